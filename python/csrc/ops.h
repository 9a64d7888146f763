// The torch op `mxmoe::forward` over a MoeLayer (LibTorch stable ABI): the
// checks of its tensors and the call, shared by the CPU and CUDA kernels.
#pragma once

#include <optional>

#include <torch/csrc/stable/tensor.h>

struct CUstream_st;

namespace mxmoe::python {

using torch::stable::Tensor;

// out = layer(x): x bf16 [T, H] (rows may be strided), routing int32 / fp32
// [T, k] or both absent, out bf16 or fp32 [T, H] contiguous, workspace a
// uint8 tensor of at least the layer's bytes for T (absent: one is taken from
// torch's allocator on x's device). `stream`: the current stream of x's
// device, null on the CPU.
void forward(const Tensor& x, const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights,
             int64_t layer, Tensor& out, const std::optional<Tensor>& workspace, CUstream_st* stream);

}  // namespace mxmoe::python
