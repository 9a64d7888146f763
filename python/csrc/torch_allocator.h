// torch's CUDA caching allocator as the layers' DeviceAllocator
// (include/mxmoe/allocator.h), through the stable ABI's C shims: a layer's
// memory is torch's, counted by torch.cuda.memory_allocated(), taken from
// what the caller freed into torch's cache, given back to it with the layer.
#pragma once

#include <memory>

#include "mxmoe/allocator.h"

namespace mxmoe::python {

std::shared_ptr<DeviceAllocator> torch_cuda_allocator();

// torch's current stream on CUDA device `device` for the calling thread (the
// legacy default stream is null).
CUstream_st* torch_current_stream(int device);

}  // namespace mxmoe::python
