"""FP8 swap-AB against the FP8 rule's pick at decode shapes (GPU): each of ours as a ratio to
torch._scaled_mm on the same tensors in the same process, alternated rounds (fp8_configs.measure).
One line per (scaling, shape, config), a table last: whether select_fp8 should take swap-AB
at small M.

    python benchmarks/fp8_swap.py [tensor] [row]
"""
import sys

import torch

from fp8_configs import measure
from pingpong import KernelConfig
from pingpong.hopper.fp8_launch import select_fp8

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
    rows = [(scaling, f"{M}x{N}x{K}", name, us, r) for scaling in sys.argv[1:] or ["tensor", "row"]
            for M, N, K in SHAPES for name, _, us, r in measure(scaling, M, N, K, list(candidates(M, N, K, sms)))]
    print("\nscaling shape              config                 us     ours/torch")
    for scaling, shape, name, us, r in rows:
        print(f"{scaling:7} {shape:18} {name:22} {us:6.1f} {r:6.3f}")


if __name__ == "__main__":
    main()
