#pragma once

#include <memory>

#include "mxmoe/backend.h"

namespace mxmoe {

// The CPU reference (fp32) as a backend.
Status create_cpu_backend(const MoeWeightsView& weights, std::unique_ptr<Backend>* out);

}  // namespace mxmoe
