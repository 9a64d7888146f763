"""The torch ops (``torch.ops.mxmoe``) with their fake kernels.

``forward(x, topk_ids, topk_weights, layer, out, workspace=None)`` writes
``out`` (bf16 or fp32, contiguous, x's shape) = the layer's MoE of ``x``
(bf16 [..., H], rows contiguous, its T tokens' leading axes flattening to one
row stride) on the current stream of x's device; ``topk_ids`` (int32) and
``topk_weights`` (fp32) [T, k] are the caller's routing, or both None to run
the layer's router. ``workspace`` (uint8) is the caller's scratch; None takes
it from torch's allocator, or on CUDA, outside a capture and up to 32 MiB,
uses a buffer kept per stream (torch's memory too, counted by
``torch.cuda.memory_allocated()``). Nothing synchronises, so the op records
into CUDA graphs.
"""
import torch

from . import _library  # noqa: F401  (registers the ops)


@torch.library.register_fake("mxmoe::forward")
def _forward_fake(x, topk_ids, topk_weights, layer, out, workspace=None):
    return None


def forward(x, topk_ids, topk_weights, layer, out, workspace=None):
    torch.ops.mxmoe.forward(x, topk_ids, topk_weights, layer, out, workspace)
    return out
