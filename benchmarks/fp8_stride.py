"""Experiment (GPU): the FP8 kernel on operands whose rows are K + PAD bytes apart instead of K.

At 16384³ (row stride 2^14 bytes) every line of a 128-row TMA box has the same low 14 address
bits, and the ~16 CTAs sharing an A panel (8 sharing a B panel) read the same box at about the
same time. If the L2 serves such power-of-two strides from few slices, a padded stride (same
values, same shape, rows K + PAD bytes apart) is faster. Ours on contiguous operands, ours on
padded copies and torch._scaled_mm on the contiguous ones, alternated (quant_common: median of
--rounds rounds of ≥ 100 L2-flushed repetitions, in forward and reversed order by turns).

    python benchmarks/fp8_stride.py block tensor --shapes 16384,16384,16384 8192,8192,8192 --pad 128
"""
import argparse
import statistics

import torch

from pingpong.fp8 import scaled_mm_direct
from pingpong.tools import bench
from pingpong.tools.bench_fp8 import make_fp8_inputs
from quant_common import alternated_times


def padded(x: torch.Tensor, pad: int) -> torch.Tensor:
    """x (R, K) row-major copied into rows K + pad elements apart (the same values)."""
    R, K = x.shape
    return torch.empty(R, K + pad, dtype=x.dtype, device=x.device)[:, :K].copy_(x)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scalings", nargs="*", default=["block"])
    p.add_argument("--shapes", nargs="+", type=bench.parse_shape, default=[(16384, 16384, 16384)])
    p.add_argument("--pad", type=int, default=128, help="elements (bytes for fp8) added to each row's stride")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    for scaling in args.scalings:
        for M, N, K in args.shapes:
            qa, qb, sa, sb = make_fp8_inputs(M, N, K, scaling)
            pa, pb = padded(qa, args.pad), padded(qb.t(), args.pad).t()
            runs = {"ours": lambda: scaled_mm_direct(qa, qb, sa, sb),
                    "ours padded": lambda: scaled_mm_direct(pa, pb, sa, sb),
                    "torch": lambda: torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16)}
            same = torch.equal(runs["ours"](), runs["ours padded"]())
            t = {k: statistics.median(v) for k, v in alternated_times(runs, args.rounds).items()}
            print(f"{scaling} {M}x{N}x{K} pad {args.pad}: ours {t['torch'] / t['ours']:.3f}, padded"
                  f" {t['torch'] / t['ours padded']:.3f} of torch._scaled_mm ({t['ours'] * 1e3:.0f} /"
                  f" {t['ours padded'] * 1e3:.0f} / {t['torch'] * 1e3:.0f} µs); bitwise equal: {same}", flush=True)


if __name__ == "__main__":
    main()
