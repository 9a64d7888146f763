"""Times MoE.from_tensors on CUDA tensors (preparation on the GPU) for gpt-oss shapes.

For each shape: the median of --reps builds from tensors already on the GPU, the input bytes
over that time, the layer's device bytes, and the most device memory torch's allocator (where
every byte of a layer's memory comes from) held during a build beyond the tensors and the
finished layer. Also one build from the same tensors in host memory (staged to the GPU, then
prepared there). Prints one JSON line per shape. usage: python prepare_timing.py [--reps 5] [--shapes 120b,120b-tp4,20b]
"""
import argparse
import json
import statistics
import time

import torch

import mxmoe

SHAPES = {"120b": (128, 2880, 2880), "120b-tp4": (128, 2880, 736), "20b": (32, 2880, 2880)}


def tensors(e, h, i, device, seed=1):
    g = torch.Generator(device=device).manual_seed(seed)
    u8 = lambda *s: torch.randint(0, 256, s, generator=g, dtype=torch.uint8, device=device)  # noqa: E731
    sc = lambda *s: torch.randint(118, 125, s, generator=g, dtype=torch.uint8, device=device)  # noqa: E731
    bf = lambda *s: (torch.randn(*s, generator=g, device=device) * 0.1).to(torch.bfloat16)  # noqa: E731
    return [bf(e, h), bf(e), u8(e, 2 * i, h // 32, 16), sc(e, 2 * i, h // 32), bf(e, 2 * i), u8(e, h, i // 32, 16),
            sc(e, h, i // 32), bf(e, h)]


def build(t, device):
    return mxmoe.MoE.from_tensors(*t, topk=4, device=device)


def peak_during(fn):
    """(result, seconds, most bytes torch's allocator held while fn ran beyond those held before)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return out, dt, torch.cuda.max_memory_allocated() - before


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shapes", default="120b,120b-tp4,20b")
    a = ap.parse_args()
    dev = torch.device("cuda", torch.cuda.current_device())
    for name in a.shapes.split(","):
        e, h, i = SHAPES[name]
        t = tensors(e, h, i, dev)
        in_bytes = sum(x.numel() * x.element_size() for x in t)
        build(t, dev)  # warm: module load, kernels' first launch
        times, peaks, layer_bytes = [], [], 0
        for _ in range(a.reps):
            moe, dt, peak = peak_during(lambda: build(t, dev))
            layer_bytes = moe.device_bytes
            times.append(dt)
            peaks.append(peak - layer_bytes)
            del moe
        host = [x.cpu() for x in t]
        moe, dt_host, peak_host = peak_during(lambda: build(host, dev))
        peak_host -= moe.device_bytes
        del moe
        med = statistics.median(times)
        print(json.dumps({"shape": name, "experts": e, "hidden": h, "intermediate": i, "input_GB": in_bytes / 1e9,
                          "from_cuda_s": med, "from_cuda_GBps": in_bytes / med / 1e9, "times_s": times,
                          "layer_device_GB": layer_bytes / 1e9, "peak_extra_device_GB": max(peaks) / 1e9,
                          "from_host_s": dt_host, "from_host_peak_extra_device_GB": peak_host / 1e9,
                          "device": torch.cuda.get_device_name(dev), "date": time.strftime("%Y-%m-%d")}),
              flush=True)


if __name__ == "__main__":
    main()
