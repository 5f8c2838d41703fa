"""`pingpong bench --op grouped --dtype fp8 [--fast-accum] [--scaling row|block]`:
pingpong.scaled_grouped_mm on the MoE suites' forward products y = x · w[g]ᵀ
(pingpong.tools.suites.MOE_MODELS: Mixtral 8×(4096→14336), Qwen3-30B-A3B 128×(2048→768),
DeepSeek-V3 256×(7168→2048)), balanced and Zipf routing, e4m3 in, bf16 out.

--scaling row (default): row-wise scales (x per token, w per expert and output column),
against torch._scaled_grouped_mm on the same quantized tensors.

--scaling block: DeepSeek-V3's block-wise scales (x per token and 128-deep K block, w per
128×128 block of each expert; random positive values in quantize_fp8's layouts). torch has no
block-wise grouped product on Hopper (torch._scaled_grouped_mm takes row-wise scales), so
the peers are (a) our row-wise grouped kernel on the same shapes (row-wise scales of the
same tensors, promoted accumulation: what block scaling costs over row scaling), and (b) a
loop over the groups of torch._scaled_mm with block scales where this torch accepts them for
every group (torch 2.11 does for the balanced MoE cases), else of pingpong.scaled_mm
block-wise (the row's "loop" column says which: "torch" or "pingpong"). The loop gets
per-group scale tensors in the layout the dense call wants (scale_a's rows of the group,
outer-dim-major), made before the timing; empty groups are skipped. use_fast_accum is
ignored block-wise (the scales apply at the promotion).

--products train: an MoE block's experts, forward and backward (gate_up = x·w1[g]ᵀ, h =
silu(gate)·up, y = h·w2[g]ᵀ, then y.backward(dY): dX, dw1, dw2), with
pingpong.fp8_grouped_training.fp8_grouped_linear (each recipe of TRAIN_RECIPES: "row_gw_hp",
row-wise with the weight gradient in bf16; "row" and "block", FP8 weight gradients) against
the same block on pingpong.grouped_mm in bf16 (`run_training`; default: Qwen3-30B-A3B and
DeepSeek-V3 at 8192 tokens). The routed rows come sorted (the permutation and the routing
weights are the same work in both and left out); FP8's time includes every quantization
(x, dY, both weights, the weights' transposed copies for dX). The "kept" columns time each
recipe's step inside `keep_quantized_weights` after the block's first micro-batch: a
gradient-accumulation micro-batch whose weights' FP8 copies are kept (module
pingpong.kept). Checked first: y, dX and dw2 of FP8 against bf16's, relative
norm difference ≤ 0.1 (two e4m3 products in a row: ~6%).

Each case is checked first (row: ours against torch's; block: ours against the loop's
result; relative norm difference ≤ 1e-2 over the routed rows; the float64 checks are the
GPU tests'), then timed: median of ≥ reps L2-flushed repetitions (pingpong.tools.timing),
`rounds` alternations of ours and the peers, ratio = peer's time / ours (> 1: ours faster),
with the spread of the per-round ratios. Where torch refuses the asked accumulation mode,
its other one is timed and the row says so.
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


def block_case_tensors(model: str, tokens: int, routing: str, seed: int = 0):
    """(a, b, (scale_a, scale_b) block-wise, (scale_a, scale_b) row-wise, offs, sizes) of one
    MoE forward product: random e4m3 operands (as case_tensors: the weights of DeepSeek-V3 are
    3.8·10⁹ elements, past what one quantize_fp8 call indexes) and random positive scales in
    the block-wise layouts (scale_a (T, K/128) outer-dim-major, scale_b (E, N/128, K/128)) and
    the row-wise ones."""
    import torch

    from ..runtime.spec import SCALE_BLOCK

    E, top_k, H, inter = MOE_MODELS[model]
    a, b, sa_row, sb_row, offs, sizes = case_tensors(model, tokens, routing, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    T, kb = a.shape[0], H // SCALE_BLOCK
    sa = (torch.rand(kb, T, generator=gen, device="cuda") * H ** -0.5 + 1e-3).t()
    sb = torch.rand(E, inter // SCALE_BLOCK, kb, generator=gen, device="cuda") + 0.5
    return a, b, (sa, sb), (sa_row, sb_row), offs, sizes


def group_loop(a, b, sa, sb, sizes):
    """(name, fn) of the per-group loop of dense block-wise products: torch._scaled_mm where it
    accepts block scales for every group's shape (tried on each once: torch 2.11's cuBLAS path
    refused some Zipf-routed group sizes with CUBLAS_STATUS_NOT_SUPPORTED), else
    pingpong.scaled_mm for all of them."""
    import torch

    import pingpong

    calls, start = [], 0
    for g, n in enumerate(sizes):
        if n:
            s_a = sa[start:start + n].t().contiguous().t()  # (n, K/128), strides (1, n): the dense layout
            calls.append((a[start:start + n], b[g], s_a, sb[g].t()))
        start += n
    try:
        for c in calls:
            torch._scaled_mm(*c, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        name, mm = "torch", lambda x, w, s, t: torch._scaled_mm(x, w, s, t, out_dtype=torch.bfloat16)  # noqa: E731
    except (RuntimeError, ValueError, TypeError, NotImplementedError):
        name, mm = "pingpong", pingpong.scaled_mm
    return name, lambda: [mm(*c) for c in calls]


def bench_block_case(model: str, tokens: int, routing: str, reps: int, rounds: int, seed: int = 0) -> dict:
    """Block-wise scaled_grouped_mm against our row-wise kernel and the per-group loop (module docstring)."""
    import torch

    import pingpong

    from .timing import time_callable

    a, b, (sa, sb), (sa_r, sb_r), offs, sizes = block_case_tensors(model, tokens, routing, seed)
    loop_name, loop_fn = group_loop(a, b, sa, sb, sizes)
    row = dict(model=model, tokens=tokens, routing=routing, fast=False, scaling="block", loop=loop_name,
               rows=sum(sizes), largest=max(sizes), empty=sizes.count(0))
    ours_fn = lambda: pingpong.scaled_grouped_mm(a, b, sa, sb, offs)  # noqa: E731
    rowwise_fn = lambda: pingpong.scaled_grouped_mm(a, b, sa_r, sb_r, offs)  # noqa: E731
    ours, theirs = ours_fn().float(), torch.cat(loop_fn()).float()
    err = ((ours - theirs).norm() / theirs.norm().clamp_min(1e-30)).item()
    row["rel_diff"] = err
    if not err <= 1e-2:
        return dict(row, status="FAILED")
    del ours, theirs
    t_o, t_r, t_l = [], [], []
    for _ in range(rounds):
        t_o.append(time_callable(ours_fn, reps).median_ms)
        t_r.append(time_callable(rowwise_fn, reps).median_ms)
        t_l.append(time_callable(loop_fn, reps).median_ms)
    ms_o = statistics.median(t_o)
    flop = 2.0 * sum(sizes) * a.shape[1] * b.shape[2]
    return dict(row, status="ok", ms_ours=ms_o, ms_row=statistics.median(t_r), ms_loop=statistics.median(t_l),
                tf_ours=flop / ms_o * 1e-9, ratio_row=statistics.median(t_r) / ms_o,
                ratio_loop=statistics.median(t_l) / ms_o,
                row_spread=(min(r / o for o, r in zip(t_o, t_r)), max(r / o for o, r in zip(t_o, t_r))),
                loop_spread=(min(lp / o for o, lp in zip(t_o, t_l)), max(lp / o for o, lp in zip(t_o, t_l))))


def _case(r) -> str:
    """A row's first columns: model, tokens, routing."""
    return f"{r['model']:<14} {r['tokens']:>6} {r['routing']:<8}"


def _stats(values) -> str:
    """geomean, count and min of ratios, as the tables' summary lines give them."""
    return f"{math.exp(sum(map(math.log, values)) / len(values)):.3f} over {len(values)}, min {min(values):.3f}"


def format_block_rows(rows) -> str:
    head = (f"{'model':<14} {'tokens':>6} {'routing':<8} {'ours TF':>8} {'ms':>8} {'row/ours':>8} {'spread':>11}"
            f" {'loop':<8} {'loop/ours':>9} {'spread':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"{_case(r)} {r.get('status')} {r.get('rel_diff', '')}")
            continue
        (rl, rh), (ll, lh) = r["row_spread"], r["loop_spread"]
        lines.append(f"{_case(r)} {r['tf_ours']:>8.1f} {r['ms_ours']:>8.3f}"
                     f" {r['ratio_row']:>8.3f} {rl:.3f}-{rh:.3f} {r['loop']:<8} {r['ratio_loop']:>9.3f}"
                     f" {ll:.3f}-{lh:.3f}")
    ok = [r for r in rows if r.get("status") == "ok"]
    for key, what in (("ratio_row", "row-wise grouped / block-wise"), ("ratio_loop", "per-group loop / block-wise")):
        sub = [r[key] for r in ok]
        if sub:
            lines.append(f"{what}: geomean {_stats(sub)}")
    return "\n".join(lines)


def format_rows(rows) -> str:
    head = (f"{'model':<14} {'tokens':>6} {'routing':<8} {'accum':<8} {'ours TF':>8} {'torch TF':>8} {'ratio':>6}"
            f" {'spread':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        acc = ("fast" if r["fast"] else "promoted") + ("*" if r.get("torch_fast", r["fast"]) != r["fast"] else "")
        if r.get("status") != "ok":
            lines.append(f"{_case(r)} {acc:<8} {r.get('status')} {r.get('rel_diff', '')}")
            continue
        lines.append(f"{_case(r)} {acc:<8} {r['tf_ours']:>8.1f}"
                     f" {r['tf_torch']:>8.1f} {r['ratio']:>6.3f} {r['lo']:.3f}-{r['hi']:.3f}")
    ok = [r for r in rows if r.get("status") == "ok"]
    for fast in (False, True):
        sub = [r["ratio"] for r in ok if r["fast"] == fast]
        if sub:
            lines.append(f"{'fast' if fast else 'promoted'}: geomean ratio (torch / ours) {_stats(sub)}")
    if any(r.get("torch_fast", r["fast"]) != r["fast"] for r in ok):
        lines.append("*: torch refused this accumulation mode; its other one was timed")
    return "\n".join(lines)


def run(models=None, tokens=None, reps=100, rounds=3, json_path=None, seed=0, fast=False, scaling="row") -> int:
    """Every (model, tokens, routing) case; rows to stderr as they finish, the table last;
    `json_path` rewritten after each row. Exit 0 when every case is ok. `scaling` "row" or
    "block" (module docstring)."""
    cases = [(m, t, r) for m in (models or MOE_MODELS) for t in (tokens or MOE_TOKENS) for r in ROUTINGS]
    if scaling == "block":
        return _run_cases(cases, lambda m, t, r: bench_block_case(m, t, r, reps, rounds, seed), format_block_rows,
                          json_path, fast=fast)
    return _run_cases(cases, lambda m, t, r: bench_case(m, t, r, fast, reps, rounds, seed), format_rows, json_path,
                      fast=fast)


def _run_cases(cases, measure, table, json_path, **fields) -> int:
    """measure(model, tokens, routing) of each case (an exception is the case's ERROR row, with
    `fields`); rows to stderr as they finish, table(rows) last; `json_path` rewritten after each
    row. Exit 0 when every case is ok."""
    import torch

    rows = []
    for i, (model, tok, routing) in enumerate(cases, 1):
        try:
            row = measure(model, tok, routing)
        except Exception as e:  # reported; the run goes on
            row = dict(model=model, tokens=tok, routing=routing, **fields,
                       status=f"ERROR: {type(e).__name__}: {e}"[:200])
        rows.append(row)
        print(f"[{i}/{len(cases)}] {row}", file=sys.stderr, flush=True)
        if json_path:
            with open(json_path, "w") as f:
                json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
        torch.cuda.empty_cache()
    print(table(rows))
    return 0 if all(r.get("status") == "ok" for r in rows) else 1

#: --products train's defaults: the DeepSeek-V3- and Qwen3-30B-A3B-shaped experts at 8192 tokens
TRAIN_MODELS, TRAIN_TOKENS = ("qwen3-30b-a3b", "deepseek-v3"), (8192,)


def train_case_tensors(model: str, tokens: int, routing: str, seed: int = 0):
    """(x, w1, w2, dY, offs, sizes): the routed rows (T, H) sorted by expert, the experts' gate-up
    (E, 2I, H) and down (E, H, I) weights (transformers' layout), all bf16 and requiring grad
    but dY."""
    import torch

    E, top_k, H, inter = MOE_MODELS[model]
    sizes = moe_group_sizes(tokens, E, top_k, routing)
    T = sum(sizes)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(T, H, generator=gen, **bf16).requires_grad_()
    w1 = (torch.randn(E, 2 * inter, H, generator=gen, **bf16) * H ** -0.5).requires_grad_()
    w2 = (torch.randn(E, H, inter, generator=gen, **bf16) * inter ** -0.5).requires_grad_()
    g = torch.randn(T, H, generator=gen, **bf16)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    return x, w1, w2, g, offs, sizes


def _rel_diff(a, b) -> float:
    """‖a − b‖ / ‖b‖ in fp32, a slab of rows at a time (DeepSeek-V3's expert gradients are 7.5·10⁹
    elements: no fp32 copy of the whole)."""
    num = den = 0.0
    for x, y in zip(a.flatten(0, -2).split(1 << 14), b.flatten(0, -2).split(1 << 14)):
        y = y.float()
        num += (x.float() - y).square().sum().item()
        den += y.square().sum().item()
    return (num / max(den, 1e-60)) ** 0.5


#: --products train's FP8 columns: each recipe the grouped path serves, then each again with the
#: weights' FP8 copies kept (a micro-batch after the first inside keep_quantized_weights)
TRAIN_RECIPES = ("row_gw_hp", "row", "block")
KEPT = tuple(f"kept {r}" for r in TRAIN_RECIPES)


def bench_training_case(model: str, tokens: int, routing: str, reps: int, rounds: int, seed: int = 0) -> dict:
    """The experts' forward + backward, FP8 (each of TRAIN_RECIPES) against bf16 grouped_mm
    (module docstring), the products timed in turn each round."""
    import torch
    import torch.nn.functional as F

    import pingpong
    from pingpong.fp8_grouped_training import fp8_grouped_linear
    from pingpong.kept import keep_quantized_weights

    from .timing import time_callable

    x, w1, w2, g, offs, sizes = train_case_tensors(model, tokens, routing, seed)
    row = dict(model=model, tokens=tokens, routing=routing, rows=sum(sizes), largest=max(sizes),
               empty=sizes.count(0))
    products = {"bf16": lambda a, w: pingpong.grouped_mm(a, w.transpose(1, 2), offs)}
    for recipe in TRAIN_RECIPES:
        products[recipe] = lambda a, w, recipe=recipe: fp8_grouped_linear(a, w, offs, recipe)

    def step(project):
        x.grad = w1.grad = w2.grad = None
        gate, up = project(x, w1).chunk(2, dim=-1)
        y = project((F.silu(gate) * up).contiguous(), w2)
        y.backward(g)
        return y

    step(products["bf16"])
    want = [t.detach().clone() for t in (x.grad, w1.grad, w2.grad)]
    for recipe in TRAIN_RECIPES:  # dX, dw1, dw2 of each recipe against bf16's
        step(products[recipe])
        row[f"rel_{recipe}"] = max(_rel_diff(a, b) for a, b in zip((x.grad, w1.grad, w2.grad), want))
    del want
    x.grad = w1.grad = w2.grad = None
    row["rel_diff"] = max(row[f"rel_{r}"] for r in TRAIN_RECIPES)
    if not row["rel_diff"] <= 1e-1:
        return dict(row, status="FAILED")
    times = {name: [] for name in (*products, *KEPT)}
    experts = torch.nn.ParameterList([w1, w2])  # Parameters sharing w1's and w2's storage
    for _ in range(rounds):
        for name, project in products.items():
            times[name].append(time_callable(lambda: step(project), reps).median_ms)
        for recipe in TRAIN_RECIPES:
            with keep_quantized_weights(experts):
                step(products[recipe])  # the block's first micro-batch makes the copies
                times[f"kept {recipe}"].append(time_callable(lambda: step(products[recipe]), reps).median_ms)
    flop = 3 * 2.0 * sum(sizes) * (w1.shape[1] * w1.shape[2] + w2.shape[1] * w2.shape[2])  # 3 products each
    ms_b = statistics.median(times["bf16"])
    row.update(status="ok", ms_bf16=ms_b, tf_bf16=flop / ms_b * 1e-9)
    for name in (*TRAIN_RECIPES, *KEPT):
        per_round = [b / f for b, f in zip(times["bf16"], times[name])]
        ms = statistics.median(times[name])
        row.update({f"ms_{name}": ms, f"ratio_{name}": ms_b / ms, f"lo_{name}": min(per_round),
                    f"hi_{name}": max(per_round)})
    return row


def format_training_rows(rows) -> str:
    names = (*TRAIN_RECIPES, *KEPT)
    head = f"{'model':<14} {'tokens':>6} {'routing':<8} {'rows':>6} {'bf16 ms':>8}" + "".join(
        f" {n + ' ms':>12} {'bf16/' + n:>14} {'spread':>11}" for n in names)
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"{_case(r)} {r.get('status')} {r.get('rel_diff', '')}")
            continue
        lines.append(f"{_case(r)} {r['rows']:>6} {r['ms_bf16']:>8.3f}" + "".join(
            f" {r['ms_' + n]:>12.3f} {r['ratio_' + n]:>14.3f} {r['lo_' + n]:.3f}-{r['hi_' + n]:.3f}" for n in names))
    ok = [r for r in rows if r.get("status") == "ok"]
    for n in names:
        if ok:
            what = f"FP8 {n}" if n in TRAIN_RECIPES else f"FP8 {n.split()[1]}, the weights' FP8 copies kept"
            lines.append(f"MoE experts forward + backward, {what} vs bf16 grouped_mm: geomean"
                         f" {_stats([r['ratio_' + n] for r in ok])}")
    return "\n".join(lines)


def run_training(models=None, tokens=None, reps=20, rounds=3, json_path=None, seed=0) -> int:
    """--products train: every (model, tokens, routing) case of `bench_training_case`, one table
    last (`_run_cases`). Exit 0 when every case is ok."""
    cases = [(m, t, r) for m in (models or TRAIN_MODELS) for t in (tokens or TRAIN_TOKENS) for r in ROUTINGS]
    return _run_cases(cases, lambda m, t, r: bench_training_case(m, t, r, reps, rounds, seed), format_training_rows,
                      json_path)
