// The NCCL implementations of ParallelLayer (include/mxmoe/parallel.h), built
// when the CUDA toolkit has NCCL. create_parallel_layer has already validated
// the configuration, filled in the devices and checked they exist.
#pragma once

#include <memory>

#include "mxmoe/parallel.h"

namespace mxmoe::parallel {

Status create_tp_layer(const MoeWeightsView& weights, const ParallelConfig& config,
                       std::unique_ptr<ParallelLayer>* out);
Status create_ep_layer(const MoeWeightsView& weights, const ParallelConfig& config,
                       std::unique_ptr<ParallelLayer>* out);

}  // namespace mxmoe::parallel
