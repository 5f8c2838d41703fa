"""Batched operands with torch.matmul's semantics, reduced to one 2-D or one batched GEMM.

    a (…a, M, K) @ b (…b, K, N)  →  out (broadcast(…a, …b), M, N)

`plan` is a pure function of the two shapes and strides; it decides once how the call runs:

    | operands                                         | kind      | kernel problem                  |
    |--------------------------------------------------|-----------|---------------------------------|
    | both 2-D                                         | "mm"      | (M, K) @ (K, N)                 |
    | b has no batch (2-D, or every batch dim is 1)     | "fold"    | (B·M, K) @ (K, N): a's batch    |
    |   and a's batch and M dims merge into one stride  |           | folded into M, a view of a      |
    |   (e.g. a contiguous (…, M, K): a shared weight)  |           |                                 |
    | otherwise                                        | "batched" | (B, M, K) @ (B, K, N), B = the  |
    |                                                  |           | product of the broadcast batch  |

For "batched", each operand is `expand`ed to the broadcast batch (stride 0 along the dims it
broadcasts) and its batch dims are merged into one; that is a view whenever the batch strides
merge (always for a single batch dim, for a broadcast operand, and for contiguous batches), else
that operand is copied (`KernelOperand.stride is None`). The output is a new contiguous tensor of
shape `out_shape`; "fold" and "batched" write it through a 2-D/3-D view of the same memory.

c (gemm's β·c) has the output's shape, or (M, N) shared by the batches (read through a
stride-0 view; it keeps the batch out of M, as a per-row bias (M, 1) does). Operands the GEMM
API runs itself (`native`: 2-D, or 3-D with one batch size once it takes batched operands)
never come here. Batch dims that do not broadcast raise PingpongError naming a and b, before
any work.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from ..errors import PingpongError
from ..runtime.spec import bias_kind, validate_nd

__all__ = ["KernelOperand", "BatchPlan", "plan", "operand_view", "plan_for", "out_shape", "check", "run", "per_row",
           "native"]


@dataclass(frozen=True)
class KernelOperand:
    """How one operand enters the kernel: its 2-D/3-D shape and, for a view, its strides."""

    shape: tuple[int, ...]
    stride: tuple[int, ...] | None  # None: not a view of the caller's tensor; a copy is made


@dataclass(frozen=True)
class BatchPlan:
    kind: str  # "mm" | "fold" | "batched"
    batch: tuple[int, ...]  # the broadcast batch shape (the output's leading dims)
    out_shape: tuple[int, ...]  # batch + (M, N)
    a: KernelOperand
    b: KernelOperand
    out: tuple[int, ...]  # the kernel's view of the output: (M, N), (B·M, N) or (B, M, N)


def _merged_stride(sizes, strides) -> int | None:
    """The one stride of `sizes` merged into a single dim, or None when they do not merge.

    Dims of size 1 place no constraint; consecutive dims i, j merge when
    stride[i] == size[j] * stride[j] (row-major order among themselves).
    """
    kept = [(s, st) for s, st in zip(sizes, strides) if s != 1]
    if not kept:
        return 1
    for (_, outer), (size, inner) in zip(kept, kept[1:]):
        if outer != size * inner:
            return None
    return kept[-1][1]


def _broadcast(a_batch, b_batch) -> tuple[int, ...]:
    try:
        return tuple(torch.broadcast_shapes(torch.Size(a_batch), torch.Size(b_batch)))
    except RuntimeError:
        raise PingpongError(
            f"a and b: batch dimensions {tuple(a_batch)} (a) and {tuple(b_batch)} (b) do not broadcast "
            "(torch.matmul's rule: aligned from the right, each pair equal or one of them 1)"
        ) from None


def _expanded_strides(shape, stride, batch) -> tuple[int, ...]:
    """Strides of `shape` expanded to `batch` + its last two dims (0 along broadcast dims)."""
    lead = len(batch) - (len(shape) - 2)
    out = []
    for i, size in enumerate(batch):
        j = i - lead
        out.append(0 if j < 0 or (shape[j] == 1 and size != 1) else stride[j])
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def plan(a_shape, a_stride, b_shape, b_stride, fold: bool = True) -> BatchPlan:
    """The plan of a (…, M, K) @ b (…, K, N) (see the module docstring). `fold=False` keeps
    the batch out of M (a per-row bias of M values must see M rows per batch). A pure
    function of its (hashable) arguments, so its decisions are cached."""
    for name, shape in (("a", a_shape), ("b", b_shape)):
        if len(shape) < 2:
            raise PingpongError(f"{name}: expected a tensor of at least 2 dims (…, rows, cols), got shape {tuple(shape)}")
    (M, K), (Kb, N) = a_shape[-2:], b_shape[-2:]
    if K != Kb:
        raise PingpongError(
            f"a and b: shape mismatch, a is {tuple(a_shape)} and b is {tuple(b_shape)}; a.shape[-1] must equal b.shape[-2]"
        )
    batch = _broadcast(a_shape[:-2], b_shape[:-2])
    out_shape = batch + (M, N)
    if len(a_shape) == 2 and len(b_shape) == 2:
        return BatchPlan("mm", (), out_shape, KernelOperand((M, K), tuple(a_stride)),
                         KernelOperand((K, N), tuple(b_stride)), (M, N))
    if fold and math.prod(b_shape[:-2]) == 1:
        rows = _merged_stride(a_shape[:-1], a_stride[:-1])
        if rows is not None:
            BM = math.prod(a_shape[:-1])
            a = KernelOperand((BM, K), (rows, a_stride[-1]))
            b = KernelOperand((K, N), tuple(b_stride[-2:]))
            return BatchPlan("fold", batch, out_shape, a, b, (BM, N))
    B = math.prod(batch)
    operands = []
    for shape, stride in ((a_shape, a_stride), (b_shape, b_stride)):
        sb = _merged_stride(batch, _expanded_strides(shape, stride, batch))
        matrix = tuple(shape[-2:])
        operands.append(KernelOperand((B,) + matrix, None if sb is None else (sb,) + tuple(stride[-2:])))
    return BatchPlan("batched", batch, out_shape, operands[0], operands[1], (B, M, N))


def plan_for(a: torch.Tensor, b: torch.Tensor, fold: bool = True) -> BatchPlan:
    args = (tuple(a.shape), a.stride(), tuple(b.shape), b.stride(), fold)
    try:
        return plan(*args)
    except TypeError:  # symbolic sizes (dynamic-shape tracing) are not hashable: plan them uncached
        return plan.__wrapped__(*args)


def operand_view(t: torch.Tensor, op: KernelOperand, batch: tuple[int, ...]) -> torch.Tensor:
    """`t` as the kernel sees it: a strided view, or (stride None) a contiguous copy."""
    if op.stride is not None:
        return t.as_strided(op.shape, op.stride)
    return t.expand(batch + tuple(t.shape[-2:])).reshape(op.shape)


def run(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, gemm2d, gemm3d, fold: bool = True) -> torch.Tensor:
    """Execute a @ b (+ c: of shape `out_shape`, or (M, N) shared by the batches) by the plan:
    `gemm2d(a2, b2, c2)` and `gemm3d(a3, b3, c3)` each return a new contiguous result of
    their 2-D / 3-D problem. A shared c keeps the batch out of M (it has M rows, not B·M)."""
    shared_c = c is not None and c.dim() == 2
    p = plan_for(a, b, fold and not shared_c)
    if p.kind == "mm":
        return gemm2d(a, b, c)
    a_k, b_k = operand_view(a, p.a, p.batch), operand_view(b, p.b, p.batch)
    # c's view of the kernel's problem: a view when its dims merge (stride 0 for a shared c)
    c_k = None if c is None else c.expand(p.out_shape).reshape(p.out)
    result = (gemm2d if p.kind == "fold" else gemm3d)(a_k, b_k, c_k)
    return result.view(p.out_shape)


def per_row(bias, m: int) -> bool:
    """A bias of shape (M, 1), M = m, each batch's rows: one value per row of each batch's (M,
    N) result (spec.bias_kind's reading, (1, 1) included where m = 1), which folding the batch
    into M would make (B·M, 1)."""
    return bias is not None and bias_kind(bias, m) == "row"


def out_shape(a, b) -> tuple[int, ...]:
    """The broadcast result's shape of a (…, M, K) @ b (…, K, N) (PingpongError if the batch
    dims do not broadcast)."""
    return plan_for(a, b).out_shape


def check(a, b, args, out_dtype) -> tuple[tuple[int, ...], torch.dtype]:
    """The N-D contract of gemm (`args`: its EpilogueArgs): output shape and dtype, or
    PingpongError naming the argument (pingpong.runtime.spec.validate_nd). Reads only metadata:
    the ops' fake implementations use it."""
    shape, dtype, _ = validate_nd(a, b, args, out_dtype, out_shape=out_shape)
    return shape, dtype


def native(a, b) -> bool:
    """Operands the GEMM API runs as they are (so this module stays out of the call): both
    2-D (or not 2-D matrices at all: the API's validation reports them), or both 3-D with
    one batch size (the batched kernel)."""
    da, db = getattr(a, "ndim", 2), getattr(b, "ndim", 2)
    return (da <= 2 and db <= 2) or (da == db == 3 and not getattr(a, "is_nested", False)
                                     and not getattr(b, "is_nested", False) and a.shape[0] == b.shape[0])
