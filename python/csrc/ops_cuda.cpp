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
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/core/ScalarType.h>

#include "ops.h"

namespace mxmoe::python {
namespace {

// Calls that pass no workspace, up to this many bytes of it (decode and
// small prefills: a few hundred KB at gpt-oss's T = 1), share one buffer per
// stream, kept between calls: an allocation from torch costs 3.5-4 us of host
// time on this class of host, as much as the rest of the op's own checks
// (H200, 2026-12-02). Calls on one stream run in its order, so they can
// share the buffer; a buffer is torch's memory, allocated on its stream,
// replaced by a larger one when a call needs more (the old one then goes
// back to torch's allocator in that stream's order). Larger needs, and calls
// into a capture (whose memory is the capture's pool), allocate per call.
constexpr size_t kSharedWorkspaceBytes = size_t(32) << 20;

void* stream_workspace(const Tensor& like, CUstream_st* stream, size_t bytes) {
  if (bytes > kSharedWorkspaceBytes) return nullptr;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
    cudaGetLastError();  // not sticky: the forward's launches say what is wrong
    return nullptr;
  }
  if (capturing != cudaStreamCaptureStatusNone) return nullptr;
  static std::mutex mutex;
  // Never destroyed: the tensors must not be released after torch's allocator at exit.
  static auto* buffers = new std::map<std::pair<int, CUstream_st*>, Tensor>();
  const std::pair<int, CUstream_st*> key(int(like.get_device_index()), stream);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = buffers->find(key);
  if (it != buffers->end() && size_t(it->second.numel()) >= bytes) return it->second.mutable_data_ptr();
  size_t size = size_t(1) << 16;  // powers of two: few replacements as T grows
  while (size < bytes) size *= 2;
  const int64_t shape[1] = {int64_t(size)};
  Tensor t = torch::stable::empty(torch::headeronly::IntHeaderOnlyArrayRef(shape, 1),
                                  torch::headeronly::ScalarType::Byte, std::nullopt, like.device());
  void* ptr = t.mutable_data_ptr();
  (*buffers)[key] = std::move(t);
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
