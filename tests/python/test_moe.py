"""mxmoe.MoE against a float64 reference that decodes the same MXFP4 bytes, on every dtype and
shape an engine passes, with the caller's routing and the router's; the op under opcheck and
torch.compile; and the errors bad input gets."""
import os
import re
import shutil
import subprocess
import sysconfig

import numpy as np
import pytest
import torch

import mxmoe
from tiny_gpt_oss import random_moe_layer, reference_mlp

SEED = 1234
E, H, I, K = 8, 160, 96, 2  # H and I not multiples of 64


def layer_tensors(seed=SEED, hidden=H, intermediate=I, experts=E):
    raw = random_moe_layer(np.random.default_rng(seed), hidden, intermediate, experts)
    t = {k: torch.from_numpy(v) for k, v in raw.items()}
    return raw, t


def make_moe(t, device, topk=K, **kw):
    return mxmoe.MoE.from_tensors(t["router_weight"], t["router_bias"], t["gate_up_proj_blocks"],
                                  t["gate_up_proj_scales"], t["gate_up_proj_bias"], t["down_proj_blocks"],
                                  t["down_proj_scales"], t["down_proj_bias"], topk=topk, device=device, **kw)


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.fixture(scope="module")
def layer():
    return layer_tensors()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("tokens", [1, 3, 37])
@pytest.mark.parametrize("routing", ["router", "caller"])
def test_matches_reference(layer, device, dtype, tokens, routing):
    raw, t = layer
    moe = make_moe(t, device)
    seed = SEED + tokens
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, H, generator=g).to(dtype)
    idx = scores = None
    kwargs = {}
    if routing == "caller":
        idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(tokens)])
        scores = torch.softmax(torch.randn(tokens, K, generator=g), -1)
        kwargs = dict(topk_ids=idx.to(device), topk_weights=scores.to(device))
    y = moe(x.to(device), **kwargs)
    assert y.dtype == dtype and y.shape == x.shape and y.device.type == device
    ref, _, _ = reference_mlp(x.double().numpy(), raw, K,
                              None if idx is None else idx.numpy(), None if scores is None else scores.numpy())
    assert np.linalg.norm(ref) > 0
    err = rel_l2(y.float().cpu().numpy(), ref)
    assert err <= 1e-2, f"rel L2 {err:.3g} (seed {seed})"


def test_batch_and_sequence_axes(layer, device):
    """[B, S, H] in, [B, S, H] out; the same tokens as one [B*S, H] call; int64 ids as torch.topk gives."""
    _, t = layer
    moe = make_moe(t, device)
    x = torch.randn(2, 5, H, generator=torch.Generator().manual_seed(SEED), dtype=torch.bfloat16).to(device)
    y = moe(x)
    assert y.shape == (2, 5, H)
    torch.testing.assert_close(y.reshape(10, H), moe(x.reshape(10, H)), rtol=0, atol=0)
    logits = x.float() @ t["router_weight"].to(device).T + t["router_bias"].to(device)
    w, ids = torch.topk(logits, K, dim=-1)  # int64 ids, [B, S, k]
    y2 = moe(x, topk_ids=ids, topk_weights=torch.softmax(w, -1))
    assert rel_l2(y2.float().cpu(), y.float().cpu()) <= 1e-2


def test_caller_routing_equals_the_router(layer, device):
    """The router's own choice passed back as the caller's routing gives the same output."""
    raw, t = layer
    moe = make_moe(t, device)
    x = torch.randn(9, H, generator=torch.Generator().manual_seed(SEED + 7)).to(torch.bfloat16)
    _, scores, idx = reference_mlp(x.double().numpy(), raw, K)
    routed = moe(x.to(device), topk_ids=torch.from_numpy(idx).to(device),
                 topk_weights=torch.from_numpy(scores).float().to(device))
    assert rel_l2(routed.float().cpu(), moe(x.to(device)).float().cpu()) <= 1e-2


def test_no_tokens(layer, device):
    _, t = layer
    moe = make_moe(t, device)
    for shape in [(0, H), (2, 0, H)]:
        y = moe(torch.empty(shape, dtype=torch.bfloat16, device=device))
        assert y.shape == shape


def test_attributes(layer, device):
    _, t = layer
    moe = make_moe(t, device)
    assert moe.backend in ("cpu", "portable", "sm90")
    assert moe.backend_reason.startswith(moe.backend + ":")
    assert (moe.num_experts, moe.hidden_size, moe.intermediate_size, moe.top_k) == (E, H, I, K)
    assert moe.device.type == device
    assert (moe.device_bytes == 0) == (device == "cpu")  # device memory only for a GPU layer
    forced = make_moe(t, device, backend="cpu" if device == "cpu" else "portable")
    assert forced.backend == ("cpu" if device == "cpu" else "portable")


def test_info():
    table = mxmoe.info("cpu")
    names = [b["name"] for b in table["backends"]]
    assert names == ["cpu", "reference", "portable", "sm90", "sm100", "sm120"]
    assert table["pick"] == "cpu" and table["backends"][0]["available"] and table["backends"][1]["available"]
    assert all(b["why"] for b in table["backends"][2:])  # each GPU backend says why not
    assert " kernels (" in table["cpu_kernels"] and table["cpu_kernels"] in table["reason"]
    for b in table["backends"]:  # built, or why not, and then unavailable for that reason
        assert b["built"] == (b["why_not_built"] == ""), b
        if not b["built"]:
            assert not b["available"] and b["why"] == f"{b['name']} is left out of this build ({b['why_not_built']})", b


# The block-scaled MMAs of the Blackwell GEMMs in their SASS (as tests/CMakeLists.txt checks the objects).
BLOCK_SCALED_MMA = {"sm100": ("sm_100a", r"UTCQMMA gdesc[^,]*, gdesc[^,]*, tmem[^,]*, tmem"),
                    "sm120": ("sm_120a", r"QMMA\.SF\.[A-Z0-9.]*E4M3\.E2M1\.E8")}


def _cuobjdump():
    """cuobjdump of the nvidia-cuda-cuobjdump wheel (python/requirements-test.txt) or the CUDA toolkit."""
    wheel_bin = os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "cu13", "bin")
    return shutil.which("cuobjdump", path=os.pathsep.join([wheel_bin, "/usr/local/cuda/bin", os.environ["PATH"]]))


def test_info_built_is_what_the_library_holds():
    """``built`` against the machine code of the loaded library: the CUDA backends are built exactly where it
    holds device code, sm90 where it holds sm_90a code, sm100 and sm120 where their sm_100a / sm_120a code
    holds the block-scaled MMAs."""
    cuobjdump = _cuobjdump()
    if cuobjdump is None:
        pytest.skip("no cuobjdump (the nvidia-cuda-cuobjdump wheel or the CUDA toolkit carries one)")
    env = dict(os.environ, PATH=os.path.dirname(cuobjdump) + os.pathsep + os.environ["PATH"])  # its nvdisasm
    lib = mxmoe._library._PATH
    listed = subprocess.run([cuobjdump, "--list-elf", lib], capture_output=True, text=True, env=env)
    elfs = set(re.findall(r"\.(sm_\d+a?)\.cubin", listed.stdout))
    built = {b["name"]: b for b in mxmoe.info("cpu")["backends"]}
    assert built["portable"]["built"] == bool(elfs), (built["portable"], listed.stdout, listed.stderr)
    assert built["sm90"]["built"] == ("sm_90a" in elfs), (built["sm90"], sorted(elfs))
    for name, (arch, mma) in BLOCK_SCALED_MMA.items():
        holds = False
        if arch in elfs:
            sass = subprocess.run([cuobjdump, "--dump-sass", "--gpu-architecture", arch, lib], capture_output=True,
                                  text=True, env=env, check=True).stdout
            holds = re.search(mma, sass) is not None
        assert built[name]["built"] == holds, (built[name], arch, sorted(elfs))


def test_from_checkpoint(tmp_path, device):
    from tiny_gpt_oss import write_tiny_gpt_oss
    written = write_tiny_gpt_oss(tmp_path / "ckpt", layers=2, hidden=64, intermediate=64, experts=4, topk=2)
    raw = written["layers"][1]
    moe = mxmoe.MoE.from_checkpoint(tmp_path / "ckpt", 1, device=device)
    assert (moe.num_experts, moe.hidden_size, moe.top_k) == (4, 64, 2)
    x = torch.randn(6, 64, generator=torch.Generator().manual_seed(SEED)).to(torch.bfloat16)
    ref, _, _ = reference_mlp(x.double().numpy(), raw, 2)
    assert rel_l2(moe(x.to(device)).float().cpu(), ref) <= 1e-2
    with pytest.raises(ValueError, match="layer 2 is out of range"):
        mxmoe.MoE.from_checkpoint(tmp_path / "ckpt", 2, device=device)
    with pytest.raises(OSError):
        mxmoe.MoE.from_checkpoint(tmp_path / "missing", 0, device=device)


def mxfp8(v, rule):
    """v (1-D, a multiple of 32) through MXFP8: E4M3 (torch's float8_e4m3fn, round to nearest even)
    times one power of two per 32, 2^ceil(log2(amax / 448)) ("ceil") or 2^(floor(log2 amax) - 8)."""
    b = torch.from_numpy(np.asarray(v, np.float32)).reshape(-1, 32).double()
    amax = b.abs().amax(1, keepdim=True)
    exp = torch.ceil(torch.log2(amax / 448)) if rule == "ceil" else torch.floor(torch.log2(amax)) - 8
    scale = torch.where(amax > 0, torch.exp2(exp), torch.ones_like(amax))
    q = (b / scale).clamp(-448, 448).float().to(torch.float8_e4m3fn).double() * scale
    return q.reshape(-1).numpy()


@pytest.mark.parametrize("rule", ["ceil", "ocp"])
def test_mxfp8_activations_on_the_cpu(layer, rule):
    raw, t = layer
    moe = make_moe(t, "cpu", activations="mxfp8", mxfp8_scale_rule=rule)
    assert moe.activations == "mxfp8" and moe.backend == "reference"  # the CPU kernels take bf16
    x = torch.randn(11, H, generator=torch.Generator().manual_seed(SEED + 3)).to(torch.bfloat16)
    y = moe(x).float().numpy()
    ref, _, _ = reference_mlp(x.double().numpy(), raw, K, quantize=lambda v: mxfp8(v, rule))
    bf16_ref, _, _ = reference_mlp(x.double().numpy(), raw, K)
    assert rel_l2(y, ref) <= 2e-3  # the same quantisation; bf16 rounding of y
    assert rel_l2(y, bf16_ref) > 2 * rel_l2(y, ref)  # and not the bf16-activation answer


def test_mxfp8_needs_a_backend_that_computes_it(layer, device):
    _, t = layer
    if device == "cuda":  # no GPU backend consumes MXFP8 yet: a named one is refused
        with pytest.raises(RuntimeError, match="consumes bf16 activations, not mxfp8"):
            make_moe(t, device, activations="mxfp8", backend="portable")
    with pytest.raises(ValueError, match="activations must be one of"):
        make_moe(t, device, activations="fp8")
    assert mxmoe.info("cpu", activations="mxfp8")["pick"] == "reference"


# ---- the op -----------------------------------------------------------------

def op_args(t, device, tokens, routing, out_dtype, workspace):
    moe = make_moe(t, device)
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(tokens, H, generator=g).to(torch.bfloat16).to(device)
    ids = w = None
    if routing:
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(tokens)]).int().to(device)
        w = torch.rand(tokens, K, generator=g).to(device)
    out = torch.empty(tokens, H, dtype=out_dtype, device=device)
    ws = torch.empty(1 << 20, dtype=torch.uint8, device=device) if workspace else None
    return moe, (x, ids, w, moe._layer, out, ws)


@pytest.mark.parametrize("routing", [False, True])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("workspace", [False, True])
def test_opcheck(layer, device, routing, out_dtype, workspace):
    _, t = layer
    moe, args = op_args(t, device, 5, routing, out_dtype, workspace)
    torch.library.opcheck(torch.ops.mxmoe.forward.default, args)


def test_op_writes_out_only(layer, device):
    _, t = layer
    moe, (x, ids, w, handle, out, ws) = op_args(t, device, 4, True, torch.float32, True)
    x0, ids0, w0 = x.clone(), ids.clone(), w.clone()
    out.fill_(float("nan"))
    torch.ops.mxmoe.forward(x, ids, w, handle, out, ws)
    assert torch.isfinite(out).all()
    assert torch.equal(x, x0) and torch.equal(ids, ids0) and torch.equal(w, w0)


def test_op_takes_leading_axes(layer, device):
    """x [B, S, H] (and strided rows) as the op takes them: the tokens of x.reshape(-1, H), out of
    x's shape; leading axes that do not flatten to one row stride, and an out of another shape,
    are refused by name."""
    _, t = layer
    moe = make_moe(t, device)
    g = torch.Generator().manual_seed(SEED + 7)
    wide = torch.randn(2, 3, H + 16, generator=g).to(torch.bfloat16).to(device)
    x = wide[..., :H]  # rows H + 16 apart
    flat = torch.empty(6, H, dtype=torch.bfloat16, device=device)
    torch.ops.mxmoe.forward(x.reshape(6, H).contiguous(), None, None, moe._layer, flat)
    out = torch.empty(2, 3, H, dtype=torch.bfloat16, device=device)
    torch.ops.mxmoe.forward(x, None, None, moe._layer, out)
    assert float(flat.float().norm()) > 0
    torch.testing.assert_close(out.reshape(6, H), flat, rtol=0, atol=0)
    one = torch.empty(H, dtype=torch.bfloat16, device=device)  # [H]: one token
    torch.ops.mxmoe.forward(x[1, 2].contiguous(), None, None, moe._layer, one)
    torch.testing.assert_close(one, flat[5], rtol=0, atol=0)
    with pytest.raises(ValueError, match="leading axes must flatten to one row stride"):
        torch.ops.mxmoe.forward(x.transpose(0, 1), None, None, moe._layer, out.transpose(0, 1).contiguous())
    with pytest.raises(ValueError, match="out must have x's shape"):
        torch.ops.mxmoe.forward(x, None, None, moe._layer, flat)
    with pytest.raises(ValueError, match=rf"x must be \[\.\.\., {H}\]"):
        torch.ops.mxmoe.forward(x[..., :64], None, None, moe._layer, out[..., :64].contiguous())
    # MoE.forward copies what the op cannot take: the same bits.
    torch.testing.assert_close(moe(x.transpose(0, 1)), out.transpose(0, 1), rtol=0, atol=0)
    torch.testing.assert_close(moe(x), out, rtol=0, atol=0)


class Block(torch.nn.Module):
    """A residual block around the MoE, as a decoder layer calls it."""

    def __init__(self, moe):
        super().__init__()
        self.norm = torch.nn.LayerNorm(H)
        self.moe = moe

    def forward(self, x):
        return x + self.moe(self.norm(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_compiles_without_graph_breaks(layer, device, dtype):
    _, t = layer
    block = Block(make_moe(t, device)).to(device=device, dtype=dtype)
    x = torch.randn(2, 7, H, generator=torch.Generator().manual_seed(SEED)).to(dtype).to(device)
    with torch.no_grad():
        eager = block(x)
        torch._dynamo.reset()
        compiled = torch.compile(block, fullgraph=True)(x)
    assert compiled.dtype == dtype
    # Compiled LayerNorm may round differently; the MoE op itself is the same call.
    assert rel_l2(compiled.float().cpu(), eager.float().cpu()) <= 1e-2
    explain = torch._dynamo.explain(block)(x)
    assert explain.graph_break_count == 0 and explain.graph_count == 1


# ---- bad input ---------------------------------------------------------------

def test_bad_forward_input(layer, device):
    _, t = layer
    moe = make_moe(t, device)
    x = torch.randn(3, H, dtype=torch.bfloat16, device=device)
    ids = torch.zeros(3, K, dtype=torch.int32, device=device)
    w = torch.full((3, K), 0.5, device=device)
    with pytest.raises(TypeError, match="x must be bfloat16, float16 or float32"):
        moe(x.to(torch.float64))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        moe(x.tolist())
    with pytest.raises(ValueError, match=rf"x must be \[..., {H}\]"):
        moe(x[:, :64])
    with pytest.raises(ValueError, match="together"):
        moe(x, topk_ids=ids)
    with pytest.raises(ValueError, match=r"topk_ids must have shape \[3, 2\]"):
        moe(x, topk_ids=ids[:, :1], topk_weights=w)
    with pytest.raises(TypeError, match="topk_ids must be int32 or int64"):
        moe(x, topk_ids=ids.float(), topk_weights=w)
    with pytest.raises(TypeError, match="topk_weights must be floating point"):
        moe(x, topk_ids=ids, topk_weights=ids)
    other = "cpu" if device == "cuda" else "meta"
    with pytest.raises(ValueError, match="the layer on"):
        moe(x.to(other))


def test_out_of_range_ids(layer, device):
    _, t = layer
    moe = make_moe(t, device)
    x = torch.randn(4, H, generator=torch.Generator().manual_seed(SEED)).to(torch.bfloat16).to(device)
    ids = torch.tensor([[0, 1], [2, E], [3, 4], [-1, 5]], dtype=torch.int32, device=device)
    w = torch.full((4, K), 0.5, device=device)
    if device == "cpu":
        with pytest.raises(IndexError, match=r"topk_ids\[1, 1\] = 8 is not an expert id in \[0, 8\)"):
            moe(x, topk_ids=ids, topk_weights=w)
    else:  # checked on the device without a synchronisation: the tokens' rows are NaN, the others exact
        y = moe(x, topk_ids=ids, topk_weights=w).float().cpu()
        assert torch.isnan(y[1]).all() and torch.isnan(y[3]).all()
        good = moe(x[[0, 2]], topk_ids=ids[[0, 2]], topk_weights=w[[0, 2]]).float().cpu()
        assert torch.isfinite(y[[0, 2]]).all()
        assert rel_l2(y[[0, 2]], good) <= 1e-2


def test_consume_frees_the_given_tensors(layer, device):
    """consume=True: the given tensors' storages are freed once the layer is built (host tensors
    for a CPU layer too); storage that cannot be freed is refused before anything is built."""
    _, t = layer
    x = torch.randn(4, H, generator=torch.Generator().manual_seed(SEED)).to(torch.bfloat16).to(device)
    want = make_moe(t, device)(x)
    given = {k: v.clone() for k, v in t.items()}
    moe = make_moe(given, device, consume=True)
    assert all(v.untyped_storage().nbytes() == 0 for v in given.values())
    assert float(want.float().norm()) > 0
    assert torch.equal(moe(x), want)
    with pytest.raises(ValueError, match="consume=True .* router_weight's cannot be resized"):
        make_moe(t, device, consume=True)  # numpy's memory
    assert all(v.untyped_storage().nbytes() > 0 for v in t.values())


def test_bad_weights(layer):
    raw, t = layer
    with pytest.raises(TypeError, match="gate_up_scales must be torch.uint8"):
        make_moe(dict(t, gate_up_proj_scales=t["gate_up_proj_scales"].float()), "cpu")
    with pytest.raises(ValueError, match=r"down_blocks must have shape \[8, 160, 3, 16\]"):
        make_moe(dict(t, down_proj_blocks=t["down_proj_blocks"][:, :, :2]), "cpu")
    with pytest.raises(ValueError, match="router_weight and router_bias together"):
        make_moe(dict(t, router_bias=None), "cpu")
    with pytest.raises(ValueError, match=r"topk must be an int in \[1, 8\]"):
        make_moe(t, "cpu", topk=9)
    nan_scales = t["gate_up_proj_scales"].clone()
    nan_scales[2, 7, 1] = 0xFF
    with pytest.raises(ValueError, match=r"w13 scales: byte 0xFF \(NaN\) at expert 2, row 7 \(up 3\), block 1"):
        make_moe(dict(t, gate_up_proj_scales=nan_scales), "cpu")
    inf_bias = t["down_proj_bias"].clone()
    inf_bias[1, 3] = float("inf")
    with pytest.raises(ValueError, match=r"b2: non-finite value \(Inf\) at \[1, 3\]"):
        make_moe(dict(t, down_proj_bias=inf_bias), "cpu")
    with pytest.raises(ValueError, match="unknown backend|bogus"):
        make_moe(t, "cpu", backend="bogus")
    with pytest.raises(RuntimeError, match="portable"):
        make_moe(t, "cpu", backend="portable")
    with pytest.raises(ValueError, match="CUDA device or the CPU"):
        make_moe(t, "meta")


def test_no_router_needs_routing(layer, device):
    _, t = layer
    moe = make_moe(dict(t, router_weight=None, router_bias=None), device)
    x = torch.randn(2, H, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="no router"):
        moe(x)
    ids = torch.tensor([[0, 1], [2, 3]], device=device)
    assert torch.isfinite(moe(x, topk_ids=ids, topk_weights=torch.full((2, K), 0.5, device=device))).all()


def test_workspace_bytes(layer, device):
    _, t = layer
    moe = make_moe(t, device)
    assert moe.workspace_bytes(0) == 0
    big = moe.workspace_bytes(64)
    assert big >= moe.workspace_bytes(1) > 0
    x = torch.randn(64, H, dtype=torch.bfloat16, device=device)
    out = torch.empty(64, H, dtype=torch.bfloat16, device=device)
    torch.ops.mxmoe.forward(x, None, None, moe._layer, out, torch.empty(big, dtype=torch.uint8, device=device))
    with pytest.raises(ValueError, match="workspace of 16 bytes"):
        torch.ops.mxmoe.forward(x, None, None, moe._layer, out, torch.empty(16, dtype=torch.uint8, device=device))


def test_describe_placement_names_the_layers_on_each_side():
    from types import SimpleNamespace
    moes = [SimpleNamespace(host_experts=h, device_bytes=0 if h else 2_500_000_000, host_stream_from=None)
            for h in [False] * 3 + [True] * 2 + [False] + [True]]
    assert mxmoe.describe_placement(moes) == \
        "MoE layers: 4 on the GPU (10.00 GB: layers 0-2, 5), 3 in host memory (layers 3-4, 6)"
    assert mxmoe.describe_placement(moes[3:5], [10, 11]) == "MoE layers: 0 on the GPU (0.00 GB), 2 in host memory " \
        "(layers 10-11)"
    assert mxmoe.describe_placement(moes[:1], [7]) == "MoE layers: 1 on the GPU (2.50 GB: layers 7), 0 in host memory"
    for m in moes[3:5]:
        m.host_stream_from = 172
    assert mxmoe.describe_placement(moes[2:5]) == "MoE layers: 1 on the GPU (2.50 GB: layers 0), 2 in host memory " \
        "(layers 1-2); forwards from T = 172 stream those to the GPU"


def test_load_layers_refuses_a_bad_budget(tmp_path):
    from tiny_gpt_oss import write_tiny_gpt_oss
    write_tiny_gpt_oss(tmp_path / "ckpt", layers=1, hidden=64, intermediate=64, experts=4, topk=2)
    with pytest.raises(ValueError, match="max_device_bytes must be a non-negative int"):
        mxmoe.load_layers(tmp_path / "ckpt", device="cpu", max_device_bytes=-1)
    with pytest.raises(ValueError, match="max_device_bytes is for GPU loads"):
        mxmoe.load_layers(tmp_path / "ckpt", device="cpu", max_device_bytes=1 << 30)
    with pytest.raises(ValueError, match="host_threads"):
        mxmoe.load_layers(tmp_path / "ckpt", device="cpu", host_threads=-2)
    with pytest.raises(ValueError, match="host_stream_tokens"):
        mxmoe.load_layers(tmp_path / "ckpt", device="cpu", host_stream_tokens=-2)


def test_from_tensors_refuses_bad_host_options():
    _, t = layer_tensors()
    with pytest.raises(ValueError, match="host_threads"):
        make_moe(t, "cpu", host_threads=-1)
    with pytest.raises(ValueError, match="host_stream_tokens"):
        make_moe(t, "cpu", host_stream_tokens=-2)
    with pytest.raises(ValueError, match="host_stream_tokens"):
        make_moe(t, "cpu", host_stream_tokens=1.5)
    # On the CPU they name what a host-memory layer would use, and change nothing.
    assert make_moe(t, "cpu", host_threads=2, host_stream_tokens=-1).host_stream_from is None


def test_load_layers(tmp_path, device):
    """Every layer at once gives the layers from_checkpoint gives one by one; progress is reported;
    bad layer lists and a NaN scale are errors that name the layer."""
    from tiny_gpt_oss import write_tiny_gpt_oss
    write_tiny_gpt_oss(tmp_path / "ckpt", layers=3, hidden=64, intermediate=64, experts=4, topk=2)
    seen = []
    moes = mxmoe.load_layers(tmp_path / "ckpt", device=device, progress=lambda d, t: seen.append((d, t)))
    assert len(moes) == 3 and seen == [(1, 3), (2, 3), (3, 3)]
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(SEED)).to(torch.bfloat16).to(device)
    for i, moe in enumerate(moes):
        one = mxmoe.MoE.from_checkpoint(tmp_path / "ckpt", i, device=device)
        y = moe(x)
        assert float(torch.linalg.norm(y.float())) > 0
        assert torch.equal(y, one(x))
    assert [m.top_k for m in mxmoe.load_layers(tmp_path / "ckpt", [2, 0], device=device, progress=False)] == [2, 2]
    with pytest.raises(ValueError, match="layer 3 is out of range"):
        mxmoe.load_layers(tmp_path / "ckpt", [0, 3], device=device)
    from safetensors.torch import load_file, save_file
    sd = load_file(tmp_path / "ckpt" / "model.safetensors")
    name = next(k for k in sd if k.startswith("model.layers.2.") and k.endswith("down_proj_scales"))
    sd[name][1, 3, 0] = 0xFF
    save_file(sd, tmp_path / "ckpt" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"layer 2: .*0xFF \(NaN\) at expert 1, row 3, block 0"):
        mxmoe.load_layers(tmp_path / "ckpt", device=device)
