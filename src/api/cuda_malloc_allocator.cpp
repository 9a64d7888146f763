// The default DeviceAllocator (include/mxmoe/allocator.h): cudaMalloc and
// cudaFree, the only place in the library that calls them. cudaMalloc returns
// memory no pending work uses, so it serves every stream; cudaFree waits for
// the device's work.
#include "mxmoe/allocator.h"

#include <fmt/format.h>
#ifdef MXMOE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mxmoe {
namespace {

class CudaMallocAllocator final : public DeviceAllocator {
 public:
  Status allocate([[maybe_unused]] int device, [[maybe_unused]] size_t bytes, CUstream_st*,
                  [[maybe_unused]] void** ptr) override {
#ifdef MXMOE_WITH_CUDA
    int previous = device;
    cudaError_t err = cudaGetDevice(&previous);
    const bool switched = err == cudaSuccess && previous != device;
    if (switched) err = cudaSetDevice(device);
    void* p = nullptr;
    if (err == cudaSuccess) err = cudaMalloc(&p, bytes);
    if (switched) cudaSetDevice(previous);
    if (err == cudaSuccess) {
      *ptr = p;
      return Status::Ok();
    }
    cudaGetLastError();  // an allocation failure is not sticky; leave none behind
    const std::string what = fmt::format("cudaMalloc({}) on CUDA device {}: {}", bytes, device, cudaGetErrorString(err));
    return err == cudaErrorMemoryAllocation ? Status::OutOfMemory(what) : Status::CudaError(what);
#else
    return Status::Unsupported("device memory: this build has no CUDA");
#endif
  }

  void deallocate(int, [[maybe_unused]] void* ptr, size_t, CUstream_st*) noexcept override {
#ifdef MXMOE_WITH_CUDA
    cudaFree(ptr);
#endif
  }
};

}  // namespace

std::shared_ptr<DeviceAllocator> cuda_malloc_allocator() {
  static const std::shared_ptr<DeviceAllocator> allocator = std::make_shared<CudaMallocAllocator>();
  return allocator;
}

}  // namespace mxmoe
