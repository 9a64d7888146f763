// The CUDA side of MoeLayer::create (src/cuda/common/device_layer.cpp), in
// builds with CUDA.
#pragma once

#include <memory>
#include <string>

#include "mxmoe/layer.h"

namespace mxmoe {

// A layer of GPU backend `kind` on CUDA device options.device, which dispatch
// has found able to run it (with options.activations); `reason` is dispatch's.
Status create_device_layer(BackendKind kind, std::string reason, const MoeWeightsView& weights,
                           const LayerOptions& options, std::unique_ptr<MoeLayer>* out);

// Where the weights are: -1 for host memory (pageable, pinned or managed),
// else the CUDA device whose memory holds every tensor. Weights split between
// places are an InvalidArgument naming two tensors.
Status weights_device(const MoeWeightsView& weights, int* device);

}  // namespace mxmoe
