"""A layer's device memory is torch's: counted by torch.cuda.memory_allocated(), taken from what the
caller freed into torch's cache, given back when the module goes; from_tensors(consume=True) frees
the caller's tensors once the layer is built; and a model converted layer by layer as an engine does
it, with no empty_cache, fits one layer above itself. Skips without a GPU."""
import ctypes
import gc

import pytest
import torch

import mxmoe

from test_moe import H, SEED, layer_tensors, make_moe

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU test skipped: torch sees no CUDA device")

# torch's allocator rounds each allocation up to 512 bytes; a layer holds at most 8 (one a tensor),
# and takes them from at most 8 tensors.
ROUNDING = 8 * 512


@pytest.fixture(autouse=True)
def device_given_back():
    """Each test starts and ends with torch's cache emptied, whatever it left behind."""
    gc.collect()
    torch.cuda.empty_cache()
    yield
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


@pytest.mark.parametrize("where", ["host", "cuda"])
def test_a_layer_is_counted_by_torch_and_given_back(where):
    _, t = layer_tensors()
    if where == "cuda":
        t = {k: v.cuda() for k, v in t.items()}
    x = torch.randn(3, H, generator=torch.Generator().manual_seed(SEED)).to(torch.bfloat16).cuda()
    make_moe(t, "cuda")(x)  # kernels loaded, the op's kept workspace taken; the layer not kept
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    moe = make_moe(t, "cuda")
    grown = torch.cuda.memory_allocated() - before
    assert moe.device_bytes > 0
    assert 0 <= grown - moe.device_bytes < ROUNDING, (grown, moe.device_bytes)
    assert float(moe(x).float().norm()) > 0
    del moe
    gc.collect()
    assert torch.cuda.memory_allocated() == before


def test_a_layer_reuses_what_the_caller_freed():
    """Memory freed into torch's cache is where the next layer goes: no new device memory."""
    _, t = layer_tensors(hidden=1024, intermediate=1024, experts=16)
    t = {k: v.cuda() for k, v in t.items()}
    make_moe(t, "cuda")
    gc.collect()
    scratch = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    del scratch  # 64 MiB in torch's cache, more than the layer
    reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    moe = make_moe(t, "cuda")
    assert 0 < moe.device_bytes < 64 << 20
    assert torch.cuda.memory_allocated() - allocated >= moe.device_bytes  # torch's memory...
    assert torch.cuda.memory_reserved() == reserved  # ...that torch already held


def test_consume_frees_the_tensors_once_the_layer_is_built():
    _, t = layer_tensors(hidden=1024, intermediate=1024, experts=16)
    t = {k: v.cuda() for k, v in t.items()}
    x = torch.randn(5, 1024, generator=torch.Generator().manual_seed(SEED)).to(torch.bfloat16).cuda()
    want = make_moe(t, "cuda")(x)
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    given = sum(v.untyped_storage().nbytes() for v in t.values())
    moe = make_moe(t, "cuda", consume=True)
    assert all(v.untyped_storage().nbytes() == 0 for v in t.values())
    assert abs(torch.cuda.memory_allocated() - (before - given + moe.device_bytes)) < ROUNDING
    assert torch.equal(moe(x), want)


def test_consume_keeps_the_tensors_on_an_error_and_refuses_storage_it_cannot_free():
    _, t = layer_tensors()
    bad = {k: v.clone().cuda() for k, v in t.items()}
    bad["down_proj_scales"][1, 5, 0] = 0xFF
    with pytest.raises(ValueError, match=r"0xFF \(NaN\) at expert 1, row 5, block 0"):
        make_moe(bad, "cuda", consume=True)
    assert all(v.untyped_storage().nbytes() > 0 for v in bad.values())
    numpy_backed = {k: torch.from_numpy(v.numpy()) for k, v in t.items()}
    with pytest.raises(ValueError, match="consume=True .* router_weight's cannot be resized"):
        make_moe(numpy_backed, "cuda", consume=True)
    assert all(v.untyped_storage().nbytes() > 0 for v in numpy_backed.values())


def _unused_stream():
    """A CUDA stream no call has used before (torch.cuda.Stream() hands out a pool of 32 in turn),
    made by torch's CUDA runtime; never destroyed, so its handle is not reused."""
    try:
        cudart = ctypes.CDLL("libcudart.so." + torch.version.cuda.split(".")[0])  # torch's, already loaded
    except OSError as e:
        pytest.skip(f"no CUDA runtime to make a stream with: {e}")
    handle = ctypes.c_void_p()
    assert cudart.cudaStreamCreateWithFlags(ctypes.byref(handle), 1) == 0  # cudaStreamNonBlocking
    return torch.cuda.ExternalStream(handle.value)


def test_kept_workspaces_are_torch_memory():
    """The op's buffer kept per stream for calls without a workspace comes from torch's allocator:
    the first such call on a stream takes it (a power of two, at least 64 KiB), the next takes
    nothing, a larger T replaces it, and the results are those of calls given a workspace."""
    _, t = layer_tensors()
    moe = make_moe(t, "cuda")
    g = torch.Generator().manual_seed(SEED)
    xs = {T: torch.randn(T, H, generator=g).to(torch.bfloat16).cuda() for T in (9, 3000)}
    want = {}
    for T, x in xs.items():
        want[T] = torch.empty_like(x)
        ws = torch.empty(moe.workspace_bytes(T), dtype=torch.uint8, device="cuda")
        torch.ops.mxmoe.forward(x, None, None, moe._layer, want[T], ws)
    outs = {T: torch.empty_like(x) for T, x in xs.items()}
    stream = _unused_stream()
    stream.wait_stream(torch.cuda.current_stream())
    grown = []
    with torch.cuda.stream(stream):
        for T in (9, 9, 3000):
            before = torch.cuda.memory_allocated()
            torch.ops.mxmoe.forward(xs[T], None, None, moe._layer, outs[T])
            grown.append(torch.cuda.memory_allocated() - before)
    torch.cuda.current_stream().wait_stream(stream)
    first = grown[0]
    assert first >= max(moe.workspace_bytes(9), 64 << 10) and first & (first - 1) == 0, grown
    assert grown[1] == 0, grown
    assert grown[2] > 0 and (first + grown[2]) & (first + grown[2] - 1) == 0, grown  # the larger one, in its place
    assert first + grown[2] >= moe.workspace_bytes(3000), grown
    for T in xs:
        assert float(want[T].float().norm()) > 0
        torch.testing.assert_close(outs[T], want[T], rtol=0, atol=0)


def _layer_120b(device):
    """One gpt-oss-120b MoE layer as an engine holds it (HF layout, no router), random."""
    g = torch.Generator(device=device).manual_seed(SEED)
    e, h, i = 128, 2880, 2880

    def codes(*shape):
        return torch.randint(0, 256, shape, dtype=torch.uint8, device=device, generator=g)

    def scales(*shape):
        return torch.randint(116, 124, shape, dtype=torch.uint8, device=device, generator=g)

    return {"gate_up_blocks": codes(e, 2 * i, h // 32, 16), "gate_up_scales": scales(e, 2 * i, h // 32),
            "gate_up_bias": torch.randn(e, 2 * i, dtype=torch.bfloat16, device=device, generator=g),
            "down_blocks": codes(e, h, i // 32, 16), "down_scales": scales(e, h, i // 32),
            "down_bias": torch.randn(e, h, dtype=torch.bfloat16, device=device, generator=g)}


@pytest.mark.parametrize("consume", [False, True])
def test_an_engine_converts_a_model_that_fills_the_device(consume):
    """gpt-oss-120b-shaped layers (36 on an 80 GB card, more where the device holds more: the
    model takes 72% of it) loaded as CUDA tensors, then converted one by one with the engine's
    tensors dropped after each (or consumed) and no empty_cache: every layer builds, the peak of
    torch's reserved memory stays within the loaded model + one layer + 2 GiB, and what stays
    allocated is the layers' own bytes."""
    total = torch.cuda.get_device_properties(0).total_memory
    engine, moes = [_layer_120b("cuda")], []
    try:
        layer_bytes = sum(v.untyped_storage().nbytes() for v in engine[0].values())
        count = int(0.72 * total) // layer_bytes
        if count < 2:
            pytest.skip(f"the device holds {total / 2**30:.0f} GiB: fewer than two 120b layers in 72% of it")
        engine += [{k: v.clone() for k, v in engine[0].items()} for _ in range(count - 1)]
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated() - count * layer_bytes  # what was there before the model
        model_reserved = torch.cuda.memory_reserved()
        torch.cuda.reset_peak_memory_stats()
        for n in range(count):
            t = engine[n]
            moes.append(mxmoe.MoE.from_tensors(None, None, t["gate_up_blocks"], t["gate_up_scales"],
                                               t["gate_up_bias"], t["down_blocks"], t["down_scales"],
                                               t["down_bias"], topk=4, device="cuda", consume=consume))
            engine[n] = t = None  # the engine drops its tensors (process_weights_after_loading)
        peak = torch.cuda.max_memory_reserved()
        held = sum(m.device_bytes for m in moes)
        print(f"\n{count} layers of {layer_bytes / 2**30:.3f} GiB (consume={consume}): model reserved "
              f"{model_reserved / 2**30:.2f} GiB, peak reserved {peak / 2**30:.2f} GiB "
              f"(+{(peak - model_reserved) / 2**30:.2f}), layers hold {held / 2**30:.2f} GiB")
        assert abs(torch.cuda.memory_allocated() - base - held) < ROUNDING * count
        assert peak <= model_reserved + layer_bytes + (2 << 30)
        x = torch.randn(2, 2880, generator=torch.Generator().manual_seed(SEED)).to(torch.bfloat16).cuda()
        ids = torch.tensor([[0, 5, 77, 127], [3, 5, 9, 100]], dtype=torch.int32, device="cuda")
        w = torch.full((2, 4), 0.25, device="cuda")
        for m in (moes[0], moes[-1]):
            y = m(x, topk_ids=ids, topk_weights=w)
            assert bool(torch.isfinite(y).all()) and float(y.float().norm()) > 0
    finally:  # a failure's traceback keeps this frame: the device goes back to the next test all the same
        engine.clear()
        moes.clear()
