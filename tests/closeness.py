"""How the test suite compares a product with its float64 reference: one check, named tolerances.

`assert_close(got, ref, norm=…, allowed=…)` is the check. `got` has the reference's shape and
is finite (outputs are poisoned with NaN before a run, so an unwritten element never passes).
It must also meet two bounds: the norm-wise relative error ‖got − ref‖ / ‖ref‖ < `norm`, and
|got − ref| ≤ `allowed` for every element. `allowed` is a tensor or a number, built from the
reference by the caller, because each case has its own rounding model. A norm bound alone
would let a small wrong block through. An elementwise bound alone would let a uniformly
biased result through.

`rel_norm` is the norm-wise error alone, for the end-to-end model checks that compare
pingpong's error with torch's. `rel_err` is the single number the GEMM tests bound: the
larger of `rel_norm` and the elementwise error scaled by |ref| + rms(ref).
"""

import torch

_BF16, _FP16, _FP32 = torch.bfloat16, torch.float16, torch.float32

#: ‖out − ref‖ / ‖ref‖ for one fused or batched product (and the portable kernels), by output dtype.
NORM_BOUND = {_BF16: 1e-2, _FP16: 2e-3, _FP32: 1e-5}
#: The same bound for the Hopper GEMM and its split-K variants (a looser fp32 bound).
GEMM_BOUND = {_BF16: 1e-2, _FP16: 2e-3, _FP32: 1e-4}
#: Elementwise, fused products: |out − ref| ≤ RTOL·|ref| + ATOL_PER_K·(K + 1). RTOL is one
#: rounding to the output dtype; ATOL_PER_K covers fp32 accumulation over K unit-normal products.
RTOL = {_BF16: 2**-7, _FP16: 2**-10, _FP32: 2**-20}
ATOL_PER_K = 2e-6
#: Elementwise, split-K: the relative rounding of one output element, doubled (bf16 rounds by
#: half an ulp, 2^-9; fp16 by 2^-12; fp32 by 2^-24). It is added to SPLIT_ACCUM times the magnitude
#: |α|·|a|@|b| + |β·c|, which covers fp32 accumulation over K in any split order.
ROUNDING = {_BF16: 2.0**-8, _FP16: 2.0**-11, _FP32: 2.0**-23}
SPLIT_ACCUM = 2.0**-16
#: Autograd through the ops (interpreted kernels), and products assembled across the CPU ranks
#: (fp16 DTensors): (norm bound, every element within this fraction of max|ref|), `assert_close64`.
AUTOGRAD = (2e-3, 1e-2)
#: Two FP8 (e4m3) computations of the same product whose inputs differ by bf16 roundings (a
#: compiled graph fuses in its own order): an input's quantization may round to the neighbour
#: e4m3 value, so they agree norm-wise to e4m3's unit roundoff (3 mantissa bits), not better.
E4M3_ROUNDOFF = 2.0**-4
#: FP8 training's products (e4m3 operands, each quantized along its own axis) against the
#: float64 product of the unquantized ones: norm-wise (the elementwise bound is the caller's).
FP8_TRAINING_NORM = 0.08


def rel_norm(got, ref):
    """‖got − ref‖ / ‖ref‖ in float64 (‖ref‖ floored at 1e-30)."""
    ref = ref.double()
    return ((got.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def rel_err(out, ref):
    """max(norm-wise relative error, elementwise error scaled by |ref| + rms(ref)); inf if
    `out` is not finite."""
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    diff = (out - ref).abs()
    norm = (diff.norm() / ref.norm().clamp_min(1e-30)).item()
    rms = ref.pow(2).mean().sqrt().clamp_min(1e-30) if ref.numel() else 1.0
    elem = (diff / (ref.abs() + rms)).max().item() if ref.numel() else 0.0
    return max(norm, elem)


def assert_close(got, ref, *, norm, allowed, what=""):
    """`got` has `ref`'s shape and is finite; ‖got − ref‖/‖ref‖ < `norm`; |got − ref| ≤ `allowed`
    elementwise. `what` (the case, its seed) leads every failure message."""
    what = f"{what}: " if what else ""
    got = got.double()
    ref = ref.double().to(got.device)
    assert got.shape == ref.shape, f"{what}shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(got).all(), f"{what}non-finite output: unwritten or overflowed elements"
    err = (got - ref).abs()
    rel = (err.norm() / ref.norm().clamp_min(1e-30)).item()
    assert rel < norm, f"{what}relative norm error {rel:.3g} (bound {norm:.3g})"
    excess = err - allowed
    if excess.numel() and excess.max() > 0:
        worst = excess.flatten().argmax().item()
        bound = torch.as_tensor(allowed, dtype=torch.float64).expand_as(err).flatten()[worst].item()
        raise AssertionError(
            f"{what}elementwise: |got - ref| = {err.flatten()[worst].item():.3g} > {bound:.3g} at flat index"
            f" {worst} (ref {ref.flatten()[worst].item():.4g})")


#: The same pair of bounds for bf16 products assembled across ranks on the GPU (DTensors, async
#: TP) against float64, and for a compiled run's against the eager run's (two roundings apart).
RANKS_BF16 = (1e-2, 2e-2)
RANKS_COMPILED = (1e-2, 3e-2)


def assert_close64(got, ref, what, bound):
    """`assert_close` with `bound` = (norm, elementwise as a fraction of max|ref|): AUTOGRAD or
    a RANKS_* bound; returns the norm-wise error."""
    norm, elem = bound
    ref = ref.double()
    assert_close(got, ref, norm=norm, allowed=elem * ref.abs().max().clamp_min(1e-30).item(), what=what)
    return rel_norm(got, ref)
