"""The cpu backend's kernel paths (``MXMOE_CPU_ISA`` forces one) through ``mxmoe.MoE`` on CPU tensors:
each against the float64 reference on the same MXFP4 bytes (rel L2 <= 5e-3 with bf16 in and out), all
equal bit for bit (thread counts: tests/cpu_test.cpp); a path this CPU lacks is refused, saying what it
lacks."""
import numpy as np
import pytest
import torch

import mxmoe
from test_moe import E, H, K, SEED, layer_tensors, make_moe, rel_l2
from tiny_gpt_oss import reference_mlp

PATHS = ["amx", "avx512_vnni", "avx512", "avx2", "scalar"]


@pytest.fixture(scope="module")
def layer():
    return layer_tensors(seed=SEED + 11)


def path_layer(t, path, monkeypatch):
    """A cpu layer on `path`, or None where this CPU lacks it (the error says what it lacks)."""
    monkeypatch.setenv("MXMOE_CPU_ISA", path)
    try:
        moe = make_moe(t, "cpu", backend="cpu")
    except RuntimeError as e:
        assert "this CPU lacks" in str(e)
        return None
    assert f"{path} kernels (forced by MXMOE_CPU_ISA)" in moe.backend_reason
    return moe


@pytest.mark.parametrize("tokens", [1, 3, 37])
@pytest.mark.parametrize("routing", ["router", "caller"])
def test_every_path_matches_the_reference_and_the_others(layer, monkeypatch, tokens, routing):
    raw, t = layer
    g = torch.Generator().manual_seed(SEED + tokens)
    x = torch.randn(tokens, H, generator=g).to(torch.bfloat16)
    kwargs, idx, scores = {}, None, None
    if routing == "caller":
        idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(tokens)])
        scores = torch.softmax(torch.randn(tokens, K, generator=g), -1)
        kwargs = dict(topk_ids=idx, topk_weights=scores)
    ref, _, _ = reference_mlp(x.double().numpy(), raw, K, None if idx is None else idx.numpy(),
                              None if scores is None else scores.numpy())
    assert np.linalg.norm(ref) > 0
    outputs = {}
    for path in PATHS:
        moe = path_layer(t, path, monkeypatch)
        if moe is None:
            continue
        y = moe(x, **kwargs)
        assert y.dtype == torch.bfloat16 and y.shape == x.shape
        err = rel_l2(y.float().numpy(), ref)
        assert err <= 5e-3, f"{path}: rel L2 {err:.3g} (seed {SEED + tokens})"
        outputs[path] = y
    assert "scalar" in outputs  # plain C++ runs anywhere
    first = next(iter(outputs.values()))
    for path, y in outputs.items():
        assert torch.equal(y, first), f"{path} differs from {next(iter(outputs))}"


def test_info_names_the_forced_path(monkeypatch):
    monkeypatch.setenv("MXMOE_CPU_ISA", "scalar")
    assert mxmoe.info("cpu")["cpu_kernels"] == "scalar kernels (forced by MXMOE_CPU_ISA)"
    monkeypatch.setenv("MXMOE_CPU_ISA", "avx1024")
    table = mxmoe.info("cpu")
    assert table["pick"] == "reference" and "MXMOE_CPU_ISA=avx1024 names no cpu kernel path" in table["reason"]
