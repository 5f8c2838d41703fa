"""Hardware counters of pingpong's kernel and cuBLAS's on the same operands, under Nsight Compute.

    ncu --profile-from-start off --clock-control none --cache-control all --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors.sum \
        python benchmarks/ncu_compare.py --shapes 128,4096,4096 3000,3000,3000 [--configs ...]

For each shape (bf16, a @ wᵀ as in `pingpong bench`; with --scaling S, FP8 operands quantized
with S's scales, ours `scaled_mm` against torch._scaled_mm), after warm-up calls, the profiled range
holds one pingpong.matmul call (the config `select_config` picks, or each of --configs in the
notation of benchmarks/schedules.py), with --portable one call of the plain-Triton kernel
(pointer loads, no TMA), and then one torch.matmul call, so ncu's rows come in that order: ours
(one row per config), portable, cuBLAS, next shape. ncu's cache control flushes the caches
before every kernel, as `pingpong bench` does. The script prints which rows are which.
"""

import argparse
import sys

import torch

from pingpong.tools import bench
from pingpong import matmul
from pingpong.api import matmul_tiled
from pingpong.hopper.host.select import choose
from pingpong.portable import portable_gemm

sys.path.insert(0, __import__("os").path.dirname(__file__))
from schedules import parse_config  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", type=bench.parse_shape, required=True)
    p.add_argument("--configs", nargs="*", type=parse_config, default=[])
    p.add_argument("--portable", action="store_true", help="also the plain-Triton kernel (no TMA)")
    p.add_argument("--scaling", choices=("tensor", "row", "block"), help="FP8: scaled_mm vs torch._scaled_mm")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    for M, N, K in args.shapes:
        calls = fp8_calls(M, N, K, args.scaling, args.configs) if args.scaling else bf16_calls(M, N, K, args)
        for _ in range(3):
            for _, fn in calls:
                fn()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for _, fn in calls:
            fn()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        for name, _ in calls:
            print(f"row: {M}x{N}x{K} {name}", file=sys.stderr)
    return 0


def fp8_calls(M, N, K, scaling, configs):
    """(name, call): ours with each config (or the rule's), then torch._scaled_mm."""
    from pingpong.fp8 import scaled_mm_direct
    from pingpong.tools.bench_fp8 import make_fp8_inputs

    qa, qb, sa, sb = make_fp8_inputs(M, N, K, scaling)
    calls = [(c.name() if c else "rule", lambda c=c: scaled_mm_direct(qa, qb, sa, sb, config=c))
             for c in configs or [None]]
    return calls + [("cuBLASLt", lambda: torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16))]


def bf16_calls(M, N, K, args):
    """(name, call): ours (each of --configs, or the rule's pick), --portable, then cuBLAS."""
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    calls = ([(c.name(), lambda c=c: matmul_tiled(a, w.t(), c)) for c in args.configs]
             or [(f"select: {choose(M, N, K, device=a.device)[0].name()}", lambda: matmul(a, w.t()))])
    if args.portable:
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        calls.append(("portable", lambda: portable_gemm(a, w.t(), out)))
    calls.append(("cuBLAS", lambda: torch.matmul(a, w.t())))
    return calls


if __name__ == "__main__":
    sys.exit(main())
