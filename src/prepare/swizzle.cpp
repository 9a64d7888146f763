// Kernel-specific orders of the prepared code bytes (see WeightSwizzle).
#include <cstring>

#include <fmt/format.h>

#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

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
      return Status::Ok();
  }
  return Status::InvalidArgument("swizzle: unknown order");
}

}  // namespace mxmoe
