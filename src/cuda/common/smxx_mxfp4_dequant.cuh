// MXFP4 -> bf16 dequantisation in registers, shared by the mma.sync (portable)
// and wgmma (sm90) GEMMs. Both read codes in WeightSwizzle::kMmaRowGroups16
// order, whose 32-bit words have their bits permuted so that each bf16 pair of
// E2M1 values is an AND after a shift or a rotate (two of each for one pair in
// four; pair_bits.h).
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

#include "prepare/pair_bits.h"

namespace mxmoe::smxx {

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a);
  __nv_bfloat162 y = *reinterpret_cast<__nv_bfloat162*>(&b);
  __nv_bfloat162 r = __hmul2(x, y);
  return *reinterpret_cast<uint32_t*>(&r);
}

// bf16x2 factors folding 2^126 and the E8M0 scale 2^(s-127). Fast path (every
// scale involved below 128, as in real weights): one multiply by
// f1 = 2^(s-1), whose bf16 exponent field is s + 126, placed in both halves
// by one multiply. Otherwise f1 = 2^126 then f2 = 2^(s-127); s = 0xFF (NaN
// scale) gives NaN, as the format says.
struct ScaleFactor {
  uint32_t f1, f2;
};
__device__ __forceinline__ uint32_t scale_factor_small(uint32_t s) { return (s + 126u) * 0x00800080u; }
__device__ __forceinline__ ScaleFactor scale_factor_any(uint32_t s) {
  const uint32_t b1 = s < 128u ? s + 126u : 253u;
  const uint32_t b2 = s == 255u ? 0x7FC0u : (s < 128u ? 0x3F80u : s << 7);  // 0x3F80 = 1.0
  return {b1 * 0x00800080u, b2 | (b2 << 16)};
}

}  // namespace mxmoe::smxx
