"""replace_experts on a small GPT-OSS model written by the test: MXFP4 experts in a safetensors
checkpoint in the HF layout, loaded by transformers (which dequantises them), logits with mxmoe
against transformers' own float32 forward."""
import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
from transformers import GptOssForCausalLM, Mxfp4Config  # noqa: E402

from mxmoe.integrations.transformers import GptOssMoE, replace_experts  # noqa: E402
from tiny_gpt_oss import write_tiny_gpt_oss  # noqa: E402

LAYERS = 3


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt_oss")
    write_tiny_gpt_oss(path, layers=LAYERS, hidden=64, intermediate=96, experts=8, topk=2, vocab=128, seed=5)
    return path


def load(path, device):
    """transformers' model in float32; its expert weights (kept bf16 by the loader) upcast, so the
    reference forward runs in float32 throughout on the same values."""
    model = GptOssForCausalLM.from_pretrained(path, dtype=torch.float32,
                                              quantization_config=Mxfp4Config(dequantize=True))
    for layer in model.model.layers:
        for name in ("gate_up_proj", "down_proj"):
            p = getattr(layer.mlp.experts, name)
            p.data = p.data.float()
    return model.to(device).eval()


def rel_l2(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


@pytest.mark.parametrize("source", ["checkpoint", "module"])
def test_logits_match_transformers(checkpoint, device, source):
    ids = torch.randint(0, 120, (2, 11), generator=torch.Generator().manual_seed(9)).to(device)
    ref_model = load(checkpoint, device)
    with torch.no_grad():
        ref = ref_model(ids).logits
    model = load(checkpoint, device)
    n = replace_experts(model, checkpoint=checkpoint if source == "checkpoint" else None)
    assert n == LAYERS
    assert all(isinstance(layer.mlp, GptOssMoE) for layer in model.model.layers)
    with torch.no_grad():
        got = model(ids).logits
    assert torch.linalg.norm(ref) > 0
    err = rel_l2(got, ref)
    per_token = (torch.linalg.norm((got - ref).double(), dim=-1) / torch.linalg.norm(ref.double(), dim=-1)).cpu()
    assert err <= 1e-2, f"logits rel L2 {err:.3g}; per token {per_token.numpy().round(4).tolist()}"


def test_quantising_dequantised_weights_is_exact(checkpoint):
    """Without a checkpoint the module's dequantised experts are quantised again: the bytes' values
    come back exactly (the OCP scale rule inverts the dequantisation)."""
    from mxmoe.integrations.transformers import _expert_tensors
    from tiny_gpt_oss import mxfp4_decode
    model = load(checkpoint, "cpu")
    experts = model.model.layers[0].mlp.experts
    gu_blocks, gu_scales, down_blocks, down_scales = _expert_tensors(experts)
    gate_up = torch.from_numpy(mxfp4_decode(gu_blocks.numpy(), gu_scales.numpy())).transpose(1, 2)
    down = torch.from_numpy(mxfp4_decode(down_blocks.numpy(), down_scales.numpy())).transpose(1, 2)
    assert torch.equal(gate_up, experts.gate_up_proj.float())
    assert torch.equal(down, experts.down_proj.float())
    assert np.count_nonzero(gate_up.numpy()) > 0


def test_rejects_other_models():
    with pytest.raises(ValueError, match="no .layers"):
        replace_experts(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("source", ["checkpoint", "module", "load_gpt_oss"])
def test_experts_split_between_the_gpu_and_host_memory(checkpoint, source):
    """A budget of one layer: the first block's experts on the GPU, the others in host memory
    (computed by the CPU), attention on the GPU throughout; the logits stay transformers'."""
    if not torch.cuda.is_available():
        pytest.skip("GPU test skipped: torch sees no CUDA device")
    import mxmoe
    ids = torch.randint(0, 120, (2, 11), generator=torch.Generator().manual_seed(10)).cuda()
    with torch.no_grad():
        ref = load(checkpoint, "cuda")(ids).logits
    per = mxmoe.info("cuda", experts=8, hidden=64, intermediate=96, topk=2)["device_layer_bytes"]
    if source == "load_gpt_oss":
        from mxmoe.integrations.transformers import load_gpt_oss
        model = load_gpt_oss(checkpoint, device="cuda", dtype=torch.float32, max_device_bytes=per, progress=False)
    else:
        model = load(checkpoint, "cuda")
        n = replace_experts(model, checkpoint=checkpoint if source == "checkpoint" else None, max_device_bytes=per,
                            progress=False)
        assert n == LAYERS
    moes = [layer.mlp.moe for layer in model.model.layers]
    assert [m.host_experts for m in moes] == [False] + [True] * (LAYERS - 1)
    assert all(m.device == torch.device("cuda", 0) for m in moes)
    with torch.no_grad():
        got = model(ids).logits
    assert torch.linalg.norm(ref) > 0
    assert rel_l2(got, ref) <= 1e-2


def test_load_gpt_oss_builds_the_model_replace_experts_gives(checkpoint, device):
    """Built on the meta device with mxmoe's blocks, then the other tensors read: the logits are
    the bits of transformers' model with replace_experts, and generation runs."""
    from mxmoe.integrations.transformers import load_gpt_oss
    ids = torch.randint(0, 120, (2, 11), generator=torch.Generator().manual_seed(11)).to(device)
    model = load_gpt_oss(checkpoint, device=device, dtype=torch.float32, progress=False)
    assert all(isinstance(layer.mlp, GptOssMoE) for layer in model.model.layers)
    ref = load(checkpoint, device)
    replace_experts(ref, checkpoint=checkpoint)
    with torch.no_grad():
        got, want = model(ids).logits, ref(ids).logits
    assert torch.linalg.norm(want) > 0
    assert torch.equal(got, want)
    assert model.generate(ids[:1, :4], max_new_tokens=3, do_sample=False).shape == (1, 7)


def test_load_gpt_oss_names_a_missing_tensor(checkpoint, tmp_path):
    import shutil
    from safetensors.torch import load_file, save_file
    from mxmoe.integrations.transformers import load_gpt_oss
    for f in checkpoint.iterdir():
        shutil.copy(f, tmp_path / f.name)
    sd = load_file(tmp_path / "model.safetensors")
    del sd["model.layers.1.self_attn.q_proj.bias"]
    save_file(sd, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"lacks 1 of the model's tensors, e.g. \['model.layers.1.self_attn.q_proj.bias'\]"):
        load_gpt_oss(tmp_path, device="cpu", progress=False)
