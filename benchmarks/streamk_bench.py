"""Stream-K against the current pick and cuBLAS on mid-row shapes, alternated rounds in one
process (pingpong.tools.timing: L2 flushed, median of ≥ REPS repetitions per round; the
reported number is the median over rounds).

    PYTHONPATH=src python benchmarks/streamk_bench.py [--rounds 3] [--fp8 row] [--json out.json] [M×N×K ...]

For each shape: `pick` (select_config on this GPU: its table or the heuristic), the stream-K
configs of `candidates`, and torch.matmul on the same tensors (bf16, layout nt: b = wᵀ).
--fp8 SCALING (tensor | row | block) adds a second row per shape: the FP8 pick (select_fp8),
the FP8 stream-K configs, the data-parallel tiles select_fp8 chooses between and a 2-way split,
and torch._scaled_mm on the same quantized operands (baseline of that row's ratios). Every config's output is checked against its baseline first (relative
Frobenius error) before timing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

SHAPES = [(589, 8192, 8192), (124, 9216, 7168), (284, 40960, 7168), (800, 3072, 3072), (1922, 3584, 3584)]
REPS = 30


def candidates():
    from pingpong import KernelConfig

    return {
        "sk 128x256": KernelConfig(128, 256, 64, stream_k=True),
        "sk 128x128": KernelConfig(128, 128, 64, stream_k=True),
        "sk pp 64x128": KernelConfig(64, 128, 64, schedule="pingpong", stream_k=True),
    }


def fp8_candidates():
    from pingpong import KernelConfig

    return {
        "sk 128x128": KernelConfig(128, 128, 128, stream_k=True),
        "sk pp 64x128": KernelConfig(64, 128, 128, schedule="pingpong", stream_k=True),
        # the data-parallel tiles select_fp8 chooses between (a config a scaling refuses is reported, not timed)
        "128x128": KernelConfig(128, 128, 128),
        "128x64": KernelConfig(128, 64, 128),
        "128x192": KernelConfig(128, 192, 128),
        "pp 64x128": KernelConfig(64, 128, 128, schedule="pingpong"),
        "128x128 k2": KernelConfig(128, 128, 128, split_k=2),
    }


def fp8_row(M, N, K, scaling, dev):
    """(calls, configs) of one FP8 row: torch._scaled_mm first (the row's baseline), the pick, stream-K."""
    import torch

    import pingpong
    from pingpong.fp8 import scaled_mm_direct
    from pingpong.hopper.host.fp8_launch import select_fp8

    gran = {"tensor": ("tensor", "tensor"), "row": ("row", "row"), "block": ("block", "block128x128")}[scaling]
    a = torch.randn(M, K, device="cuda").bfloat16()
    w = torch.randn(N, K, device="cuda").bfloat16()
    qa, sa = pingpong.quantize_fp8(a, gran[0])
    qw, sw = pingpong.quantize_fp8(w, gran[1])
    qb, sb = qw.t(), sw.t()
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    pick = select_fp8(M, N, K, True, sms, torch.cuda.get_device_name(dev), scaling)
    base = {"torch._scaled_mm": lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)}
    configs = {f"fp8 {scaling} pick": pick, **{f"fp8 {n}": c for n, c in fp8_candidates().items()}}
    fns = {n: (lambda c=c: scaled_mm_direct(qa, qb, sa, sb, config=c)) for n, c in configs.items()}
    return base, fns, configs


def checked_fp8(M, N, K, base, fns):
    """The FP8 row's calls: the baseline, then each config whose result is within 1e-2 of it
    (relative norm); a config this shape cannot take or a wrong result is reported, not timed."""
    row = dict(base)
    want = next(iter(base.values()))().float()
    for name, fn in fns.items():
        try:
            got = fn().float()
        except Exception as e:  # noqa: BLE001 (a config this shape cannot take: say so, time the rest)
            print(f"{M}×{N}×{K} {name}: {e}", flush=True)
            continue
        err = ((got - want).norm() / want.norm()).item()
        if err < 1e-2:
            row[name] = fn
        else:
            print(f"{M}×{N}×{K} {name}: relative error {err:.3g}, not timed", flush=True)
    return row


def main(argv=None) -> int:
    import torch
    import triton

    from pingpong.api import _gemm_into
    from pingpong.hopper.host.select import choose
    from pingpong.tools.bench import make_inputs, sm_clock
    from pingpong.tools.timing import time_callable

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("shapes", nargs="*", help="M×N×K (default: SHAPES, five mid-row shapes)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json")
    p.add_argument("--fp8", choices=("tensor", "row", "block"), help="also FP8 with these scales vs torch._scaled_mm")
    p.add_argument("--fp8-only", action="store_true", help="with --fp8: the FP8 rows alone")
    args = p.parse_args(argv)
    shapes = [tuple(int(x) for x in s.replace("x", "×").split("×")) for s in args.shapes] or SHAPES
    dev = torch.cuda.current_device()
    header = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "triton": triton.__version__,
              "SM clock": sm_clock(dev), "method": f"bf16 nt, queued_bench median of >= {REPS} reps per round,"
              f" median of {args.rounds} alternated rounds"}
    print(header, flush=True)
    calls = {}
    for M, N, K in shapes:
        if args.fp8_only and args.fp8:
            base, fns, fconfigs = fp8_row(M, N, K, args.fp8, dev)
            calls[(M, N, K, "fp8")] = (checked_fp8(M, N, K, base, fns), {n: str(c) for n, c in fconfigs.items()})
            continue
        a, b = make_inputs(M, N, K, torch.bfloat16, "nt", device="cuda")
        ref = torch.matmul(a, b)
        pick, source = choose(M, N, K, device=dev)
        configs = {f"pick ({'table' if source != 'heuristic' else 'heuristic'})": pick, **candidates()}
        row = {"cuBLAS": lambda a=a, b=b: torch.matmul(a, b)}
        for name, config in configs.items():
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            fn = lambda out=out, a=a, b=b, config=config: _gemm_into(out, a, b, None, 1.0, 0.0, config)  # noqa: E731
            fn()
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            if not err < 1e-2:
                print(f"{M}×{N}×{K} {name}: relative error {err:.3g}, not timed", flush=True)
                continue
            row[name] = fn
        calls[(M, N, K)] = (row, {name: str(c) for name, c in configs.items()})
        if args.fp8:
            base, fns, fconfigs = fp8_row(M, N, K, args.fp8, dev)
            calls[(M, N, K, "fp8")] = (checked_fp8(M, N, K, base, fns), {n: str(c) for n, c in fconfigs.items()})
    times = {shape: {name: [] for name in row} for shape, (row, _) in calls.items()}
    for r in range(args.rounds):
        for shape, (row, _) in calls.items():
            for name, fn in row.items():
                times[shape][name].append(time_callable(fn, REPS).median_ms * 1e3)
        print(f"round {r + 1} done", flush=True)
    results = []
    for key, per in times.items():
        M, N, K = key[:3]
        baseline = next(iter(per))  # cuBLAS, or torch._scaled_mm on an FP8 row
        cublas = statistics.median(per[baseline])
        line = [f"{M}×{N}×{K}" + (" fp8" if len(key) > 3 else ""), f"{baseline} {cublas:.1f} µs"]
        for name, ts in per.items():
            if name != baseline:
                us = statistics.median(ts)
                line.append(f"{name} {us:.1f} µs ({cublas / us:.3f})")
        print(" | ".join(line), flush=True)
        results.append({"shape": [M, N, K], "fp8": args.fp8 if len(key) > 3 else None,
                        "us": {n: statistics.median(ts) for n, ts in per.items()},
                        "rounds_us": per, "configs": calls[key][1]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
