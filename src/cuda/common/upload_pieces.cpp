// See upload_pieces.h.
#include "cuda/common/upload_pieces.h"

#include <algorithm>

#include <cuda_runtime.h>

#include "cuda/common/smxx_moe_kernels.h"

namespace mxmoe::smxx {
namespace {

size_t round_256(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

size_t lay_out_pieces(std::vector<UploadPiece>* pieces, size_t margin) {
  size_t off = 0;
  for (UploadPiece& pc : *pieces) {
    off += margin;
    pc.off = off;
    off += round_256(pc.bytes) + margin;
  }
  return off;
}

Status write_margins(uint8_t* dev, const std::vector<UploadPiece>& pieces, size_t margin, const char* who) {
  std::vector<uint8_t> poison;
  for (const UploadPiece& pc : pieces) {
    const size_t tail = round_256(pc.bytes) - pc.bytes + margin;
    poison.assign(std::max(margin, tail), pc.poison);
    if (pc.bf16_nan)
      for (size_t j = 0; j < poison.size(); ++j) poison[j] = (j & 1) ? 0x7F : 0xC0;
    if (margin)
      MXMOE_RETURN_IF_ERROR(cuda_status(
          cudaMemcpy(dev + pc.off - margin, poison.data(), margin, cudaMemcpyHostToDevice), who, "poison margin"));
    if (tail)
      MXMOE_RETURN_IF_ERROR(cuda_status(
          cudaMemcpy(dev + pc.off + pc.bytes, poison.data(), tail, cudaMemcpyHostToDevice), who, "poison margin"));
  }
  return Status::Ok();
}

}  // namespace mxmoe::smxx
