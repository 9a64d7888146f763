#include "prepare/blockscaled_scales.h"

#include <fmt/format.h>

#include "mxmoe/format.h"

namespace mxmoe {

Status pack_blockscaled_scales(const uint8_t* dense, int64_t rows, int64_t k_blocks, int64_t row_stride,
                               uint8_t* out) {
  if (rows < 0 || k_blocks < 0 || row_stride < k_blocks || (rows > 0 && k_blocks > 0 && (!dense || !out)))
    return Status::InvalidArgument(fmt::format(
        "block-scaled scales: {} rows of {} blocks with a row stride of {} bytes", rows, k_blocks, row_stride));
  for (int64_t o = 0; o < blockscaled_scale_bytes(rows, k_blocks); ++o) {
    int64_t r = 0, b = 0;
    blockscaled_scale_source(k_blocks, o, &r, &b);
    out[o] = r < rows && b < k_blocks ? dense[r * row_stride + b] : kE8M0Neutral;
  }
  return Status::Ok();
}

}  // namespace mxmoe
