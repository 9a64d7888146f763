// The host-memory layer (include/mxmoe/layer.h: backend "cpu" on a CUDA
// device), in builds with CUDA (src/cuda/common/host_experts_layer.cpp).
#pragma once

#include <memory>
#include <string>

#include "mxmoe/layer.h"

namespace mxmoe {

// The cpu backend's packed experts in host memory, serving forwards whose x,
// routing and y are memory of CUDA device options.device. The weights must be
// host memory (the cpu plan prepares them there); `reason` is dispatch's.
Status create_host_experts_layer(std::string reason, const MoeWeightsView& weights, const LayerOptions& options,
                                 std::unique_ptr<MoeLayer>* out);

}  // namespace mxmoe
