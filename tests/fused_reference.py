"""The fused epilogue's float64 reference and the two bounds every fused/batched check uses.

    reference = act(α·(a @ b) + bias) + β·c       in float64, with torch's own activations,
                                                  torch.matmul's batch broadcasting and
                                                  torch's broadcasting of the bias
"""

import itertools
import math

import torch
import torch.nn.functional as F

from closeness import ATOL_PER_K, NORM_BOUND, RTOL, assert_close

ACTIVATIONS = {
    "none": lambda z: z,
    "relu": F.relu,
    "gelu_erf": F.gelu,
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "silu": F.silu,
}


def reference(a, b, *, alpha=1.0, beta=0.0, c=None, bias=None, activation="none"):
    z = alpha * torch.matmul(a.double(), b.double())
    if bias is not None:
        z = z + bias.double()
    y = ACTIVATIONS[activation](z)
    if c is not None and beta != 0.0:
        y = y + beta * c.double()
    return y


def check(out, ref, k, seed):
    """The fused bounds: closeness.NORM_BOUND, and RTOL·|ref| + ATOL_PER_K·(K + 1) elementwise."""
    ref = ref.double().to(out.device)
    assert_close(out, ref, norm=NORM_BOUND[out.dtype], allowed=RTOL[out.dtype] * ref.abs() + ATOL_PER_K * (k + 1),
                 what=f"seed {seed}")


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
