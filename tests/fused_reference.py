"""The fused epilogue's float64 reference and the two bounds every fused/batched check uses.

    reference = act(α·(a @ b) + bias) + β·c       in float64, with torch's own activations,
                                                  torch.matmul's batch broadcasting and
                                                  torch's broadcasting of the bias
"""

import itertools
import math

import torch
import torch.nn.functional as F

ACTIVATIONS = {
    "none": lambda z: z,
    "relu": F.relu,
    "gelu_erf": F.gelu,
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "silu": F.silu,
}

#: ‖out − ref‖ / ‖ref‖ per output dtype.
NORM_BOUND = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-5}
#: Elementwise: |out − ref| ≤ RTOL·|ref| + ATOL_PER_K·(K + 1): one rounding to the output
#: dtype, plus fp32 accumulation over K unit-normal products.
RTOL = {torch.bfloat16: 2**-7, torch.float16: 2**-10, torch.float32: 2**-20}
ATOL_PER_K = 2e-6


def reference(a, b, *, alpha=1.0, beta=0.0, c=None, bias=None, activation="none"):
    z = alpha * torch.matmul(a.double(), b.double())
    if bias is not None:
        z = z + bias.double()
    y = ACTIVATIONS[activation](z)
    if c is not None and beta != 0.0:
        y = y + beta * c.double()
    return y


def check(out, ref, k, seed):
    """Both bounds; NaN (an unwritten, poisoned element) never passes."""
    got = out.double()
    ref = ref.to(got.device)
    assert got.shape == ref.shape, f"shape {tuple(got.shape)} != {tuple(ref.shape)} (seed {seed})"
    assert torch.isfinite(got).all(), f"non-finite output: unwritten or overflowed elements (seed {seed})"
    err = (got - ref).abs()
    norm = (err.norm() / ref.norm().clamp_min(1e-30)).item()
    assert norm < NORM_BOUND[out.dtype], f"relative norm error {norm:.3g} (seed {seed})"
    allowed = RTOL[out.dtype] * ref.abs() + ATOL_PER_K * (k + 1)
    worst = (err - allowed).flatten().argmax().item()
    assert (err <= allowed).all(), (
        f"elementwise: |out - ref| = {err.flatten()[worst].item():.3g} > {allowed.flatten()[worst].item():.3g}"
        f" at flat index {worst} (ref {ref.flatten()[worst].item():.4g}, seed {seed})"
    )


def matrix(batch, rows, cols, dtype, transposed, gen, device="cpu"):
    """A (*batch, rows, cols) tensor whose matrices are row-major, or (`transposed`) the
    transposed view of row-major (cols, rows) matrices."""
    shape = (*batch, cols, rows) if transposed else (*batch, rows, cols)
    t = torch.randn(shape, generator=gen, device=device).to(dtype)
    return t.transpose(-1, -2) if transposed else t


def poisoned(shape, dtype, device="cpu"):
    return torch.full(shape, math.nan, dtype=dtype, device=device)


def new_seed():
    """A fresh seed per check (printed by `check` on failure, to replay it)."""
    import random

    return random.randrange(2**31)


def offsets(sizes, device="cpu"):
    """grouped_mm's offs for groups of these sizes: int32 cumulative ends."""
    return torch.tensor(list(itertools.accumulate(sizes)), dtype=torch.int32, device=device)
