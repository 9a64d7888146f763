"""Tiny random GPT-OSS checkpoint in the HF MXFP4 on-disk layout (test fixture).

Targets transformers==5.17.0 / torch==2.11.0. Load on CPU with

    GptOssForCausalLM.from_pretrained(path, dtype=torch.float32,
                                      quantization_config=Mxfp4Config(dequantize=True))

(without dequantize=True, transformers 5.17 asks for accelerate and, on a GPU host, kernels from the Hub).

On-disk expert layout (same as openai/gpt-oss-*):
  gate_up_proj_blocks U8 [E, 2I, H/32, 16]  gate_up_proj_scales U8 [E, 2I, H/32]  gate_up_proj_bias BF16 [E, 2I]
  down_proj_blocks    U8 [E, H, I/32, 16]   down_proj_scales    U8 [E, H, I/32]   down_proj_bias    BF16 [E, H]
Each block byte packs two E2M1 codes, low nibble = even element; scales are E8M0 (2**(byte-127)).
Rows of gate_up are interleaved: row 2j = gate_j, row 2j+1 = up_j.
"""

import json
import os

import numpy as np
import torch
from safetensors.torch import save_file

FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                       -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)

# Verbatim from openai/gpt-oss-20b config.json.
QUANTIZATION_CONFIG = {
    "modules_to_not_convert": [
        "model.layers.*.self_attn",
        "model.layers.*.mlp.router",
        "model.embed_tokens",
        "lm_head",
    ],
    "quant_method": "mxfp4",
}

SWIGLU_ALPHA = 1.702
SWIGLU_LIMIT = 7.0


def mxfp4_decode(blocks, scales):
    """[..., R, G, 16] u8 + [..., R, G] u8 -> float32 [..., R, G*32] (row-major, as on disk)."""
    blocks = np.asarray(blocks, dtype=np.uint8)
    scales = np.asarray(scales, dtype=np.uint8)
    assert blocks.shape[:-1] == scales.shape and blocks.shape[-1] == 16
    out = np.empty(blocks.shape[:-1] + (32,), dtype=np.float32)
    out[..., 0::2] = FP4_VALUES[blocks & 0x0F]
    out[..., 1::2] = FP4_VALUES[blocks >> 4]
    out = np.ldexp(out, scales.astype(np.int32)[..., None] - 127).astype(np.float32)
    return out.reshape(blocks.shape[:-2] + (blocks.shape[-2] * 32,))


def hf_expert_weights(layer):
    """The dequantized params transformers builds from one layer of `write_tiny_gpt_oss(...)["layers"]`.

    gate_up_proj [E, H, 2I] (= decode(gate_up_blocks).transpose(0, 2, 1)); down_proj [E, I, H]."""
    gate_up = mxfp4_decode(layer["gate_up_proj_blocks"], layer["gate_up_proj_scales"]).transpose(0, 2, 1)
    down = mxfp4_decode(layer["down_proj_blocks"], layer["down_proj_scales"]).transpose(0, 2, 1)
    return np.ascontiguousarray(gate_up), np.ascontiguousarray(down)


def reference_mlp(x, layer, topk, idx=None, scores=None, quantize=None):
    """numpy float64 reference of GptOssMLP.forward for x [T, H] -> (out [T, H], scores [T, k], idx [T, k]).

    With idx and scores [T, k] given, that routing is used instead of the router's. ``quantize``
    (a function of a 1-D array) is applied to each token's x before the experts and to each
    SwiGLU output before the down projection (the router reads x as given). Exact logit ties
    are broken lowest-index-first here; torch.topk does not promise that order."""
    x = np.asarray(x, dtype=np.float64)
    gate_up, down = (w.astype(np.float64) for w in hf_expert_weights(layer))
    if idx is None:
        logits = x @ layer["router_weight"].astype(np.float64).T + layer["router_bias"]
        idx = np.argsort(-logits, axis=-1, kind="stable")[:, :topk]
        top = np.take_along_axis(logits, idx, axis=-1)
        scores = np.exp(top - top.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
    out = np.zeros_like(x)
    q = quantize or (lambda v: v)
    for t in range(x.shape[0]):
        xt = q(x[t])
        for j in range(topk):
            e = idx[t, j]
            h = xt @ gate_up[e] + layer["gate_up_proj_bias"][e]
            gate = np.minimum(h[0::2], SWIGLU_LIMIT)
            up = np.clip(h[1::2], -SWIGLU_LIMIT, SWIGLU_LIMIT)
            act = q((up + 1.0) * gate / (1.0 + np.exp(-SWIGLU_ALPHA * gate)))
            out[t] += scores[t, j] * (act @ down[e] + layer["down_proj_bias"][e])
    return out, scores, idx


def _config(layers, hidden, intermediate, experts, topk, vocab):
    layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": vocab - 1,
        "pad_token_id": vocab - 2,
        "experts_per_token": topk,
        "num_experts_per_tok": topk,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": intermediate,
        "layer_types": layer_types,
        "max_position_embeddings": 131072,
        "num_attention_heads": 4,
        "num_hidden_layers": layers,
        "num_key_value_heads": 2,
        "num_local_experts": experts,
        "output_router_logits": False,
        "quantization_config": dict(QUANTIZATION_CONFIG, modules_to_not_convert=list(
            QUANTIZATION_CONFIG["modules_to_not_convert"])),
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 4,
        "swiglu_limit": SWIGLU_LIMIT,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": vocab,
    }


def random_moe_layer(rng, hidden, intermediate, experts):
    """One MoE block's tensors as numpy arrays in the HF layout: blocks/scales u8, biases and router f32
    holding bf16 values (exactly what a checkpoint stores). Codes are random bytes (two E2M1 codes
    each); scales 2**-8 .. 2**-4, never 0xFF."""
    H, I, E = hidden, intermediate, experts

    def bf16(shape, std):
        return torch.from_numpy(rng.normal(0.0, std, size=shape).astype(np.float32)).to(torch.bfloat16).float().numpy()

    return {
        "gate_up_proj_blocks": rng.integers(0, 256, size=(E, 2 * I, H // 32, 16), dtype=np.uint8),
        "gate_up_proj_scales": rng.integers(119, 124, size=(E, 2 * I, H // 32), dtype=np.uint8),
        "down_proj_blocks": rng.integers(0, 256, size=(E, H, I // 32, 16), dtype=np.uint8),
        "down_proj_scales": rng.integers(119, 124, size=(E, H, I // 32), dtype=np.uint8),
        "gate_up_proj_bias": bf16((E, 2 * I), 0.1),
        "down_proj_bias": bf16((E, H), 0.1),
        "router_weight": bf16((E, H), H ** -0.5),
        # A bias spread wider than the logits' rounding differences keeps the top-k decisive, so
        # bf16 and fp32 routers pick the same experts and outputs compare without tie flips.
        "router_bias": bf16((E,), 1.0),
    }


_CHECKPOINT_NAMES = {
    "gate_up_proj_blocks": "mlp.experts.gate_up_proj_blocks", "gate_up_proj_scales": "mlp.experts.gate_up_proj_scales",
    "down_proj_blocks": "mlp.experts.down_proj_blocks", "down_proj_scales": "mlp.experts.down_proj_scales",
    "gate_up_proj_bias": "mlp.experts.gate_up_proj_bias", "down_proj_bias": "mlp.experts.down_proj_bias",
    "router_weight": "mlp.router.weight", "router_bias": "mlp.router.bias",
}


def write_tiny_gpt_oss(path, *, layers=2, hidden=64, intermediate=64, experts=4, topk=2, vocab=128, seed=0):
    """Write config.json + model.safetensors to `path`; return the raw arrays.

    Returns {"config": dict, "layers": [per-layer dict of random_moe_layer]}.
    """
    assert hidden % 32 == 0 and intermediate % 32 == 0
    cfg = _config(layers, hidden, intermediate, experts, topk, vocab)
    H = hidden
    nq, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    rng = np.random.default_rng(seed)

    def bf16(shape, std, mean=0.0):
        return torch.from_numpy(rng.normal(mean, std, size=shape).astype(np.float32)).to(torch.bfloat16)

    sd = {
        "model.embed_tokens.weight": bf16((vocab, H), 1.0),
        "model.norm.weight": bf16((H,), 0.1, 1.0),
        "lm_head.weight": bf16((vocab, H), 0.1),
    }
    out_layers = []
    for i in range(layers):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = bf16((H,), 0.1, 1.0)
        sd[p + "post_attention_layernorm.weight"] = bf16((H,), 0.1, 1.0)
        for name, rows, cols in (("q_proj", nq * hd, H), ("k_proj", nkv * hd, H),
                                 ("v_proj", nkv * hd, H), ("o_proj", H, nq * hd)):
            sd[p + f"self_attn.{name}.weight"] = bf16((rows, cols), cols ** -0.5)
            sd[p + f"self_attn.{name}.bias"] = bf16((rows,), 0.02)
        sd[p + "self_attn.sinks"] = bf16((nq,), 1.0)
        raw = random_moe_layer(rng, hidden, intermediate, experts)
        for key, name in _CHECKPOINT_NAMES.items():
            t = torch.from_numpy(raw[key])
            sd[p + name] = t if t.dtype == torch.uint8 else t.to(torch.bfloat16)
        out_layers.append(raw)

    os.makedirs(path, exist_ok=True)
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(path, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return {"config": cfg, "layers": out_layers}
