// Where mxmoe's device memory comes from: the caller's allocator.
//
// Every byte of device memory the library takes (a layer's prepared weights,
// the staging copy of host weights, the device checks' results, load_layers'
// staging, the parallel layers' buffers) is asked of a DeviceAllocator, so an
// engine's allocator (torch's caching allocator in the Python package) can
// count it, reuse what the engine freed, and give it back. Without one,
// cuda_malloc_allocator() serves: cudaMalloc and cudaFree.
//
// Memory is stream-ordered, as in torch's caching allocator
// (raw_alloc_with_stream): allocate(device, bytes, stream) returns memory that
// work enqueued on `stream` from then on may use; mxmoe uses it on that stream
// (set-up work) and, where other streams read it later (a layer's forwards),
// only after that work is complete. deallocate is called with the same device,
// size and stream once every use of the memory is enqueued on that stream or
// complete, so the allocator may hand it to work ordered after the stream's.
// A layer's forwards on other streams must be complete before the layer is
// destroyed (include/mxmoe/layer.h).
#pragma once

#include <cstddef>
#include <memory>

#include "mxmoe/status.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*: callers pass theirs as is

namespace mxmoe {

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // `bytes` (> 0) of memory of CUDA device `device`, 256-byte aligned, in
  // `stream`'s order (null: the legacy default stream). On failure *ptr is
  // left alone and the Status says why (OutOfMemory when the device is full).
  // May be called from any thread.
  virtual Status allocate(int device, size_t bytes, CUstream_st* stream, void** ptr) = 0;
  // Gives back what allocate returned, with the same device, bytes and stream.
  virtual void deallocate(int device, void* ptr, size_t bytes, CUstream_st* stream) noexcept = 0;
};

// cudaMalloc on `device` (made current for the call) and cudaFree: the
// allocator of LayerOptions, LoadOptions and ParallelConfig that name none. In
// a build without CUDA every allocation is Unsupported.
std::shared_ptr<DeviceAllocator> cuda_malloc_allocator();

}  // namespace mxmoe
