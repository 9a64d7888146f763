#include "prepare/blockscaled_scales.h"

#include <cstring>

#include <fmt/format.h>

#include "mxmoe/format.h"

namespace mxmoe {

Status pack_blockscaled_scales(const uint8_t* dense, int64_t rows, int64_t k_blocks, int64_t row_stride,
                               uint8_t* out) {
  if (rows < 0 || k_blocks < 0 || row_stride < k_blocks || (rows > 0 && k_blocks > 0 && (!dense || !out)))
    return Status::InvalidArgument(fmt::format(
        "block-scaled scales: {} rows of {} blocks with a row stride of {} bytes", rows, k_blocks, row_stride));
  std::memset(out, kE8M0Neutral, size_t(blockscaled_scale_bytes(rows, k_blocks)));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < k_blocks; ++b) out[blockscaled_scale_offset(r, b, k_blocks)] = dense[r * row_stride + b];
  return Status::Ok();
}

}  // namespace mxmoe
