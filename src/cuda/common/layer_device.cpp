#include "cuda/common/layer_device.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/common/smxx_moe_kernels.h"

namespace mxmoe::smxx {

Status DeviceGuard::enter(int device, const char* who) {
  cudaError_t err = cudaGetDevice(&previous_);
  if (err == cudaSuccess && previous_ != device) {
    err = cudaSetDevice(device);
    switched_ = err == cudaSuccess;
  }
  return cuda_status(err, who, "select the layer's device");
}

DeviceGuard::~DeviceGuard() {
  if (switched_) cudaSetDevice(previous_);
}

Status check_on_device(const char* who, const char* name, const void* ptr, int device) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky; leave no error behind for the caller
    return Status::InvalidArgument(
        fmt::format("{}: {} ({}) is not CUDA memory: {}", who, name, ptr, cudaGetErrorString(err)));
  }
  if (attr.type == cudaMemoryTypeManaged) return Status::Ok();
  if (attr.type != cudaMemoryTypeDevice)
    return Status::InvalidArgument(
        fmt::format("{}: {} ({}) is host memory; the layer is on CUDA device {}", who, name, ptr, device));
  if (attr.device != device)
    return Status::InvalidArgument(fmt::format("{}: {} ({}) is on CUDA device {}; the layer is on CUDA device {}", who,
                                               name, ptr, attr.device, device));
  return Status::Ok();
}

ForwardArgs forward_args_of(const LayerForwardArgs& a) {
  ForwardArgs f;
  f.x = a.x;
  f.x_stride = a.x_row_stride;
  f.tokens = a.tokens;
  f.topk_ids = a.topk_ids;
  f.topk_weights = a.topk_weights;
  if (a.y_dtype == OutputDtype::kFp32) f.y = static_cast<float*>(a.y);
  else f.y_bf16 = static_cast<uint16_t*>(a.y);
  return f;
}

}  // namespace mxmoe::smxx
