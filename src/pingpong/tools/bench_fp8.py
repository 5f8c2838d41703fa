"""`pingpong bench --dtype fp8 --scaling tensor|row|block`: pingpong.scaled_mm against
torch._scaled_mm (cuBLASLt / CUTLASS) on the same quantized tensors, and quantize_fp8's
bandwidth.

The method is bench.py's (check first, NaN-poisoned output, alternating rounds, L2 flushed,
median of medians): inputs are random normal A (M, K) and W (N, K) with a spread of row
magnitudes (so the scales differ), quantized once by pingpong.quantize_fp8 (e4m3; "block":
A in 1×128, W in 128×128 blocks); ours and torch's run on those very tensors, both with
use_fast_accum as given (default False, torch's default). The check compares ours with a
float64 product of the dequantized operands: ‖out − ref‖/‖ref‖ ≤ FP8_TOLERANCE (the bf16
output's rounding is 2^-9; a wrong scale or block is orders of magnitude above).

A shape torch._scaled_mm refuses (block-wise at M = 1: CUBLAS_STATUS_NOT_SUPPORTED) is the
peer's failure, not ours: its row says PEER_UNSUPPORTED, ours is still checked and timed, the
peer's message goes to stderr, and the geometric mean leaves the row out (no ratio).
"""

from __future__ import annotations

import statistics
import sys

from .timing import time_callable

SCALINGS = ("tensor", "row", "block")
FP8_TOLERANCE = 1e-2
#: quantize granularity of (A, W) per scaling mode
_GRAN = {"tensor": ("tensor", "tensor"), "row": ("row", "row"), "block": ("block", "block128x128")}


def make_fp8_inputs(M, N, K, scaling: str, device="cuda", seed: int = 0):
    """(qa, qb, sa, sb, ref): qb = qw.t() (column-major), scales in torch's layouts, and the
    float64 product of the dequantized operands."""
    import torch

    from ..quantize import quantize_fp8

    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(M, K, generator=gen, device=device) * (0.5 + torch.rand(M, 1, generator=gen, device=device))
    w = torch.randn(N, K, generator=gen, device=device) * (0.5 + torch.rand(N, 1, generator=gen, device=device))
    ga, gw = _GRAN[scaling]
    qa, sa = quantize_fp8(a.to(torch.bfloat16), ga)
    qw, sw = quantize_fp8(w.to(torch.bfloat16), gw)
    return qa, qw.t(), sa, sw.t()


def dequantized(q, s, scaling: str, operand: str):
    """float64 values of q·s for A (M, K) or W (N, K) (`operand` "a" / "w", s as quantize gave it)."""
    import torch

    from ..runtime.spec import SCALE_BLOCK

    x = q.double()
    if scaling == "tensor" or scaling == "row":
        return x * s.double()
    if operand == "a":  # (M, K/128)
        return x * s.double().repeat_interleave(SCALE_BLOCK, 1)
    rows, cols = x.shape
    return x * s.double().repeat_interleave(SCALE_BLOCK, 0)[:rows].repeat_interleave(SCALE_BLOCK, 1)[:, :cols]


def reference(qa, qb, sa, sb, scaling: str):
    return dequantized(qa, sa, scaling, "a") @ dequantized(qb.t(), sb.t(), scaling, "w").t()


def bench_fp8_shape(M, N, K, settings, device="cuda", timer=time_callable, config=None):
    """Check, then time, one shape: a bench.Row (path names the scaling, or `config`: a
    KernelConfig run instead of the selection's, as benchmarks/schedules.py does)."""
    import torch

    from .. import fp8
    from .rows import PEER_UNSUPPORTED, Row, error_status, rel_error

    scaling, fast = settings.scaling, settings.fast_accum
    path = f"fp8-{scaling}" + ("-fast" if fast else "") + (f" {config.name()}" if config is not None else "")

    def ours_fn():
        if config is None:
            return fp8.scaled_mm(qa, qb, sa, sb, use_fast_accum=fast)
        return fp8.scaled_mm_direct(qa, qb, sa, sb, use_fast_accum=fast, config=config)
    try:
        qa, qb, sa, sb = make_fp8_inputs(M, N, K, scaling, device, settings.seed)
        poison = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=device)
        del poison  # the caching allocator hands this NaN-filled block to the next output
        ours = ours_fn()
        torch.cuda.synchronize()
    except Exception as e:
        return Row(M, N, K, path, error_status(e))
    ref = reference(qa, qb, sa, sb, scaling)
    err = rel_error(ours, ref)
    peer = lambda: torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)  # noqa: E731
    try:
        torch_err = f"{rel_error(peer(), ref):.3e}"
    except RuntimeError as e:  # the peer refuses this shape: ours is still checked and timed
        torch_err, peer = f"refused ({str(e).splitlines()[0][:120]})", None
    del ours, ref
    if not err <= FP8_TOLERANCE:
        return Row(M, N, K, path, "FAILED", rel_err=err)
    print(f"{M}x{N}x{K} {path}: rel.err ours {err:.3e}, torch._scaled_mm {torch_err}", file=sys.stderr)
    ours_t, theirs_t = [], []
    for _ in range(settings.rounds):
        ours_t.append(timer(ours_fn, settings.reps))
        if peer is not None:
            theirs_t.append(timer(peer, settings.reps))
    med = lambda ts: statistics.median(t.median_ms for t in ts)  # noqa: E731
    ours_reps = sum(t.reps for t in ours_t)
    if peer is None:
        return Row(M, N, K, path, PEER_UNSUPPORTED, err, med(ours_t), ours_reps=ours_reps, in_bytes=1, out_bytes=2)
    ratios = [c.median_ms / o.median_ms for o, c in zip(ours_t, theirs_t)]
    return Row(M, N, K, path, "ok", err, med(ours_t), med(theirs_t), ours_reps, sum(t.reps for t in theirs_t),
               min(ratios), max(ratios), 1, 2)
