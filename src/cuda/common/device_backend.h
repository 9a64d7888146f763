// The Backend object the CUDA backends share: host <-> device copies, an
// optionally poisoned workspace, and timing with CUDA-graph replays. A backend
// supplies only its forward (a DeviceForward over weights it has uploaded).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

#include "cuda/common/device_memory.h"
#include "cuda/common/forward_args.h"
#include "mxmoe/backend.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe {

struct DeviceBackendOptions {
  // Tests: surround every prepared tensor with this many bytes of poison inside
  // its allocation (scales 0xFF = NaN, codes 0x77 = +6/+6, biases and router
  // NaN) and fill the workspace with 0xFF, so any read outside a tensor's
  // readable extent or of an unwritten workspace row shows in the output.
  int64_t poison_margin_bytes = 0;
};

namespace smxx {

// One backend's forward on the current device, over weights it owns.
class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  virtual size_t workspace_bytes(int64_t tokens) const = 0;
  // Enqueues the forward on `stream`; `workspace` holds workspace_bytes(tokens)
  // bytes, 256-byte aligned.
  virtual Status forward(const ForwardArgs& args, void* workspace, size_t workspace_size,
                         cudaStream_t stream) const = 0;
};

// The Backend for `forward`: `shape` is the layer's real shape, `has_router`
// whether the uploaded weights hold a router; a positive poison margin also
// poisons the workspace and y before every forward_host (see
// DeviceBackendOptions).
Status make_device_backend(BackendKind kind, const MoeShape& shape, bool has_router, int64_t poison_margin_bytes,
                           std::unique_ptr<DeviceForward> forward, std::unique_ptr<Backend>* out);

}  // namespace smxx
}  // namespace mxmoe
