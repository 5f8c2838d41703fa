"""The PyTorch-facing targets, timed through the public modules and functions, on a GPU.

    PYTHONPATH=src python benchmarks/linear_bench.py [--reps 30] [--rounds 3] [--skip-compile]

1. forward of pingpong.nn.Linear(4096, 14336, activation="gelu_tanh") on x (8192, 4096), bf16,
   vs torch eager F.gelu(F.linear(x, w, b), approximate="tanh") and vs torch.compile (default
   mode) of the same function;
2. forward + backward of pingpong.nn.Linear vs nn.Linear (same weights, x requires grad);
3. batched (16, 2048, 2048) @ (16, 2048, 2048) through pingpong.matmul vs torch.bmm, and a
   shared weight (16, 512, 2048) @ (2048, 2048) (folded into one GEMM) vs torch.matmul;
4. one training step (forward, backward, AdamW) of a transformers Llama with random weights
   at a size where the GEMMs, not the host, set the time (hidden 2048, MLP 5632, 4 layers,
   vocabulary 32000, 4 × 1024 tokens, bf16), after `pingpong.nn.replace_linear`, vs the same
   model in torch (skipped without transformers, or with --skip-model).

Each pingpong result is compared with torch's first (relative Frobenius error printed). Ours and
theirs alternate for --rounds rounds (medians of L2-flushed repetitions, pingpong.tools.timing);
printed: each round's torch/pingpong time ratio (> 1: pingpong faster) and their median.
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

import pingpong
from pingpong.tools.timing import time_callable


def rel(out, ref) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def compare(name, ours, theirs, args, err):
    ratios, t_ours, t_theirs = [], [], []
    for _ in range(args.rounds):
        t_ours.append(time_callable(ours, args.reps).median_ms)
        t_theirs.append(time_callable(theirs, args.reps).median_ms)
        ratios.append(t_theirs[-1] / t_ours[-1])
    print(f"{name:<42} pingpong {statistics.median(t_ours):7.3f} ms  torch {statistics.median(t_theirs):7.3f} ms  "
          f"torch/pingpong {' '.join(f'{r:.3f}' for r in ratios)} (median {statistics.median(ratios):.3f})  "
          f"rel.err {err:.1e}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--skip-compile", action="store_true")
    p.add_argument("--skip-model", action="store_true")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("skipped: no CUDA GPU")
        return 2
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")

    ref = torch.nn.Linear(4096, 14336, device=dev, dtype=bf)
    ours = pingpong.nn.Linear.from_linear(ref, activation="gelu_tanh")
    x = torch.randn(8192, 4096, device=dev, dtype=bf)

    def eager():
        return F.gelu(F.linear(x, ref.weight, ref.bias), approximate="tanh")

    with torch.no_grad():
        err = rel(ours(x), eager())
        compare("linear+bias+gelu_tanh fwd vs eager", lambda: ours(x), eager, args, err)
        if not args.skip_compile:
            compiled = torch.compile(eager)
            compare("linear+bias+gelu_tanh fwd vs torch.compile", lambda: ours(x), compiled, args, rel(ours(x), compiled()))

    plain = pingpong.nn.Linear.from_linear(ref)
    xg = x.clone().requires_grad_()
    g = torch.randn(8192, 14336, device=dev, dtype=bf)

    def fwd_bwd(layer):
        def run():
            layer(xg).backward(g)
            xg.grad = layer.weight.grad = layer.bias.grad = None
        return run

    y = plain(xg)
    dx_ours, = torch.autograd.grad(y, xg, g)
    dx_torch, = torch.autograd.grad(ref(xg), xg, g)
    compare("nn.Linear fwd+bwd (8192x4096 -> 14336)", fwd_bwd(plain), fwd_bwd(ref), args, rel(dx_ours, dx_torch))

    a = torch.randn(16, 2048, 2048, device=dev, dtype=bf)
    b = torch.randn(16, 2048, 2048, device=dev, dtype=bf)
    with torch.no_grad():
        compare("batched (16, 2048, 2048)^2 vs torch.bmm", lambda: pingpong.matmul(a, b), lambda: torch.bmm(a, b),
                args, rel(pingpong.matmul(a, b), torch.bmm(a, b)))
        s, w = torch.randn(16, 512, 2048, device=dev, dtype=bf), b[0]
        compare("shared weight (16, 512, 2048) @ (2048, 2048)", lambda: pingpong.matmul(s, w),
                lambda: torch.matmul(s, w), args, rel(pingpong.matmul(s, w), torch.matmul(s, w)))
    if not args.skip_model:
        training_step(args)
    return 0


def training_step(args):
    """Section 4 of the module docstring."""
    import copy

    try:
        import transformers
    except ImportError:
        print("training step: skipped (transformers is not installed)")
        return
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
                                   num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=1024,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    theirs = transformers.LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
    ours = copy.deepcopy(theirs)
    report = pingpong.nn.replace_linear(ours)
    ids = torch.randint(0, cfg.vocab_size, (4, 1024), device="cuda")

    def step(model):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

        def run():
            model(ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return run

    with torch.no_grad():
        err = rel(ours(ids).logits, theirs(ids).logits)
    print(f"training step model: {len(report.replaced)} Linear layers replaced")
    compare("Llama training step (4x1024 tokens, h=2048)", step(ours), step(theirs), args, err)


if __name__ == "__main__":
    raise SystemExit(main())
