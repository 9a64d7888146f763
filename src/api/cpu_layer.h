// The cpu MoeLayer: the CPU kernels (src/cpu/) on host pointers.
#pragma once

#include <memory>
#include <string>

#include "mxmoe/layer.h"

namespace mxmoe {

// Prepares and packs the weights (the layer owns them) for the kernel path
// choose_cpu_isa picks, and serves bf16-activation forwards on the host.
Status create_cpu_layer(std::string reason, const MoeWeightsView& weights, std::unique_ptr<MoeLayer>* out);

}  // namespace mxmoe
