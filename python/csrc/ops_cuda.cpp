// The CUDA kernel of `mxmoe::forward`: the same adapter on the current stream
// of x's device (torch's, so the op orders with the caller's other work and
// is captured by torch.cuda.graph).
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
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
// statistics like the layers), in the caller's stream's order, so that a
// replaced one goes back behind the calls that used it. Each is taken on a
// thread of its own: torch routes every allocation of a thread that warms up
// a CUDA graph (torch.compile's CUDA-graph trees) into the graph's pool, which
// a buffer kept beyond the warm-up must not be part of.
class KeptWorkspaces {
 public:
  void* get(int device, CUstream_st* stream, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    Kept& w = kept_[{device, stream}];
    if (w.bytes >= bytes) return w.ptr;
    size_t size = size_t(1) << 16;  // powers of two: few replacements as T grows
    while (size < bytes) size *= 2;
    const std::shared_ptr<DeviceAllocator> torch = torch_cuda_allocator();
    if (w.ptr) torch->deallocate(device, w.ptr, w.bytes, stream);
    w = {};
    void* ptr = nullptr;
    bool ok = false;
    std::thread([&] { ok = torch->allocate(device, size, stream, &ptr).ok(); }).join();
    if (!ok) return nullptr;  // torch's allocator then says what it can
    w = {ptr, size};
    return ptr;
  }

 private:
  struct Kept {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  std::mutex mutex_;
  std::map<std::pair<int, CUstream_st*>, Kept> kept_;
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
