"""transformers' GPT-OSS with and without mxmoe, on a CUDA GPU: logits and tokens per second.

Builds a GPT-OSS checkpoint whose MoE blocks have gpt-oss-20b's shape (H = I = 2880, E = 32,
top-4; MXFP4 experts, synthetic, in the Hugging Face on-disk layout) with the pytest fixture
tests/python/tiny_gpt_oss.py: a few layers, a small vocabulary and the fixture's small attention
(4 heads of 16), so that the MoE blocks are most of the work. The fixture's router bias (std 1.0)
keeps the top-k decisive: without it near-ties would flip between two forwards.

transformers loads it with ``Mxfp4Config(dequantize=True)`` (its experts in bf16). Its forward runs
in float32 (the reference, as in the pytest) and in bf16 on the GPU, with its default experts
implementation; then ``mxmoe.integrations.transformers.replace_experts`` swaps every MoE block of
both models for mxmoe layers, and they run again. Printed:

- logits rel L2 against transformers' float32 forward: of the float32 model with mxmoe's blocks
  (mxmoe's own error, its bf16 activations and outputs), of both bf16 models, and of the bf16
  model with mxmoe against transformers' bf16 forward; each over all tokens and over the tokens
  routed as in the float32 model in every layer, with the share of (layer, token) whose top-k
  expert set differs from the float32 model's (the router in float64 on each model's own MoE
  input);
- each MoE block of the float32 model on its input in that forward, with its router's top-k,
  against the same block after the replacement given that routing: mxmoe's own error. The gate
  (exit status 1 past it) is this <= 1e-2 in every layer; the logits are not gated, since a token
  whose top-k flips on a near-tie changes its logits by O(1), and through attention the later
  tokens' too, in transformers' own bf16 forward as well;
- prefill (one forward of --prefill tokens, building a KV cache) and decode (one token with that
  cache) of the bf16 models in tokens/s, medians of CUDA-event timings after warm-up, and layer
  0's MoE block alone at both sizes.

Usage (repository root, after building the torch op, e.g. ``cmake ... -DMXMOE_PYTHON=python3``):

    MXMOE_LIBRARY=build/python/libmxmoe_torch.so PYTHONPATH=python \\
        python3 bench/transformers_gpt_oss.py --layers 2 --prefill 2048 --json out.json

Needs a CUDA device; exits with status 2 saying so where torch sees none.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

H = I = 2880  # gpt-oss-20b
E, K = 32, 4
DEVICE = "cuda"


def fail(msg):
    print(f"transformers_gpt_oss: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path, experts_implementation=None):
    """transformers' bf16 model from the checkpoint, on the CPU (the loader dequantises the MXFP4
    experts to bf16 there)."""
    from transformers import GptOssForCausalLM, Mxfp4Config
    kwargs = {} if experts_implementation is None else {"experts_implementation": experts_implementation}
    model = GptOssForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                              quantization_config=Mxfp4Config(dequantize=True), **kwargs)
    return model.eval()


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


class MoeInputs:
    """Records each layer's MoE block input (the router's x) during one forward."""

    def __init__(self, model):
        self.x = {}
        self.handles = [layer.mlp.register_forward_pre_hook(self._hook(i))
                        for i, layer in enumerate(model.model.layers)]

    def _hook(self, i):
        def hook(_module, args):
            self.x[i] = args[0].detach().reshape(-1, args[0].shape[-1]).clone()
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


def topk_sets(x, weight, bias, k):
    """Each token's top-k expert ids (sorted) from float64 router logits of x as given."""
    logits = x.double() @ weight.double().T + bias.double()
    return torch.sort(torch.topk(logits, k, dim=-1).indices, dim=-1).values


def time_ms(fn, warmup, iters):
    """Median of `iters` CUDA-event timings of fn() after `warmup` calls (each call waited for)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return statistics.median(times), times


def host_us(fn, warmup, iters):
    """Median host time of one eager fn() in microseconds (the wall time of the call, which
    enqueues the GPU work without waiting for it; the GPU is waited for between calls, outside the
    timing), and that of torch.empty(1, H) in the same turns: the host's speed drifts by 2-3x over
    minutes (a VM's share of its CPUs), and the reference shows by how much."""
    ref = lambda: torch.empty(1, H, dtype=torch.bfloat16, device=DEVICE)
    for _ in range(warmup):
        fn()
        ref()
    torch.cuda.synchronize()
    times, ref_times = [], []
    for _ in range(iters):
        for call, into in ((fn, times), (ref, ref_times)):
            t0 = time.perf_counter()
            call()
            into.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
    return statistics.median(times), statistics.median(ref_times)


def measure(model, ids, args):
    """Logits of ids, their MoE inputs, and the timings of prefill, decode and the MoE blocks."""
    rec = MoeInputs(model)
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits.float()
    rec.remove()
    out = {"logits": logits, "moe_inputs": rec.x}
    with torch.inference_mode():
        prefill_ms, prefill_all = time_ms(lambda: model(ids, use_cache=True), args.warmup, args.iters)
        cache = model(ids, use_cache=True).past_key_values
        nxt = ids[:, -1:]
        decode_ms, decode_all = time_ms(lambda: model(nxt, past_key_values=cache, use_cache=True),
                                        args.warmup, args.decode_iters)
        mlp = model.model.layers[0].mlp
        x_pre = torch.randn(1, ids.shape[1], H, dtype=torch.bfloat16, device=ids.device)
        x_dec = x_pre[:, :1].clone()
        block_pre_ms, _ = time_ms(lambda: mlp(x_pre), args.warmup, args.iters)
        block_dec_ms, _ = time_ms(lambda: mlp(x_dec), args.warmup, args.decode_iters)
        block_dec_host_us, empty_host_us = host_us(lambda: mlp(x_dec), max(args.warmup, 200),
                                                   max(args.decode_iters, 1000))
    out.update(prefill_ms=prefill_ms, decode_ms=decode_ms, block_prefill_ms=block_pre_ms,
               block_decode_ms=block_dec_ms, block_decode_host_us=block_dec_host_us,
               empty_host_us=empty_host_us, prefill_all_ms=prefill_all,
               decode_all_ms=decode_all)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    p.add_argument("--prefill", type=int, default=2048, help="prefill tokens (default 2048)")
    p.add_argument("--vocab", type=int, default=256, help="vocabulary size (default 256: small, so the MoE dominates)")
    p.add_argument("--backend", default="auto", help="mxmoe backend: auto, portable, sm90 (default auto)")
    p.add_argument("--source", choices=("checkpoint", "module"), default="checkpoint",
                   help="replace_experts from the checkpoint's MXFP4 bytes or the module's dequantised weights")
    p.add_argument("--experts-implementation", default=None,
                   help="transformers' experts implementation (default: its own choice, grouped_mm on CUDA)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls before each timing (default 3)")
    p.add_argument("--iters", type=int, default=10, help="timed prefills (default 10)")
    p.add_argument("--decode-iters", type=int, default=30, help="timed decode steps (default 30)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-dir", default=None, help="where to write the checkpoint (default: a temporary folder)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()

    if not torch.cuda.is_available():
        fail("needs a CUDA device, and torch sees none (torch.cuda.is_available() is False)")
    try:
        import transformers
        from mxmoe.integrations.transformers import replace_experts
        from tiny_gpt_oss import write_tiny_gpt_oss
    except ImportError as e:
        fail(f"{e} (needs transformers and the mxmoe package: PYTHONPATH=python with MXMOE_LIBRARY, or pip install .)")
    transformers.utils.logging.disable_progress_bar()
    device = torch.device(DEVICE)
    torch.manual_seed(args.seed)

    t0 = time.time()
    tmp = None
    path = args.checkpoint_dir
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="gpt_oss_")
        path = tmp.name
    write_tiny_gpt_oss(path, layers=args.layers, hidden=H, intermediate=I, experts=E, topk=K, vocab=args.vocab,
                       seed=args.seed)
    print(f"checkpoint: {args.layers} layers, H = I = {H}, E = {E}, top-{K}, vocab {args.vocab} "
          f"({time.time() - t0:.1f} s)", flush=True)
    ids = torch.randint(0, args.vocab - 2, (1, args.prefill), generator=torch.Generator().manual_seed(args.seed + 1))
    ids = ids.to(device)

    t0 = time.time()
    model = load(path, args.experts_implementation)
    implementation = model.config._experts_implementation
    print(f"loaded ({time.time() - t0:.1f} s)", flush=True)

    def replace(m):
        n = replace_experts(m, checkpoint=path if args.source == "checkpoint" else None, backend=args.backend)
        if n != args.layers:
            fail(f"replace_experts replaced {n} blocks of {args.layers}")
        torch.cuda.empty_cache()
        return m.model.layers[0].mlp.moe

    def logits_and_moe_inputs(m):
        rec = MoeInputs(m)
        with torch.no_grad():
            logits = m(ids, use_cache=False).logits.float()
        rec.remove()
        return logits, rec.x

    # The reference: transformers in float32 on the same weights (bf16 and MXFP4 values, exact in
    # float32), as the pytest compares; then the same float32 model with mxmoe's blocks, whose
    # distance from it is mxmoe's alone (its bf16 activations and outputs).
    t0 = time.time()
    ref_model = copy.deepcopy(model).float().to(device)
    routers = [(layer.mlp.router.weight.detach().clone(), layer.mlp.router.bias.detach().clone())
               for layer in ref_model.model.layers]
    ref, ref_x = logits_and_moe_inputs(ref_model)
    # Each MoE block alone on the float32 model's input to it, with its router's routing, before
    # and after the replacement: mxmoe's error with the same input and the same top-k.
    block_ref = []
    with torch.no_grad():
        for i, layer in enumerate(ref_model.model.layers):
            _, scores, idx = layer.mlp.router(ref_x[i])
            block_ref.append((idx, scores, layer.mlp(ref_x[i][None])[0][0]))
    replace(ref_model)
    with torch.no_grad():
        block_rel_l2 = [rel_l2(layer.mlp.moe(ref_x[i], topk_ids=idx, topk_weights=scores).float(), y)
                        for i, (layer, (idx, scores, y)) in enumerate(zip(ref_model.model.layers, block_ref))]
    del block_ref
    mx32, mx32_x = logits_and_moe_inputs(ref_model)
    del ref_model
    torch.cuda.empty_cache()
    print(f"float32 forwards, transformers and with mxmoe, done ({time.time() - t0:.1f} s)", flush=True)

    t0 = time.time()
    model = model.to(device)
    tf = measure(model, ids, args)
    print(f"transformers (bf16, experts: {implementation}) measured ({time.time() - t0:.1f} s)", flush=True)

    t0 = time.time()
    moe = replace(model)
    mx = measure(model, ids, args)
    print(f"mxmoe (backend {moe.backend}: {moe.backend_reason}) measured ({time.time() - t0:.1f} s)", flush=True)

    def flips(x):
        """[layers, tokens] bool: the top-k set differs from the float32 model's."""
        return torch.stack([(topk_sets(x[i], w, b, K) != topk_sets(ref_x[i], w, b, K)).any(-1)
                            for i, (w, b) in enumerate(routers)])

    def routing_differs(x):
        """Share of (layer, token) whose top-k set differs from the float32 model's."""
        return float(flips(x).double().mean())

    def agreeing_rel_l2(logits, x):
        """rel L2 over the tokens routed as in the float32 model in every layer, and their count."""
        keep = ~flips(x).any(0).to(logits.device)
        return rel_l2(logits[0][keep], ref[0][keep]), int(keep.sum())

    def per_token_max(a, b):
        t = torch.linalg.norm((a - b).double(), dim=-1) / torch.linalg.norm(b.double(), dim=-1)
        return float(t.max())

    agree = {"fp32_model_mxmoe": agreeing_rel_l2(mx32, mx32_x), "mxmoe": agreeing_rel_l2(mx["logits"], mx["moe_inputs"]),
             "transformers_bf16": agreeing_rel_l2(tf["logits"], tf["moe_inputs"])}

    result = {
        "device": torch.cuda.get_device_name(), "torch_version": torch.__version__,
        "transformers_version": transformers.__version__, "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "layers": args.layers, "hidden": H, "intermediate": I, "experts": E, "topk": K, "vocab": args.vocab,
        "prefill_tokens": args.prefill, "experts_implementation": implementation, "mxmoe_backend": moe.backend,
        "mxmoe_backend_reason": moe.backend_reason, "source": args.source,
        "rel_l2": {
            "fp32_model_mxmoe_vs_transformers": rel_l2(mx32, ref),
            "mxmoe_vs_transformers_fp32": rel_l2(mx["logits"], ref),
            "transformers_bf16_vs_fp32": rel_l2(tf["logits"], ref),
            "mxmoe_vs_transformers_bf16": rel_l2(mx["logits"], tf["logits"]),
        },
        "max_token_rel_l2": {
            "fp32_model_mxmoe_vs_transformers": per_token_max(mx32[0], ref[0]),
            "mxmoe_vs_transformers_fp32": per_token_max(mx["logits"][0], ref[0]),
            "transformers_bf16_vs_fp32": per_token_max(tf["logits"][0], ref[0]),
        },
        "rel_l2_tokens_routed_alike": {name: {"rel_l2": v[0], "tokens": v[1]} for name, v in agree.items()},
        "moe_block_rel_l2_same_input_and_routing": block_rel_l2,
        "routing_differs_from_fp32": {"fp32_model_mxmoe": routing_differs(mx32_x),
                                      "mxmoe": routing_differs(mx["moe_inputs"]),
                                      "transformers_bf16": routing_differs(tf["moe_inputs"])},
    }
    for name, r in (("transformers", tf), ("mxmoe", mx)):
        result[name] = {
            "prefill_ms": r["prefill_ms"], "prefill_tok_s": args.prefill / (r["prefill_ms"] * 1e-3),
            "decode_ms": r["decode_ms"], "decode_tok_s": 1 / (r["decode_ms"] * 1e-3),
            "moe_block_prefill_ms": r["block_prefill_ms"], "moe_block_decode_ms": r["block_decode_ms"],
            "moe_block_decode_host_us": r["block_decode_host_us"], "torch_empty_host_us": r["empty_host_us"],
            "prefill_all_ms": r["prefill_all_ms"], "decode_all_ms": r["decode_all_ms"],
        }

    l2 = result["rel_l2"]
    alike = result["rel_l2_tokens_routed_alike"]
    # The gate: mxmoe's numerical error, each MoE block against transformers' float32 block on the
    # same input with the same top-k. The logits are printed, not gated: a token whose top-k flips
    # on a near-tie (mxmoe's router reads bf16-rounded x) changes its logits by O(1), and through
    # attention the later tokens' too, in transformers' own bf16 forward as well; the share of such
    # tokens is printed.
    ok = max(block_rel_l2) <= 1e-2
    print(f"\ndevice: {result['device']}, torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"logits rel L2 against transformers' float32 forward, {args.prefill} tokens x {args.vocab}: all tokens; "
          f"the tokens routed as in the float32 model in every layer")
    for name, key, akey in (("float32 model with mxmoe", "fp32_model_mxmoe_vs_transformers", "fp32_model_mxmoe"),
                            ("bf16 model with mxmoe", "mxmoe_vs_transformers_fp32", "mxmoe"),
                            ("bf16 model, transformers", "transformers_bf16_vs_fp32", "transformers_bf16")):
        print(f"  {name:26s} {l2[key]:.2e}; {alike[akey]['rel_l2']:.2e} over {alike[akey]['tokens']} tokens")
    print(f"  bf16 models, mxmoe against transformers: {l2['mxmoe_vs_transformers_bf16']:.2e}")
    print(f"each MoE block on the float32 model's input with its router's top-{K}, mxmoe against transformers' "
          f"float32 block: {', '.join(f'{v:.2e}' for v in block_rel_l2)} ({'ok' if ok else 'FAIL'}, <= 1e-2)")
    rd = result["routing_differs_from_fp32"]
    print(f"(layer, token) top-{K} sets differing from the float32 model's: float32 model with mxmoe "
          f"{rd['fp32_model_mxmoe']:.2%}, bf16 with mxmoe {rd['mxmoe']:.2%}, bf16 transformers "
          f"{rd['transformers_bf16']:.2%}")
    print(f"\n| | prefill {args.prefill} (ms) | prefill tok/s | decode 1 (ms) | decode tok/s "
          f"| MoE block, {args.prefill} tokens (ms) | MoE block, 1 token (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, label in (("transformers", f"transformers ({implementation})"), ("mxmoe", f"mxmoe ({moe.backend})")):
        r = result[name]
        print(f"| {label} | {r['prefill_ms']:.2f} | {r['prefill_tok_s']:.0f} | {r['decode_ms']:.3f} | "
              f"{r['decode_tok_s']:.0f} | {r['moe_block_prefill_ms']:.3f} | {r['moe_block_decode_ms']:.3f} |")
    t, m = result["transformers"], result["mxmoe"]
    print(f"MoE block, 1 token, eager host time per call (GPU not waited for): transformers "
          f"{t['moe_block_decode_host_us']:.1f} us, mxmoe {m['moe_block_decode_host_us']:.1f} us (torch.empty(1, H) "
          f"in the same turns: {t['torch_empty_host_us']:.1f} and {m['torch_empty_host_us']:.1f} us)")
    print(f"mxmoe / transformers: prefill {m['prefill_tok_s'] / t['prefill_tok_s']:.2f}x tok/s, decode "
          f"{m['decode_tok_s'] / t['decode_tok_s']:.2f}x tok/s; MoE block {t['moe_block_prefill_ms'] / m['moe_block_prefill_ms']:.2f}x "
          f"(prefill), {t['moe_block_decode_ms'] / m['moe_block_decode_ms']:.2f}x (decode) faster")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if tmp is not None:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
