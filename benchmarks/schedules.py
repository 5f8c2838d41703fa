"""Compare Hopper schedules/configs against cuBLAS in one process (the ablation's raw data).

    PYTHONPATH=src python benchmarks/schedules.py --shapes 8192,8192,8192 --configs \
        persistent:128x256x64 cooperative:128x256x64 pingpong:128x128x64

Each config is checked, then timed with the harness of `pingpong bench` (same method); with
--dtype fp8 --scaling S, an FP8 product (pingpong.scaled_mm's direct path, e4m3, promoted)
against torch._scaled_mm (pingpong.tools.bench_fp8). A plan gives each shape its own configs:

    PYTHONPATH=src python benchmarks/schedules.py --plan benchmarks/data/midrows_streamk_plan.json --rounds 2
        (mid-row shapes: the selection's pick, data-parallel and stream-K tiles)
"""

import argparse
import json
import re
import sys
import types

from pingpong import KernelConfig, api
from pingpong.tools import bench
from pingpong.tools.bench_fp8 import bench_fp8_shape


def config_api(config: KernelConfig):
    """A stand-in for pingpong.api whose matmul runs one explicit config."""
    return types.SimpleNamespace(path_for=lambda a, b: config.name(),
                                 matmul=lambda a, b: api.matmul_tiled(a, b, config))


def parse_config(text: str) -> KernelConfig:
    """SCHEDULE:BMxBNxBK[/sSTAGES][/gGROUP_M][/eEPILOGUE_N][/nINSTR_N][/kSPLIT_K][/swap][/cCLUSTER_M][/sk],
    e.g. pingpong:128x128x64/s4/g8/e32, cooperative:128x16x64/k2/swap, pingpong:128x128x64/c2 or
    cooperative:128x128x64/sk (stream-K)."""
    m = re.fullmatch(r"(\w+):(\d+)x(\d+)x(\d+)(?:/s(\d+))?(?:/g(\d+))?(?:/e(\d+))?(?:/n(\d+))?(?:/k(\d+))?"
                     r"(/swap)?(?:/c(\d+))?(/sk)?", text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"--configs: expected SCHEDULE:BMxBNxBK[/sS][/gG][/eE][/nN][/kSPLIT][/swap][/cC][/sk], got {text!r}")
    sched, bm, bn, bk, stages, group, epi, instr, split, swap, cluster, stream = m.groups()
    return KernelConfig(int(bm), int(bn), int(bk), stages=int(stages) if stages else None, schedule=sched,
                        group_m=int(group) if group else 8, epilogue_n=int(epi) if epi else None,
                        instr_n=int(instr) if instr else None, split_k=int(split) if split else 1,
                        swap_ab=bool(swap), cluster_m=int(cluster) if cluster else 1, stream_k=bool(stream))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", type=bench.parse_shape, default=[(8192, 8192, 8192)])
    p.add_argument("--configs", nargs="+", type=parse_config, default=[])
    p.add_argument("--plan", help="a JSON list of [M, N, K, [config, ...]]: each shape with its own configs "
                                  "(instead of --shapes × --configs)")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--dtype", default="bf16", help="bf16 (default), fp16, or fp8 (--scaling)")
    p.add_argument("--scaling", default="row", choices=("tensor", "row", "block"), help="--dtype fp8: the scales")
    p.add_argument("--rounds", type=int, default=3, help="alternate ours and cuBLAS this many times")
    p.add_argument("--json", help="rewrite this JSON file with every row so far after each row")
    args = p.parse_args(argv)
    settings = bench.Settings(shapes=args.shapes, dtype=args.dtype, layout="nt", reps=args.reps, rounds=args.rounds,
                              scaling=args.scaling)
    rows = []
    if args.plan:
        with open(args.plan) as f:
            pairs = [((m, n, k), [parse_config(c) for c in cfgs]) for m, n, k, cfgs in json.load(f)]
    elif args.configs:
        pairs = [(shape, args.configs) for shape in args.shapes]
    else:
        p.error("give --configs or --plan")
    total = sum(len(cfgs) for _, cfgs in pairs)
    for shape, configs in pairs:
        for cfg in configs:
            if args.dtype == "fp8":
                row = bench_fp8_shape(*shape, settings, config=cfg)
            else:
                row = bench.bench_shape(*shape, settings, config_api(cfg))
            print(bench._progress(len(rows) + 1, total, row, 0), file=sys.stderr)
            rows.append(row)
            if args.json:
                bench.write_json(args.json, rows, bench.environment_header(settings))
    print(bench.format_table(rows, bench.environment_header(settings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
