// Entry point of the `portable` CUDA backend (mma.sync, SM80+), compiled only
// when the build has CUDA.
#pragma once

#include <memory>

#include "mxmoe/backend.h"

namespace mxmoe {

// Prepares `weights` with the portable plan and uploads them to the current
// CUDA device.
Status create_portable_backend(const MoeWeightsView& weights, std::unique_ptr<Backend>* out);

}  // namespace mxmoe
