"""Host time per call of quantize_fp8 and of an inference Float8Linear forward (GPU), against
torch's bf16 F.linear on the same input: on decode-size inputs the GPU work is a few µs, so
back-to-back calls run at the host's pace and µs per call is the host's cost.

    python benchmarks/host_quantize.py [--rows 1 16 128] [--k 4096] [--calls 500] [--rounds 5]

Prints, per row count, the median over rounds of µs per call (`calls` calls back to back, one
synchronize at the end) for quantize_fp8 row and block, Float8Linear (row) and F.linear. Compare
two trees by running this under each one's PYTHONPATH, alternately.

    python benchmarks/host_quantize.py --training [--tokens 8192] [--reps 50]

instead times on the GPU (median of L2-flushed repetitions, pingpong.tools.timing) FP8
training's quantization of one Llama-3-8B-sized layer's operands, X (tokens × 4096), W
(14336 × 4096) and dY (tokens × 14336): quantize_fp8_pair (both axes, the transposed copy
padded) against the unfused route (quantize_fp8 of x, a padded transposed copy of x in its
dtype, quantize_fp8 of that; for 128×128 weight blocks, the fp8 copy of the transpose), per
granularity, with the fused outputs checked bitwise against the unfused ones. One table.
"""

import argparse
import statistics

import torch

import pingpong
from pingpong.fp8 import Float8Linear
from pingpong.quantize import padded_rows, quantize_fp8, quantize_fp8_pair
from pingpong.tools.timing import call_us, time_callable


def per_call_us(fn, calls: int, rounds: int) -> float:
    fn()
    return statistics.median(call_us(fn, calls)[1] for _ in range(rounds))


def unfused_pair(x, granularity: str, pad: int):
    """What quantize_fp8_pair replaces: (q, s) of x and (qt, st) of xᵀ padded, by quantize_fp8
    and a transposed copy (for "block128x128", the fp8 copy of q's transpose)."""
    q, s = quantize_fp8(x, granularity)
    if granularity == "block128x128":
        return q, s, q.t().contiguous(), s.t().contiguous()
    M, K = x.shape
    xt = x.new_empty(K, padded_rows(M, pad))
    xt[:, :M].copy_(x.t())
    xt[:, M:].zero_()
    return (q, s, *quantize_fp8(xt, granularity))


def training(tokens: int, reps: int) -> None:
    """The --training table (module docstring)."""
    hidden, inter = 4096, 14336
    operands = (("X", (tokens, hidden), ("tensor", "row", "block")),
                ("W", (inter, hidden), ("tensor", "row", "block128x128")),
                ("dY", (tokens, inter), ("tensor", "row", "block")))
    print("| operand | shape | granularity | unfused µs | fused µs | speedup | fused GB/s | bitwise |")
    print("|---|---|---|---|---|---|---|---|")
    for name, shape, granularities in operands:
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        for g in granularities:
            pad = 128 if g.startswith("block") else 16
            got, want = quantize_fp8_pair(x, g, pad=pad), unfused_pair(x, g, pad)
            same = all(torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a,
                                   b.view(torch.uint8) if b.element_size() == 1 else b) for a, b in zip(got, want))
            t_unfused = time_callable(lambda: unfused_pair(x, g, pad), reps).median_ms * 1e3
            t_fused = time_callable(lambda: quantize_fp8_pair(x, g, pad=pad), reps).median_ms * 1e3
            reads = 1 if g.startswith("block") else 2
            gbs = x.numel() * (2 * reads + 2) / (t_fused * 1e3)  # bf16 reads, two fp8 writes
            print(f"| {name} | {shape[0]}×{shape[1]} | {g} | {t_unfused:.1f} | {t_fused:.1f} |"
                  f" {t_unfused / t_fused:.2f} | {gbs:.0f} | {'yes' if same else 'NO'} |", flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 16, 128])
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--training", action="store_true", help="FP8 training's fused quantization (module docstring)")
    p.add_argument("--tokens", type=int, default=8192, help="--training: X's and dY's rows")
    p.add_argument("--reps", type=int, default=50, help="--training: timed repetitions")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    if args.training:
        return training(args.tokens, args.reps)
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
