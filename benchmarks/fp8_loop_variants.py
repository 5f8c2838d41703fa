"""FP8 promoted K-loop variants against torch._scaled_mm on the same tensors, one process,
alternated rounds (GPU): which loop shape pingpong.hopper.fp8_kernel keeps. A variant is a
value of a module switch of pingpong.hopper.fp8_launch read when a plan first compiles; each
variant gets its own plan object (its own compiled kernel and bound launch).

    python benchmarks/fp8_loop_variants.py SWITCH=v1,v2 [--modes block tensor row] [--rounds 3]
                                          [--suite llm]
"""
import argparse
import statistics

import torch

import pingpong.hopper.fp8_launch as fl
from pingpong.runtime import spec as _spec
from pingpong.tools.bench_fp8 import make_fp8_inputs
from pingpong.tools.timing import time_callable

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 28672, 8192), (128, 8192, 8192), (16, 8192, 8192)]

p = argparse.ArgumentParser()
p.add_argument("switch", help="NAME=value,value,... (values: Python literals)")
p.add_argument("--modes", nargs="+", default=["block"])
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--reps", type=int, default=50)
p.add_argument("--suite", help="a named shape list of pingpong.tools.suites instead of the issue's 5 shapes")
args = p.parse_args()
if args.suite:
    from pingpong.tools.suites import suite

    SHAPES = list(suite(args.suite))
name, values = args.switch.split("=")
values = [eval(v) for v in values.split(",")]  # noqa: S307 (a benchmark's own command line)

for mode in args.modes:
    ratios_all = {v: [] for v in values}
    for M, N, K in SHAPES:
        qa, qb, sa, sb = make_fp8_inputs(M, N, K, mode)
        key = _spec.build(qa, qb, out_dtype=torch.bfloat16, bias=None, activation=None, config=None,
                          scales=(sa, sb, False))
        theirs_out = torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16)
        calls = {}
        for v in values:
            setattr(fl, name, v)
            plan = fl.plan(key)

            def ours(plan=plan):
                out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
                plan.run_scaled(qa, qb, sa, sb, out, None)
                return out

            o = ours()
            err = ((o.double() - theirs_out.double()).norm() / theirs_out.double().norm()).item()
            calls[v] = ours
            print(f"{mode} {M}x{N}x{K} {name}={v!r}: rel.diff to torch {err:.2e} ({plan.config})", flush=True)
        theirs = lambda: torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
        ratios = {v: [] for v in values}
        tf = {}
        for _ in range(args.rounds):
            for v in values:
                o = time_callable(calls[v], args.reps).median_ms
                t = time_callable(theirs, args.reps).median_ms
                ratios[v].append(t / o)
                tf[v] = 2 * M * N * K / (o * 1e-3) / 1e12
        for v in values:
            r = statistics.median(ratios[v])
            ratios_all[v].append(r)
            print(f"{mode} {M}x{N}x{K} {name}={v!r}: {tf[v]:.0f} TFLOP/s, {r:.3f} of torch._scaled_mm"
                  f" (rounds {' '.join(f'{x:.3f}' for x in ratios[v])})", flush=True)
    for v in values:
        g = statistics.geometric_mean(ratios_all[v])
        print(f"GEOMEAN {mode} {name}={v!r}: {g:.3f} over {len(SHAPES)} shapes (lowest"
              f" {min(ratios_all[v]):.3f})", flush=True)
