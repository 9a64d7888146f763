// What every layer that serves a GPU's activations needs around its forward:
// the layer's device made current, each pointer checked to be memory of
// that device, and the call's arguments as a backend's forward takes them.
#pragma once

#include "cuda/common/forward_args.h"
#include "mxmoe/layer.h"
#include "mxmoe/status.h"

namespace mxmoe::smxx {

// Makes `device` current for the guard's scope (kernels and copies go to the
// current device) and restores the caller's.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  Status enter(int device, const char* who);
  ~DeviceGuard();

 private:
  int previous_ = 0;
  bool switched_ = false;
};

// `ptr` must be memory of CUDA device `device`: device memory (cudaMalloc, a
// framework's caching allocator) or managed memory. Host memory, even pinned
// and mapped, is refused: the kernels would read it over PCIe, and a host
// layer's copies would not be the device-to-host copies they are recorded as.
Status check_on_device(const char* who, const char* name, const void* ptr, int device);

// A layer's forward arguments as a backend's DeviceForward takes them.
ForwardArgs forward_args_of(const LayerForwardArgs& a);

}  // namespace mxmoe::smxx
