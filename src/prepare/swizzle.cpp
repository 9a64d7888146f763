// Kernel-specific orders of the prepared code bytes (see WeightSwizzle).
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "mxmoe/prepare.h"
#include "prepare/cpu_row_groups.h"
#include "prepare/layout_index.h"

namespace mxmoe {
namespace {

// `rows` x `row_bytes` dense codes -> fragment order `swizzle`, one stored
// 32-bit word at a time: each word's 4 bytes lie in one 16- or 8-byte lane
// piece of a dense row (layout_index.h), and its bits are permuted.
void gather_fragment_codes(WeightSwizzle swizzle, const uint8_t* dense, int64_t rows, int64_t row_bytes,
                           uint8_t* out) {
  for (int64_t o = 0; o < rows * row_bytes; o += 4) {
    int64_t row = 0, byte = 0;
    layout::fragment_code_source(swizzle, row_bytes, o, &row, &byte);
    uint32_t w;
    std::memcpy(&w, dense + row * row_bytes + byte, 4);
    w = layout::permute_word_bits(w);
    std::memcpy(out + o, &w, 4);
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
