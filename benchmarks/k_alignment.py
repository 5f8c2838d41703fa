"""Does a K-major operand's row alignment matter? Times pingpong.matmul and torch.matmul on
a (M, K) @ (N, K)ᵀ bf16 product whose operands are stored (1) contiguous (row stride K) and
(2) as views into buffers with the row stride rounded up to a multiple of 64 elements (128 B),
same values.

    PYTHONPATH=src python benchmarks/k_alignment.py [--shapes M,N,K ...] [--reps 50]
"""

import argparse
import sys

import torch

import pingpong
from pingpong.tools import bench
from pingpong.tools.timing import time_callable


def padded(t: torch.Tensor, multiple: int = 64) -> torch.Tensor:
    """t's values in a buffer whose rows are `multiple` elements apart (a view of its first K)."""
    rows, k = t.shape
    buf = torch.empty(rows, -(-k // multiple) * multiple, device=t.device, dtype=t.dtype)
    buf[:, :k] = t
    return buf[:, :k]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="+", default=["3072,3072,3000", "3072,3072,3072", "6000,2000,3000",
                                                    "8192,8192,3000", "8192,8192,3072"])
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args(argv)
    if bench.skipped_without_gpu():
        return 2
    torch.manual_seed(0)
    print(f"{'shape':<16} {'ours contiguous':>16} {'ours aligned rows':>18} {'cuBLAS contiguous':>18}  (µs)")
    for text in args.shapes:
        M, N, K = (int(v) for v in text.split(","))
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
        ap, wp = padded(a), padded(w)
        t = [1e3 * time_callable(f, args.reps).median_ms for f in
             (lambda: pingpong.matmul(a, w.t()), lambda: pingpong.matmul(ap, wp.t()), lambda: torch.matmul(a, w.t()))]
        print(f"{text:<16} {t[0]:16.1f} {t[1]:18.1f} {t[2]:18.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
