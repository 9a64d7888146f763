"""The op on CUDA as engines drive it: on a side stream, captured in a CUDA graph and replayed,
and under torch.compile(mode="reduce-overhead") (CUDA graphs made by torch). Skips without a GPU."""
import pytest
import torch

import mxmoe

from test_moe import H, K, E, SEED, Block, layer_tensors, make_moe, rel_l2

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU test skipped: torch sees no CUDA device")


# The GPU each arch backend needs; the Blackwell ones take MXFP8 activations.
NEEDS = {"sm90": ({(9, 0)}, "an SM90 GPU"), "sm100": ({(10, 0), (10, 3)}, "an SM100 or SM103 GPU"),
         "sm120": ({(12, 0), (12, 1)}, "an SM120 or SM121 GPU")}
BLACKWELL = ("sm100", "sm120")


def skip_unless_its_gpu(backend):
    if backend in NEEDS and torch.cuda.get_device_capability() not in NEEDS[backend][0]:
        major, minor = torch.cuda.get_device_capability()
        pytest.skip(f"{backend} needs {NEEDS[backend][1]}; this device is SM{major}{minor}")


# "cpu" on the GPU: a host-memory layer (experts in host memory, computed by the CPU).
@pytest.fixture(scope="module", params=["portable", "sm90", "sm100", "sm120", "auto", "cpu"])
def moe(request):
    skip_unless_its_gpu(request.param)
    _, t = layer_tensors()
    activations = "mxfp8" if request.param in BLACKWELL else "bf16"
    return make_moe(t, "cuda", backend=request.param, activations=activations)


@pytest.mark.parametrize("backend", BLACKWELL)
def test_blackwell_backend_matches_the_cpu_mxfp8_layer(backend):
    """The arch's CUTLASS GEMMs against the CPU reference with MXFP8 activations (their GEMMs
    write bf16 products, about 1% from the reference that keeps fp32 ones)."""
    skip_unless_its_gpu(backend)
    _, t = layer_tensors()
    gpu = make_moe(t, "cuda", backend=backend, activations="mxfp8")
    cpu = make_moe(t, "cpu", activations="mxfp8")
    assert gpu.backend == backend
    g = torch.Generator().manual_seed(SEED + 5)
    for tokens in (1, 3, 129):
        x = torch.randn(tokens, H, generator=g).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(tokens)]).int()
        w = torch.softmax(torch.randn(tokens, K, generator=g), -1)
        y = gpu(x.cuda(), topk_ids=ids.cuda(), topk_weights=w.cuda()).float().cpu()
        ref = cpu(x, topk_ids=ids, topk_weights=w).float()
        assert float(torch.linalg.norm(y)) > 0
        assert rel_l2(y.numpy(), ref.numpy()) <= 2e-2, (backend, tokens)


def test_side_stream(moe):
    x = torch.randn(300, H, generator=torch.Generator().manual_seed(SEED)).to(torch.bfloat16).cuda()
    ref = moe(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # work queued behind other work on the side stream
            y = moe(x * 1)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(y, ref, rtol=0, atol=0)


def test_eager_calls_without_a_workspace(moe):
    """Eager calls that pass no workspace share one kept per stream: on two streams, with T growing
    past the kept buffer and back, every call gives the bits of a call with its own workspace."""
    if moe.host_experts:
        pytest.skip("a host-memory layer's forwards on two streams need an order between them "
                    "(test_host_memory_layer_on_two_streams_in_order)")
    g = torch.Generator().manual_seed(SEED + 11)
    xs = {T: torch.randn(T, H, generator=g).to(torch.bfloat16).cuda() for T in (1, 5, 900, 2)}
    want = {}
    for T, x in xs.items():
        want[T] = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
        ws = torch.empty(moe.workspace_bytes(T), dtype=torch.uint8, device="cuda")
        torch.ops.mxmoe.forward(x, None, None, moe._layer, want[T], ws)
        assert float(want[T].float().norm()) > 0
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    got = []
    for stream in (torch.cuda.current_stream(), side, torch.cuda.current_stream()):
        with torch.cuda.stream(stream):
            for _ in range(3):
                for T, x in xs.items():
                    out = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
                    torch.ops.mxmoe.forward(x, None, None, moe._layer, out)
                    got.append((T, out))
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    for T, out in got:
        torch.testing.assert_close(out, want[T], rtol=0, atol=0)


@pytest.mark.parametrize("tokens", [1, 64, 700])
def test_graph_capture_and_replay(moe, tokens):
    g = torch.Generator().manual_seed(SEED + tokens)
    x = torch.randn(tokens, H, generator=g).to(torch.bfloat16).cuda()
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(tokens)]).int().cuda()
    w = torch.softmax(torch.randn(tokens, K, generator=g), -1).cuda()
    eager = moe(x, topk_ids=ids, topk_weights=w)
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        moe(static_x, topk_ids=ids, topk_weights=w)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        static_y = moe(static_x, topk_ids=ids, topk_weights=w)
    x2 = torch.randn(tokens, H, generator=g).to(torch.bfloat16).cuda()
    static_x.copy_(x2)
    graph.replay()
    torch.testing.assert_close(static_y, moe(x2, topk_ids=ids, topk_weights=w), rtol=0, atol=0)
    static_x.copy_(x)
    graph.replay()
    torch.testing.assert_close(static_y, eager, rtol=0, atol=0)


def test_compile_reduce_overhead(moe):
    block = Block(moe).to(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(4, 9, H, generator=torch.Generator().manual_seed(SEED)).to(torch.bfloat16).cuda()
    with torch.no_grad():
        eager = block(x)
        torch._dynamo.reset()
        compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            y = compiled(x)
    assert rel_l2(y.float().cpu(), eager.float().cpu()) <= 1e-2


def test_bf16_output_rounds_the_fp32_one(moe):
    x = torch.randn(33, H, generator=torch.Generator().manual_seed(SEED)).to(torch.bfloat16).cuda()
    out32 = torch.empty(33, H, device="cuda")
    out16 = torch.empty(33, H, device="cuda", dtype=torch.bfloat16)
    torch.ops.mxmoe.forward(x, None, None, moe._layer, out32)
    torch.ops.mxmoe.forward(x, None, None, moe._layer, out16)
    torch.testing.assert_close(out16, out32.to(torch.bfloat16), rtol=0, atol=0)


def test_from_tensors_on_the_gpu_gives_the_layer_from_host_tensors():
    """CUDA tensors are prepared on their GPU (no copy through host memory): the layer's forward
    has the bits of the one built from the same tensors in host memory."""
    _, t = layer_tensors()
    on_gpu = {k: v.cuda() for k, v in t.items()}
    from_gpu = make_moe(on_gpu, "cuda")
    from_host = make_moe(t, "cuda")
    g = torch.Generator().manual_seed(SEED + 9)
    x = torch.randn(7, H, generator=g).to(torch.bfloat16).cuda()
    y = from_gpu(x)
    assert float(torch.linalg.norm(y.float())) > 0
    assert torch.equal(y, from_host(x))
    assert from_gpu(x[:0]).shape == (0, H)


def test_from_tensors_refuses_tensors_on_another_gpu_and_names_bad_scales():
    _, t = layer_tensors()
    if torch.cuda.device_count() > 1:
        on_1 = {k: v.to("cuda:1") for k, v in t.items()}
        with pytest.raises(ValueError, match="is on cuda:1; the layer is asked for cuda:0"):
            make_moe(on_1, "cuda:0")
    bad = {k: v.clone().cuda() for k, v in t.items()}
    bad["down_proj_scales"][1, 5, 0] = 0xFF
    with pytest.raises(ValueError, match=r"w2 scales: byte 0xFF \(NaN\) at expert 1, row 5, block 0"):
        make_moe(bad, "cuda")


def test_load_layers_runs_out_of_device_memory(tmp_path):
    """A device that runs out of memory partway through a load: an error naming the layer, and
    every byte the load took given back to torch's allocator (the layers loaded before it
    included). The device is given back to the next test whatever happens."""
    from tiny_gpt_oss import write_tiny_gpt_oss
    layers = 8
    write_tiny_gpt_oss(tmp_path / "ckpt", layers=layers, hidden=1024, intermediate=1024, experts=16, topk=2)
    mxmoe.load_layers(tmp_path / "ckpt", [0], device="cuda", progress=False)  # kernels loaded, pools warm
    layer_bytes = (tmp_path / "ckpt" / "model.safetensors").stat().st_size // layers
    hog = None
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
        hog = torch.empty(free - int(3.5 * layer_bytes), dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        allocated = torch.cuda.memory_allocated()
        before, _ = torch.cuda.mem_get_info()
        with pytest.raises(MemoryError, match=r"layer [1-7]: torch's CUDA caching allocator: out of memory"):
            mxmoe.load_layers(tmp_path / "ckpt", device="cuda", progress=False)
        assert torch.cuda.memory_allocated() == allocated
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        after, _ = torch.cuda.mem_get_info()
        assert abs(after - before) <= 4 << 20, (before, after)
    finally:
        del hog
        torch.cuda.empty_cache()


def test_host_memory_layer_matches_the_cpu_layer():
    """Backend "cpu" on a GPU: x and y on the GPU, the experts in host memory computed by the CPU's
    kernels, so the bits are the CPU layer's, through the router or the caller's routing."""
    _, t = layer_tensors()
    host = make_moe(t, "cuda", backend="cpu", host_stream_tokens=-1)
    cpu = make_moe(t, "cpu")
    assert (host.backend, host.device, host.host_experts, host.device_bytes) == ("cpu", torch.device("cuda", 0),
                                                                                  True, 0)
    assert host.host_stream_from is None
    assert "host memory" in host.backend_reason
    assert not cpu.host_experts
    g = torch.Generator().manual_seed(SEED + 21)
    for tokens in (1, 3, 129):
        x = torch.randn(tokens, H, generator=g).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(tokens)]).int()
        w = torch.softmax(torch.randn(tokens, K, generator=g), -1)
        y = host(x.cuda(), topk_ids=ids.cuda(), topk_weights=w.cuda())
        assert y.device.type == "cuda" and float(y.float().norm()) > 0
        assert torch.equal(y.cpu(), cpu(x, topk_ids=ids, topk_weights=w)), tokens
        assert torch.equal(host(x.cuda()).cpu(), cpu(x)), tokens
    bad = torch.tensor([[0, 1], [E, 2], [3, 4]], dtype=torch.int32)
    x = torch.randn(3, H, generator=g).to(torch.bfloat16)
    y = host(x.cuda(), topk_ids=bad.cuda(), topk_weights=torch.full((3, K), 0.5).cuda()).cpu()
    assert torch.isnan(y[1]).all() and not torch.isnan(y[0]).any() and not torch.isnan(y[2]).any()
    torch.library.opcheck(torch.ops.mxmoe.forward, (x.cuda(), None, None, host._layer,
                                                    torch.empty(3, H, dtype=torch.bfloat16, device="cuda")))


def test_host_memory_layer_streams_with_the_gpu_layers_bits():
    """From host_stream_tokens tokens on, a host-memory layer copies its experts over PCIe into
    its workspace and runs the GPU's kernels on them: the bits of that backend's own layer, eager
    and replayed from a graph; below, the CPU layer's."""
    _, t = layer_tensors()
    host = make_moe(t, "cuda", backend="cpu", host_stream_tokens=4)
    gpu, cpu = make_moe(t, "cuda"), make_moe(t, "cpu")
    assert f"from T = 4 (host_stream_tokens) the experts stream over PCIe to the {gpu.backend}" in host.backend_reason
    assert host.workspace_bytes(3) == 0 and host.workspace_bytes(4) > 0 and host.device_bytes == 0
    assert host.host_stream_from == 4 and gpu.host_stream_from is None
    g = torch.Generator().manual_seed(SEED + 24)
    for tokens in (1, 3, 4, 129):
        x = torch.randn(tokens, H, generator=g).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(tokens)]).int()
        w = torch.softmax(torch.randn(tokens, K, generator=g), -1)
        y = host(x.cuda(), topk_ids=ids.cuda(), topk_weights=w.cuda()).cpu()
        assert float(y.float().norm()) > 0
        if tokens < 4:
            assert torch.equal(y, cpu(x, topk_ids=ids, topk_weights=w)), tokens
            continue
        assert torch.equal(y, gpu(x.cuda(), topk_ids=ids.cuda(), topk_weights=w.cuda()).cpu()), tokens
        assert torch.equal(host(x.cuda()), gpu(x.cuda())), tokens
    x = torch.randn(200, H, generator=g).to(torch.bfloat16).cuda()
    ws = torch.empty(host.workspace_bytes(200), dtype=torch.uint8, device="cuda")
    out = torch.empty(200, H, dtype=torch.bfloat16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops.mxmoe.forward(x, None, None, host._layer, out, ws)
    for _ in range(2):
        x.copy_(torch.randn(200, H, generator=g).to(torch.bfloat16))
        graph.replay()
        assert torch.equal(out, gpu(x))
    torch.library.opcheck(torch.ops.mxmoe.forward, (x, None, None, host._layer,
                                                    torch.empty(200, H, dtype=torch.bfloat16, device="cuda")))
    with pytest.raises(ValueError, match="host_stream_tokens"):
        make_moe(t, "cuda", backend="cpu", host_stream_tokens=-2)


def test_host_memory_layer_on_two_streams_in_order():
    """What its forwards on two streams need: each stream waits for the other's last forward."""
    _, t = layer_tensors()
    host = make_moe(t, "cuda", backend="cpu", host_stream_tokens=-1)
    g = torch.Generator().manual_seed(SEED + 22)
    xs = [torch.randn(9, H, generator=g).to(torch.bfloat16).cuda() for _ in range(2)]
    want = [host(x) for x in xs]
    side = torch.cuda.Stream()
    got = []
    for _ in range(3):
        for i, stream in enumerate((torch.cuda.current_stream(), side)):
            other = side if i == 0 else torch.cuda.current_stream()
            stream.wait_stream(other)
            with torch.cuda.stream(stream):
                got.append((i, host(xs[i])))
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    for i, y in got:
        assert torch.equal(y, want[i])


def test_decode_step_with_host_memory_layers_replays_from_a_graph(tmp_path):
    """A decode step through residual blocks whose experts are split between the GPU and host
    memory, captured once in a CUDA graph (kernels, copies and host functions): each replay on
    new input gives eager's bits."""
    from tiny_gpt_oss import write_tiny_gpt_oss
    write_tiny_gpt_oss(tmp_path / "ckpt", layers=3, hidden=128, intermediate=96, experts=8, topk=2)
    per = mxmoe.info("cuda", experts=8, hidden=128, intermediate=96, topk=2)["device_layer_bytes"]
    moes = mxmoe.load_layers(tmp_path / "ckpt", device="cuda", max_device_bytes=per, progress=False)
    assert [m.host_experts for m in moes] == [False, True, True]
    norms = [torch.nn.LayerNorm(128, device="cuda", dtype=torch.bfloat16) for _ in moes]

    def step(x):
        for norm, moe in zip(norms, moes):
            x = x + moe(norm(x))
        return x

    g = torch.Generator().manual_seed(SEED + 25)
    for tokens in (1, 4):
        static_x = torch.randn(tokens, 128, generator=g).to(torch.bfloat16).cuda()
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step(static_x)  # warm-up outside the capture
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = step(static_x)
            for _ in range(3):
                x = torch.randn(tokens, 128, generator=g).to(torch.bfloat16).cuda()
                static_x.copy_(x)
                graph.replay()
                want = step(x)
                assert float(want.float().norm()) > 0
                assert torch.equal(static_y, want), tokens


def test_load_layers_splits_under_a_device_budget(tmp_path):
    """The first layers that fit the budget on the GPU, the others in host memory with the CPU
    layers' bits; a line says which went where."""
    from tiny_gpt_oss import write_tiny_gpt_oss
    write_tiny_gpt_oss(tmp_path / "ckpt", layers=3, hidden=128, intermediate=96, experts=8, topk=2)
    per = mxmoe.info("cuda", experts=8, hidden=128, intermediate=96, topk=2)["device_layer_bytes"]
    assert per > 0
    on_cpu = mxmoe.load_layers(tmp_path / "ckpt", device="cpu", progress=False)
    x = torch.randn(5, 128, generator=torch.Generator().manual_seed(SEED + 23)).to(torch.bfloat16)
    for budget, placed in ((None, [False] * 3), (per * 3 // 2, [False, True, True]), (0, [True] * 3)):
        seen = []
        moes = mxmoe.load_layers(tmp_path / "ckpt", device="cuda", max_device_bytes=budget, host_stream_tokens=-1,
                                 progress=lambda d, n: seen.append((d, n)))
        assert seen == [(1, 3), (2, 3), (3, 3)]
        assert [m.host_experts for m in moes] == placed, budget
        assert [m.device_bytes for m in moes] == [0 if h else per for h in placed]
        for m, c in zip(moes, on_cpu):
            y, ref = m(x.cuda()).cpu(), c(x)
            assert float(ref.float().norm()) > 0
            if m.host_experts:
                assert torch.equal(y, ref)
            else:
                assert rel_l2(y.float().numpy(), ref.float().numpy()) <= 1e-2
    moes = mxmoe.load_layers(tmp_path / "ckpt", device="cuda", max_device_bytes=per, progress=False)
    assert moes[0].host_stream_from is None and moes[1].host_stream_from == moes[2].host_stream_from > 0
    assert mxmoe.describe_placement(moes) == (
        f"MoE layers: 1 on the GPU ({per / 1e9:.2f} GB: layers 0), 2 in host memory (layers 1-2); "
        f"forwards from T = {moes[1].host_stream_from} stream those to the GPU")
    moes = mxmoe.load_layers(tmp_path / "ckpt", device="cuda", max_device_bytes=per, host_stream_tokens=-1,
                             progress=False)
    assert mxmoe.describe_placement(moes) == \
        f"MoE layers: 1 on the GPU ({per / 1e9:.2f} GB: layers 0), 2 in host memory (layers 1-2)"
    with pytest.raises(ValueError, match="max_device_bytes"):
        mxmoe.load_layers(tmp_path / "ckpt", device="cuda", max_device_bytes=-1)
    with pytest.raises(ValueError, match="max_device_bytes is for GPU loads"):
        mxmoe.load_layers(tmp_path / "ckpt", device="cpu", max_device_bytes=per)
