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
#include "torch_allocator.h"

namespace mxmoe::python {
namespace {

// Calls that pass no workspace, up to this many bytes of it (decode and
// small prefills: a few hundred KB at gpt-oss's T = 1), share one buffer per
// stream, kept between calls: an allocation from torch costs 3.5-4 us of host
// time on an H200 machine, as much as the rest of the op (2026-12-02). Calls
// on one stream run in its order, so they can share it. Larger needs, and
// calls into a capture (whose memory is the capture's pool), take torch's
// allocation per call.
constexpr size_t kSharedWorkspaceBytes = size_t(32) << 20;

// The kept buffers come from torch's caching allocator (counted in its
// statistics like the layers), taken on a private stream of each device: an
// allocation on the caller's stream could come from a pool that torch lends
// only for a while (torch.compile's CUDA-graph warm-up routes its stream's
// allocations into the graph's pool), which a kept buffer must not be part of.
// Private-stream memory is used on the caller's stream once that stream has
// waited for the private one, and goes back only after the private stream has
// waited for the calls that used it: a replaced buffer is reused, by the next
// buffer, behind every kernel that read it.
// Makes `device` current for the scope (events and streams are created on,
// and must be used with, the current device).
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

class KeptWorkspaces {
 public:
  void* get(int device, CUstream_st* stream, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    Kept& w = kept_[{device, stream}];
    if (w.bytes >= bytes) return w.ptr;
    size_t size = size_t(1) << 16;  // powers of two: few replacements as T grows
    while (size < bytes) size *= 2;
    const CurrentDevice current(device);
    CUstream_st* own = current.ok() ? private_stream(device) : nullptr;
    cudaEvent_t order = nullptr;
    if (!own || cudaEventCreateWithFlags(&order, cudaEventDisableTiming) != cudaSuccess) return fail(nullptr);
    const std::shared_ptr<DeviceAllocator> torch = torch_cuda_allocator();
    bool ok = true;
    if (w.ptr) {  // back to torch behind the calls queued on `stream` so far
      ok = cudaEventRecord(order, stream) == cudaSuccess && cudaStreamWaitEvent(own, order, 0) == cudaSuccess;
      if (!ok) return fail(order);
      torch->deallocate(device, w.ptr, w.bytes, own);
      w = {};
    }
    void* ptr = nullptr;
    ok = torch->allocate(device, size, own, &ptr).ok() && cudaEventRecord(order, own) == cudaSuccess &&
         cudaStreamWaitEvent(stream, order, 0) == cudaSuccess;
    if (!ok) {
      if (ptr) torch->deallocate(device, ptr, size, own);
      return fail(order);
    }
    cudaEventDestroy(order);
    w = {ptr, size};
    return ptr;
  }

 private:
  struct Kept {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  // null: torch's allocator then says what it can
  static void* fail(cudaEvent_t order) {
    if (order) cudaEventDestroy(order);
    cudaGetLastError();  // not sticky: the forward's launches say what is wrong
    return nullptr;
  }
  // Created on first use on `device`, the current one; kept to the end.
  CUstream_st* private_stream(int device) {
    auto it = streams_.find(device);
    if (it != streams_.end()) return it->second;
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return nullptr;
    return streams_[device] = s;
  }

  std::mutex mutex_;
  std::map<std::pair<int, CUstream_st*>, Kept> kept_;
  std::map<int, CUstream_st*> streams_;
};

void* stream_workspace(const Tensor& like, CUstream_st* stream, size_t bytes) {
  if (bytes > kSharedWorkspaceBytes) return nullptr;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
    cudaGetLastError();  // not sticky: the forward's launches say what is wrong
    return nullptr;
  }
  if (capturing != cudaStreamCaptureStatusNone) return nullptr;
  static auto* kept = new KeptWorkspaces();  // kept to the end: its buffers outlive every call
  return kept->get(int(like.get_device_index()), stream, bytes);
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
