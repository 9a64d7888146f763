// Kernel-specific orders of the prepared code bytes (see WeightSwizzle).
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "mxmoe/format.h"
#include "mxmoe/prepare.h"
#include "prepare/code_strides.h"
#include "prepare/pair_bits.h"

namespace mxmoe {
namespace {

// Pair i = elements (2i, 2i + 1) of a dense word (element j in bits
// [4j, 4j + 4)) as its bf16x2 pattern (see pair_bits.h).
uint32_t pair_pattern(uint32_t dense, int i) {
  const uint32_t lo = (dense >> (8 * i)) & 0xF, hi = (dense >> (8 * i + 4)) & 0xF;
  auto half = [](uint32_t n) { return ((n & 0x8) << 12) | ((n & 0x7) << 6); };
  return half(lo) | (half(hi) << 16);
}

uint32_t permute_word_bits(uint32_t dense) {
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t t = pair_pattern(dense, i);
    for (int p : pair_bits::kPatternBits) out |= ((t >> p) & 1u) << pair_bits::stored_bit(i, p);
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

// One tile of 128 rows in kMmaRowGroups16 order (`groups16`) -> its 8 groups'
// 1 KB chunk images where kMmaRowTiles128 puts them, then their 512-byte tail
// chunks back to back: both placements are the strides the kernels walk
// (code_strides.h).
void interleave_tile_chunks(const uint8_t* groups16, int64_t row_bytes, uint8_t* out) {
  const CodeStrides from = code_strides(WeightSwizzle::kMmaRowGroups16, row_bytes);
  const CodeStrides to = code_strides(WeightSwizzle::kMmaRowTiles128, row_bytes);
  const int64_t chunks = row_bytes / 64;
  for (int g = 0; g < 8; ++g) {
    for (int64_t c = 0; c < chunks; ++c)
      std::memcpy(out + c * to.chunk + g * to.group, groups16 + g * from.group + c * from.chunk, 1024);
    if (row_bytes % 64 != 0)
      std::memcpy(out + chunks * to.chunk + g * to.tail_group, groups16 + g * from.group + chunks * from.chunk, 512);
  }
}

// One block of 32 rows of `blocks` scale bytes each (cols / 32), dense ->
// the fragment scale order (see swizzle_scales).
void swizzle_scale_rows32(const uint8_t* dense, int64_t blocks, uint8_t* out) {
  const int64_t nfull = blocks / 4;  // 128-wide K chunks; blocks % 4 == 2 when a 64-wide tail follows
  for (int row = 0; row < 32; ++row) {
    const int m = row / 16, g = (row % 16) / 2, r = row % 2;
    const uint8_t* src = dense + row * blocks;
    for (int64_t c = 0; c < nfull; ++c)
      for (int t = 0; t < 4; ++t) out[c * 128 + ((4 * g + t) * 2 + m) * 2 + r] = src[4 * c + t];
    for (int t = 0; t < blocks % 4; ++t) out[nfull * 128 + ((2 * g + t) * 2 + m) * 2 + r] = src[4 * nfull + t];
  }
}

// One group of 16 rows of `cols` elements, dense -> kCpuRowGroups16 (see
// prepare.h): the low nibble of byte 64q + 4r + i of block b is element
// 32b + 4q + i of row r, its high nibble element 32b + 16 + 4q + i.
void swizzle_group_cpu16(const uint8_t* dense, int64_t cols, uint8_t* out) {
  for (int64_t b = 0; b < cols / 32; ++b)
    for (int q = 0; q < 4; ++q)
      for (int r = 0; r < 16; ++r)
        for (int i = 0; i < 4; ++i) {
          const uint8_t* row = dense + r * (cols / 2);
          const int64_t k = 32 * b + 4 * q + i;
          out[256 * b + 64 * q + 4 * r + i] = uint8_t(e2m1_code_at(row, k) | e2m1_code_at(row, k + 16) << 4);
        }
}

Status check_cpu_order(int64_t rows, int64_t cols) {
  if (rows % 16 == 0 && cols % 32 == 0) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("swizzle: the cpu order needs rows % 16 == 0 and cols % 32 == 0, got {} x {}", rows, cols));
}

}  // namespace

Status swizzle_scales(WeightSwizzle swizzle, const uint8_t* dense, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t blocks = cols / 32;
  if (swizzle == WeightSwizzle::kNone) {
    std::memcpy(out, dense, size_t(rows * blocks));
    return Status::Ok();
  }
  if (swizzle == WeightSwizzle::kCpuRowGroups16) {
    MXMOE_RETURN_IF_ERROR(check_cpu_order(rows, cols));
    for (int64_t g = 0; g < rows / 16; ++g)
      for (int64_t b = 0; b < blocks; ++b)
        for (int r = 0; r < 16; ++r) out[(g * blocks + b) * 16 + r] = dense[(g * 16 + r) * blocks + b];
    return Status::Ok();
  }
  if (swizzle != WeightSwizzle::kMmaRowGroups16 && swizzle != WeightSwizzle::kMmaRowTiles128)
    return Status::InvalidArgument("swizzle: unknown order");
  if (rows % 32 != 0 || cols % 64 != 0)
    return Status::InvalidArgument(fmt::format(
        "swizzle: the fragment scale order needs rows % 32 == 0 and cols % 64 == 0, got {} x {}", rows, cols));
  for (int64_t r0 = 0; r0 < rows; r0 += 32) swizzle_scale_rows32(dense + r0 * blocks, blocks, out + r0 * blocks);
  return Status::Ok();
}

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
    case WeightSwizzle::kMmaRowTiles128: {
      if (rows % 128 != 0 || cols % 64 != 0)
        return Status::InvalidArgument(fmt::format(
            "swizzle: 128-row tile order needs rows % 128 == 0 and cols % 64 == 0, got {} x {}", rows, cols));
      std::vector<uint8_t> tile(size_t(128 * row_bytes));
      for (int64_t r0 = 0; r0 < rows; r0 += 128) {
        MXMOE_RETURN_IF_ERROR(
            swizzle_codes(WeightSwizzle::kMmaRowGroups16, dense + r0 * row_bytes, 128, cols, tile.data()));
        interleave_tile_chunks(tile.data(), row_bytes, out + r0 * row_bytes);
      }
      return Status::Ok();
    }
    case WeightSwizzle::kCpuRowGroups16:
      MXMOE_RETURN_IF_ERROR(check_cpu_order(rows, cols));
      for (int64_t g = 0; g < rows / 16; ++g)
        swizzle_group_cpu16(dense + g * 16 * row_bytes, cols, out + g * 16 * row_bytes);
      return Status::Ok();
  }
  return Status::InvalidArgument("swizzle: unknown order");
}

}  // namespace mxmoe
