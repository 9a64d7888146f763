// The CUDA kernel of `mxmoe::forward`: the same adapter on the current stream
// of x's device (torch's, so the op orders with the caller's other work and
// is captured by torch.cuda.graph).
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include <cuda_runtime.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>

#include "ops.h"

namespace mxmoe::python {
namespace {

// Calls that pass no workspace, up to this many bytes of it (decode and
// small prefills: a few hundred KB at gpt-oss's T = 1), share one buffer per
// stream, kept between calls: an allocation from torch costs 3.5-4 us of host
// time on an H200 machine, as much as the rest of the op (2026-12-02). Calls on one stream run in its order, so they can share it.
// The buffers are CUDA's stream-ordered allocations, not torch's: a tensor
// kept between calls could come from a pool that torch lends only for a
// while (a CUDA graph's, while torch.compile warms one up), and a buffer
// replaced by a larger one is freed in its stream's order, behind the
// kernels that still read it. Larger needs, and calls into a capture (whose
// memory is the capture's pool), take torch's allocation per call.
constexpr size_t kSharedWorkspaceBytes = size_t(32) << 20;

struct SharedWorkspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// Makes `device` current for the scope (stream-ordered allocations come from
// the current device's pool when the stream is the legacy default one).
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    ok_ = cudaGetDevice(&previous_) == cudaSuccess && (previous_ == device || cudaSetDevice(device) == cudaSuccess);
  }
  ~CurrentDevice() {
    int now = previous_;
    if (ok_ && cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  bool ok() const { return ok_; }

 private:
  int previous_ = 0;
  bool ok_ = false;
};

void* stream_workspace(const Tensor& like, CUstream_st* stream, size_t bytes) {
  if (bytes > kSharedWorkspaceBytes) return nullptr;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
    cudaGetLastError();  // not sticky: the forward's launches say what is wrong
    return nullptr;
  }
  if (capturing != cudaStreamCaptureStatusNone) return nullptr;
  static std::mutex mutex;
  static auto* buffers = new std::map<std::pair<int, CUstream_st*>, SharedWorkspace>();  // kept to the end
  const int device = int(like.get_device_index());
  std::lock_guard<std::mutex> lock(mutex);
  SharedWorkspace& w = (*buffers)[{device, stream}];
  if (w.bytes >= bytes) return w.ptr;
  size_t size = size_t(1) << 16;  // powers of two: few replacements as T grows
  while (size < bytes) size *= 2;
  const CurrentDevice current(device);
  void* ptr = nullptr;
  if (!current.ok() || cudaMallocAsync(&ptr, size, stream) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;  // torch's allocator then says what it can
  }
  if (w.ptr) cudaFreeAsync(w.ptr, stream);  // after the kernels queued before it
  w = {ptr, size};
  return ptr;
}

void forward_cuda(const Tensor& x, const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights,
                  int64_t layer, Tensor& out, const std::optional<Tensor>& workspace) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream));
  forward(x, topk_ids, topk_weights, layer, out, workspace, static_cast<CUstream_st*>(stream), &stream_workspace);
}

}  // namespace
}  // namespace mxmoe::python

STABLE_TORCH_LIBRARY_IMPL(mxmoe, CUDA, m) { m.impl("forward", TORCH_BOX(&mxmoe::python::forward_cuda)); }
