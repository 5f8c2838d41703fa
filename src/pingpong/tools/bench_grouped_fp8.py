"""`pingpong bench --op grouped --dtype fp8 [--fast-accum]`: pingpong.scaled_grouped_mm
against torch._scaled_grouped_mm on the same quantized tensors, the MoE suites' forward
products y = x · w[g]ᵀ (pingpong.tools.suites.MOE_MODELS: Mixtral 8×(4096→14336),
Qwen3-30B-A3B 128×(2048→768), DeepSeek-V3 256×(7168→2048)), balanced and Zipf routing,
row-wise scales (x per token, w per expert and output column), e4m3 in, bf16 out.

Each case is checked first (ours against torch's, relative norm difference ≤ 1e-2 over the
routed rows; the float64 checks are the GPU tests'), then timed: median of ≥ reps L2-flushed
repetitions (pingpong.tools.timing), `rounds` alternations of ours and torch's, ratio =
torch's time / ours (> 1: ours faster), with the spread of the per-round ratios. Where torch
refuses the asked accumulation mode, its other one is timed and the row says so.
"""

from __future__ import annotations

import json
import math
import statistics
import sys

from .suites import MOE_MODELS, MOE_TOKENS, moe_group_sizes

ROUTINGS = ("balanced", "zipf")


def case_tensors(model: str, tokens: int, routing: str, seed: int = 0):
    """(a, b, scale_a, scale_b, offs, group sizes) of one MoE forward product, on the GPU."""
    import torch

    E, top_k, H, inter = MOE_MODELS[model]
    sizes = moe_group_sizes(tokens, E, top_k, routing)
    T = sum(sizes)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    e4m3 = torch.float8_e4m3fn
    a = torch.randn(T, H, generator=gen, device="cuda").to(e4m3)
    w = torch.randn(E, inter, H, generator=gen, device="cuda").to(e4m3)
    sa = torch.rand(T, generator=gen, device="cuda") * H ** -0.5 + 1e-3
    sb = torch.rand(E, inter, generator=gen, device="cuda") + 0.5
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    return a, w.transpose(1, 2), sa, sb, offs, sizes


def bench_case(model: str, tokens: int, routing: str, fast: bool, reps: int, rounds: int, seed: int = 0) -> dict:
    import torch

    import pingpong

    from .timing import time_callable

    a, b, sa, sb, offs, sizes = case_tensors(model, tokens, routing, seed)
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


def format_rows(rows) -> str:
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


def run(models=None, tokens=None, reps=100, rounds=3, json_path=None, seed=0, fast=False) -> int:
    """Every (model, tokens, routing) case; rows to stderr as they finish, the table last;
    `json_path` rewritten after each row. Exit 0 when every case is ok."""
    import torch

    cases = [(m, t, r) for m in (models or MOE_MODELS) for t in (tokens or MOE_TOKENS) for r in ROUTINGS]
    rows = []
    for i, (model, tok, routing) in enumerate(cases, 1):
        try:
            row = bench_case(model, tok, routing, fast, reps, rounds, seed)
        except Exception as e:  # reported; the run goes on
            row = dict(model=model, tokens=tok, routing=routing, fast=fast,
                       status=f"ERROR: {type(e).__name__}: {e}"[:200])
        rows.append(row)
        print(f"[{i}/{len(cases)}] {row}", file=sys.stderr, flush=True)
        if json_path:
            with open(json_path, "w") as f:
                json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
        torch.cuda.empty_cache()
    print(format_rows(rows))
    return 0 if all(r.get("status") == "ok" for r in rows) else 1
