"""Block-wise (and row-wise) FP8 tiles compared in one process against torch._scaled_mm on the
same tensors (GPU): which KernelConfig select_fp8 should take. One line per (shape, config).
`measure` is shared with benchmarks/fp8_swap.py.

    python benchmarks/fp8_configs.py tensor row --shapes 16384,16384,16384 \
        --configs cooperative:128x128x128 cooperative:128x128x128/c2 cooperative:128x64x128
"""
import argparse
import os
import statistics
import sys

import torch

from pingpong import KernelConfig
from pingpong.fp8 import scaled_mm_direct
from pingpong.tools.bench_fp8 import make_fp8_inputs
from pingpong.hopper.fp8_launch import rule_fp8
from pingpong.tools import bench
from pingpong.tools.timing import time_callable

sys.path.insert(0, os.path.dirname(__file__))
from schedules import config_name, parse_config  # noqa: E402

CONFIGS = {
    "coop128x128": KernelConfig(128, 128, 128),
    "coop128x128-g16": KernelConfig(128, 128, 128, group_m=16),
    "coop128x64": KernelConfig(128, 64, 128),
    "pp64x128": KernelConfig(64, 128, 128, schedule="pingpong"),
    "pp64x64": KernelConfig(64, 64, 128, schedule="pingpong"),
}
SHAPES = [(8192, 8192, 8192), (2048, 28672, 8192), (128, 8192, 8192), (16, 8192, 8192)]


def sm_clock() -> str:
    """"MHz W": the SM clock and board power over NVML's last sample period (1/6 to 1 s: the
    timing loop just run), which shows a power-limited clock; "?" where NVML is missing."""
    try:
        return f"{torch.cuda.clock_rate()} {torch.cuda.power_draw() // 1000}"
    except Exception:  # noqa: BLE001 (no NVML bindings)
        return "?"


def measure(scaling, M, N, K, configs):
    """(name, config, µs, ratio to torch._scaled_mm) per (name, config) of `configs` that runs,
    each printed as it is measured: the median of 2 alternated rounds of ≥ 100 repetitions,
    with the SM clock and power after each timing loop (`sm_clock`)."""
    qa, qb, sa, sb = make_fp8_inputs(M, N, K, scaling)
    theirs = lambda: torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
    for name, cfg in configs:
        ours = lambda: scaled_mm_direct(qa, qb, sa, sb, config=cfg)  # noqa: E731
        try:
            ours()
        except Exception as e:  # noqa: BLE001
            print(f"{scaling} {M}x{N}x{K} {name}: {type(e).__name__}: {e}"[:200], flush=True)
            continue
        ratios, us, clocks = [], [], []
        for _ in range(2):
            o = time_callable(ours, 100).median_ms
            clocks.append(sm_clock())
            t = time_callable(theirs, 100).median_ms
            clocks.append(sm_clock())
            ratios.append(t / o)
            us.append(o * 1e3)
        r, u = statistics.median(ratios), statistics.median(us)
        print(f"{scaling} {M}x{N}x{K} {name} ({cfg}): {2 * M * N * K / (u * 1e-6) / 1e12:.0f} TFLOP/s, {u:.1f} us,"
              f" {r:.3f} of torch._scaled_mm; SM MHz, W after ours/torch: {' / '.join(clocks)}", flush=True)
        yield name, cfg, u, r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scalings", nargs="*", default=["block"], help="tensor / row / block")
    p.add_argument("--shapes", nargs="+", type=bench.parse_shape, default=SHAPES)
    p.add_argument("--configs", nargs="+", type=parse_config, default=None,
                   help="explicit configs (benchmarks/schedules.py's notation, e.g. cooperative:128x128x128/c2);"
                        " default: CONFIGS, and the FP8 rule's pick first")
    args = p.parse_args(argv)
    for scaling in args.scalings:
        for M, N, K in args.shapes:
            rule = rule_fp8(M, N, K, True, torch.cuda.get_device_properties(0).multi_processor_count, scaling)
            if args.configs:
                configs = [("rule", rule)] + [(config_name(c), c) for c in args.configs if c != rule]
            else:
                configs = [(n, c) for n, c in CONFIGS.items() if not (M > 128 and c.block_m == 64 and c.block_n == 64)]
            for _ in measure(scaling, M, N, K, configs):
                pass


if __name__ == "__main__":
    main()
