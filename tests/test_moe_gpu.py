"""GPU: a transformers MoE model (Qwen3-MoE, small random config) with its experts computed by
pingpong.grouped_mm through transformers' experts-implementation hook: the logits against
the model's own (eager, per-expert loop) in float32, within the bf16 model's own error, and
a training step whose expert-weight gradients match the eager model's."""

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


def test_training_step(monkeypatch):
    calls = counted(monkeypatch)
    grads = {}
    for impl in ("eager", "pingpong"):
        model = small_model().to(torch.bfloat16).train()
        if impl == "pingpong":
            moe.use_pingpong_experts(model)
        ids = torch.randint(0, 512, (2, 300), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
        loss = model(ids, labels=ids).loss
        loss.backward()
        assert torch.isfinite(loss)
        grads[impl] = {n: p.grad.double() for n, p in model.named_parameters() if "experts" in n}
        before = {n: p.detach().clone() for n, p in model.named_parameters() if "experts" in n}
        torch.optim.SGD(model.parameters(), lr=1e-2).step()
        assert any(not torch.equal(before[n], p) for n, p in model.named_parameters() if "experts" in n)
    assert calls
    assert grads["eager"].keys() == grads["pingpong"].keys() and grads["eager"]
    for n, g in grads["pingpong"].items():
        want = grads["eager"][n]
        rel = (g - want).norm() / want.norm().clamp_min(1e-30)
        assert rel < 5e-2, f"{n}: gradient differs from the eager model's by {rel:.3g}"
