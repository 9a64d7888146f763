// Kernel-specific orders of the prepared code bytes (see WeightSwizzle).
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "mxmoe/format.h"
#include "mxmoe/prepare.h"
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
      for (int64_t g = 0; g < rows / 16; ++g)
        swizzle_group_cpu16(dense + g * 16 * row_bytes, cols, out + g * 16 * row_bytes);
      return Status::Ok();
  }
  return Status::InvalidArgument("swizzle: unknown order");
}

}  // namespace mxmoe
