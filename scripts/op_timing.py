"""The torch op on a GPU: the host time of one eager call (T = 1) and the time per forward under
CUDA-graph replay (T = 1, 64, 4096, routing rotated over 8 sets so L2 does not hold the experts),
for gpt-oss-20b-shaped synthetic weights on the portable and sm90 backends."""
import statistics
import time

import numpy as np
import torch

import mxmoe

E, H, I, K = 32, 2880, 2880, 4
SETS = 8


def weights(seed=0):
    rng = np.random.default_rng(seed)
    t = lambda a: torch.from_numpy(a)
    bf16 = lambda shape, std: torch.from_numpy(rng.normal(0, std, shape).astype(np.float32)).to(torch.bfloat16)
    return dict(router_weight=bf16((E, H), H ** -0.5), router_bias=bf16((E,), 0.1),
                gate_up_blocks=t(rng.integers(0, 256, (E, 2 * I, H // 32, 16), dtype=np.uint8)),
                gate_up_scales=t(rng.integers(119, 124, (E, 2 * I, H // 32), dtype=np.uint8)),
                gate_up_bias=bf16((E, 2 * I), 0.1),
                down_blocks=t(rng.integers(0, 256, (E, H, I // 32, 16), dtype=np.uint8)),
                down_scales=t(rng.integers(119, 124, (E, H, I // 32), dtype=np.uint8)),
                down_bias=bf16((E, H), 0.1))


def host_us(calls, samples=2000, warmup_s=0.5):
    """Median wall time of one call of each of `calls` in microseconds, the GPU waited for between
    calls (untimed), after warm-up calls for `warmup_s` seconds. The calls take turns, so that
    each sees the same host: the host's speed drifts by 2-3x over minutes (a VM's share of its
    CPUs), which the reference call in the same turns (torch.empty) shows."""
    t_end = time.perf_counter() + warmup_s
    while time.perf_counter() < t_end:
        for call in calls:
            call()
        torch.cuda.synchronize()
    host = [[] for _ in calls]
    for _ in range(samples):
        for call, times in zip(calls, host):
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
    return [statistics.median(times) for times in host]


def main():
    w = weights()
    for backend in ("portable", "sm90"):
        moe = mxmoe.MoE.from_tensors(**w, topk=K, backend=backend, device="cuda")
        # Host overhead of one eager call at T = 1: the wall time of enqueueing, GPU not waited for.
        x = torch.randn(1, H, device="cuda", dtype=torch.bfloat16)
        out, ws = torch.empty(1, H, device="cuda", dtype=torch.bfloat16), torch.empty(
            moe.workspace_bytes(1), device="cuda", dtype=torch.uint8)
        ids = torch.tensor([[0, 5, 9, 17]], dtype=torch.int32, device="cuda")
        wts = torch.full((1, K), 0.25, device="cuda")
        calls = {"MoE.forward": lambda: moe(x),
                 "the op, tensors given": lambda: torch.ops.mxmoe.forward(x, None, None, moe._layer, out, ws),
                 "the op, caller's routing": lambda: torch.ops.mxmoe.forward(x, ids, wts, moe._layer, out, ws),
                 "torch.empty(1, H), for reference": lambda: torch.empty(1, H, device="cuda", dtype=torch.bfloat16)}
        for what, us in zip(calls, host_us(list(calls.values()))):
            print(f"{backend}: eager host time per call at T=1 ({what}): median {us:.1f} us")
        for T in (1, 64, 4096):
            x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
            g = torch.Generator().manual_seed(T)
            ids = [torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).int().cuda()
                   for _ in range(SETS)]
            wts = [torch.softmax(torch.randn(T, K, generator=g), -1).cuda() for _ in range(SETS)]
            out = torch.empty(T, H, device="cuda", dtype=torch.bfloat16)
            ws = torch.empty(moe.workspace_bytes(T), device="cuda", dtype=torch.uint8)
            stream = torch.cuda.Stream()
            graphs = []
            with torch.cuda.stream(stream):
                for i in range(SETS):  # warm the allocator and kernels outside capture
                    torch.ops.mxmoe.forward(x, ids[i], wts[i], moe._layer, out, ws)
                for i in range(SETS):
                    gr = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(gr, stream=stream):
                        torch.ops.mxmoe.forward(x, ids[i], wts[i], moe._layer, out, ws)
                    graphs.append(gr)
            for _ in range(3):
                for gr in graphs:
                    gr.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(20):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for gr in graphs:
                    gr.replay()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1) * 1e3 / SETS)
            print(f"{backend}: graph replay T={T}: median {statistics.median(times):.1f} us per forward")


if __name__ == "__main__":
    main()
