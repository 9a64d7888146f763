// The torch op `mxmoe::forward` over a MoeLayer (LibTorch stable ABI): the
// checks of its tensors and the call, shared by the CPU and CUDA kernels.
#pragma once

#include <cstddef>
#include <optional>

#include <torch/csrc/stable/tensor.h>

struct CUstream_st;

namespace mxmoe::python {

using torch::stable::Tensor;

// A workspace of at least `bytes` for a call on `stream` on like's device
// that passes none, or null to take one from torch's allocator for the call.
using WorkspaceSource = void* (*)(const Tensor& like, CUstream_st* stream, size_t bytes);

// out = layer(x): x bf16 [..., H] (T tokens along leading axes that flatten to
// one row stride, which may exceed H), routing int32 / fp32 [T, k] or both
// absent, out bf16 or fp32 of x's shape, contiguous, workspace a
// uint8 tensor of at least the layer's bytes for T (absent: `source`'s, or
// one from torch's allocator on x's device). `stream`: the current stream of
// x's device, null on the CPU.
void forward(const Tensor& x, const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights,
             int64_t layer, Tensor& out, const std::optional<Tensor>& workspace, CUstream_st* stream,
             WorkspaceSource source);

}  // namespace mxmoe::python
