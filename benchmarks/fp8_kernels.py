"""Which kernel torch._scaled_mm (cuBLASLt) runs for an FP8 shape, next to ours (GPU): the
kernel names (cuBLAS's name its tile, cluster and schedule in their first 60 characters) and
each one's GPU time per call, from breakdown.py's profile over 5 calls on the same quantized
tensors (back to back: the operands stay in L2 when they fit). --configs: ours with each of
these configs (benchmarks/schedules.py's notation) instead of the rule's; --fast-accum: both
with use_fast_accum=True.

    python benchmarks/fp8_kernels.py tensor row block --shapes 8192,8192,8192 16384,16384,16384
    python benchmarks/fp8_kernels.py tensor --shapes 1,4096,4096 --configs pingpong:64x16x128/swap
"""
import argparse
import os
import sys

import torch

from pingpong.fp8 import scaled_mm_direct
from pingpong.tools import bench
from pingpong.tools.bench_fp8 import make_fp8_inputs

sys.path.insert(0, os.path.dirname(__file__))
from breakdown import profile_calls  # noqa: E402
from schedules import config_name, parse_config  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scalings", nargs="*", default=["tensor"], help="tensor / row / block")
    p.add_argument("--shapes", nargs="+", type=bench.parse_shape, default=[(8192, 8192, 8192)])
    p.add_argument("--configs", nargs="+", type=parse_config, default=[None])
    p.add_argument("--fast-accum", action="store_true")
    args = p.parse_args()
    fast = args.fast_accum
    for M, N, K in args.shapes:
        for scaling in args.scalings:
            qa, qb, sa, sb = make_fp8_inputs(M, N, K, scaling)
            calls = [("torch", lambda: torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast))]
            calls += [(f"ours {config_name(c) if c else 'rule'}",
                       lambda c=c: scaled_mm_direct(qa, qb, sa, sb, use_fast_accum=fast, config=c)) for c in args.configs]
            for who, fn in calls:
                for name, us in profile_calls(fn, 5)[0].items():
                    tf = 2 * M * N * K / (us * 1e-6) / 1e12
                    print(f"{scaling} {M}x{N}x{K} {who}: {us:9.1f} us {tf:6.0f} TFLOP/s  {name}", flush=True)


if __name__ == "__main__":
    main()
