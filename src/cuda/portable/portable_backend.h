// Entry point of the `portable` CUDA backend (mma.sync, SM80+), compiled only
// when the build has CUDA.
#pragma once

#include <cstdint>
#include <memory>

#include "mxmoe/backend.h"

namespace mxmoe {

struct PortableOptions {
  // Tests: surround every prepared tensor with this many bytes of poison inside
  // the same allocation (scales 0xFF = NaN, codes 0x77 = +6/+6, biases and router
  // NaN) and fill the workspace with 0xFF, so any read outside a tensor's
  // readable extent or of an unwritten workspace row shows in the output.
  int64_t poison_margin_bytes = 0;
};

// Prepares `weights` with the portable plan and uploads them to the current
// CUDA device.
Status create_portable_backend(const MoeWeightsView& weights, std::unique_ptr<Backend>* out);
Status create_portable_backend(const MoeWeightsView& weights, const PortableOptions& options,
                               std::unique_ptr<Backend>* out);

}  // namespace mxmoe
