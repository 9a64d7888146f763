// Kernel-specific orders of the prepared code bytes (see WeightSwizzle).
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

// Bits of a bf16 pair pattern that carry data: sign at 15/31, e1 e0 m at
// 8..6 and 24..22 (see WeightSwizzle::kMmaRowGroups16).
constexpr int kPairBits[8] = {6, 7, 8, 15, 22, 23, 24, 31};

// Pair i = (n_i, n_{i+4}) of a dense word as its bf16 bit pattern.
uint32_t pair_pattern(uint32_t dense, int i) {
  const uint32_t lo = (dense >> (4 * i)) & 0xF, hi = (dense >> (4 * i + 16)) & 0xF;
  auto half = [](uint32_t n) { return ((n & 0x8) << 12) | ((n & 0x7) << 6); };
  return half(lo) | (half(hi) << 16);
}

// Where bit p of pair i's pattern is stored in the word: pairs 0..2 rotate
// the whole pattern by 0, 4 and 10; pair 3 is split over rotations 6 and 14.
int stored_bit(int i, int p) {
  switch (i) {
    case 0: return p;
    case 1: return (p + 4) % 32;
    case 2: return (p + 10) % 32;
    default: return (p == 6 || p == 22) ? (p + 14) % 32 : (p + 6) % 32;
  }
}

uint32_t permute_word_bits(uint32_t dense) {
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t t = pair_pattern(dense, i);
    for (int p : kPairBits) out |= ((t >> p) & 1u) << stored_bit(i, p);
  }
  return out;
}

// Applies permute_word_bits to every little-endian 32-bit word of `bytes`.
void permute_bits(uint8_t* bytes, int64_t n) {
  for (int64_t at = 0; at + 4 <= n; at += 4) {
    uint32_t w;
    std::memcpy(&w, bytes + at, 4);
    w = permute_word_bits(w);
    std::memcpy(bytes + at, &w, 4);
  }
}

// One group of 16 rows of `row_bytes` each, dense -> mma fragment order.
void swizzle_group_mma16(const uint8_t* dense, int64_t row_bytes, uint8_t* out) {
  const int64_t nfull = row_bytes / 64;          // 128-wide K chunks
  const bool tail = row_bytes % 64 != 0;         // a 64-wide chunk (32 bytes a row)
  for (int i = 0; i < 16; ++i) {
    const int g = i >> 1, r = i & 1;
    const uint8_t* row = dense + i * row_bytes;
    for (int64_t c = 0; c < nfull; ++c)
      for (int t = 0; t < 4; ++t)
        std::memcpy(out + c * 1024 + r * 512 + (4 * g + t) * 16, row + c * 64 + t * 16, 16);
    if (tail)
      for (int t = 0; t < 4; ++t)
        std::memcpy(out + nfull * 1024 + r * 256 + (4 * g + t) * 8, row + nfull * 64 + t * 8, 8);
  }
}

}  // namespace

Status swizzle_codes(WeightSwizzle swizzle, const uint8_t* dense, int64_t rows, int64_t cols,
                     uint8_t* out) {
  const int64_t row_bytes = cols / 2;
  switch (swizzle) {
    case WeightSwizzle::kNone:
      std::memcpy(out, dense, size_t(rows * row_bytes));
      return Status::Ok();
    case WeightSwizzle::kMmaRowGroups16:
      if (rows % 16 != 0 || cols % 64 != 0)
        return Status::InvalidArgument(fmt::format(
            "swizzle: mma fragment order needs rows % 16 == 0 and cols % 64 == 0, got {} x {}", rows, cols));
      for (int64_t g = 0; g < rows / 16; ++g)
        swizzle_group_mma16(dense + g * 16 * row_bytes, row_bytes, out + g * 16 * row_bytes);
      permute_bits(out, rows * row_bytes);  // rows * row_bytes is a multiple of 16 * 32
      return Status::Ok();
  }
  return Status::InvalidArgument("swizzle: unknown order");
}

}  // namespace mxmoe
