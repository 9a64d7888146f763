// Bit order of the 32-bit code words in WeightSwizzle::kMmaRowGroups16, shared
// by the preparation (which stores it), the GEMM kernels (which read it) and the
// tests. Plain C++, compiled for the host and the device.
//
// A word holds 8 E2M1 codes, elements 0..7 of a K run; pair i is elements
// (2i, 2i + 1), which the mma A fragment takes as one register, so the
// activations pair up in their natural order. Its target pattern is a bf16x2:
// the low element's sign at bit 15 and magnitude (e1 e0 m) at bits 8..6, the
// high element's at 31 and 24..22. Read as bf16 that is the E2M1 value times
// 2^-126 (e = 0, codes 0 and 0.5, lands on bf16 subnormals), which the scale
// multiply then lifts.
//
// The stored word places each pair's 8 bits so that the kernel gets the
// pattern with few integer-pipe instructions: pair 0 with one AND, pair 1
// with a left shift by 4 and an AND, pair 2 with a rotate by 6 and an AND,
// pair 3 from a left shift by 6 (six bits) and a rotate by 2 (bits 8 and 24)
// with two ANDs. The left shifts compile to IMAD.SHL, which runs on the FMA
// pipe beside the scale multiplies, so per four pairs the integer ALU pipe
// (half rate on SM90, the decode kernels' limit) runs 5 LOP3 and 2 SHF instead
// of the 5 LOP3 and 4 SHF that rotations alone need. No arrangement does with
// fewer: left shifts alone cannot fill bits 25..30 (their only target above
// them is bit 31), and a single shift per pair cannot cover the word.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MXMOE_PAIR_BITS_HD __host__ __device__ __forceinline__
#else
#define MXMOE_PAIR_BITS_HD inline
#endif

namespace mxmoe::pair_bits {

inline constexpr uint32_t kPatternMask = 0x81C081C0u;  // bits 6, 7, 8, 15 and 22, 23, 24, 31
inline constexpr uint32_t kPair3FromRotate = 0x01000100u;  // bits 8 and 24 of pair 3
inline constexpr int kPatternBits[8] = {6, 7, 8, 15, 22, 23, 24, 31};

// Where bit p (one of kPatternBits) of pair i's pattern is stored.
constexpr int stored_bit(int i, int p) {
  switch (i) {
    case 0: return p;
    case 1: return p - 4;
    case 2: return (p + 6) % 32;
    default: return (p == 8 || p == 24) ? (p + 2) % 32 : p - 6;
  }
}

MXMOE_PAIR_BITS_HD uint32_t rotate_right(uint32_t w, int n) { return (w >> n) | (w << (32 - n)); }

// Which pipe the shifts of pairs 1 and 3 go to. Their masks keep only bits
// the left shift brought in, so a rotate gives the same pattern: kFma writes
// left shifts (IMAD.SHL) for the portable decode kernels, whose integer pipe
// is their limit; kAlu writes rotates (SHF) for the wgmma consumers, whose
// FMA pipe carries the scale multiplies (H200, same-run A/B: gpt-oss-120b
// T = 256 714 / 716 us against 721 / 722, gpt-oss-20b T = 256 249 against 252).
enum class ShiftPipe { kFma, kAlu };

// The bf16x2 pattern of pair i (0..3) of stored word w.
template <ShiftPipe kPipe = ShiftPipe::kFma>
MXMOE_PAIR_BITS_HD uint32_t e2m1_pair_bits(uint32_t w, int i) {
  constexpr bool kFma = kPipe == ShiftPipe::kFma;
  switch (i) {
    case 0: return w & kPatternMask;
    case 1: return (kFma ? w << 4 : rotate_right(w, 28)) & kPatternMask;
    case 2: return rotate_right(w, 6) & kPatternMask;
    default:
      return ((kFma ? w << 6 : rotate_right(w, 26)) & (kPatternMask & ~kPair3FromRotate)) |
             (rotate_right(w, 2) & kPair3FromRotate);
  }
}

}  // namespace mxmoe::pair_bits
