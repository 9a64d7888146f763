// Kernel-specific orders of the prepared code bytes (see WeightSwizzle).
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "mxmoe/prepare.h"
#include "prepare/cpu_row_groups.h"
#include "prepare/layout_index.h"

namespace mxmoe {
namespace {

// The stored image of each byte of a dense word: permute_word_bits moves
// every bit of a word to one stored bit, so a word's image is the OR of its
// four bytes' images, a table lookup each (the bit loop itself, per word,
// took 10-12 s for gpt-oss-20b's w13 codes).
struct WordBitTables {
  uint32_t byte[4][256];
  WordBitTables() {
    for (int i = 0; i < 4; ++i)
      for (uint32_t b = 0; b < 256; ++b) byte[i][b] = layout::permute_word_bits(b << (8 * i));
  }
  uint32_t permute(uint32_t w) const {
    return byte[0][w & 0xFF] | byte[1][(w >> 8) & 0xFF] | byte[2][(w >> 16) & 0xFF] | byte[3][w >> 24];
  }
};

// `rows` x `row_bytes` dense codes -> fragment order `swizzle`, 8 stored
// bytes at a time: each lane piece of the order is 16 or 8 contiguous bytes
// of one dense row (layout_index.h), and each 32-bit word's bits are permuted.
void gather_fragment_codes(WeightSwizzle swizzle, const uint8_t* dense, int64_t rows, int64_t row_bytes,
                           uint8_t* out) {
  static const WordBitTables tables;
  const int64_t total = rows * row_bytes;
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < total; o += 8) {
    int64_t row = 0, byte = 0;
    layout::fragment_code_source(swizzle, row_bytes, o, &row, &byte);
    const uint8_t* src = dense + row * row_bytes + byte;
    for (int k = 0; k < 8; k += 4) {
      uint32_t w;
      std::memcpy(&w, src + k, 4);
      w = tables.permute(w);
      std::memcpy(out + o + k, &w, 4);
    }
  }
}

// The 16 row pointers of dense group g (rows of `row_bytes`).
void group_rows(const uint8_t* dense, int64_t g, int64_t row_bytes, const uint8_t* rows[16]) {
  for (int r = 0; r < 16; ++r) rows[r] = dense + (16 * g + r) * row_bytes;
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
    for (int64_t g = 0; g < rows / 16; ++g) {
      const uint8_t* group[16];
      group_rows(dense, g, blocks, group);
      cpu16_group_scales(group, blocks, out + g * 16 * blocks);
    }
    return Status::Ok();
  }
  if (swizzle != WeightSwizzle::kMmaRowGroups16 && swizzle != WeightSwizzle::kMmaRowTiles128)
    return Status::InvalidArgument("swizzle: unknown order");
  if (rows % 32 != 0 || cols % 64 != 0)
    return Status::InvalidArgument(fmt::format(
        "swizzle: the fragment scale order needs rows % 32 == 0 and cols % 64 == 0, got {} x {}", rows, cols));
  for (int64_t o = 0; o < rows * blocks; ++o) {
    int64_t row = 0, block = 0;
    layout::fragment_scale_source(blocks, o, &row, &block);
    out[o] = dense[row * blocks + block];
  }
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
      gather_fragment_codes(swizzle, dense, rows, row_bytes, out);
      return Status::Ok();
    case WeightSwizzle::kMmaRowTiles128: {
      if (rows % 128 != 0 || cols % 64 != 0)
        return Status::InvalidArgument(fmt::format(
            "swizzle: 128-row tile order needs rows % 128 == 0 and cols % 64 == 0, got {} x {}", rows, cols));
      gather_fragment_codes(swizzle, dense, rows, row_bytes, out);
      return Status::Ok();
    }
    case WeightSwizzle::kCpuRowGroups16:
      MXMOE_RETURN_IF_ERROR(check_cpu_order(rows, cols));
      for (int64_t g = 0; g < rows / 16; ++g) {
        const uint8_t* group[16];
        group_rows(dense, g, row_bytes, group);
        cpu16_group_codes(group, cols, out + g * 16 * row_bytes);
      }
      return Status::Ok();
  }
  return Status::InvalidArgument("swizzle: unknown order");
}

}  // namespace mxmoe
