"""`pingpong bench --op grouped`: pingpong.grouped_mm against torch._grouped_mm on the same
tensors, over mixture-of-experts cases (pingpong.tools.suites.MOE_MODELS).

One case = (model, tokens, routing, product) for the expert projection hidden -> intermediate
(w (E, I, H), stored as a model stores it):

    forward  y (T·k, I)  = grouped_mm(x (T·k, H),  w.transpose(1, 2), offs)     2-D × 3-D
    dgrad    dX (T·k, H) = grouped_mm(dY (T·k, I), w, offs)                     2-D × 3-D
    wgrad    dW (E, H, I) = grouped_mm(x.t(), dY, offs)                         2-D × 2-D (ragged K)

Rows are sorted by expert; group sizes from `moe_group_sizes` (balanced or Zipf routing).
Each case is checked first (ours into a NaN-poisoned buffer, against torch._grouped_mm,
relative norm error ≤ 1e-2), then timed as the GEMM bench times (pingpong.tools.timing:
median of ≥ reps L2-flushed repetitions, `rounds` alternations, the spread of the per-round
ratios). The ratio is torch's time / ours (> 1: ours faster).
"""

from __future__ import annotations

import json
import math
import statistics
import sys

from .suites import MOE_MODELS, moe_group_sizes, moe_suite
from .timing import time_callable


def case_tensors(model: str, tokens: int, routing: str, product: str, seed: int = 0):
    """(a, b, offs) of one case on the GPU, random normal values (scaled to unit-size outputs)."""
    import torch

    E, top_k, H, inter = MOE_MODELS[model]
    sizes = moe_group_sizes(tokens, E, top_k, routing)
    rows = sum(sizes)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)

    def randn(*shape, scale=1.0):
        return (torch.randn(shape, generator=gen, device="cuda") * scale).to(torch.bfloat16)

    if product == "forward":
        return randn(rows, H), randn(E, inter, H, scale=H ** -0.5).transpose(1, 2), offs, sizes
    if product == "dgrad":
        return randn(rows, inter), randn(E, inter, H, scale=inter ** -0.5), offs, sizes
    x = randn(rows, H)
    return x.t(), randn(rows, inter, scale=max(1, rows // E) ** -0.5), offs, sizes


def flops(a, b, offs_sizes, product) -> float:
    if product == "wgrad":
        return 2.0 * a.shape[0] * b.shape[1] * sum(offs_sizes)
    return 2.0 * sum(offs_sizes) * a.shape[1] * b.shape[2]


def bench_case(model, tokens, routing, product, reps=100, rounds=3, seed=0) -> dict:
    import torch

    from ..grouped import _compute, grouped_mm

    a, b, offs, sizes = case_tensors(model, tokens, routing, product, seed)
    row = dict(model=model, tokens=tokens, routing=routing, product=product, rows=sum(sizes),
               groups=len(sizes), largest=max(sizes), empty=sizes.count(0))
    theirs = torch._grouped_mm(a, b, offs)
    ours = _compute(a, b, offs, a.dtype, out=torch.full_like(theirs, float("nan")))
    valid = slice(None) if product == "wgrad" else slice(0, sum(sizes))
    err = ((ours[valid].float() - theirs[valid].float()).norm() / theirs[valid].float().norm().clamp_min(1e-30)).item()
    row["rel_err"] = err
    if not err <= 1e-2:
        return dict(row, status="FAILED")
    del ours, theirs
    t_ours, t_torch = [], []
    for _ in range(rounds):
        t_ours.append(time_callable(lambda: grouped_mm(a, b, offs), reps).median_ms)
        t_torch.append(time_callable(lambda: torch._grouped_mm(a, b, offs), reps).median_ms)
    ms_o, ms_t = statistics.median(t_ours), statistics.median(t_torch)
    f = flops(a, b, sizes, product)
    per_round = [t / o for o, t in zip(t_ours, t_torch)]
    return dict(row, status="ok", ms_ours=ms_o, ms_torch=ms_t, tflops_ours=f / ms_o * 1e-9,
                tflops_torch=f / ms_t * 1e-9, ratio=ms_t / ms_o, ratio_min=min(per_round), ratio_max=max(per_round))


def format_rows(rows) -> str:
    head = f"{'model':<14} {'tokens':>6} {'routing':<8} {'product':<7} {'ours TF':>8} {'torch TF':>8} {'ratio':>6} {'spread':>11}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"{r['model']:<14} {r['tokens']:>6} {r['routing']:<8} {r['product']:<7} {r.get('status')}"
                         f" err={r.get('rel_err')}")
            continue
        lines.append(f"{r['model']:<14} {r['tokens']:>6} {r['routing']:<8} {r['product']:<7} {r['tflops_ours']:>8.1f}"
                     f" {r['tflops_torch']:>8.1f} {r['ratio']:>6.3f} {r['ratio_min']:.3f}-{r['ratio_max']:.3f}")
    ok = [r for r in rows if r.get("status") == "ok"]
    if ok:
        geo = math.exp(sum(math.log(r["ratio"]) for r in ok) / len(ok))
        lines.append(f"geomean ratio (torch / ours) over {len(ok)} cases: {geo:.3f}; min {min(r['ratio'] for r in ok):.3f}")
        for p in ("forward", "dgrad", "wgrad"):
            sub = [r["ratio"] for r in ok if r["product"] == p]
            if sub:
                lines.append(f"  {p}: geomean {math.exp(sum(map(math.log, sub)) / len(sub)):.3f} over {len(sub)}")
        skew = [(r, b) for r in ok if r["routing"] == "zipf" for b in ok if b["routing"] == "balanced"
                and (b["model"], b["tokens"], b["product"]) == (r["model"], r["tokens"], r["product"])]
        if skew:
            worst = max(skew, key=lambda rb: rb[0]["ms_ours"] / rb[1]["ms_ours"])
            lines.append("zipf / balanced time (ours), worst: "
                         f"{worst[0]['ms_ours'] / worst[1]['ms_ours']:.3f} ({worst[0]['model']} {worst[0]['tokens']} "
                         f"{worst[0]['product']}); torch's there: {worst[0]['ms_torch'] / worst[1]['ms_torch']:.3f}")
    return "\n".join(lines)


def run(models=None, tokens=None, reps=100, rounds=3, json_path=None, seed=0, products=None) -> int:
    import torch

    cases = moe_suite(**{k: v for k, v in dict(models=models, tokens=tokens, products=products).items() if v})
    rows = []
    for i, case in enumerate(cases, 1):
        try:
            row = bench_case(*case, reps=reps, rounds=rounds, seed=seed)
        except Exception as e:  # reported, the run goes on
            row = dict(zip(("model", "tokens", "routing", "product"), case), status=f"ERROR: {type(e).__name__}: {e}"[:160])
        rows.append(row)
        print(f"[{i}/{len(cases)}] {row}", file=sys.stderr, flush=True)
        if json_path:
            with open(json_path, "w") as f:
                json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
    print(format_rows(rows))
    return 0 if all(r.get("status") == "ok" for r in rows) else 1
