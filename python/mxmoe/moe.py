"""``mxmoe.MoE``: the GPT-OSS MLP block (router and MXFP4 experts) as a module."""
import sys

import torch
from torch import nn

from . import _library, ops  # noqa: F401  (ops registers the fake kernel)

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


def _device_index(device):
    """The layer's device as mxmoe numbers it: a CUDA index, or -1 for the CPU."""
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cpu":
        return -1
    if device.type != "cuda":
        raise ValueError(f"mxmoe: device must be a CUDA device or the CPU, got {device}")
    return torch.cuda.current_device() if device.index is None else device.index


def _check(name, t, dtype, shape):
    """Raises TypeError / ValueError naming `name` unless t is a tensor of `dtype` (None: any float) and `shape`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mxmoe: {name} must be a torch.Tensor, got {type(t).__name__}")
    if dtype is None and not t.is_floating_point():
        raise TypeError(f"mxmoe: {name} must be a floating-point tensor, got {t.dtype}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"mxmoe: {name} must be {dtype}, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"mxmoe: {name} must have shape {list(shape)}, got {list(t.shape)}")


def _host(t, dtype=None):
    return t.detach().to(device="cpu", dtype=dtype or t.dtype).contiguous()


_BF16_NAMES = ("router_weight", "router_bias", "gate_up_bias", "down_bias")


def _placed(named, index, backend):
    """The tensors as the library takes them, in mxmoe_create_layer's order.

    For a GPU layer whose tensors all lie on CUDA devices they stay there (the
    library prepares them on that GPU, without a copy through host memory;
    tensors on another GPU than the layer's are refused); otherwise, and for
    a host-memory layer (backend "cpu" on a GPU), they are copied to host
    memory. Biases and router become bf16 where they are.
    """
    given = {n: t for n, t in named.items() if t is not None}
    if index >= 0 and backend != "cpu" and all(t.is_cuda for t in given.values()):
        for n, t in given.items():
            if t.device.index != index:
                raise ValueError(f"mxmoe: {n} is on {t.device}; the layer is asked for cuda:{index}")
        place = lambda t, dtype=None: t.detach().to(dtype=dtype or t.dtype).contiguous()  # noqa: E731
    else:
        place = _host
    return [None if named[n] is None else place(named[n], torch.bfloat16 if n in _BF16_NAMES else None)
            for n in named]


class _Layer:
    """Owns one layer handle of the compiled library; releases it when collected."""

    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        _library.release_layer(self.handle)


class MoE(nn.Module):
    """The GPT-OSS MoE block: ``y = sum_k w_k (W2_e (SwiGLU(W13_e x + b13_e)) + b2_e)``.

    Build one with :meth:`from_checkpoint` or :meth:`from_tensors`; the
    weights are validated (shapes, NaN scales, non-finite biases), prepared
    for the chosen backend and copied to the layer's device once, so the
    tensors given may be freed afterwards. The module holds no parameters:
    the layer stays on the device it was built for (``.to()`` does not move
    it; build another).

    Attributes: ``backend`` (e.g. "sm90"; on the CPU "cpu", the SIMD kernels,
    or "reference" for MXFP8 activations), ``backend_reason`` (why dispatch
    chose it; on the CPU also the kernels' instruction set), ``device``,
    ``num_experts``, ``hidden_size``, ``intermediate_size``, ``top_k``,
    ``device_bytes`` (the device memory the layer holds, from torch's allocator; 0 on the CPU),
    ``host_experts`` (True for a host-memory layer: backend "cpu" on a GPU, whose experts live in
    host memory and are computed by the CPU while x and y stay on the GPU).

    A host-memory layer's forwards are enqueued on the current stream like a GPU layer's (copies
    and a host function, so CUDA graphs record them); forwards of one such layer on different
    streams must be ordered by the caller, since they share its pinned staging.
    """

    def __init__(self, handle):
        super().__init__()
        self._owner = _Layer(handle)
        self._layer = handle
        info = _library.layer_info(handle)
        self.backend = info["backend"]
        self.backend_reason = info["reason"]
        self.activations = info["activations"]
        self.device = torch.device("cpu") if info["device"] < 0 else torch.device("cuda", info["device"])
        self.num_experts = info["experts"]
        self.hidden_size = info["hidden"]
        self.intermediate_size = info["intermediate"]
        self.top_k = info["topk"]
        self.has_router = info["has_router"]
        self.device_bytes = info["device_bytes"]
        self.host_experts = info["host_experts"]
        # Forwards of at least this many tokens stream the host-memory experts to the GPU (None: never).
        self.host_stream_from = info["host_stream_from"] or None

    @classmethod
    def from_checkpoint(cls, path, layer, *, backend="auto", device=None, topk=None, activations="bf16",
                        mxfp8_scale_rule="ceil"):
        """Layer ``layer`` of a GPT-OSS safetensors checkpoint (a folder with config.json, or one file).

        The checkpoint's MXFP4 bytes are used as they are; ``topk`` overrides
        the config's. ``device`` defaults to the current CUDA device, or the
        CPU where there is none. ``activations`` and ``mxfp8_scale_rule`` as
        in :meth:`from_tensors`.
        """
        if not isinstance(layer, int) or layer < 0:
            raise ValueError(f"mxmoe: layer must be a non-negative int, got {layer!r}")
        codes = _library.activation_codes(activations, mxfp8_scale_rule)
        return cls(_library.create_layer_from_checkpoint(str(path), layer, topk, backend, _device_index(device),
                                                         codes))

    @classmethod
    def from_tensors(cls, router_weight, router_bias, gate_up_blocks, gate_up_scales, gate_up_bias, down_blocks,
                     down_scales, down_bias, *, topk=4, swiglu_alpha=1.702, swiglu_limit=7.0, backend="auto",
                     device=None, activations="bf16", mxfp8_scale_rule="ceil", consume=False, host_threads=0,
                     host_stream_tokens=0):
        """One layer from tensors in the Hugging Face GPT-OSS checkpoint layout (any device).

        ``gate_up_blocks`` uint8 [E, 2I, H/32, 16] and ``gate_up_scales`` uint8
        [E, 2I, H/32] (rows interleaved: 2j gate, 2j+1 up), ``gate_up_bias``
        [E, 2I]; ``down_blocks`` uint8 [E, H, I/32, 16], ``down_scales`` uint8
        [E, H, I/32], ``down_bias`` [E, H]; ``router_weight`` [E, H] and
        ``router_bias`` [E], or both None (every forward then needs routing).
        Biases and router are used in bf16, as the checkpoints store them.
        Tensors on the layer's GPU are prepared there, by the library's
        kernels, without a copy through host memory (a tensor on another GPU
        is a ValueError); tensors elsewhere are copied.

        ``activations``: what the expert GEMMs consume, "bf16" (every
        backend) or "mxfp8" (x and the SwiGLU output quantized to E4M3 with
        one E8M0 scale per 32, scales by ``mxfp8_scale_rule``: "ceil",
        2^ceil(log2(amax / 448)) as the Blackwell engines, or "ocp"); a
        backend that cannot serve the format is passed over by "auto" and
        refused when named.

        On a GPU the layer's memory comes from torch's caching allocator (counted by
        ``torch.cuda.memory_allocated()``, taken from what the caller freed, given back when the
        module is collected), in the order of the current stream. ``consume=True`` frees the given
        tensors' storages (resizes them to 0 bytes) as soon as the layer is built, so that an
        engine converting a model layer by layer holds one layer above the model at most; every
        tensor sharing those storages is emptied too. On an error nothing is freed.

        ``backend="cpu"`` on a GPU keeps the experts in host memory (``host_experts``), computed
        by the CPU on ``host_threads`` threads (0: OpenMP's default); from
        ``host_stream_tokens`` tokens on (0: from where that is faster than the CPU, as
        ``backend_reason`` says; -1: never) a forward streams them over PCIe into its workspace
        and runs the GPU's kernels on them, with the bits of that GPU backend's own layer.
        """
        _check_host_options(host_threads, host_stream_tokens)
        if not isinstance(gate_up_blocks, torch.Tensor) or gate_up_blocks.dim() != 4:
            raise ValueError("mxmoe: gate_up_blocks must be a uint8 tensor [E, 2I, H/32, 16]")
        e, i2, hb, _ = gate_up_blocks.shape
        h, i = hb * 32, i2 // 2
        _check("gate_up_blocks", gate_up_blocks, torch.uint8, (e, 2 * i, h // 32, 16))
        _check("gate_up_scales", gate_up_scales, torch.uint8, (e, 2 * i, h // 32))
        _check("gate_up_bias", gate_up_bias, None, (e, 2 * i))
        _check("down_blocks", down_blocks, torch.uint8, (e, h, i // 32, 16))
        _check("down_scales", down_scales, torch.uint8, (e, h, i // 32))
        _check("down_bias", down_bias, None, (e, h))
        if (router_weight is None) != (router_bias is None):
            raise ValueError("mxmoe: give router_weight and router_bias together, or neither")
        if router_weight is not None:
            _check("router_weight", router_weight, None, (e, h))
            _check("router_bias", router_bias, None, (e,))
        if not isinstance(topk, int) or not 1 <= topk <= e:
            raise ValueError(f"mxmoe: topk must be an int in [1, {e}], got {topk!r}")
        named = {"router_weight": router_weight, "router_bias": router_bias, "gate_up_blocks": gate_up_blocks,
                 "gate_up_scales": gate_up_scales, "gate_up_bias": gate_up_bias, "down_blocks": down_blocks,
                 "down_scales": down_scales, "down_bias": down_bias}
        if consume:
            for n, t in named.items():
                if t is not None and not t.untyped_storage().resizable():
                    raise ValueError(f"mxmoe: consume=True frees the tensors' storages, and {n}'s cannot be "
                                     "resized (memory it does not own, e.g. a mapped file)")
        index = _device_index(device)
        tensors = _placed(named, index, backend)
        codes = _library.activation_codes(activations, mxfp8_scale_rule)
        handle = _library.create_layer(tensors, (e, h, i, topk), (float(swiglu_alpha), float(swiglu_limit)), backend,
                                       index, codes, host_threads, host_stream_tokens)
        moe = cls(handle)
        if consume:
            del tensors  # copies made for the library go first, then the caller's storages
            for t in named.values():
                if t is not None:
                    t.untyped_storage().resize_(0)
        return moe

    def workspace_bytes(self, max_tokens):
        """Bytes of a uint8 workspace that serves ``torch.ops.mxmoe.forward`` for up to ``max_tokens``
        tokens (allocate it once, outside a CUDA graph, and pass it as ``workspace``)."""
        if not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"mxmoe: max_tokens must be a non-negative int, got {max_tokens!r}")
        return _library.layer_workspace_bytes(self._layer, max_tokens)

    def forward(self, x, topk_ids=None, topk_weights=None):
        """``y = MoE(x)`` for x [..., H] in bf16, fp16 or fp32; y has x's shape and dtype.

        With ``topk_ids`` [..., k] (int32 or int64) and ``topk_weights``
        [..., k] (floats), the caller's routing is used as given instead of
        the router's. On a GPU an id outside [0, E) makes its token's row
        NaN (the check runs on the device, without a synchronisation); on the
        CPU it raises IndexError.
        """
        # Each Python-level tensor call costs 1-3 us of host time (H200 host, 2026-12-02), half a
        # kernel launch: a bf16 x with contiguous rows and the router takes torch.empty and the op.
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"mxmoe: x must be a torch.Tensor, got {type(x).__name__}")
        dtype, shape = x.dtype, x.shape
        if dtype not in _FLOATS:
            raise TypeError(f"mxmoe: x must be bfloat16, float16 or float32, got {dtype}")
        if not shape or shape[-1] != self.hidden_size:
            raise ValueError(f"mxmoe: x must be [..., {self.hidden_size}], got {list(shape)}")
        if x.device != self.device:
            raise ValueError(f"mxmoe: x is on {x.device}, the layer on {self.device}")
        ids = weights = None
        if topk_ids is not None or topk_weights is not None:
            ids, weights = self._routing(shape[:-1], topk_ids, topk_weights)
        elif not self.has_router:
            raise ValueError("mxmoe: this layer has no router: pass topk_ids and topk_weights")
        x2 = x if dtype == torch.bfloat16 else x.to(torch.bfloat16)
        # The op takes x [..., H] whose leading axes flatten to one row stride; the kernels read
        # rows 16 bytes at a time: a contiguous last axis, rows 8 elements apart, and (eagerly;
        # compiled graphs allocate aligned) the first row 16-byte aligned.
        if not x2.is_contiguous():
            x2 = x2.reshape(-1, self.hidden_size)  # a view where the leading axes flatten
            if x2.stride(1) != 1 or x2.stride(0) % 8 != 0:
                x2 = x2.contiguous()
        if not torch.compiler.is_compiling() and x2.storage_offset() % 8 != 0:
            x2 = x2.clone(memory_format=torch.contiguous_format)
        out_dtype = torch.bfloat16 if dtype == torch.bfloat16 else torch.float32
        out = torch.empty(x2.shape, dtype=out_dtype, device=self.device)
        torch.ops.mxmoe.forward(x2, ids, weights, self._layer, out)
        if out_dtype != dtype:
            out = out.to(dtype)
        return out if out.dim() == len(shape) else out.reshape(shape)

    def _routing(self, lead, topk_ids, topk_weights):
        """The caller's routing as the op takes it: int32 and float32 [T, k], contiguous."""
        if (topk_ids is None) != (topk_weights is None):
            raise ValueError("mxmoe: give topk_ids and topk_weights together, or neither")
        routing_shape = (*lead, self.top_k)
        for name, t in (("topk_ids", topk_ids), ("topk_weights", topk_weights)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"mxmoe: {name} must be a torch.Tensor, got {type(t).__name__}")
            if tuple(t.shape) != routing_shape:
                raise ValueError(f"mxmoe: {name} must have shape {list(routing_shape)}, got {list(t.shape)}")
            if t.device != self.device:
                raise ValueError(f"mxmoe: {name} is on {t.device}, the layer on {self.device}")
        if topk_ids.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"mxmoe: topk_ids must be int32 or int64, got {topk_ids.dtype}")
        if not topk_weights.is_floating_point():
            raise TypeError(f"mxmoe: topk_weights must be floating point, got {topk_weights.dtype}")
        return (topk_ids.reshape(-1, self.top_k).to(torch.int32).contiguous(),
                topk_weights.reshape(-1, self.top_k).to(torch.float32).contiguous())

    def extra_repr(self):
        return (f"experts={self.num_experts}, hidden={self.hidden_size}, intermediate={self.intermediate_size}, "
                f"top_k={self.top_k}, backend={self.backend}, device={self.device}")


def _progress_bar(progress):
    """The callable load_layers reports to: the caller's, a bar on a terminal's stderr, or none."""
    if callable(progress):
        return progress
    if progress is None and sys.stderr.isatty():
        def bar(done, total):
            filled = 30 * done // max(total, 1)
            sys.stderr.write(f"\rmxmoe: loading layers [{'#' * filled}{' ' * (30 - filled)}] {done}/{total}")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        return bar
    return None


def _check_host_options(host_threads, host_stream_tokens):
    if not isinstance(host_threads, int) or host_threads < 0:
        raise ValueError(f"mxmoe: host_threads must be a non-negative int, got {host_threads!r}")
    if not isinstance(host_stream_tokens, int) or host_stream_tokens < -1:
        raise ValueError(f"mxmoe: host_stream_tokens must be an int >= -1 (-1: never, 0: where faster), "
                         f"got {host_stream_tokens!r}")


def load_layers(path, layers=None, *, backend="auto", device=None, progress=None, topk=None, max_device_bytes=None,
                host_threads=0, host_stream_tokens=0):
    """Every MoE layer of a GPT-OSS checkpoint (or those in ``layers``) as a list of :class:`MoE`.

    On a GPU the files are read in parallel into pinned staging (two layers' worth of host
    memory), each layer uploaded while the next is read and prepared on the GPU. ``progress``:
    None draws a bar on stderr when it is a terminal, False draws none, a callable gets
    ``(done, total)`` after each layer. Errors name the layer; nothing stays allocated after one.

    ``max_device_bytes`` (GPU loads): the device memory the layers may take. The first layers
    that fit go on the GPU; the others keep their experts in host memory (``host_experts``)
    and compute them on the CPU on ``host_threads`` threads (0: OpenMP's default), with x and
    y on the GPU. 0 keeps every layer's experts in host memory. Where a bar is drawn, a line
    says which layers went where. ``host_stream_tokens`` as in :meth:`MoE.from_tensors`.
    """
    if layers is not None:
        layers = [int(i) for i in layers]
        if any(i < 0 for i in layers):
            raise ValueError(f"mxmoe: layers must be non-negative, got {layers}")
    if max_device_bytes is not None and (not isinstance(max_device_bytes, int) or max_device_bytes < 0):
        raise ValueError(f"mxmoe: max_device_bytes must be a non-negative int, got {max_device_bytes!r}")
    _check_host_options(host_threads, host_stream_tokens)
    index = _device_index(device)
    count = len(layers) if layers else 1 << 12
    bar = _progress_bar(progress)
    handles = _library.load_layers(str(path), layers or [], topk, backend, index, (0, 0), max_device_bytes,
                                   host_threads, host_stream_tokens, bar, count)
    moes = [MoE(h) for h in handles]
    if bar is not None and bar is not progress and max_device_bytes is not None:
        sys.stderr.write(f"mxmoe: {describe_placement(moes, layers)}\n")
    return moes


def describe_placement(moes, layers=None):
    """One line: which layers' experts are on the GPU and which in host memory, e.g.
    "MoE layers: 24 on the GPU (41.21 GB: layers 0-23), 12 in host memory (layers 24-35); forwards
    from T = 172 stream those to the GPU"."""
    ids = layers or list(range(len(moes)))
    on_gpu = [i for i, m in zip(ids, moes) if not m.host_experts]
    in_host = [i for i, m in zip(ids, moes) if m.host_experts]
    gpu_bytes = sum(m.device_bytes for m in moes)
    gpu = f"{len(on_gpu)} on the GPU ({gpu_bytes / 1e9:.2f} GB" + (f": {_spans(on_gpu)})" if on_gpu else ")")
    host = f"{len(in_host)} in host memory" + (f" ({_spans(in_host)})" if in_host else "")
    streams = sorted({m.host_stream_from for m in moes if m.host_experts and m.host_stream_from})
    if streams:
        host += f"; forwards from T = {'/'.join(map(str, streams))} stream those to the GPU"
    return f"MoE layers: {gpu}, {host}"


def _spans(ids):
    """'layers 0-11, 14' for a non-empty list of layer indices."""
    spans, start = [], ids[0]
    for a, b in zip(ids, ids[1:] + [None]):
        if b != a + 1:
            spans.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return "layers " + ", ".join(spans)
