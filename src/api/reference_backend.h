#pragma once

#include <memory>

#include "mxmoe/backend.h"

namespace mxmoe {

// The fp64 CPU reference as a backend, with bf16 or MXFP8 activations.
Status create_reference_backend(const MoeWeightsView& weights, const ActivationOptions& activations,
                                std::unique_ptr<Backend>* out);

}  // namespace mxmoe
