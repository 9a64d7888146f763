// See torch_allocator.h. raw_alloc takes memory in the order of torch's
// current stream on its current device: a stream guard makes the stream mxmoe
// asks for current for the call (and its device), as raw_alloc_with_stream
// would. raw_delete returns a block to the stream it was taken on.
#include "torch_allocator.h"

#include <string>

#include <cuda_runtime.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

namespace mxmoe::python {
namespace {

std::string gib(size_t bytes) {
  const size_t centi = bytes * 100 / (size_t(1) << 30);
  return std::to_string(centi / 100) + "." + (centi % 100 < 10 ? "0" : "") + std::to_string(centi % 100) + " GiB";
}

// Free and total memory of `device`, for an error message ("" if unknown).
std::string device_memory(int device) {
  int previous = device;
  if (cudaGetDevice(&previous) != cudaSuccess) return "";
  size_t free = 0, total = 0;
  const bool ok = cudaSetDevice(device) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess;
  cudaSetDevice(previous);
  cudaGetLastError();
  return ok ? "; the device has " + gib(free) + " free of " + gib(total) : "";
}

class TorchCudaAllocator final : public DeviceAllocator {
 public:
  Status allocate(int device, size_t bytes, CUstream_st* stream, void** ptr) override {
    CUDAStreamGuardHandle guard = nullptr;
    if (aoti_torch_create_cuda_stream_guard(stream, device, &guard) != AOTI_TORCH_SUCCESS)
      return Status::CudaError("torch's CUDA allocator: cannot make the stream current on cuda:" +
                               std::to_string(device));
    void* p = nullptr;
    const AOTITorchError err = aoti_torch_cuda_caching_allocator_raw_alloc(bytes, &p);
    aoti_torch_delete_cuda_stream_guard(guard);
    if (err != AOTI_TORCH_SUCCESS || !p)
      return Status::OutOfMemory("torch's CUDA caching allocator: out of memory for " + std::to_string(bytes) +
                                 " bytes on cuda:" + std::to_string(device) + device_memory(device) +
                                 " (torch's message is logged above)");
    *ptr = p;
    return Status::Ok();
  }

  void deallocate(int, void* ptr, size_t, CUstream_st*) noexcept override {
    aoti_torch_cuda_caching_allocator_raw_delete(ptr);
  }
};

}  // namespace

std::shared_ptr<DeviceAllocator> torch_cuda_allocator() {
  static const std::shared_ptr<DeviceAllocator> allocator = std::make_shared<TorchCudaAllocator>();
  return allocator;
}

CUstream_st* torch_current_stream(int device) {
  void* stream = nullptr;
  if (aoti_torch_get_current_cuda_stream(device, &stream) != AOTI_TORCH_SUCCESS) return nullptr;
  return static_cast<CUstream_st*>(stream);
}

}  // namespace mxmoe::python
