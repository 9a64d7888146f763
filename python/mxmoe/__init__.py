"""mxmoe: GPT-OSS Mixture-of-Experts layers with MXFP4 expert weights.

``mxmoe.MoE`` is the whole MLP block (router and experts) as a module;
``mxmoe.load_layers`` loads every MoE layer of a checkpoint at once (on a
GPU that cannot hold them all, the layers beyond ``max_device_bytes`` keep
their experts in host memory and compute them on the CPU);
``mxmoe.info()`` says which backend runs where and why;
``mxmoe.integrations.transformers.replace_experts`` puts ``MoE`` into a
transformers GPT-OSS model. The ops under ``torch.ops.mxmoe`` (see
``mxmoe.ops``) are what the module calls.
"""
import torch

from . import _library, ops
from .moe import MoE, _device_index, describe_placement, load_layers

__all__ = ["MoE", "describe_placement", "info", "load_layers", "ops"]
__version__ = "0.1.0"


def info(device=None, *, backend="auto", experts=32, hidden=2880, intermediate=2880, topk=4, activations="bf16"):
    """The dispatch table for a layer shape (default: gpt-oss-20b's) on ``device``.

    Returns a dict: ``device`` (index, name, SM; None on the CPU),
    ``compiled_archs``, ``cpu_kernels`` (the CPU kernels' instruction-set
    path, e.g. "avx512_vnni kernels (this CPU has AVX-512 F, BW and VNNI)";
    ``MXMOE_CPU_ISA`` forces one), ``backends`` (each: ``name``; ``built``,
    whether this build holds it, and ``why_not_built``, e.g. "built without
    CUTLASS"; ``available`` here and ``why`` not), ``pick`` and ``reason`` (or
    ``error`` where ``backend`` cannot run), and ``device_layer_bytes``, the
    device memory a layer of the pick holds (0 on the CPU).
    """
    code, _ = _library.activation_codes(activations, "ceil")
    return _library.dispatch_info((experts, hidden, intermediate, topk), _device_index(device), backend, code)
