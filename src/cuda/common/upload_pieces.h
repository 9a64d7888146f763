// The one allocation a CUDA backend uploads its prepared tensors into: each
// tensor 256-byte aligned, optionally between margins of poison (tests: see
// DeviceBackendOptions), so a read outside a tensor's extent shows in the
// output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mxmoe/status.h"

namespace mxmoe::smxx {

struct UploadPiece {
  size_t bytes = 0;
  uint8_t poison = 0;     // the margins' byte: codes 0x77 (+6, +6), scales 0xFF (NaN)
  bool bf16_nan = false;  // margins of bf16 NaN words instead (biases, router)
  size_t off = 0;         // where the piece starts (lay_out_pieces)
};

// Places the pieces in order, each `margin` bytes after the end of the one
// before (rounded up to 256 bytes) and followed by `margin` bytes; returns
// the allocation's size. `margin` is a multiple of 256.
size_t lay_out_pieces(std::vector<UploadPiece>* pieces, size_t margin);

// Writes each piece's poison into the allocation at `dev`: the margin before
// it and, after it, its rounding to 256 bytes and the margin.
Status write_margins(uint8_t* dev, const std::vector<UploadPiece>& pieces, size_t margin, const char* who);

}  // namespace mxmoe::smxx
