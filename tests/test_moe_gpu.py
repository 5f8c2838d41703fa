"""GPU: a transformers MoE model (Qwen3-MoE, small random config) with its experts computed by
pingpong.grouped_mm through transformers' experts-implementation hook: the logits against
the model's own (eager, per-expert loop) in float32, within the bf16 model's own error, and
a training step whose expert-weight gradients are as close to the float32 model's as the bf16
eager model's are, and the same on every run."""

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs transformers, the moe extra: pip install -e '.[moe]'")

from pingpong import moe  # noqa: E402

pytestmark = pytest.mark.gpu


def small_model(seed=0):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    config = Qwen3MoeConfig(vocab_size=512, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                            num_experts=16, num_experts_per_tok=4, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=64, norm_topk_prob=True)
    return Qwen3MoeForCausalLM(config).cuda().eval()


def counted(monkeypatch):
    calls = []
    original = moe.experts_forward
    monkeypatch.setattr(moe, "experts_forward", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


def test_logits_match_the_models_own(monkeypatch):
    calls = counted(monkeypatch)
    model = small_model()
    ids = torch.randint(0, 512, (4, 200), device="cuda")
    with torch.no_grad():
        ref = model(ids).logits.double()  # float32, the eager per-expert loop
        model = model.to(torch.bfloat16)
        eager = model(ids).logits.double()
        moe.use_pingpong_experts(model)
        ours = model(ids).logits.double()
    assert calls, "the pingpong experts implementation did not run"
    own = (eager - ref).norm() / ref.norm()
    err = (ours - ref).norm() / ref.norm()
    print(f"relative error vs float32: eager bf16 {own:.3g}, pingpong bf16 {err:.3g}")
    assert err <= 2 * own + 1e-3, f"pingpong {err:.3g} vs the model's own bf16 error {own:.3g}"


def training_step(impl, dtype=torch.bfloat16):
    """One step's expert-weight gradients (float64 copies) of the small model on `impl`'s experts;
    checks that the loss is finite and that SGD moves the expert weights."""
    model = small_model().to(dtype).train()
    if impl == "pingpong":
        moe.use_pingpong_experts(model)
    ids = torch.randint(0, 512, (2, 300), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    loss = model(ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    grads = {n: p.grad.double() for n, p in model.named_parameters() if "experts" in n}
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "experts" in n}
    torch.optim.SGD(model.parameters(), lr=1e-2).step()
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters() if "experts" in n)
    return grads


def test_training_step(monkeypatch):
    """The bf16 step's expert-weight gradients against the float32 eager model's: pingpong's
    error within 10% (+0.005) of the bf16 eager model's own. (Against the bf16 eager model
    directly the two differ by up to ~4% in the second layer: the bf16 roundings of the first
    layer differ, and the router's near-ties amplify them.)"""
    calls = counted(monkeypatch)
    ref = training_step("eager", torch.float32)
    eager = training_step("eager")
    assert not calls
    ours = training_step("pingpong")
    assert calls
    assert ref.keys() == ours.keys() == eager.keys() and ref
    for n, want in ref.items():
        scale = want.norm().clamp_min(1e-30)
        own, got = ((eager[n] - want).norm() / scale).item(), ((ours[n] - want).norm() / scale).item()
        assert got <= 1.1 * own + 5e-3, f"{n}: error {got:.4f} against float32, the eager bf16 model's {own:.4f}"


def test_training_step_is_deterministic():
    """Two identical steps give the same gradients bit for bit: the tokens' k expert outputs are
    summed, and the dispatch's gradient accumulated, in a fixed order (no atomics)."""
    first, second = training_step("pingpong"), training_step("pingpong")
    for n, g in first.items():
        assert torch.equal(g, second[n]), f"{n}: max |difference| {(g - second[n]).abs().max().item():.3g} between two runs"
