"""A transformers Llama (small config, random weights) with pingpong layers under torch.compile:
default mode (inductor calls the plans directly: pingpong.integration.inductor), reduce-overhead (CUDA
graphs replay the step) and dynamic shapes. Marker `gpu`; needs the `test-model` extra.

Bounds as tests/test_transformers_gpu.py: pingpong's logits error against a float32 copy at
most 1.5× torch bf16's error plus 1e-3; a training step's gradients against torch's compiled
bf16 model's, relative norm of the difference ≤ 1.5× torch's own against a float32 copy plus
1e-3, per parameter.
"""

import copy

import pytest
import torch

import pingpong
from closeness import rel_norm
from pingpong.integration import inductor

pytestmark = pytest.mark.gpu
transformers = pytest.importorskip("transformers", reason="the test-model extra (pip install -e '.[test-model]')")

VOCAB = 1000


def llama(dtype):
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=704, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=256, tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to(device="cuda", dtype=dtype)


def ids(batch, seq, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, seq), device="cuda", generator=g)


@pytest.fixture
def models():
    torch._dynamo.reset()
    inductor.CALLS.clear()
    ref32 = llama(torch.float32)
    theirs = copy.deepcopy(ref32).to(torch.bfloat16)
    ours = copy.deepcopy(theirs)
    assert pingpong.nn.replace_linear(ours).skipped == {}
    yield ref32, theirs, ours
    torch._dynamo.reset()


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compiled_logits(models, mode):
    ref32, theirs, ours = models
    x = ids(4, 128, seed=1)
    with torch.no_grad():
        want = ref32(x).logits
        torch_err = rel_norm(torch.compile(theirs, mode=mode)(x).logits, want)
        compiled = torch.compile(ours, mode=mode)
        for _ in range(3):  # reduce-overhead: warm-up, record, replay
            got = compiled(x).logits.clone()
    ours_err = rel_norm(got, want)
    print(f"mode {mode}: logits vs float32: torch {torch_err:.2e}, pingpong {ours_err:.2e}, calls {dict(inductor.CALLS)}")
    assert ours_err <= 1.5 * torch_err + 1e-3
    assert inductor.CALLS["linear"] > 0  # the direct path, not the dispatcher


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compiled_training_step_gradients(models, mode):
    ref32, theirs, ours = models
    x = ids(2, 64, seed=2)

    def grads(model, compiled):
        model.zero_grad(set_to_none=True)
        for _ in range(2 if mode else 1):  # reduce-overhead: the second call replays
            model.zero_grad(set_to_none=True)
            compiled(x, labels=x).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    want = grads(ref32, ref32)
    theirs_g = grads(theirs, torch.compile(theirs, mode=mode))
    ours_g = grads(ours, torch.compile(ours, mode=mode))
    for name, ref in want.items():
        bound = 1.5 * rel_norm(theirs_g[name], ref) + 1e-3
        assert rel_norm(ours_g[name], ref) <= bound, (name, rel_norm(ours_g[name], ref), bound)
    assert inductor.CALLS["mm"] > 0


def test_dynamic_lengths_compile_once_more_at_most(models):
    """Three sequence lengths: dynamo's automatic dynamic shapes recompile once (the second
    length), not per length; logits within bounds at each."""
    ref32, theirs, ours = models
    compiled = torch.compile(ours)
    counts = []
    for seq in (64, 96, 80):
        x = ids(2, seq, seed=seq)
        with torch.no_grad():
            want = ref32(x).logits
            err, torch_err = rel_norm(compiled(x).logits, want), rel_norm(theirs(x).logits, want)
        counts.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        assert err <= 1.5 * torch_err + 1e-3, (seq, err, torch_err)
    assert counts[2] == counts[1], counts  # the third length reused the dynamic graph
    assert inductor.CALLS["linear"] > 0
