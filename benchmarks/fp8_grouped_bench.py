"""pingpong.scaled_grouped_mm against torch._scaled_grouped_mm on the same quantized tensors:
the MoE suites' forward products y = x · w[g]ᵀ (pingpong.tools.suites.MOE_MODELS: Mixtral
8×(4096→14336), Qwen3-30B-A3B 128×(2048→768), DeepSeek-V3 256×(7168→2048)), balanced and
Zipf routing, row-wise scales (x per token, w per expert and output column), bf16 out.

Each case is checked first (ours against torch's, relative norm difference ≤ 1e-2 over the
routed rows), then timed: median of ≥ reps L2-flushed repetitions (pingpong.tools.timing),
`rounds` alternations of ours and torch's, ratio = torch's time / ours (> 1: ours faster),
with the spread of the per-round ratios.

    PYTHONPATH=src python benchmarks/fp8_grouped_bench.py [--tokens 512 4096] [--fast] [--deadline S]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import torch

import pingpong
from pingpong.tools.suites import MOE_MODELS, moe_group_sizes
from pingpong.tools.timing import time_callable

E4M3 = torch.float8_e4m3fn


def case_tensors(model, tokens, routing, seed=0):
    E, top_k, H, inter = MOE_MODELS[model]
    sizes = moe_group_sizes(tokens, E, top_k, routing)
    T = sum(sizes)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(T, H, generator=gen, device="cuda").to(E4M3)
    w = torch.randn(E, inter, H, generator=gen, device="cuda").to(E4M3)
    sa = torch.rand(T, generator=gen, device="cuda") * H ** -0.5 + 1e-3
    sb = torch.rand(E, inter, generator=gen, device="cuda") + 0.5
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    return a, w.transpose(1, 2), sa, sb, offs, sizes


def bench_case(model, tokens, routing, fast, reps, rounds):
    a, b, sa, sb, offs, sizes = case_tensors(model, tokens, routing)
    row = dict(model=model, tokens=tokens, routing=routing, fast=fast, rows=sum(sizes), largest=max(sizes),
               empty=sizes.count(0))
    ours_fn = lambda: pingpong.scaled_grouped_mm(a, b, sa, sb, offs, use_fast_accum=fast)  # noqa: E731
    torch_fast = fast
    torch_fn = lambda: torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16,  # noqa: E731
                                                use_fast_accum=torch_fast)
    ours = ours_fn().float()
    try:
        theirs = torch_fn().float()
    except RuntimeError:  # torch refuses this accumulation mode: compare with its other one (reported)
        torch_fast = not fast
        theirs = torch_fn().float()
    row["torch_fast"] = torch_fast
    err = ((ours - theirs).norm() / theirs.norm().clamp_min(1e-30)).item()
    row["rel_diff"] = err
    if not err <= 1e-2:
        return dict(row, status="FAILED")
    del ours, theirs
    t_o, t_t = [], []
    for _ in range(rounds):
        t_o.append(time_callable(ours_fn, reps).median_ms)
        t_t.append(time_callable(torch_fn, reps).median_ms)
    ms_o, ms_t = statistics.median(t_o), statistics.median(t_t)
    flop = 2.0 * sum(sizes) * a.shape[1] * b.shape[2]
    per_round = [t / o for o, t in zip(t_o, t_t)]
    return dict(row, status="ok", ms_ours=ms_o, ms_torch=ms_t, tf_ours=flop / ms_o * 1e-9, tf_torch=flop / ms_t * 1e-9,
                ratio=ms_t / ms_o, lo=min(per_round), hi=max(per_round))


def table(rows) -> str:
    head = (f"{'model':<14} {'tokens':>6} {'routing':<8} {'accum':<8} {'ours TF':>8} {'torch TF':>8} {'ratio':>6}"
            f" {'spread':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        acc = ("fast" if r["fast"] else "promoted") + ("*" if r.get("torch_fast", r["fast"]) != r["fast"] else "")
        if r.get("status") != "ok":
            lines.append(f"{r['model']:<14} {r['tokens']:>6} {r['routing']:<8} {acc:<8} {r.get('status')}"
                         f" {r.get('rel_diff', '')}")
            continue
        lines.append(f"{r['model']:<14} {r['tokens']:>6} {r['routing']:<8} {acc:<8} {r['tf_ours']:>8.1f}"
                     f" {r['tf_torch']:>8.1f} {r['ratio']:>6.3f} {r['lo']:.3f}-{r['hi']:.3f}")
    ok = [r for r in rows if r.get("status") == "ok"]
    for fast in (False, True):
        sub = [r["ratio"] for r in ok if r["fast"] == fast]
        if sub:
            lines.append(f"{'fast' if fast else 'promoted'}: geomean ratio (torch / ours) "
                         f"{math.exp(sum(map(math.log, sub)) / len(sub)):.3f} over {len(sub)}, min {min(sub):.3f}")
    if any(r.get("torch_fast", r["fast"]) != r["fast"] for r in ok):
        lines.append("*: torch refused this accumulation mode; its other one was timed")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=list(MOE_MODELS))
    p.add_argument("--tokens", nargs="+", type=int, default=[512, 4096])
    p.add_argument("--fast", action="store_true", help="also use_fast_accum=True (after the promoted pass)")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--deadline", type=float, default=1e9, help="seconds: start no case after this")
    args = p.parse_args()
    print("device", torch.cuda.get_device_name(), "torch", torch.__version__, file=sys.stderr)
    start, rows = time.time(), []
    for fast in ((False, True) if args.fast else (False,)):
        for model in args.models:
            for tokens in args.tokens:
                for routing in ("balanced", "zipf"):
                    if time.time() - start > args.deadline:
                        continue
                    try:
                        row = bench_case(model, tokens, routing, fast, args.reps, args.rounds)
                    except Exception as e:  # reported; the run goes on
                        row = dict(model=model, tokens=tokens, routing=routing, fast=fast,
                                   status=f"ERROR {type(e).__name__}: {e}"[:200])
                    rows.append(row)
                    print(row, file=sys.stderr, flush=True)
                    torch.cuda.empty_cache()
    print(table(rows))
    return 0 if all(r.get("status") == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
