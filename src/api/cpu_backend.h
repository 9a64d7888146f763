#pragma once

#include <memory>

#include "mxmoe/backend.h"

namespace mxmoe {

// The CPU kernels (src/cpu/) as a backend, on the path choose_cpu_isa picks;
// bf16 activations.
Status create_cpu_backend(const MoeWeightsView& weights, std::unique_ptr<Backend>* out);

}  // namespace mxmoe
