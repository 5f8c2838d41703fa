"""quantize_groups_t: the experts' tokens quantized along the tokens and written transposed, each
expert's run padded to a multiple of 128 — the FP8 operands of the MoE weight gradient.

dW_g = dY_gᵀ · X_g contracts expert g's tokens: an FP8 GEMM with K = T_g. FP8 wgmma reads its
operands K-major only, so each operand must hold the tokens contiguous (xᵀ, one row per
feature), and a GEMM's 128-deep K blocks must never straddle two experts: each expert's run
starts at a multiple of 128, its tail up to the next one zeros (nothing to the sum).

    x (T, C), expert g = rows [start_g, end_g)         qt (C, TP), runs padded to L_g = 128·⌈T_g/128⌉
    ┌──── C ────┐                                     ┌─ L_0 ─┬──── L_1 ────┬─ L_2 ─┬─────────────┐
    │  expert 0 │ T_0                                 │ x_0ᵀ 0│ x_1ᵀ      0 │ x_2ᵀ 0│  not written│ C
    ├───────────┤                          ──▶        └───────┴─────────────┴───────┴─────────────┘
    │  expert 1 │ T_1                                 0      P_0           P_1     P_2           TP
    ├───────────┤                                     poffs = (P_0, P_1, P_2), P_g = L_0 + … + L_g
    │  expert 2 │ T_2
    └───────────┘

offs (G,) int32 holds the experts' cumulative token ends (expert g's tokens are rows [offs[g-1],
offs[g]), offs[-1] = 0), and stays on the device: the kernel reads it (no host sync), and
writes poffs, the padded ends, for the GEMM. Offsets are clipped as the ragged-K GEMM clips them
(pingpong.hopper.kernels.grouped_k's group_k_range): each into [0, T] (T: x's rows), an end below
its start an empty expert. qt's width TP = 16·⌈T/16⌉ + 128·G (`padded_tokens`) is a static bound
on P_{G-1} (rows 16-byte aligned); columns from P_{G-1} on are left unwritten. Offsets whose
experts overlap (an end that decreases, the next expert starting below it) can need more; the
runs are cut at 128·⌊TP/128⌋ (poffs too), so nothing is written out of bounds.

    | granularity | scales s                                    | scale of          | reads of x |
    |-------------|---------------------------------------------|-------------------|------------|
    | "row"       | (G, C) fp32: s[g, c]                        | column c of x_g   | 2          |
    | "block"     | (TP // 128, C) fp32: s[b, c], b = padded    | 128 tokens of the | 1          |
    |             | block (P_{g-1}/128 + j: j-th of expert g)   | padded run, col c |            |

Bitwise (qt's run, s) = quantize_fp8(x_gᵀ zero-padded to L_g columns, granularity, dtype)
(pingpong.quantize: the same scale math, `_scale_inv`, imported): "row" its (C, 1) scales as
s[g, :], "block" its (C, L_g/128) scales transposed into rows P_{g-1}/128 … of s. An empty expert
("row") gets the scale of an all-zero column, amax clamped to 1e-12: 1e-12 / FP8_MAX in fp32,
finite and positive, as quantize_fp8 gives an all-zero row; block-wise it has no blocks.

The kernel (plain Triton): one program per (expert g, BLOCK_C columns). It computes its
expert's start, end and P_{g-1} from offs itself (a vector of the G clipped offsets, the sum of
the runs before g: no prefix kernel), then walks the expert's tokens in BLOCK_T × BLOCK_C tiles:
"row" in two passes (the columns' maxima, then the cast, its second read mostly from L2),
"block" in one (a 128-token tile is a block: its columns' maxima, cast, scale row), each tile
stored transposed (tl.trans) into qt's rows, the padding tile's rows past T_g as zeros. One
expert's tokens go through one program per column block: an expert holding most tokens leaves
the GPU under-filled (C / BLOCK_C programs) — correct first, fast second.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .errors import PingpongError, check_tensor
from .integration import inductor
from .integration.ops import traced
from .quantize import _EPS, FP8_MAX, _saturate, _scale_inv, check_quantize, columns_amax
from .runtime.spec import SCALE_BLOCK
from .toolchain import KERNEL_OPTIONS

__all__ = ["quantize_groups_t", "padded_tokens", "GROUP_GRANULARITIES"]

GROUP_GRANULARITIES = ("row", "block")
IN_DTYPES = (torch.bfloat16, torch.float16)
#: the program's tile: BLOCK_T tokens (a divisor of 128: a padded run is whole tiles; 128
#: block-wise, the block) × BLOCK_C columns (128-byte rows of a bf16 load), and its warps
GROUPS_TILE, GROUPS_WARPS = (SCALE_BLOCK, 64), 4
#: qt's rows: a multiple of 16 tokens (16-byte aligned fp8 rows)
ROW_ALIGN = 16


@triton.jit
def _groups_t_kernel(x, offs, qt, s, poffs, T, C, G, PMAX, sxt, sqc, FP8_MAX: tl.constexpr, BLOCK: tl.constexpr,
                     BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_G: tl.constexpr):
    """Expert g = program_id(0), columns [program_id(1)·BLOCK_C, +BLOCK_C): its tokens x[start,
    start + n) quantized along the tokens, stored transposed into qt[c, p0 + i] with zeros for
    i in [n, run); BLOCK: one scale per 128 tokens into s[(p0 + i) / 128, c], else one per
    column into s[g, c]. Program (g, 0) writes poffs[g] = p0 + run."""
    g = tl.program_id(0)
    i = tl.arange(0, BLOCK_G)
    ends = tl.minimum(tl.maximum(tl.load(offs + i, mask=i < G, other=0), 0), T).to(tl.int64)
    starts = tl.load(offs + tl.maximum(i - 1, 0), mask=(i > 0) & (i < G), other=0)
    starts = tl.minimum(tl.maximum(starts, 0), T).to(tl.int64)
    n = tl.maximum(ends - starts, 0)
    runs = tl.where(i < G, (n + 127) // 128 * 128, 0)  # int64: overlapping bad offsets may sum past 2³¹
    p0 = tl.minimum(tl.sum(tl.where(i < g, runs, 0), axis=0), PMAX)
    p1 = tl.minimum(tl.sum(tl.where(i <= g, runs, 0), axis=0), PMAX)
    start = tl.sum(tl.where(i == g, starts, 0), axis=0)
    n = tl.sum(tl.where(i == g, n, 0), axis=0)
    if tl.program_id(1) == 0:
        tl.store(poffs + g, p1.to(tl.int32))

    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    t = tl.arange(0, BLOCK_T)
    xs = x + start * sxt + cols[None, :]  # int64 rows (x past 2³¹ elements)
    qs = qt + cols.to(tl.int64)[:, None] * sqc + p0  # int64: C · TP past 2³¹
    if not BLOCK:  # pass 1: each column's max |x| over the expert's tokens
        amax = columns_amax(xs, n, sxt, cmask, BLOCK_T, BLOCK_C)
        scale, inv = _scale_inv(amax, FP8_MAX)
        tl.store(s + g.to(tl.int64) * C + cols, scale, mask=cmask)
    for t0 in range(0, p1 - p0, BLOCK_T):  # the run: tokens, then zeros up to the multiple of 128
        k = t0 + t
        v = tl.load(xs + k.to(tl.int64)[:, None] * sxt, mask=(k[:, None] < n) & cmask[None, :],
                    other=0.0).to(tl.float32)
        if BLOCK:
            scale, inv = _scale_inv(tl.max(tl.abs(v), axis=0), FP8_MAX)
            tl.store(s + ((p0 + t0) // BLOCK_T) * C + cols, scale, mask=cmask)
        qv = _saturate(v * inv[None, :], FP8_MAX)
        tl.store(qs + k[None, :], tl.trans(qv.to(qt.dtype.element_ty)), mask=cmask[:, None])


def padded_tokens(T, G):
    """TP, qt's width: T rounded up to ROW_ALIGN, plus 128 per expert (each run's padding is
    under 128): ≥ P_{G-1} for any offsets that do not overlap. Symbolic T and G (the fake) too."""
    return -(-T // ROW_ALIGN) * ROW_ALIGN + SCALE_BLOCK * G


def check_groups(x, offs, dtype, granularity, device_checks: bool = True) -> None:
    """PingpongError naming the argument for anything quantize_groups_t does not take."""
    check_tensor("x", x)
    check_tensor("offs", offs)
    if granularity not in GROUP_GRANULARITIES:
        raise PingpongError(f"granularity: expected one of {GROUP_GRANULARITIES}, got {granularity!r}")
    check_quantize(x, "row", dtype, device_checks)  # dtype, x 2-D with contiguous rows, its device
    if x.dtype not in IN_DTYPES:
        raise PingpongError(f"x: dtype {x.dtype} is not supported; expected one of {IN_DTYPES}")
    if x.shape[1] % 16:
        raise PingpongError(f"x: C (= {x.shape[1]}) must be a multiple of 16")
    if offs.dim() != 1 or offs.dtype != torch.int32 or offs.stride(0) != 1 and offs.shape[0] > 1:
        raise PingpongError(f"offs: expected a contiguous (G,) int32 tensor of the experts' token ends, got"
                            f" {offs.dtype} of shape {tuple(offs.shape)} and strides {tuple(offs.stride())}")
    if offs.shape[0] == 0:
        raise PingpongError("offs: no experts (G = 0); expected at least one token end")
    if offs.device != x.device:
        raise PingpongError(f"offs: on {offs.device}; expected x's device {x.device}")


def groups_like(x, offs, dtype, granularity):
    """quantize_groups_t's outputs (qt (C, TP), s, poffs (G,) int32), uninitialized."""
    T, C = x.shape
    G = offs.shape[0]
    TP = padded_tokens(T, G)
    f32 = dict(dtype=torch.float32, device=x.device)
    s = torch.empty(G, C, **f32) if granularity == "row" else torch.empty(TP // SCALE_BLOCK, C, **f32)
    return x.new_empty((C, TP), dtype=dtype), s, torch.empty(G, dtype=torch.int32, device=x.device)


def quantize_groups_direct(x, offs, dtype=torch.float8_e4m3fn, granularity="row", out=None):
    """quantize_groups_t on the direct path: validate, launch; into `out` = (qt, s, poffs) when
    given (inductor's buffers, laid out as `groups_like`)."""
    check_groups(x, offs, dtype, granularity)
    qt, s, poffs = groups_like(x, offs, dtype, granularity) if out is None else out
    if x.shape[0] == 0:  # no tokens: every expert empty, nothing to read (and no kernel on x's empty storage)
        poffs.zero_()
        if granularity == "row":  # the kernel's scale of an empty expert, in the same fp32 division
            s.copy_((torch.full((), _EPS, dtype=torch.float32, device=x.device) / FP8_MAX[dtype]).expand_as(s))
        return qt, s, poffs
    launch_groups(x, offs, qt, s, poffs, granularity)
    return qt, s, poffs


def launch_groups(x, offs, qt, s, poffs, granularity) -> None:
    """quantize_groups_t's kernel on a checked x with tokens and its outputs, through Triton's
    JIT (the interpreter for CPU tensors)."""
    T, C = x.shape
    G = offs.shape[0]
    bt, bc = GROUPS_TILE
    meta = {} if x.device.type == "cpu" else dict(num_warps=GROUPS_WARPS, **KERNEL_OPTIONS)
    pmax = qt.shape[1] // SCALE_BLOCK * SCALE_BLOCK
    grid = (G, max(1, -(-C // bc)))  # C = 0: one program per expert still writes poffs
    _groups_t_kernel[grid](x, offs, qt, s, poffs, T, C, G, pmax, x.stride(0), qt.stride(0),
                           FP8_MAX=FP8_MAX[qt.dtype], BLOCK=granularity == "block", BLOCK_T=bt, BLOCK_C=bc,
                           BLOCK_G=triton.next_power_of_2(G), **meta)


def quantize_groups_t(x: torch.Tensor, offs: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn,
                      granularity: str = "row"):
    """(qt, s, poffs) of x (T, C) bf16/fp16 whose rows are the experts' tokens, cut by offs (G,)
    int32 (cumulative ends, on x's device): qt (C, TP) `dtype`, each expert's tokens quantized
    along the tokens and transposed into a run that starts at a multiple of 128, zero-padded to
    one; s its scales ("row": (G, C); "block": (TP // 128, C), one per 128 padded tokens);
    poffs (G,) int32 the runs' padded ends (module docstring). No host sync. While torch.compile
    traces, the ``pingpong::quantize_groups_t`` op."""
    if traced(x, offs):
        return torch.ops.pingpong.quantize_groups_t(x, offs, granularity, dtype)
    return quantize_groups_direct(x, offs, dtype, granularity)


@torch.library.custom_op("pingpong::quantize_groups_t", mutates_args=())
def _quantize_groups_op(x: torch.Tensor, offs: torch.Tensor, granularity: str,
                        dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return quantize_groups_direct(x, offs, dtype, granularity)


@_quantize_groups_op.register_fake
def _(x, offs, granularity, dtype):
    inductor.register()
    check_groups(x, offs, dtype, granularity, device_checks=False)
    return groups_like(x, offs, dtype, granularity)


@inductor.lowered("quantize_groups_t")
def quantize_groups_t_out(x, offs, *, granularity, dtype, out):
    """pingpong::quantize_groups_t into inductor's buffers (qt, s, poffs) (pingpong.integration.inductor)."""
    quantize_groups_direct(x, offs, dtype, granularity, out)
