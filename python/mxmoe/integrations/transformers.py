"""mxmoe in Hugging Face transformers' GPT-OSS models.

``replace_experts(model)`` swaps every ``GptOssMLP`` (router and experts) of
a ``GptOssForCausalLM`` / ``GptOssModel`` for an mxmoe layer on the device
the block's weights are on. ``load_gpt_oss(path)`` builds such a model from a
checkpoint without transformers ever holding the experts, so a model whose
experts do not fit the GPU keeps the rest of them in host memory.
"""
import glob
import os
import sys

import torch
from torch import nn

from .. import _library
from ..moe import MoE, _progress_bar, describe_placement, load_layers


class GptOssMoE(nn.Module):
    """Stands where ``GptOssMLP`` stood: ``forward(hidden_states)`` returns
    ``(output, None)`` (the decoder layer keeps the first). The router runs
    inside mxmoe, so ``output_router_logits`` has no logits to collect.

    The block runs its ``moe``'s forward itself, not through the module call
    (which costs 1.5-3 us of host time on an H200's host, a tenth of an
    eager decode step's MoE): hooks go on this block, not on ``.moe``."""

    def __init__(self, moe):
        super().__init__()
        self.moe = moe

    def forward(self, hidden_states):
        return self.moe.forward(hidden_states), None


def _mxfp4(w, name):
    """float [E, N, K] -> blocks uint8 [E, N, K/32, 16], scales uint8 [E, N, K/32] (OCP rule)."""
    e, n, k = w.shape
    if k % 32:
        raise ValueError(f"mxmoe: {name} has {k} columns along K, not a multiple of 32")
    codes, scales = _library.quantize_mxfp4(w.detach().to("cpu", torch.float32).reshape(e * n, k).contiguous())
    return codes.reshape(e, n, k // 32, 16), scales.reshape(e, n, k // 32)


def _expert_tensors(experts):
    """(gate_up_blocks, gate_up_scales, down_blocks, down_scales) of a GPT-OSS experts module."""
    names = ("gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales")
    held = [getattr(experts, n, None) for n in names]
    if all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in held):
        return held  # the checkpoint's MXFP4 bytes, as loaded
    # Dequantised weights: gate_up_proj [E, H, 2I], down_proj [E, I, H].
    gate_up = _mxfp4(experts.gate_up_proj.transpose(1, 2), "gate_up_proj")
    down = _mxfp4(experts.down_proj.transpose(1, 2), "down_proj")
    return (*gate_up, *down)


def _is_gpt_oss_mlp(module):
    return type(module).__name__ == "GptOssMLP" and hasattr(module, "router") and hasattr(module, "experts")


def replace_experts(model, checkpoint=None, backend="auto", max_device_bytes=None, host_threads=0, progress=None,
                    host_stream_tokens=0):
    """Replaces every GPT-OSS MoE block of ``model`` with an mxmoe layer; returns how many.

    With ``checkpoint`` (the model's folder or .safetensors file) the layers
    take the exact MXFP4 bytes from it. Without, they come from the module:
    its MXFP4 blocks and scales where it still holds them, otherwise its
    dequantised expert weights are quantised to MXFP4 (OCP rule: scale =
    floor(log2(amax)) - 2 per 32 along K). That gives back the original
    bytes' values exactly when the weights were dequantised from MXFP4, as
    transformers does when it loads a GPT-OSS checkpoint on a CPU or with
    ``Mxfp4Config(dequantize=True)``; other weights are rounded to MXFP4.
    Each layer is built on the device of its block's router weight.

    ``max_device_bytes``: the GPU memory the MoE layers may take (per GPU).
    The first blocks whose experts fit go on the GPU; the others keep their
    experts in host memory and compute them on the CPU (``host_threads``
    threads, 0: OpenMP's default) while attention, x and y stay on the GPU;
    ``host_stream_tokens`` as in :meth:`mxmoe.MoE.from_tensors`.
    ``progress`` as in :func:`mxmoe.load_layers`; a line then says which
    layers went where.
    """
    decoder = getattr(model, "model", model)
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ValueError("mxmoe: the model has no .layers (expected a transformers GPT-OSS model)")
    config = getattr(model, "config", None)
    blocks = [(i, layer) for i, layer in enumerate(layers) if _is_gpt_oss_mlp(getattr(layer, "mlp", None))]
    loaded = {}
    if checkpoint is not None:
        # One load_layers per (device, top-k): the files are read once, in parallel, and
        # prepared on the device.
        groups = {}
        for i, layer in blocks:
            router = layer.mlp.router
            topk = int(getattr(router, "top_k", getattr(config, "num_experts_per_tok", 4)))
            groups.setdefault((router.weight.device, topk), []).append(i)
        budget = dict.fromkeys((device for device, _ in groups), max_device_bytes)
        for (device, topk), ids in groups.items():
            moes = load_layers(checkpoint, ids, backend=backend, device=device, topk=topk, progress=progress,
                               max_device_bytes=budget[device], host_threads=host_threads,
                               host_stream_tokens=host_stream_tokens)
            if budget[device] is not None:
                budget[device] = max(0, budget[device] - sum(m.device_bytes for m in moes))
            loaded.update(zip(ids, moes))
    budget = {}  # bytes left per GPU, for the layers built from the module's tensors
    replaced = 0
    for i, layer in blocks:
        mlp = layer.mlp
        router, experts = mlp.router, mlp.experts
        device = router.weight.device
        topk = int(getattr(router, "top_k", getattr(config, "num_experts_per_tok", 4)))
        if checkpoint is not None:
            moe = loaded[i]
        else:
            gu_blocks, gu_scales, down_blocks, down_scales = _expert_tensors(experts)
            where = backend
            if max_device_bytes is not None and device.type == "cuda":
                e, h, i2 = gu_blocks.shape[0], gu_blocks.shape[2] * 32, gu_blocks.shape[1]
                need = _library.dispatch_info((e, h, i2 // 2, topk), device.index, backend, 0)["device_layer_bytes"]
                left = budget.setdefault(device, max_device_bytes)
                where = backend if need <= left else "cpu"
                budget[device] = left - need if need <= left else left
            moe = MoE.from_tensors(router.weight, router.bias, gu_blocks, gu_scales, experts.gate_up_proj_bias,
                                   down_blocks, down_scales, experts.down_proj_bias, topk=topk,
                                   swiglu_alpha=float(getattr(experts, "alpha", 1.702)),
                                   swiglu_limit=float(getattr(experts, "limit", 7.0)),  # what its forward clamps at
                                   backend=where, device=device, host_threads=host_threads,
                                   host_stream_tokens=host_stream_tokens)
        layer.mlp = GptOssMoE(moe)
        replaced += 1
    if max_device_bytes is not None and checkpoint is None and _progress_bar(progress) is not None:
        moes = [layer.mlp.moe for _, layer in blocks]
        sys.stderr.write(f"mxmoe: {describe_placement(moes, [i for i, _ in blocks])}\n")
    return replaced


def load_gpt_oss(path, *, device=None, dtype=torch.bfloat16, max_device_bytes=None, backend="auto", host_threads=0,
                 progress=None, host_stream_tokens=0):
    """A transformers ``GptOssForCausalLM`` from a GPT-OSS checkpoint folder, its MoE blocks mxmoe's.

    The model is built on the meta device, its MLP blocks become mxmoe layers
    (:func:`mxmoe.load_layers`: the MXFP4 bytes read once, prepared on ``device``), and only then
    are the other tensors (attention, norms, embeddings, head; in ``dtype``) read into it on
    ``device``: the experts never pass through transformers, so gpt-oss-120b needs no more
    GPU memory than its attention and the MoE layers that ``max_device_bytes`` lets on. The
    layers beyond it keep their experts in host memory and compute them on the CPU
    (``host_threads``; ``host_stream_tokens`` as in :meth:`mxmoe.MoE.from_tensors`). ``device``
    defaults to the current CUDA device, else the CPU.
    """
    from transformers import AutoConfig, GenerationConfig, GptOssForCausalLM
    from safetensors import safe_open

    from ..moe import _device_index
    index = _device_index(device)
    device = torch.device("cpu") if index < 0 else torch.device("cuda", index)
    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = GptOssForCausalLM(config).to(dtype)
    layers = model.model.layers
    moes = load_layers(path, list(range(len(layers))), backend=backend, device=device, progress=progress,
                       max_device_bytes=max_device_bytes, host_threads=host_threads,
                       host_stream_tokens=host_stream_tokens)
    for layer, moe in zip(layers, moes):
        layer.mlp = GptOssMoE(moe)
    model.to_empty(device=device)
    params = model.state_dict()
    read = set()
    files = [path] if os.path.isfile(path) else sorted(glob.glob(os.path.join(path, "*.safetensors")))
    with torch.no_grad():
        for file in files:
            with safe_open(file, framework="pt", device=str(device)) as f:
                for name in f.keys():
                    if name in params:
                        params[name].copy_(f.get_tensor(name))
                        read.add(name)
    if getattr(config, "tie_word_embeddings", False) and "lm_head.weight" not in read:
        model.tie_weights()
        read.add("lm_head.weight")
    missing = sorted(set(params) - read)
    if missing:
        raise ValueError(f"mxmoe: {path} lacks {len(missing)} of the model's tensors, e.g. {missing[:3]}")
    rebuild_tables(model, config, device)
    try:
        model.generation_config = GenerationConfig.from_pretrained(path)
    except OSError:
        pass  # no generation_config.json: transformers' defaults
    return model.eval()


def rebuild_tables(model, config, device):
    """Builds again, on ``device``, the modules whose buffers are tables computed at construction
    (non-persistent, e.g. the rotary frequencies): a model made on the meta device and then
    ``to_empty`` holds garbage there."""
    for name, module in list(model.named_modules()):
        if any(True for _ in module.buffers(recurse=False)):
            parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
            with torch.device(device):
                setattr(parent, name.rpartition(".")[2], type(module)(config=config))
