// The CUDA kernel of `mxmoe::forward`: the same adapter on the current stream
// of x's device (torch's, so the op orders with the caller's other work and
// is captured by torch.cuda.graph).
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>

#include "ops.h"

namespace mxmoe::python {
namespace {

void forward_cuda(const Tensor& x, const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights,
                  int64_t layer, Tensor& out, const std::optional<Tensor>& workspace) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream));
  forward(x, topk_ids, topk_weights, layer, out, workspace, static_cast<CUstream_st*>(stream));
}

}  // namespace
}  // namespace mxmoe::python

STABLE_TORCH_LIBRARY_IMPL(mxmoe, CUDA, m) { m.impl("forward", TORCH_BOX(&mxmoe::python::forward_cuda)); }
