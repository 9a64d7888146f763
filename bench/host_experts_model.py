"""gpt-oss-120b's shape split between a GPU and host memory: decode tokens/s with N of its 36 MoE layers on
the GPU and the others' experts in host memory (computed by the CPU), beside the per-layer sums that bound it.

transformers' GptOssForCausalLM with gpt-oss-120b's configuration (36 layers, hidden 2880, 64 heads of 64,
8 KV heads, 128 experts, top-4, vocabulary 201088), built on the meta device and given random weights on the
GPU (attention, norms, embeddings, head: N(0, 0.02) in bf16); every MoE block is an mxmoe layer made from
one random MXFP4 layer (scales drawn around 2^-6, biases and router small), as a GPU layer and as a
host-memory layer (backend "cpu"), both made once. For each N the first N blocks take the GPU layer and the
others the host-memory one. Printed per N:

- decode: one token a step with the KV cache of a 32-token prompt, batch 1, eager (as transformers runs it),
  median step of 32 in ms and tokens/s;
- the bound: the step with every MoE block replaced by the identity (attention, norms, head and the host
  time between) + N x the GPU layer's forward at T = 1 + (36 - N) x the host-memory layer's, each a median
  of CUDA-event timings on the step's inputs;
- the last step's logits norm; and once, one block's output from the host-memory layer against the GPU
  layer's on the same input and routing (rel L2; the CPU's arithmetic is not the GPU's).

Usage (repository root, after building the torch op):

    MXMOE_LIBRARY=build/python/libmxmoe_torch.so PYTHONPATH=python OMP_NUM_THREADS=16 \\
        python3 bench/host_experts_model.py --splits 0,12,24,36 --json out.json

Host memory: ~62 GB for the host-memory layers; GPU memory: ~66 GB with every layer on the GPU.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

from mxmoe.integrations.transformers import rebuild_tables
from transformers_gpt_oss import time_ms  # beside this file


def random_layer(config, seed):
    """One MoE layer's tensors in the Hugging Face layout, on the GPU."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    e, h, i = config.num_local_experts, config.hidden_size, config.intermediate_size
    u8 = lambda *shape: torch.randint(0, 256, shape, generator=g, dtype=torch.uint8, device="cuda")  # noqa: E731
    scales = lambda *shape: torch.randint(119, 124, shape, generator=g, dtype=torch.uint8, device="cuda")  # noqa
    small = lambda *shape: (torch.randn(shape, generator=g, device="cuda") * 0.02).to(torch.bfloat16)  # noqa
    return {"router_weight": small(e, h), "router_bias": small(e), "gate_up_blocks": u8(e, 2 * i, h // 32, 16),
            "gate_up_scales": scales(e, 2 * i, h // 32), "gate_up_bias": small(e, 2 * i),
            "down_blocks": u8(e, h, i // 32, 16), "down_scales": scales(e, h, i // 32), "down_bias": small(e, h)}


def build_model(config):
    from transformers import GptOssForCausalLM
    with torch.device("meta"):
        model = GptOssForCausalLM(config).to(torch.bfloat16)
    for layer in model.model.layers:
        layer.mlp = torch.nn.Identity()
    model.to_empty(device="cuda")
    g = torch.Generator(device="cuda").manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g, device="cuda") * 0.02)
    rebuild_tables(model, config, "cuda")
    return model.eval()


class Block(torch.nn.Module):
    """Where GptOssMLP stood: returns (output, None)."""

    def __init__(self, moe):
        super().__init__()
        self.moe = moe

    def forward(self, x):
        return self.moe.forward(x), None


class PassThrough(torch.nn.Module):
    def forward(self, x):
        return x, None


def decode_ms(model, prompt):
    """Median ms of one decode step (batch 1) with the KV cache of `prompt`; the last logits."""
    with torch.no_grad():
        out = model(prompt, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        steps, logits = [], None
        for step in range(36):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(token, past_key_values=cache, use_cache=True)
            torch.cuda.synchronize()
            if step >= 4:
                steps.append((time.perf_counter() - t0) * 1e3)
            cache, token, logits = out.past_key_values, out.logits[:, -1:].argmax(-1), out.logits
    return statistics.median(steps), float(logits.float().norm())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", default="0,12,24,36", help="layers whose experts are on the GPU, each a run")
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("host_experts_model: needs a CUDA device", file=sys.stderr)
        return 2
    import mxmoe
    from transformers import GptOssConfig
    config = GptOssConfig(num_hidden_layers=args.layers)
    splits = [int(s) for s in args.splits.split(",")]
    t0 = time.perf_counter()
    model = build_model(config)
    t = random_layer(config, 7)
    names = ("router_weight", "router_bias", "gate_up_blocks", "gate_up_scales", "gate_up_bias", "down_blocks",
             "down_scales", "down_bias")
    tensors = [t[n] for n in names]
    host_tensors = [x.cpu() for x in tensors]
    k = config.num_experts_per_tok
    gpu_moes = [mxmoe.MoE.from_tensors(*tensors, topk=k, device="cuda") for _ in range(max(splits))]
    host_moes = [mxmoe.MoE.from_tensors(*host_tensors, topk=k, device="cuda", backend="cpu")
                 for _ in range(args.layers - min(splits))]
    built_s = time.perf_counter() - t0
    threads = int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count()
    print(f"{torch.cuda.get_device_name()}; {threads} CPU threads ({os.cpu_count()} cores); layers built in "
          f"{built_s:.0f} s; GPU layer: {gpu_moes[0].backend if gpu_moes else '-'}; "
          f"host layer: {host_moes[0].backend_reason if host_moes else '-'}", flush=True)

    prompt = torch.randint(0, config.vocab_size, (1, 32), generator=torch.Generator().manual_seed(3)).cuda()
    layers = model.model.layers
    for layer in layers:
        layer.mlp = PassThrough()
    decode_ms(model, prompt)  # warm-up: the first steps of a process pay for lazy set-up
    attention_ms, _ = decode_ms(model, prompt)
    x = torch.randn(1, config.hidden_size, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16).cuda()
    gpu_ms = time_ms(lambda: gpu_moes[0](x), 4, 32)[0] if gpu_moes else float("nan")
    host_ms = time_ms(lambda: host_moes[0](x), 4, 32)[0] if host_moes else float("nan")
    ids = torch.randperm(config.num_local_experts, generator=torch.Generator().manual_seed(5))[:k].view(1, k)
    w = torch.softmax(torch.randn(1, k, generator=torch.Generator().manual_seed(6)), -1)
    xs = torch.randn(64, config.hidden_size, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16).cuda()
    ids64 = torch.stack([torch.randperm(config.num_local_experts)[:k] for _ in range(64)]).int().cuda()
    w64 = torch.softmax(torch.randn(64, k), -1).cuda()
    block_err = None
    if gpu_moes and host_moes:
        a = host_moes[0](xs, topk_ids=ids64, topk_weights=w64).float()
        b = gpu_moes[0](xs, topk_ids=ids64, topk_weights=w64).float()
        block_err = float((a - b).norm() / b.norm())
    del ids, w
    print(f"decode step, every MoE block the identity: {attention_ms:.2f} ms; one MoE layer at T = 1: GPU "
          f"{gpu_ms * 1e3:.1f} us, host memory {host_ms * 1e3:.1f} us; host-memory block against the GPU block "
          f"(T = 64, same routing): rel L2 {block_err}", flush=True)
    rows = []
    print(f"{'N on GPU':>9} {'step ms':>9} {'tokens/s':>9} {'bound ms':>9} {'x bound':>8} {'logits norm':>12}")
    for n in splits:
        for i, layer in enumerate(layers):
            layer.mlp = Block(gpu_moes[i] if i < n else host_moes[i - min(splits)])
        step, norm = decode_ms(model, prompt)
        bound = attention_ms + n * gpu_ms + (args.layers - n) * host_ms
        rows.append({"gpu_layers": n, "step_ms": step, "tokens_per_s": 1e3 / step, "bound_ms": bound,
                     "logits_norm": norm})
        print(f"{n:>9} {step:>9.2f} {1e3 / step:>9.1f} {bound:>9.2f} {step / bound:>8.2f} {norm:>12.1f}", flush=True)
    for layer in layers:  # the step without MoE again, now that everything is warm
        layer.mlp = PassThrough()
    attention_after, _ = decode_ms(model, prompt)
    print(f"decode step, every MoE block the identity, measured again after the splits: {attention_after:.2f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "threads": threads, "cores": os.cpu_count(),
                       "attention_ms": attention_ms, "attention_after_ms": attention_after, "gpu_layer_us": gpu_ms * 1e3, "host_layer_us": host_ms * 1e3,
                       "block_rel_l2": block_err, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
