"""FP8 swap-AB against the FP8 rule's pick at decode shapes (GPU): each of ours as a ratio to
torch._scaled_mm on the same tensors in the same process, alternated rounds (median of 2
rounds of ≥ 100 L2-flushed repetitions each). One line per (scaling, shape, config), a table
last. Whether select_fp8 should take swap-AB at small M.

    python benchmarks/fp8_swap.py [tensor] [row]
"""
import statistics
import sys

import torch

from pingpong import KernelConfig
from pingpong.fp8 import scaled_mm_direct
from pingpong.hopper.fp8_launch import select_fp8
from pingpong.tools.bench_fp8 import make_fp8_inputs
from pingpong.tools.timing import time_callable

SHAPES = [(1, 4096, 4096), (16, 6144, 4096), (1, 4096, 14336), (16, 28672, 4096), (32, 8192, 8192)]


def candidates(M, N, K, sms):
    """The rule's pick, then swap-AB: 64 rows of N × (16 | 32) columns of M ping-pong, 128 rows
    cooperative, one split and two (the product has few tiles where N is short)."""
    bn = 16 if M <= 16 else 32
    yield "pick", select_fp8(M, N, K, True, sms)
    for split in (1, 2):
        tag = f"-split{split}" if split > 1 else ""
        yield f"swap-pp64x{bn}{tag}", KernelConfig(64, bn, 128, schedule="pingpong", split_k=split, swap_ab=True)
        yield f"swap-coop128x{bn}{tag}", KernelConfig(128, bn, 128, split_k=split, swap_ab=True)


def main():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for scaling in sys.argv[1:] or ["tensor", "row"]:
        for M, N, K in SHAPES:
            qa, qb, sa, sb = make_fp8_inputs(M, N, K, scaling)
            theirs = lambda: torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
            for name, cfg in candidates(M, N, K, sms):
                ours = lambda: scaled_mm_direct(qa, qb, sa, sb, config=cfg)  # noqa: E731
                try:
                    ours()
                except Exception as e:  # noqa: BLE001
                    print(f"{scaling} {M}x{N}x{K} {name}: {type(e).__name__}: {e}"[:200], flush=True)
                    continue
                ratios, us = [], []
                for _ in range(2):
                    o, t = time_callable(ours, 100).median_ms, time_callable(theirs, 100).median_ms
                    ratios.append(t / o)
                    us.append(o * 1e3)
                r = statistics.median(ratios)
                rows.append((scaling, f"{M}x{N}x{K}", name, statistics.median(us), r))
                print(f"{scaling} {M}x{N}x{K} {name} ({cfg}): {statistics.median(us):.1f} us, {r:.3f} of"
                      " torch._scaled_mm", flush=True)
    print("\nscaling shape              config                 us     ours/torch")
    for scaling, shape, name, us, r in rows:
        print(f"{scaling:7} {shape:18} {name:22} {us:6.1f} {r:6.3f}")


if __name__ == "__main__":
    main()
