// The source a device preparation reads: the caller's weights where they are
// already memory of the layer's device, or a staging copy of host weights
// there (one layer's original bytes, freed once the image is written).
#pragma once

#include <memory>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/common/device_memory.h"
#include "mxmoe/moe.h"

namespace mxmoe::smxx {

struct StagedWeights {
  MoeWeightsView view;  // every pointer memory of the layer's device, readable on the memory's stream
  DeviceBuffer copy;    // the staging copy of host weights, if any
};

// The tensors of a view in a fixed order (w13 codes, scales, w2 codes,
// scales, b13, b2, router weight, bias): pointer and bytes from it to the
// last element (0 for an absent router).
struct WeightSpan {
  const char* name;
  const void* ptr;
  int64_t bytes;
};
std::vector<WeightSpan> weight_spans(const MoeWeightsView& weights);
// Where each span goes in one staging buffer, in order, each at a multiple
// of 256 bytes (the kernels' bulk copies need 16-byte aligned sources); the
// buffer's size in `*total`.
std::vector<int64_t> staging_offsets(const std::vector<WeightSpan>& spans, int64_t* total);
// `weights` with its tensors at `at` (weight_spans' order), strides kept.
MoeWeightsView rebased(const MoeWeightsView& weights, const std::vector<const void*>& at);

// On the current device, which is CUDA device memory.device: the copy of
// host weights is taken from `memory` and written on memory.stream.
Status stage_weights(const MoeWeightsView& weights, const MemorySource& memory, const char* who, StagedWeights* out);

}  // namespace mxmoe::smxx
