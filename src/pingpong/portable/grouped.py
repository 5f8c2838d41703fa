"""The portable grouped GEMM: plain `triton.language`, for any GPU without the Hopper kernels
(pingpong.hopper.kernels.grouped, .grouped_k), operands they cannot read, and Triton's interpreter
(CPU tests).

    RAGGED_K = False  out[s_g:e_g, :] = a[s_g:e_g, :] @ b[g]          rows of group g (forward, dX)
    RAGGED_K = True   out[g]          = a[:, s_g:e_g] @ b[s_g:e_g, :] K range of group g (dW)

    grid (tiles of one group's output, G)    tiles in a grouped raster (8 row tiles per band, so
                                              the programs in flight share A and B panels in L2)
                                              program (t, g): loads s_g, e_g from offs (device
                                              data, no host sync), then
    ragged rows: tile t's rows start at s_g + pid_m·BM; a tile past e_g returns at once
                 (the grid holds ceil(T/BM) row tiles per group: any group may hold every row)
    ragged K:    the K loop runs over [s_g, e_g) in BK steps, the last one masked to e_g, so
                 the next group's K never enters the sum; an empty group writes zeros

Loads are masked pointer loads (any strides), the accumulator fp32 (`tl.dot`), one masked
store. Ends past the operand are clipped to it; a decreasing offset makes its group empty.

Index width: element offsets are 32-bit (the group's and the store's row offsets 64-bit)
unless some operand's span (`pingpong.runtime.addressing.span`) passes 2**31 - 1; then
`INDEX_64` widens the row, column and K indices before they multiply a stride (a (T, K)
of 524288 tokens × 7168, an xᵀ of the weight gradient, a transposed out of the ragged-columns
product), as the dense portable kernel does. `zero_tail` widens always (one store per element).

`zero_tail` writes zeros into the rows of out past offs[G-1] (ragged-row products), reading
the end on the device: the gradients need them zero, torch._grouped_mm leaves them unset.

`GroupedPortablePlan` is the portable backend's plan of a grouped spec (pingpong.portable.plan;
under Triton's interpreter, pingpong.portable.Interpreter's).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..runtime.addressing import needs_int64
from ..runtime.plan import GroupedPlan
from ..runtime.spec import RAGGED_K
from ..toolchain import KERNEL_OPTIONS


def _grouped_kernel(a, b, out, offs, M, N, KT, G, sam, sak, sbg, sbk, sbn, sog, som, son,
                    RAGGED_K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    GROUP_M: tl.constexpr, INDEX_64: tl.constexpr):
    pid = tl.program_id(0)
    g = tl.program_id(1)
    num_n = (N + BN - 1) // BN
    num_m = (M + BM - 1) // BM
    band = GROUP_M * num_n  # grouped raster: GROUP_M row tiles per band, column-major inside it
    first_m = (pid // band) * GROUP_M
    band_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % band) % band_m
    pid_n = (pid % band) // band_m
    limit = KT if RAGGED_K else M  # the ragged dimension's extent
    end = tl.minimum(tl.maximum(tl.load(offs + g), 0), limit)  # bad offsets: clipped to [0, limit]
    start = tl.minimum(tl.maximum(tl.load(offs + tl.maximum(g - 1, 0)), 0), limit)
    start = tl.where(g > 0, start, 0)
    end = tl.maximum(end, start)
    rn = pid_n * BN + tl.arange(0, BN)
    if INDEX_64:  # an operand's offsets pass 2**31 (module docstring): widen before multiplying by strides
        rn = rn.to(tl.int64)
    acc = tl.full((BM, BN), 0.0, tl.float32)
    if RAGGED_K:
        rm = pid_m * BM + tl.arange(0, BM)
        if INDEX_64:
            rm = rm.to(tl.int64)
        row_ok = rm < M
        b_base = b
        for k in range(start, end, BK):
            rk = k + tl.arange(0, BK)
            if INDEX_64:
                rk = rk.to(tl.int64)
            k_ok = rk < end
            x = tl.load(a + rm[:, None] * sam + rk[None, :] * sak, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            y = tl.load(b_base + rk[:, None] * sbk + rn[None, :] * sbn, mask=k_ok[:, None] & (rn < N)[None, :],
                        other=0.0)
            acc = tl.dot(x, y, acc)
        o = out + g.to(tl.int64) * sog
    else:
        rm = start + pid_m * BM + tl.arange(0, BM)
        if INDEX_64:
            rm = rm.to(tl.int64)
        row_ok = rm < end
        b_base = b + g.to(tl.int64) * sbg
        for k in range(0, KT, BK):
            rk = k + tl.arange(0, BK)
            if INDEX_64:
                rk = rk.to(tl.int64)
            k_ok = rk < KT
            x = tl.load(a + rm[:, None] * sam + rk[None, :] * sak, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            y = tl.load(b_base + rk[:, None] * sbk + rn[None, :] * sbn, mask=k_ok[:, None] & (rn < N)[None, :],
                        other=0.0)
            acc = tl.dot(x, y, acc)
        o = out
    mask = row_ok[:, None] & (rn < N)[None, :]
    tl.store(o + rm[:, None].to(tl.int64) * som + rn[None, :] * son, acc.to(out.dtype.element_ty), mask=mask)


def _zero_tail_kernel(out, offs, M, N, G, som, son, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    end = tl.maximum(tl.load(offs + G - 1), 0)
    mask = ((rm >= end) & (rm < M))[:, None] & (rn < N)[None, :]
    tl.store(out + rm[:, None].to(tl.int64) * som + rn[None, :].to(tl.int64) * son,
             tl.full((BM, BN), 0.0, out.dtype.element_ty),
             mask=mask)


grouped_kernel = triton.jit(_grouped_kernel)
zero_tail_kernel = triton.jit(_zero_tail_kernel)


@functools.lru_cache(maxsize=None)
def _interpreted(fn):
    from triton.runtime.interpreter import InterpretedFunction
    return InterpretedFunction(fn)


def _block(interpret: bool, ragged_k: bool) -> tuple[int, int, int]:
    return (16, 16, 16) if interpret else ((128, 128, 64) if ragged_k else (64, 128, 64))


def grouped(a, b, out, offs, ragged_k: bool, interpret: bool = False) -> torch.Tensor:
    """out = the grouped product (module docstring); a (M, K), b (G, K, N) or, ragged K,
    (K, N); out (T, N) or (G, M, N). Any strides."""
    BM, BN, BK = _block(interpret, ragged_k)
    M, KT = a.shape
    N = b.shape[-1]
    G = offs.shape[0]
    sbg = b.stride(0) if b.dim() == 3 else 0
    sog = out.stride(0) if out.dim() == 3 else 0
    rows = M if ragged_k else -(-M // BM) * BM  # ragged rows: any group may hold all of them
    grid = (-(-rows // BM) * -(-N // BN), G)
    if G == 0 or N == 0 or M == 0:
        return out
    args = (a, b, out, offs, M, N, KT, G, a.stride(0), a.stride(1), sbg, b.stride(-2), b.stride(-1), sog,
            out.stride(-2), out.stride(-1))
    kernel = _interpreted(_grouped_kernel) if interpret else grouped_kernel
    extra = {} if interpret else dict(num_warps=8 if BM * BN >= 128 * 128 else 4, num_stages=3, **KERNEL_OPTIONS)
    kernel[grid](*args, RAGGED_K=ragged_k, BM=BM, BN=BN, BK=BK, GROUP_M=8, INDEX_64=needs_int64(a, b, out), **extra)
    return out


def zero_tail(out, offs, interpret: bool = False) -> torch.Tensor:
    """Zero out's rows at and past offs[-1] (out (T, N), any strides); no host sync."""
    M, N = out.shape
    G = offs.shape[0]
    if M == 0 or N == 0:
        return out
    if G == 0:
        return out.zero_()
    BM, BN = (16, 16) if interpret else (64, 128)
    kernel = _interpreted(_zero_tail_kernel) if interpret else zero_tail_kernel
    kernel[(-(-M // BM), -(-N // BN))](out, offs, M, N, G, out.stride(0), out.stride(1), BM=BM, BN=BN,
                                       **({} if interpret else KERNEL_OPTIONS))
    return out


class GroupedPortablePlan(GroupedPlan):
    """A grouped product (ragged rows, or ragged K) on the portable kernel, any strides;
    `interpret`: under Triton's interpreter."""

    __slots__ = ("interpret",)

    def __init__(self, device, mode, interpret=False):
        self.device, self.mode, self.interpret, self.activation = device, mode, interpret, "none"
        self.path = "interpreted" if interpret else "portable"

    def compute(self, a, b, out, offs):
        grouped(a, b, out, offs, ragged_k=self.mode == RAGGED_K, interpret=self.interpret)
