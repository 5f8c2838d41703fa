"""Host time per call of quantize_fp8 and of an inference Float8Linear forward (GPU), against
torch's bf16 F.linear on the same input: on decode-size inputs the GPU work is a few µs, so
back-to-back calls run at the host's pace and µs per call is the host's cost.

    python benchmarks/host_quantize.py [--rows 1 16 128] [--k 4096] [--calls 500] [--rounds 5]

Prints, per row count, the median over rounds of µs per call (`calls` calls back to back, one
synchronize at the end) for quantize_fp8 row and block, Float8Linear (row) and F.linear. Compare
two trees by running this under each one's PYTHONPATH, alternately.
"""

import argparse
import statistics

import torch

import pingpong
from pingpong.fp8 import Float8Linear
from pingpong.tools.timing import call_us


def per_call_us(fn, calls: int, rounds: int) -> float:
    fn()
    return statistics.median(call_us(fn, calls)[1] for _ in range(rounds))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 16, 128])
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    linear = torch.nn.Linear(args.k, args.k, bias=False, device="cuda", dtype=torch.bfloat16)
    fp8 = Float8Linear.from_linear(linear, "row")
    with torch.no_grad():
        for m in args.rows:
            x = torch.randn(m, args.k, device="cuda", dtype=torch.bfloat16)
            row = per_call_us(lambda: pingpong.quantize_fp8(x, "row"), args.calls, args.rounds)
            block = per_call_us(lambda: pingpong.quantize_fp8(x, "block"), args.calls, args.rounds)
            layer = per_call_us(lambda: fp8(x), args.calls, args.rounds)
            ref = per_call_us(lambda: torch.nn.functional.linear(x, linear.weight), args.calls, args.rounds)
            print(f"{m}x{args.k}: µs per call: quantize row {row:.1f}, block {block:.1f}; Float8Linear (row) "
                  f"{layer:.1f}; torch F.linear bf16 {ref:.1f}", flush=True)


if __name__ == "__main__":
    main()
