"""quantize_fp8: x -> (q, scale) with x ≈ q · scale, in torch._scaled_mm's scale layouts.

Plain Triton (any GPU; CPU tensors run in Triton's interpreter, fp32/fp16 only: its bf16 is
wrong). Each kernel reads x once and writes q and the scales once: amax of the group, scale =
amax / FP8_MAX (amax clamped to 1e-12 so a zero group gets a tiny finite positive scale), q =
clamp(x · (FP8_MAX / amax), ±FP8_MAX) cast with round-to-nearest-even (the reciprocal once per
group in IEEE division, then one multiply per element: the division per element cost 1.5% of
the bandwidth; q is bitwise torch's `(x.float() * (FP8_MAX / amax)).to(dtype)`). amax is not
clamped from above: a group holding ±inf gets scale = inf and dequantizes to non-finite values
(torch's float8 recipes do the same; saturating would hide the overflow in a finite result).
A NaN in x quantizes to NaN (the clamp keeps it, as torch.clamp does); its group's amax ignores it
(the kernels' max drops NaN), so the other elements keep a finite scale.

    | granularity    | groups           | scale shape and layout              | passes over x      |
    |----------------|------------------|-------------------------------------|--------------------|
    | "row"          | each row         | (M, 1) contiguous                   | 1 (row in regs)    |
    | "block"        | 1×128 of a row   | (M, K/128), strides (1, M)          | 1                  |
    | "block128x128" | 128×128 (weights)| (M/128, K/128) row-major            | 1                  |
    | "tensor"       | the whole tensor | () 0-d                              | 2 kernels, 2 reads |

Tensor-wise needs the amax of *every* element before the first cast, and no program can know
it until all have read their part: either a grid-wide barrier (a persistent kernel whose
programs all wait for each other: it deadlocks unless every program is resident, which
plain Triton cannot guarantee) or a second pass. So tensor-wise is two launches: partial
maxima (one per program), then each program reduces the partials (a few KB from L2) and
quantizes its tile, reading x a second time (5 bytes moved per bf16 element instead of 3).
Row rows longer than MAX_ROW elements are read twice (amax, then cast; the second read
mostly from L2).

Tiles smaller than a row are numbered along each row of tiles first (a 1-D grid), so the
programs in flight read a few whole rows, not a 256-byte piece of each of thousands of rows:
0.82 of peak HBM bandwidth on (8192, 8192) bf16 instead of 0.77 (1×128 and 128×128);
tensor-wise's second pass walks backward from where the first ended (the end of x still in L2):
0.85 of its 5 bytes per element instead of 0.82. Loading x with evict_first cost 0.5-1.5%.
Offsets are int64 per row (x past 2³¹ elements: DeepSeek-V3's stacked expert weights).

On a GPU every kernel here (row, block, tensor-wise's two, quantize_fp8_pair's two) goes through
Triton's JIT once per call shape, then launches directly (`launch`, `launch_pair`:
runtime.launcher.CachedLaunch, as the GEMM plans do).

The scales of "row" and "block" are scale_a's layout for an activation A (M, K); for a weight
W (N, K), pass `scale.t()` as scale_b ((1, N) row-wise; (K/128, N/128) from "block128x128").

`quantize_fp8_pair` quantizes x (M, K) along both axes for training, where each operand feeds two
products that contract different axes (pingpong.fp8_training): q (M, K) scaled along K as
quantize_fp8(x) gives it, and qt (K, M') scaled along M and already transposed, the M axis padded
with zeros to M' (a multiple of `pad`) — bitwise quantize_fp8(xᵀ padded) — so the second product
needs no transpose copy. Reads of x (bf16: 2 bytes an element read, 1 per fp8 output written):

    | granularity    | q along K, qt along M          | reads of x | unfused (copy xᵀ, quantize both) |
    |----------------|--------------------------------|------------|----------------------------------|
    | "tensor"       | one scale for both             | 2          | 5 (2 + copy + 2), 2 more writes  |
    | "row"          | per row of x, per column of x  | 2          | 3 (1 + copy + 1), 2 more writes  |
    | "block"        | 1×128 along K, 1×128 along M   | 1          | 3 (1 + copy + 1), 2 more writes  |
    | "block128x128" | the same 128×128 blocks        | 1          | 2 (quantize, then an fp8 copy)   |

"row" and "tensor" cannot do with fewer than two reads: an element's cast needs its row's and its
column's amax (or the whole tensor's), and a column's amax is known only after every row has
been read — the grid-wide wait tensor-wise meets (above). So: one amax pass (row and column
maxima of each tile together, `tl.atomic_max` into zeroed fp32 vectors: max is exact, so the
order of the atomics changes nothing), then one cast pass that writes q and qt from the same
registers (qt through tl.trans), its second read of x partly from L2, and which zeroes the
other slot of its stream's two for the next call (`amax_slots`). Block-wise both groups of
an element lie inside one 128×128 tile (its 1×128 row pieces and its 128×1 column pieces), so
one program reads the tile once and writes both. Scales stay on the device (no host sync).
A pair call alike after one that ran on a GPU takes that call's `PairPlan` (no check but the
grad check, outputs from the planned layouts, both launches from base addresses, the maxima
in a slot of the stream's buffer that the previous call's cast zeroed: no zeroing launch; rows
alone, quantize_fp8's kernels launched the same way): an FP8 training layer
quantizes three operands a step, and where the step is host-bound (small layers, tensor
parallelism) their host time is the step's.

Stacked matrices x (G, N, K) (an experts' weights, pingpong.fp8_grouped_training) take the
row-wise pair's two passes apart, for two products that run at different times (forward and
backward): `quantize_stacked_direct` quantizes the rows along K with the one-read row kernel's
code and keeps each column's max |x| along N beside (one atomic max per column per
STACKED_ROWS rows, into a zeroed (G, K) fp32 buffer); `quantize_fp8_columns(x, amax=…)` then
casts along N into the transposed layout (G, K, N) from those maxima, reading x once more (two
reads without them). Reads of x: 2 in all, as the pair's.
"""

from __future__ import annotations

import threading
from typing import Optional

import torch
import triton
import triton.language as tl

from .integration import inductor
from .errors import PingpongError, check_tensor
from .integration.ops import traced
from .kept import kept, keeping
from .runtime.device import fp8_e4m3_reason
from .runtime.fp8_spec import refuse_grad
from .runtime.launcher import CachedLaunch, LaunchCache
from .runtime.plan import stream_key, stream_zeros
from .runtime.spec import PLAIN_TENSORS, SCALE_BLOCK
from .toolchain import KERNEL_OPTIONS

__all__ = ["quantize_fp8", "quantize_fp8_pair", "quantize_fp8_columns", "GRANULARITIES", "FP8_MAX"]

GRANULARITIES = ("tensor", "row", "block", "block128x128")
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
IN_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MAX_ROW = 16384  # longest row held in registers by the one-read row kernel
_EPS = 1e-12
#: 1×128 blocks: (rows, 128-column groups) per program
BLOCK_TILE = (32, 1)


@triton.jit
def _row_block(x, q, s, rows, M, K, sxm, sqm, FP8_MAX: tl.constexpr, BLOCK_K: tl.constexpr):
    """Whole rows `rows` (int64) of x: amax per row, scale, cast, stored; returns |x| of the
    block (zeros where masked) for a caller that also wants the columns' maxima."""
    cols = tl.arange(0, BLOCK_K)
    rmask = rows < M
    mask = rmask[:, None] & (cols[None, :] < K)
    v = tl.load((x + rows * sxm)[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)  # int64 per row
    a = tl.abs(v)
    scale, inv = _scale_inv(tl.max(a, axis=1), FP8_MAX)
    qv = _saturate(v * inv[:, None], FP8_MAX)
    tl.store((q + rows * sqm)[:, None] + cols[None, :], qv.to(q.dtype.element_ty), mask=mask)
    tl.store(s + rows, scale, mask=rmask)
    return a


@triton.jit
def _row_kernel(x, q, s, M, K, sxm, sqm, FP8_MAX: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                ONE_READ: tl.constexpr):
    """Rows [pid·BLOCK_M, +BLOCK_M): amax per row, scale, cast."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # int64 (past 2³¹ elements)
    if ONE_READ:
        _row_block(x, q, s, rows, M, K, sxm, sqm, FP8_MAX, BLOCK_K)
    else:
        cols = tl.arange(0, BLOCK_K)
        rmask = rows < M
        xr = x + rows * sxm  # each row's first element: the int64 multiply once per row, not per element
        qr = q + rows * sqm
        amax = tl.zeros([BLOCK_M], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            mask = rmask[:, None] & (k0 + cols[None, :] < K)
            v = tl.load(xr[:, None] + k0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(v), axis=1))
        scale, inv = _scale_inv(amax, FP8_MAX)
        for k0 in range(0, K, BLOCK_K):
            mask = rmask[:, None] & (k0 + cols[None, :] < K)
            v = tl.load(xr[:, None] + k0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            qv = _saturate(v * inv[:, None], FP8_MAX)
            tl.store(qr[:, None] + k0 + cols[None, :], qv.to(q.dtype.element_ty), mask=mask)
        tl.store(s + rows, scale, mask=rmask)


@triton.jit
def _stacked_row_kernel(x, q, s, amax, M, K, sxm, sqm, FP8_MAX: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_K: tl.constexpr, STEPS: tl.constexpr):
    """quantize_stacked_direct: group g = program_id(1) of stacked matrices (M rows of K each),
    rows quantized as _row_kernel's one-read path, and each column's max |x| over the group's
    rows into amax[g] (zeroed first): the program takes STEPS blocks of BLOCK_M whole rows one
    after the other, keeps the columns' maxima in registers, and adds one atomic max per column:

        group g, rows [pid·STEPS·BLOCK_M, +STEPS·BLOCK_M)     ┌───────── K ─────────┐
          block 0          load, row amax, cast, store; cmax = max(cmax, |v| per column)
          …
          block STEPS-1
          └─▶ atomic_max(amax[g, :], cmax)   (one per column per STEPS·BLOCK_M rows)
    """
    g = tl.program_id(1).to(tl.int64)  # int64: a group's offset past 2³¹ elements (stacked experts)
    cmax = tl.zeros([BLOCK_K], dtype=tl.float32)
    for step in range(STEPS):
        rows = (tl.program_id(0).to(tl.int64) * STEPS + step) * BLOCK_M + tl.arange(0, BLOCK_M)
        a = _row_block(x + g * M * sxm, q + g * M * sqm, s + g * M, rows, M, K, sxm, sqm, FP8_MAX, BLOCK_K)
        cmax = tl.maximum(cmax, tl.max(a, axis=0))
    cols = tl.arange(0, BLOCK_K)
    tl.atomic_max(amax + g * K + cols, cmax, mask=cols < K)


@triton.jit
def _tile(nk, REVERSE: tl.constexpr):
    """(tile row, tile column) of this program in a 1-D grid of (row tiles × nk) that walks each
    row of tiles before the next (REVERSE: from the last tile)."""
    pid = tl.program_id(0)
    if REVERSE:
        pid = tl.num_programs(0) - 1 - pid
    return (pid // nk).to(tl.int64), pid % nk  # int64: row offsets past 2³¹ elements, once per row


@triton.jit
def _block_kernel(x, q, s, M, K, sxm, sqm, ssm, ssk, FP8_MAX: tl.constexpr, BLOCK_M: tl.constexpr,
                  GROUP_K: tl.constexpr, GROUP_M: tl.constexpr, GROUPS: tl.constexpr):
    """One tile of BLOCK_M rows × GROUPS·GROUP_K columns. GROUP_M = 1: one scale per row and
    GROUP_K columns (1×128); GROUP_M = BLOCK_M: one scale per BLOCK_M × GROUP_K block (128×128,
    GROUPS = 1). Scale of group (m // GROUP_M, k // GROUP_K) at s + (m // GROUP_M)·ssm +
    (k // GROUP_K)·ssk."""
    pid_m, pid_k = _tile(tl.cdiv(K, GROUPS * GROUP_K), False)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * GROUPS * GROUP_K + tl.arange(0, GROUPS * GROUP_K)
    mask = (rows[:, None] < M) & (cols[None, :] < K)
    v = tl.load(x + rows[:, None] * sxm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if GROUP_M == 1:
        v3 = tl.reshape(v, [BLOCK_M, GROUPS, GROUP_K])
        amax = tl.maximum(tl.max(tl.abs(v3), axis=2), 1e-12)
        scale = tl.fdiv(amax, tl.full(amax.shape, FP8_MAX, tl.float32), ieee_rounding=True)
        inv = tl.fdiv(tl.full(amax.shape, FP8_MAX, tl.float32), amax, ieee_rounding=True)
        qv = tl.reshape(_saturate(v3 * inv[:, :, None], FP8_MAX), [BLOCK_M, GROUPS * GROUP_K])
        groups = pid_k.to(tl.int64) * GROUPS + tl.arange(0, GROUPS)  # × ssk = M
        tl.store(s + rows[:, None] * ssm + groups[None, :] * ssk, scale,
                 mask=(rows[:, None] < M) & (groups[None, :] * GROUP_K < K))
    else:
        amax = tl.maximum(tl.max(tl.max(tl.abs(v), axis=1), axis=0), 1e-12)
        scale = tl.fdiv(amax, tl.full(amax.shape, FP8_MAX, tl.float32), ieee_rounding=True)
        qv = _saturate(v * tl.fdiv(tl.full(amax.shape, FP8_MAX, tl.float32), amax, ieee_rounding=True), FP8_MAX)
        tl.store(s + pid_m * ssm + pid_k * ssk, scale)
    tl.store(q + rows[:, None] * sqm + cols[None, :], qv.to(q.dtype.element_ty), mask=mask)


@triton.jit
def _amax_kernel(x, partial, M, K, sxm, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """Tensor-wise pass 1: the amax of one BLOCK_M × BLOCK_K tile -> partial[program]."""
    pid_m, pid_k = _tile(tl.cdiv(K, BLOCK_K), False)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows[:, None] < M) & (cols[None, :] < K)
    v = tl.load(x + rows[:, None] * sxm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(partial + tl.program_id(0), tl.max(tl.max(tl.abs(v), axis=1), axis=0))


#: words of the other amax slot each program of the pair's cast zeroes per step (`_clear_slot`)
CLEAR_BLOCK: tl.constexpr = tl.constexpr(256)


@triton.jit
def _tensor_cast_kernel(x, q, s, partial, P, M, K, sxm, sqm, FP8_MAX: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr):
    """Tensor-wise pass 2: amax = max of the P partials; the program of tile (0, 0) stores the
    scale; every program casts its tile, from the last tile: pass 1 ended there, and left the end
    of x in L2."""
    pid_m, pid_k = _tile(tl.cdiv(K, BLOCK_K), True)
    p = tl.arange(0, BLOCK_P)
    amax = tl.maximum(tl.max(tl.load(partial + p, mask=p < P, other=0.0), axis=0), 1e-12)
    scale = tl.fdiv(amax, tl.full(amax.shape, FP8_MAX, tl.float32), ieee_rounding=True)
    inv = tl.fdiv(tl.full(amax.shape, FP8_MAX, tl.float32), amax, ieee_rounding=True)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows[:, None] < M) & (cols[None, :] < K)
    v = tl.load(x + rows[:, None] * sxm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    qv = _saturate(v * inv, FP8_MAX)
    tl.store(q + rows[:, None] * sqm + cols[None, :], qv.to(q.dtype.element_ty), mask=mask)
    if pid_m == 0 and pid_k == 0:
        tl.store(s, scale)


@triton.jit
def _pair_amax_kernel(x, ramax, camax, M, K, sxm, TENSOR: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """quantize_fp8_pair's pass 1 ("tensor", "row"): the maxima of |x| over one tile, per row
    into ramax[row] and per column into camax[column] (TENSOR: the tile's into ramax[0])."""
    pid_m, pid_k = _tile(tl.cdiv(K, BLOCK_K), False)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows[:, None] < M) & (cols[None, :] < K)
    a = tl.abs(tl.load(x + rows[:, None] * sxm + cols[None, :], mask=mask, other=0.0).to(tl.float32))
    if TENSOR:
        tl.atomic_max(ramax, tl.max(tl.max(a, axis=1), axis=0))
    else:
        if ROWS:
            tl.atomic_max(ramax + rows, tl.max(a, axis=1), mask=rows < M)
        if COLS:
            tl.atomic_max(camax + cols, tl.max(a, axis=0), mask=cols < K)


@triton.jit
def _saturate(v, FP8_MAX: tl.constexpr):
    """v clamped to ±FP8_MAX with NaN kept, as torch.clamp keeps it (the default clamp drops
    NaN: a NaN in x came out as -FP8_MAX, a finite value that hid it from the product)."""
    return tl.clamp(v, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _scale_inv(amax, FP8_MAX: tl.constexpr):
    """(scale, 1 / scale) of a group's amax, as every kernel here computes them."""
    amax = tl.maximum(amax, 1e-12)
    return (tl.fdiv(amax, tl.full(amax.shape, FP8_MAX, tl.float32), ieee_rounding=True),
            tl.fdiv(tl.full(amax.shape, FP8_MAX, tl.float32), amax, ieee_rounding=True))


@triton.jit
def _pair_cast_kernel(x, q, s, qt, st, ramax, camax, clear, M, MP, K, sxm, sqm, sqtk, ssm, ssk, sstk, sstm, words,
                      FP8_MAX: tl.constexpr, MODE: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_K: tl.constexpr):
    """quantize_fp8_pair's cast of one BLOCK_M × BLOCK_K tile of x, rows [0, MP) (rows past M
    read as zeros: qt's padding): q (M, K) scaled along K and qt (K, MP) scaled along M, both
    from one load. MODE 0 "tensor", 1 "row" (amaxes from pass 1); 2 "block" (1×128 along K and
    128×1 along M, the tile 128 rows high), 3 "block128x128" (the tile is the block): no pass 1.

    MODE 0 and 1 zero the `words` at `clear`, the other slot of the stream's amax buffer
    (`_clear_slot`), for the next call's pass 1."""
    if MODE < 2:  # first: nothing of the tile is live across its loop (after the stores it held them)
        _clear_slot(clear, words)
    pid_m, pid_k = _tile(tl.cdiv(K, BLOCK_K), False)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    v = tl.load(x + rows[:, None] * sxm + cols[None, :], mask=(rows[:, None] < M) & (cols[None, :] < K),
                other=0.0).to(tl.float32)
    first = (pid_m == 0) & (pid_k == 0)
    if MODE == 0:
        scale, inv = _scale_inv(tl.load(ramax), FP8_MAX)
        qr = _saturate(v * inv, FP8_MAX)
        qc = qr
        if ROWS and first:
            tl.store(s, scale)
        if COLS and first:
            tl.store(st, scale)
    elif MODE == 1:
        if ROWS:
            rscale, rinv = _scale_inv(tl.load(ramax + rows, mask=rows < M, other=0.0), FP8_MAX)
            qr = _saturate(v * rinv[:, None], FP8_MAX)
            if pid_k == 0:
                tl.store(s + rows * ssm, rscale, mask=rows < M)
        if COLS:
            cscale, cinv = _scale_inv(tl.load(camax + cols, mask=cols < K, other=0.0), FP8_MAX)
            qc = _saturate(v * cinv[None, :], FP8_MAX)
            if pid_m == 0:
                tl.store(st + cols * sstk, cscale, mask=cols < K)
    elif MODE == 2:
        a = tl.abs(v)
        if ROWS:
            GROUPS: tl.constexpr = BLOCK_K // GROUP_K
            rscale, rinv = _scale_inv(tl.max(tl.reshape(a, [BLOCK_M, GROUPS, GROUP_K]), axis=2), FP8_MAX)
            qr = tl.reshape(_saturate(tl.reshape(v, [BLOCK_M, GROUPS, GROUP_K]) * rinv[:, :, None], FP8_MAX),
                            [BLOCK_M, BLOCK_K])
            groups = pid_k.to(tl.int64) * GROUPS + tl.arange(0, GROUPS)
            tl.store(s + rows[:, None] * ssm + groups[None, :] * ssk, rscale,
                     mask=(rows[:, None] < M) & (groups[None, :] * GROUP_K < K))
        if COLS:
            cscale, cinv = _scale_inv(tl.max(a, axis=0), FP8_MAX)
            qc = _saturate(v * cinv[None, :], FP8_MAX)
            tl.store(st + cols * sstk + pid_m * sstm, cscale, mask=cols < K)
    else:
        scale, inv = _scale_inv(tl.max(tl.max(tl.abs(v), axis=1), axis=0), FP8_MAX)
        qr = _saturate(v * inv, FP8_MAX)
        qc = qr
        if ROWS and pid_m * BLOCK_M < M:
            tl.store(s + pid_m * ssm + pid_k * ssk, scale)
        if COLS:
            tl.store(st + pid_k * sstk + pid_m * sstm, scale)
    if ROWS:
        tl.store(q + rows[:, None] * sqm + cols[None, :], qr.to(q.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < K))
    if COLS:
        # int64: qt (K, M') past 2³¹ elements (K·M' of 16384 × 131072 tokens, stacked experts' Wᵀ)
        tl.store(qt + cols.to(tl.int64)[:, None] * sqtk + rows[None, :], tl.trans(qc.to(qt.dtype.element_ty)),
                 mask=(cols[:, None] < K) & (rows[None, :] < MP))


@triton.jit
def _clear_slot(clear, words):
    """Every program of the pair's cast zeroes its share of the `words` at `clear`: the slot of
    the stream's amax buffer that the previous call filled (`amax_slots`). Plain stores, no
    ordering with anything in this launch: the previous call's cast, the last to read that
    slot, ended before this launch began (one stream's kernels run in order), and the next
    call's amax pass, which fills it, begins after this one ends.

        call i:  amax pass fills slot i % 2 | cast reads slot i % 2, zeroes slot (i + 1) % 2
    """
    offs = tl.program_id(0) * CLEAR_BLOCK + tl.arange(0, CLEAR_BLOCK)
    for start in range(0, words, tl.num_programs(0) * CLEAR_BLOCK):
        tl.store(clear + start + offs, 0.0, mask=start + offs < words)


@triton.jit
def columns_amax(xs, n, stride, cmask, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """Each column's max |x| over rows 0 .. n-1 of the strip at xs (row r at xs + r·stride; the
    columns masked by cmask), BLOCK_ROWS rows at a time (quantize_fp8_columns' and
    quantize_groups_t's first pass)."""
    rows = tl.arange(0, BLOCK_ROWS)
    amax = tl.zeros([BLOCK_COLS], dtype=tl.float32)
    for r0 in range(0, n, BLOCK_ROWS):
        r = r0 + rows
        v = tl.load(xs + r.to(tl.int64)[:, None] * stride, mask=(r[:, None] < n) & cmask[None, :], other=0.0)
        amax = tl.maximum(amax, tl.max(tl.abs(v.to(tl.float32)), axis=0))
    return amax


@triton.jit
def _columns_kernel(x, q, s, amax, N, K, sxg, sxn, FP8_MAX: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, AMAX: tl.constexpr):
    """quantize_fp8_columns: columns [program_id(0)·BLOCK_K, +BLOCK_K) of x[g] (N, K), g =
    program_id(1): the amax of each column along N (pass 1; AMAX: read from amax[g] instead,
    the one-read cast), then the cast (pass 2, the strip read again, mostly from L2), stored
    transposed into q[g] (K, N); the scales into s[g] (K,).

        x[g] (N, K)        cols ──▶ BLOCK_K          q[g] (K, N)
        ┌────┬──┬────┐     pass 1: n0 = 0, BLOCK_N, … ─▶ amax (per column)
        │    │▓▓│    │ N   pass 2: n0 = 0, BLOCK_N, … ─▶ cast, tl.trans ─▶ rows cols of q[g]
        └────┴──┴────┘
    """
    g = tl.program_id(1).to(tl.int64)  # int64: a group's offset past 2³¹ elements (stacked experts)
    cols = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    rows = tl.arange(0, BLOCK_N)
    xg = x + g * sxg + cols[None, :]
    kmask = cols < K
    if AMAX:
        amax = tl.load(amax + g * K + cols, mask=kmask, other=0.0)
    else:
        amax = columns_amax(xg, N, sxn, kmask, BLOCK_N, BLOCK_K)
    scale, inv = _scale_inv(amax, FP8_MAX)
    qg = q + g * N * K + cols.to(tl.int64)[:, None] * N
    for n0 in range(0, N, BLOCK_N):
        n = n0 + rows
        v = tl.load(xg + n.to(tl.int64)[:, None] * sxn, mask=(n[:, None] < N) & kmask[None, :], other=0.0)
        qv = _saturate(v.to(tl.float32) * inv[None, :], FP8_MAX)
        tl.store(qg + n[None, :], tl.trans(qv.to(q.dtype.element_ty)), mask=kmask[:, None] & (n[None, :] < N))
    tl.store(s + g * K + cols, scale, mask=kmask)


def interpreter_enabled() -> bool:
    """Triton's interpreter is on (TRITON_INTERPRET=1 before triton is imported): CPU tensors
    run there (the kernels call triton.language's own jit functions, tl.max, which only the
    interpreter proper can call)."""
    import os

    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_quantize(x, granularity, dtype, device_checks: bool = True) -> None:
    """PingpongError naming the argument for anything quantize_fp8 does not take."""
    check_tensor("x", x)
    if granularity not in GRANULARITIES:
        raise PingpongError(f"granularity: expected one of {GRANULARITIES}, got {granularity!r}")
    if dtype not in FP8_MAX:
        raise PingpongError(f"dtype: expected one of {tuple(FP8_MAX)}, got {dtype!r}")
    if x.dim() != 2:
        raise PingpongError(f"x: expected a 2-D tensor (reshape (..., K) to (-1, K) first), got shape {tuple(x.shape)}")
    if x.dtype not in IN_DTYPES:
        raise PingpongError(f"x: dtype {x.dtype} is not supported; expected one of {IN_DTYPES}")
    if x.stride(1) != 1 and x.shape[1] > 1:
        raise PingpongError(f"x: rows must be contiguous (stride 1 along the last dim), got strides {tuple(x.stride())}")
    if granularity in ("block", "block128x128") and x.shape[1] % SCALE_BLOCK:
        raise PingpongError(f"x: {granularity} scales need K (= {x.shape[1]}) to be a multiple of {SCALE_BLOCK}")
    if not device_checks:
        return
    if x.device.type == "cpu":
        if not interpreter_enabled():
            raise PingpongError(f"x: on {x.device}; quantize_fp8 runs on a GPU (or on the CPU in Triton's interpreter:"
                                " set TRITON_INTERPRET=1 before importing triton)")
        if x.dtype == torch.bfloat16:
            raise PingpongError("x: bfloat16 on the CPU (Triton's interpreter) is computed wrongly; use float16/float32")
    elif x.device.type != "cuda":
        raise PingpongError(f"x: on {x.device}; quantize_fp8 runs on CUDA/ROCm GPUs")
    elif dtype == torch.float8_e4m3fn:
        why = fp8_e4m3_reason(x.device.index if x.device.index is not None else torch.cuda.current_device())
        if why:
            raise PingpongError(f"dtype: {why}")
    refuse_grad("quantize_fp8", x, names=("x",))


def scale_like(x: torch.Tensor, granularity: str, shape=None) -> torch.Tensor:
    """An uninitialized fp32 scale of a 2-D x's granularity (or of an x of `shape` on x's
    device), in the layout quantize_fp8 returns."""
    M, K = x.shape if shape is None else shape
    f32 = dict(dtype=torch.float32, device=x.device)
    if granularity == "tensor":
        return torch.empty((), **f32)
    if granularity == "row":
        return torch.empty(M, 1, **f32)
    if granularity == "block":
        return torch.empty(K // SCALE_BLOCK, M, **f32).t()  # (M, K/128), outer-dim-major (torch's 1×128 layout)
    return torch.empty(-(-M // SCALE_BLOCK), K // SCALE_BLOCK, **f32)


def rows_like(x: torch.Tensor, granularity: str, dtype, shape=None):
    """quantize_fp8's outputs (q, s), uninitialized, of a 2-D x (or of an x of `shape` on x's device)."""
    return x.new_empty(x.shape if shape is None else shape, dtype=dtype), scale_like(x, granularity, shape)


def quantize_direct(x: torch.Tensor, granularity: str = "row", dtype=torch.float8_e4m3fn, out=None):
    """quantize_fp8 on the direct path: validate, launch; into `out` = (q, s) when given
    (inductor's buffers, laid out as `rows_like`)."""
    check_quantize(x, granularity, dtype)
    M, K = x.shape
    q, s = rows_like(x, granularity, dtype) if out is None else out
    if M == 0 or K == 0:
        if s.numel():
            s.fill_(_EPS / FP8_MAX[dtype])
        return q, s
    launch(x, q, s, granularity)
    return q, s


#: Bound launches of the row and block kernels (`launch`) and of the pair's (`launch_pair`), one per
#: call shape; emptied when full (a model has few shapes, but the token count of its activations varies).
LAUNCH_CACHE_SIZE = 1024
_LAUNCHES = LaunchCache(LAUNCH_CACHE_SIZE)
#: quantize_pair_direct's PairPlans by call signature (`_pair_key`), emptied as _LAUNCHES
_PAIR_PLANS = LaunchCache(LAUNCH_CACHE_SIZE)


def launch(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, granularity: str) -> None:
    """The kernels that write q and s (as quantize_direct allocates them) from a checked,
    non-empty x. On a GPU, the row and block kernels go through Triton's JIT once per call
    shape and are launched directly after
    (runtime.launcher.CachedLaunch, as the GEMMs' plans are): the JIT's binder costs more host
    time than a quantization of a decode step's activations takes on the GPU."""
    if granularity == "tensor":
        _launch_tensor(x, q, s)
    elif x.device.type == "cpu":  # the interpreter
        fn, args, kwargs, grid = prepare(x, q, s, granularity, interpret=True)
        fn[grid](*args, **kwargs)
    else:
        _launch_rows((bound_launch(x, q, s, granularity),), x.device.index, x, q, s, granularity)


def _launch_rows(launches: tuple, device: int, x, q, s, granularity: str) -> None:
    """`launch`'s kernels on a GPU through the given CachedLaunches (`_rows_launches`)."""
    if granularity == "tensor":
        _launch_tensor(x, q, s, launches, device)
    else:
        launches[0](device, (x.data_ptr(), q.data_ptr(), s.data_ptr()), (), prepare, x, q, s, granularity)


def _rows_launches(granularity: str) -> tuple:
    """One CachedLaunch per kernel of `launch`: tensor-wise its two passes, else the one kernel."""
    return (CachedLaunch(), CachedLaunch()) if granularity == "tensor" else (CachedLaunch(),)


def bound_launch(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, granularity: str) -> CachedLaunch:
    """The row or block kernel's CachedLaunch for this call shape (x, q and s on a GPU, as
    `launch` takes them): called as launch(device, (x, q, s addresses), (), prepare, x, q, s,
    granularity). Float8Linear keeps the one of each input shape it has seen."""
    return _LAUNCHES.get_or_make(launch_key(x, q, s, granularity))


def launch_key(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, granularity: str) -> tuple:
    """What the compiled row or block kernel depends on: the granularity, x's dtype (bf16 or
    fp16 loads), q's (e4m3 or e5m2: FP8_MAX and the cast), the shapes and strides, the device,
    and whether each base is 16-byte aligned (Triton specializes pointers on it)."""
    return (granularity, x.dtype, q.dtype, *x.shape, x.stride(0), q.stride(0), *s.stride(), x.device.index,
            x.data_ptr() % 16 == 0, q.data_ptr() % 16 == 0, s.data_ptr() % 16 == 0)


def prepare(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, granularity: str, interpret: bool = False):
    """(kernel, args, kwargs, grid) of the row or block kernel's JIT launch for `launch`
    (interpret: no compile options, for Triton's CPU interpreter)."""
    M, K = x.shape
    fmax = FP8_MAX[q.dtype]
    if granularity == "row":
        one, bk, bm, warps = _row_tile(K)
        meta = {} if interpret else dict(num_warps=warps, **KERNEL_OPTIONS)
        return (_row_kernel, (x, q, s, M, K, x.stride(0), q.stride(0)),
                dict(FP8_MAX=fmax, BLOCK_M=bm, BLOCK_K=bk, ONE_READ=one, **meta), (-(-M // bm),))
    bm, groups = (SCALE_BLOCK, 1) if granularity == "block128x128" else BLOCK_TILE
    kb = K // SCALE_BLOCK
    groups = min(groups, kb) if kb % groups == 0 else 1
    meta = {} if interpret else dict(num_warps=8 if bm * groups >= 64 else 4, **KERNEL_OPTIONS)
    nm, nk = -(-M // bm), kb // groups
    return (_block_kernel, (x, q, s, M, K, x.stride(0), q.stride(0), s.stride(0), s.stride(1)),
            dict(FP8_MAX=fmax, BLOCK_M=bm, GROUP_K=SCALE_BLOCK, GROUP_M=1 if granularity == "block" else bm,
                 GROUPS=groups, **meta), (nm * nk,))


def _row_tile(K: int):
    """(whole rows in registers, BLOCK_K, BLOCK_M, warps) of the row kernels for rows of K."""
    one = K <= MAX_ROW
    bk = triton.next_power_of_2(K) if one else 4096
    bm = max(1, min(16, 4096 // bk)) if one else 1
    return one, bk, bm, 8 if bk * bm >= 4096 else 4


def _launch_tensor(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, launches=None, device=None) -> None:
    """Tensor-wise: the amax partials (one per TENSOR_TILE of x), then the cast; past
    TENSOR_PARTIALS partials a torch max reduces them to one between the two. On a GPU each
    kernel goes through Triton's JIT once per call shape and is launched directly after (as
    `launch`'s row and block kernels), through `launches` on `device` when given (a PairPlan's)."""
    P = _tensor_partials(*x.shape)
    partial = torch.empty(P + (P > TENSOR_PARTIALS), dtype=torch.float32, device=x.device)
    steps = tensor_steps(x, q, s, partial)
    interpret = launches is None and x.device.type == "cpu"
    if launches is None:
        launches = (None, None) if interpret else _LAUNCHES.get_or_make(launch_key(x, q, s, "tensor"),
                                                                         lambda: _rows_launches("tensor"))
    for i, (cached, (prepare_step, ptrs)) in enumerate(zip(launches, steps)):
        if i and P > TENSOR_PARTIALS:  # their max into partial[P]
            torch.amax(partial[:P], 0, keepdim=True, out=partial[P:])
        if interpret:
            fn, args, kwargs, grid = prepare_step(x, q, s, partial, interpret=True)
            fn[grid](*args, **kwargs)
        else:
            cached(x.device.index if device is None else device, ptrs, (), prepare_step, x, q, s, partial)


#: tensor-wise quantize_fp8's tile (rows, columns at most): one amax partial each; and the most
#: partials each program of the cast reads (more are reduced to one first)
TENSOR_TILE, TENSOR_PARTIALS = (32, 256), 8192


def _tensor_tile(K: int) -> tuple[int, int]:
    return TENSOR_TILE[0], min(TENSOR_TILE[1], triton.next_power_of_2(K))


def _tensor_partials(M: int, K: int) -> int:
    bm, bk = _tensor_tile(K)
    return -(-M // bm) * -(-K // bk)


def tensor_steps(x, q, s, partial) -> list:
    """_launch_tensor's kernels in order, each as (its prepare function, the base addresses of
    its leading tensor arguments); the cast reads the partials, or past TENSOR_PARTIALS the one
    after them (their max)."""
    P = _tensor_partials(*x.shape)
    xp, pp = x.data_ptr(), partial.data_ptr()
    read = pp + 4 * P if P > TENSOR_PARTIALS else pp
    return [(prepare_tensor_amax, (xp, pp)), (prepare_tensor_cast, (xp, q.data_ptr(), s.data_ptr(), read))]


def prepare_tensor_amax(x, q, s, partial, interpret: bool = False):
    """(kernel, args, kwargs, grid) of tensor-wise pass 1 (`_launch_tensor`)."""
    M, K = x.shape
    bm, bk = _tensor_tile(K)
    meta = {} if interpret else dict(num_warps=8, **KERNEL_OPTIONS)
    return _amax_kernel, (x, partial, M, K, x.stride(0)), dict(BLOCK_M=bm, BLOCK_K=bk, **meta), (_tensor_partials(M, K),)


def prepare_tensor_cast(x, q, s, partial, interpret: bool = False):
    """(kernel, args, kwargs, grid) of tensor-wise pass 2 (`_launch_tensor`): it reads `tensor_steps`'s partials."""
    M, K = x.shape
    bm, bk = _tensor_tile(K)
    P = _tensor_partials(M, K)
    if P > TENSOR_PARTIALS:
        partial, P = partial[P:], 1
    meta = {} if interpret else dict(num_warps=8, **KERNEL_OPTIONS)
    return (_tensor_cast_kernel, (x, q, s, partial, P, M, K, x.stride(0), q.stride(0)),
            dict(FP8_MAX=FP8_MAX[q.dtype], BLOCK_M=bm, BLOCK_K=bk, BLOCK_P=triton.next_power_of_2(P), **meta),
            (_tensor_partials(M, K),))


def quantize_fp8(x: torch.Tensor, granularity: str = "row", dtype: torch.dtype = torch.float8_e4m3fn):
    """(q, scale) with x ≈ q · scale (module docstring): q has x's shape and `dtype`
    (float8_e4m3fn or float8_e5m2), scale is fp32 in torch._scaled_mm's layout for the
    granularity. While torch.compile traces, the ``pingpong::quantize_fp8`` op."""
    if traced(x):
        if isinstance(x, torch.Tensor):  # the op has no backward: named here, not by the compiler
            refuse_grad("quantize_fp8", x, names=("x",))
        return torch.ops.pingpong.quantize_fp8(x, granularity, dtype)
    return quantize_direct(x, granularity, dtype)


#: quantize_fp8_pair's tiles (rows, columns): the amax pass; the cast, 128 × 128 in every mode (the
#: block-wise groups need it; q's rows and qt's are then 128 bytes each), in 16 warps (the fp32
#: tile and both casts of it in ~63 registers, ~123 block-wise; no spills)
PAIR_AMAX_TILE, PAIR_CAST_TILE, PAIR_CAST_WARPS = (32, 256), (SCALE_BLOCK, SCALE_BLOCK), 16
_PAIR_MODES = {"tensor": 0, "row": 1, "block": 2, "block128x128": 3}


def padded_rows(M: int, pad: int) -> int:
    """M' = M rounded up to a multiple of pad, at least one pad (the max taken on M: a traced M,
    a symbol ≥ 2, then needs no guard, where max(pad, M') would split a compiled graph at M = pad)."""
    return -(-max(M, 1) // pad) * pad


def check_pair(x, granularity, dtype, pad, rows, cols, device_checks: bool = True) -> None:
    check_quantize(x, granularity, dtype, device_checks)
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 1:
        raise PingpongError(f"pad: expected a positive int, got {pad!r}")
    if granularity in ("block", "block128x128") and pad % SCALE_BLOCK:
        raise PingpongError(f"pad: {granularity} scales along the rows need pad (= {pad}) to be a multiple of"
                            f" {SCALE_BLOCK}")
    if not (rows or cols):
        raise PingpongError("rows, cols: at least one output must be asked for")


def _unasked(x, dtype):
    """The empty (q, s) of a pair not asked for."""
    return x.new_empty(0, dtype=dtype), x.new_empty(0, dtype=torch.float32)


def pair_like(x, granularity, dtype, pad, rows, cols, out=(None,) * 4):
    """quantize_fp8_pair's outputs, uninitialized: (q, s, qt, st), the ones not asked for empty;
    each pair given in `out` (not None) kept."""
    M, K = x.shape
    q, s, qt, st = out
    if q is None:
        q, s = rows_like(x, granularity, dtype) if rows else _unasked(x, dtype)
    if qt is None:
        qt, st = (rows_like(x, granularity, dtype, (K, padded_rows(M, pad))) if cols else
                  _unasked(x, dtype))
    return q, s, qt, st


def quantize_pair_direct(x, granularity="row", dtype=torch.float8_e4m3fn, pad=16, rows=True, cols=True,
                         out=(None,) * 4):
    """quantize_fp8_pair on the direct path: validate, launch; into the pairs of `out` = (q, s,
    qt, st) given (inductor's buffers, laid out as `pair_like`), the others new. A call alike
    after one that launched on a GPU takes that call's PairPlan: its key holds everything
    check_pair reads but grad mode, which refuse_grad checks on every call."""
    key = _pair_key(x, granularity, dtype, pad, rows, cols)
    plan = None if key is None else _PAIR_PLANS.get(key)
    if plan is not None:
        refuse_grad("quantize_fp8", x, names=("x",))
        made = plan.run(x, out)
        if made is not None:
            return made
    check_pair(x, granularity, dtype, pad, rows, cols)
    q, s, qt, st = pair_like(x, granularity, dtype, pad, rows, cols, out)
    if x.numel() == 0:  # nothing to read: the scales of empty (or zero-padding) groups, qt all padding
        for t in (s, st):
            t.fill_(_EPS / FP8_MAX[dtype])
        qt.zero_()
        return q, s, qt, st
    if key is not None and _plans_on(x):  # the signature's plan (pair_like's layouts), made once
        plan = _PAIR_PLANS.get_or_make(key, lambda: PairPlan(x, pair_like(x, granularity, dtype, pad, rows, cols),
                                                             granularity, rows, cols))
        if plan.run(x, (q, s, qt, st)) is not None:
            return q, s, qt, st
    # the interpreter, or an out of another layout than planned
    if cols:
        launch_pair(x, q, s, qt, st, granularity, rows, cols)
    else:  # one axis: quantize_fp8's own kernels (one read for "row")
        launch(x, q, s, granularity)
    return q, s, qt, st


def _plans_on(x) -> bool:
    """Whether x's pair calls keep PairPlans: on a GPU (the CPU runs Triton's interpreter)."""
    return x.device.type == "cuda"


def _pair_key(x, granularity, dtype, pad, rows, cols):
    """A PairPlan's key: x's shape, strides, dtype, device and 16-byte alignment and the other
    arguments; None for anything but a plain tensor or Parameter (a subclass, a DTensor, takes
    the checked path) and for a pad, rows or cols of another type than check_pair takes (16.0 and
    True equal 16 and 1 as keys: a hit would skip the check that refuses them)."""
    if type(x) not in PLAIN_TENSORS or x.is_neg():  # a negated view: check_tensor refuses it
        return None
    if type(pad) is not int or type(rows) is not bool or type(cols) is not bool:
        return None
    try:  # (a sparse or nested x has no strides: the checked path names it)
        return x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16 == 0, granularity, dtype, pad, rows, cols
    except RuntimeError:
        return None


class PairPlan:
    """One quantize_fp8_pair call signature on a GPU, decided once by a call that passed
    check_pair (`quantize_pair_direct`): the outputs' shapes, strides and dtypes (of `made`:
    pair_like's, whatever `out` that call was given), and the launches, each a CachedLaunch of
    its own: with cols, `launch_pair`'s (the amax pass, then the cast; block-wise the cast
    alone); rows alone, quantize_fp8's (`launch`: one kernel, tensor-wise two).
    A call alike allocates its outputs and launches from base addresses; an `out` buffer of
    another layout or alignment than planned launches nothing and gives None (the caller takes
    the checked path).

    The amax pass fills a slot of its stream's buffer that the previous call's cast zeroed
    (`amax_slots`): no zeroing launch per call."""

    __slots__ = ("device", "index", "granularity", "rows", "cols", "layouts", "launches")

    def __init__(self, x, made, granularity, rows, cols):
        self.device, self.index, self.granularity, self.rows, self.cols = x.device, x.device.index, granularity, rows, cols
        self.layouts = tuple((t.shape, t.stride(), t.dtype) for t in made)
        self.launches = _pair_launches(granularity) if cols else _rows_launches(granularity)

    def run(self, x, out):
        made = []
        for t, (shape, stride, dtype) in zip(out, self.layouts):
            if t is None:
                t = torch.empty_strided(shape, stride, dtype=dtype, device=self.device)
            elif t.shape != shape or t.stride() != stride or t.dtype != dtype or t.data_ptr() % 16:
                return None
            made.append(t)
        if not self.cols:
            _launch_rows(self.launches, self.index, x, made[0], made[1], self.granularity)
            return tuple(made)
        with _TURN_LOCK:  # (amax_slots)
            inputs = (x, *made, *amax_slots(x, self.granularity), self.granularity, self.rows, self.cols)
            _launch_steps(self.launches, self.index, inputs)
        return tuple(made)


def launch_pair(x, q, s, qt, st, granularity, rows, cols) -> None:
    """quantize_fp8_pair's kernels on a checked, non-empty x and its outputs (pair_like): for
    "tensor" and "row" the amax pass into a zeroed slot (`amax_slots`), then the cast; block-wise the cast
    alone. On a GPU each goes through Triton's JIT once per call shape and is launched directly
    after (`bound_pair`, as `launch`); CPU tensors run in Triton's interpreter."""
    if x.device.type == "cpu":  # the interpreter
        inputs = (x, q, s, qt, st, *amax_slots(x, granularity), granularity, rows, cols)
        for prepare_step, _, _ in pair_steps(*inputs):
            fn, args, kwargs, grid = prepare_step(*inputs, interpret=True)
            fn[grid](*args, **kwargs)
        return
    with _TURN_LOCK:  # (amax_slots)
        inputs = (x, q, s, qt, st, *amax_slots(x, granularity), granularity, rows, cols)
        _launch_steps(bound_pair(*inputs), x.device.index, inputs)


def _launch_steps(launches, device: int, inputs) -> None:
    """pair_steps' kernels through their CachedLaunches; a launch that raised drops the stream's
    amax buffer (the amax pass may have filled a slot that no cast reads, and the cast that
    zeroes the other may not have run)."""
    try:
        for cached, (prepare_step, ptrs, dyn) in zip(launches, pair_steps(*inputs)):
            cached(device, ptrs, dyn, prepare_step, *inputs)
    except BaseException:
        _MAXIMA.pop(stream_key(inputs[0].device), None)
        raise


#: (device, raw stream) -> that stream's buffer of two slots for the pair's amax pass (`amax_slots`)
_MAXIMA: dict = {}
#: (device, raw stream) -> (its buffer in _MAXIMA, the slot the stream's next pair call fills)
_TURNS: dict = {}
#: held from a pair call's turn (`amax_slots`) to its last launch, so that a stream's calls from
#: several threads (torch's current stream is per thread; the default one is shared) queue their
#: launches in the order they took their turns
_TURN_LOCK = threading.Lock()
#: a slot's words are a multiple of this (each slot's base then 16-byte aligned, as its launch was compiled)
SLOT_WORDS = 64


def amax_slots(x, granularity: str) -> tuple:
    """(fill, clear) of one pair call: fill, zeroed fp32 words for the amax pass ("row": M rows'
    then K columns' maxima; "tensor": one), and clear, the other slot, which the cast zeroes
    whole (`_clear_slot`) for the call after. The current stream's buffer (runtime.plan.stream_zeros)
    holds the two slots, taken in turns: call i fills slot i % 2 and its cast zeroes slot
    (i + 1) % 2, which call i - 1 filled and its cast last read before call i began. A fresh
    buffer off a GPU and while a CUDA graph is captured (its slot 0 filled). Block-wise, which
    has no amax pass, (x, x) (unread). On a GPU, callers hold _TURN_LOCK from here to the call's
    last launch: a turn is only right for launches queued in the order the turns were taken."""
    mode = _PAIR_MODES[granularity]
    if mode >= 2:
        return x, x
    words = -(-(x.shape[0] + x.shape[1] if mode else 1) // SLOT_WORDS) * SLOT_WORDS
    buf = stream_zeros(_MAXIMA, x.device, 2 * words, torch.float32)
    turn = 0
    if x.device.type == "cuda":
        key = stream_key(x.device)
        if _MAXIMA.get(key) is buf:  # (not a fresh one)
            held, turn = _TURNS.get(key, (None, 0))
            turn = turn if held is buf else 0
            _TURNS[key] = (buf, 1 - turn)
    slots = buf.view(2, buf.numel() // 2)
    return slots[turn], slots[1 - turn]


def pair_steps(x, q, s, qt, st, amax, clear, granularity, rows, cols) -> list:
    """launch_pair's kernels in order, each as (its prepare function, the base addresses of its
    leading tensor arguments, its `dynamic` scalars: what a bound launch takes per call)."""
    mode = _PAIR_MODES[granularity]
    xp, ap = x.data_ptr(), amax.data_ptr()
    tail = ap + 4 * x.shape[0] if mode == 1 else ap  # amax[M:]: the columns' maxima ("row"); unread: amax ("tensor")
    cast = (prepare_pair_cast, (xp, q.data_ptr(), s.data_ptr(), qt.data_ptr(), st.data_ptr(), ap, tail,
                                clear.data_ptr()), (_clear_words(clear, mode),))
    return [(prepare_pair_amax, (xp, ap, tail), ()), cast] if mode < 2 else [cast]


def bound_pair(x, q, s, qt, st, amax, clear, granularity, rows, cols) -> tuple:
    """The CachedLaunches of this pair call's shape (`_pair_launches`), as `launch_pair` takes
    them: keyed by everything the two compiled kernels and their scalars depend on (every
    scalar of the cast's launch but the cleared slot's size, passed per call, the dtypes, the
    device, each base's 16-byte alignment)."""
    key = ("pair", granularity, rows, cols, x.dtype, q.dtype, qt.dtype, *_pair_scalars(x, q, s, qt, st, rows, cols),
           x.device.index, x.data_ptr() % 16 == 0, q.data_ptr() % 16 == 0, s.data_ptr() % 16 == 0,
           qt.data_ptr() % 16 == 0, st.data_ptr() % 16 == 0, amax.data_ptr() % 16 == 0, clear.data_ptr() % 16 == 0)
    return _LAUNCHES.get_or_make(key, lambda: _pair_launches(granularity))


def _pair_launches(granularity: str) -> tuple:
    """One CachedLaunch per kernel of `pair_steps`: the amax pass and the cast, block-wise the
    cast; the cast takes the size of the slot it zeroes per call (a stream's buffer can grow)."""
    cast = CachedLaunch(dynamic=("words",))
    return (CachedLaunch(), cast) if _PAIR_MODES[granularity] < 2 else (cast,)


def _clear_words(clear, mode: int) -> int:
    """The cast's `words`: the slot it zeroes, all of it ("tensor", "row"); none block-wise.
    Always a multiple of SLOT_WORDS, so Triton's specialization of it (divisible by 16, not 1)
    is the same for every size the bound launch is given."""
    return clear.numel() if mode < 2 else 0


def _pair_scalars(x, q, s, qt, st, rows, cols) -> tuple:
    """(M, M', K, x's row stride, q's, qt's, the scales' (rows, columns) strides of s and st):
    the cast's scalars; an output not asked for (or a 0-d tensor-wise scale) has placeholders."""
    M, K = x.shape
    Mp = qt.shape[1] if cols else M
    sq = (q.stride(0), *s.stride()) if rows and s.dim() == 2 else (K, 0, 0)
    sqt = (qt.stride(0), *st.stride()) if cols and st.dim() == 2 else (Mp, 0, 0)
    return M, Mp, K, x.stride(0), sq[0], sqt[0], sq[1], sq[2], sqt[1], sqt[2]


def prepare_pair_amax(x, q, s, qt, st, amax, clear, granularity, rows, cols, interpret: bool = False):
    """(kernel, args, kwargs, grid) of the pair's amax pass ("tensor", "row") for `launch_pair`."""
    M, K = x.shape
    bm, bk = PAIR_AMAX_TILE
    meta = {} if interpret else dict(num_warps=8, **KERNEL_OPTIONS)
    return (_pair_amax_kernel, (x, amax, amax[M:] if granularity == "row" else amax, M, K, x.stride(0)),
            dict(TENSOR=granularity == "tensor", ROWS=rows, COLS=cols, BLOCK_M=bm, BLOCK_K=bk, **meta),
            (-(-M // bm) * -(-K // bk),))


def prepare_pair_cast(x, q, s, qt, st, amax, clear, granularity, rows, cols, interpret: bool = False):
    """(kernel, args, kwargs, grid) of the pair's cast for `launch_pair` (it zeroes `clear`
    but block-wise)."""
    M, Mp, K, *strides = _pair_scalars(x, q, s, qt, st, rows, cols)
    mode = _PAIR_MODES[granularity]
    bm, bk = PAIR_CAST_TILE
    meta = {} if interpret else dict(num_warps=PAIR_CAST_WARPS, **KERNEL_OPTIONS)
    return (_pair_cast_kernel, (x, q, s, qt, st, amax, amax[M:] if mode == 1 else amax, clear, M, Mp, K, *strides,
                                _clear_words(clear, mode)),
            dict(FP8_MAX=FP8_MAX[q.dtype], MODE=mode, ROWS=rows, COLS=cols, BLOCK_M=bm, BLOCK_K=bk,
                 GROUP_K=SCALE_BLOCK, **meta),
            (-(-Mp // bm) * -(-K // bk),))


def quantize_fp8_pair(x: torch.Tensor, granularity: str = "row", dtype: torch.dtype = torch.float8_e4m3fn,
                      pad: int = 16, rows: bool = True, cols: bool = True):
    """(q, s, qt, st) of a 2-D x (M, K) (module docstring, the pair table): (q, s) =
    quantize_fp8(x, granularity, dtype); (qt, st) = quantize_fp8(xᵀ with M padded by zeros to M',
    granularity, dtype): qt (K, M') contiguous, scaled along M — bitwise both, in fewer reads of
    x. "block" and "block128x128" need pad a multiple of 128. rows / cols False: that pair is
    not computed (empty tensors). While torch.compile traces, the ``pingpong::quantize_fp8_pair`` op."""
    if traced(x):
        return torch.ops.pingpong.quantize_fp8_pair(x, granularity, dtype, pad, rows, cols)
    return quantize_pair_direct(x, granularity, dtype, pad, rows, cols)


@torch.library.custom_op("pingpong::quantize_fp8_pair", mutates_args=())
def _quantize_pair_op(x: torch.Tensor, granularity: str, dtype: torch.dtype, pad: int, rows: bool,
                      cols: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return quantize_pair_direct(x, granularity, dtype, pad, rows, cols)


@_quantize_pair_op.register_fake
def _(x, granularity, dtype, pad, rows, cols):
    inductor.register()
    check_pair(x, granularity, dtype, pad, rows, cols, device_checks=False)
    return pair_like(x, granularity, dtype, pad, rows, cols)


@inductor.lowered("quantize_fp8_pair")
def quantize_fp8_pair_out(x, *, granularity, dtype, pad, rows, cols, out):
    """pingpong::quantize_fp8_pair into inductor's buffers (q, s, qt, st) (pingpong.integration.inductor)."""
    quantize_pair_direct(x, granularity, dtype, pad, rows, cols, out)


@torch.library.custom_op("pingpong::quantize_fp8", mutates_args=())
def _quantize_op(x: torch.Tensor, granularity: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_direct(x, granularity, dtype)


@_quantize_op.register_fake
def _(x, granularity, dtype):
    inductor.register()
    check_quantize(x, granularity, dtype, device_checks=False)
    return rows_like(x, granularity, dtype)


@inductor.lowered("quantize_fp8")
def quantize_fp8_out(x, *, granularity, dtype, out):
    """pingpong::quantize_fp8 into inductor's buffers (q, s) (pingpong.integration.inductor)."""
    quantize_direct(x, granularity, dtype, out)


#: quantize_fp8_columns's strip: BLOCK_N rows a step, BLOCK_K columns a program (128-byte rows of
#: a bf16 load, 128-byte rows of the transposed fp8 store), and its warps
COLUMNS_TILE, COLUMNS_WARPS = (128, 64), 4


def check_columns(x, dtype, amax=None, device_checks: bool = True) -> None:
    """PingpongError naming the argument for anything quantize_fp8_columns does not take."""
    check_tensor("x", x)
    if x.dim() != 3 or not x.is_contiguous():
        raise PingpongError(f"x: expected a contiguous 3-D (G, N, K) tensor, got shape {tuple(x.shape)} and strides"
                            f" {tuple(x.stride())}")
    check_quantize(x.view(-1, x.shape[2]), "row", dtype, device_checks)
    if amax is not None:
        G, _, K = x.shape
        check_tensor("amax", amax)
        if amax.dtype != torch.float32 or tuple(amax.shape) != (G, K) or not amax.is_contiguous():
            raise PingpongError(f"amax: expected the columns' maxima, a contiguous float32 (G, K) = {(G, K)} tensor,"
                                f" got {amax.dtype} of shape {tuple(amax.shape)} and strides {tuple(amax.stride())}")
        if amax.device != x.device:
            raise PingpongError(f"amax: on {amax.device}; expected x's device {x.device}")


def columns_like(x, dtype):
    """quantize_fp8_columns's outputs (q (G, K, N), s (G, K) fp32), uninitialized."""
    G, N, K = x.shape
    return x.new_empty((G, K, N), dtype=dtype), torch.empty(G, K, dtype=torch.float32, device=x.device)


def quantize_columns_direct(x, dtype=torch.float8_e4m3fn, amax=None, out=None):
    """quantize_fp8_columns on the direct path: validate, launch; into `out` = (q, s) when
    given (inductor's buffers, laid out as `columns_like`). A kept parameter's copy
    (pingpong.kept) is made once per block: returned as kept, or copied into `out`."""
    check_columns(x, dtype, amax)
    if keeping(x):
        q, s = kept(x, ("columns", dtype), lambda: _columns(x, dtype, amax, None))
        return (q, s) if out is None else (out[0].copy_(q), out[1].copy_(s))
    return _columns(x, dtype, amax, out)


def _columns(x, dtype, amax, out):
    """quantize_columns_direct's launch on checked arguments, never kept (as `_stacked`)."""
    q, s = columns_like(x, dtype) if out is None else out
    if x.shape[1] == 0:  # empty columns: the scale of an all-zero group, as quantize_fp8's
        s.fill_(_EPS / FP8_MAX[dtype])
    elif q.numel():
        launch_columns(x, q, s, amax)
    return q, s


def launch_columns(x, q, s, amax=None) -> None:
    """quantize_fp8_columns's kernel on a checked, non-empty x (and amax, the columns' maxima, or
    None), through Triton's JIT (the interpreter for CPU tensors)."""
    G, N, K = x.shape
    bn, bk = COLUMNS_TILE
    meta = {} if x.device.type == "cpu" else dict(num_warps=COLUMNS_WARPS, **KERNEL_OPTIONS)
    _columns_kernel[(-(-K // bk), G)](x, q, s, s if amax is None else amax, N, K, x.stride(0), x.stride(1),
                                       FP8_MAX=FP8_MAX[q.dtype], BLOCK_N=bn, BLOCK_K=bk, AMAX=amax is not None,
                                       **meta)


def quantize_fp8_columns(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn, amax=None):
    """(q, s) of stacked matrices x (G, N, K) (contiguous) quantized along N, row-wise per
    group and column, and written transposed: q (G, K, N) contiguous, s (G, K) fp32 — bitwise
    quantize_fp8(x.transpose(1, 2).reshape(G·K, N), "row", dtype) viewed so, without that
    transposed copy of x (two reads of x, mostly the second from L2, and one fp8 write). With
    `amax`, each column's max |x| along N ((G, K) fp32, as `quantize_stacked_direct` gives it
    while it quantizes the rows), one read of x: the same q and s. The FP8 data gradient's b of
    an experts' weights (pingpong.fp8_grouped_training). While torch.compile traces, the
    ``pingpong::quantize_fp8_columns`` op."""
    if traced(x, amax):
        return torch.ops.pingpong.quantize_fp8_columns(x, dtype, amax)
    return quantize_columns_direct(x, dtype, amax)


@torch.library.custom_op("pingpong::quantize_fp8_columns", mutates_args=())
def _quantize_columns_op(x: torch.Tensor, dtype: torch.dtype,
                         amax: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_columns_direct(x, dtype, amax)


@_quantize_columns_op.register_fake
def _(x, dtype, amax=None):
    inductor.register()
    check_columns(x, dtype, amax, device_checks=False)
    return columns_like(x, dtype)


@inductor.lowered("quantize_fp8_columns")
def quantize_fp8_columns_out(x, *optional, amax: bool = False, dtype, out):
    """pingpong::quantize_fp8_columns into inductor's buffers (q, s) (pingpong.integration.inductor)."""
    quantize_columns_direct(x, dtype, optional[0] if amax else None, out)


@triton.jit
def _blocks_t_kernel(x, qt, st, N, K, FP8_MAX: tl.constexpr, BLOCK: tl.constexpr):
    """One BLOCK × BLOCK block of stacked matrices x (G, N, K) (contiguous, BLOCK dividing N and
    K; seen as (G·N, K)): one scale (the 128×128 block recipe's, _block_kernel's math), the
    block cast and stored transposed, qt[g, k, n], its scale at st[g, k / BLOCK, n / BLOCK]."""
    rb, kb = _tile(K // BLOCK, False)
    rows = rb * BLOCK + tl.arange(0, BLOCK)  # rows of the (G·N, K) view, inside expert g
    cols = kb * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + rows[:, None] * K + cols[None, :]).to(tl.float32)
    scale, inv = _scale_inv(tl.max(tl.max(tl.abs(v), axis=1), axis=0), FP8_MAX)
    qv = _saturate(v * inv, FP8_MAX).to(qt.dtype.element_ty)
    g = rb * BLOCK // N
    n = rows - g * N
    tl.store(qt + g * K * N + cols[:, None] * N + n[None, :], tl.trans(qv))
    tl.store(st + (g * (K // BLOCK) + kb) * (N // BLOCK) + (rb * BLOCK - g * N) // BLOCK, scale)


def check_blocks_t(x, dtype, device_checks: bool = True) -> None:
    """PingpongError naming the argument for anything quantize_fp8_blocks_t does not take."""
    check_tensor("x", x)
    if x.dim() != 3 or not x.is_contiguous() or x.shape[1] % SCALE_BLOCK or x.shape[2] % SCALE_BLOCK:
        raise PingpongError(f"x: expected a contiguous 3-D (G, N, K) tensor, N and K multiples of {SCALE_BLOCK}, got"
                            f" shape {tuple(x.shape)} and strides {tuple(x.stride())}")
    check_quantize(x.view(x.shape[0] * x.shape[1], x.shape[2]), "block128x128", dtype, device_checks)


def blocks_t_like(x, dtype):
    """quantize_fp8_blocks_t's outputs (qt (G, K, N), st (G, K/128, N/128) fp32), uninitialized."""
    G, N, K = x.shape
    return (x.new_empty((G, K, N), dtype=dtype),
            torch.empty(G, K // SCALE_BLOCK, N // SCALE_BLOCK, dtype=torch.float32, device=x.device))


def quantize_blocks_t_direct(x, dtype=torch.float8_e4m3fn, out=None):
    """quantize_fp8_blocks_t on the direct path: validate, launch; into `out` = (qt, st) when
    given (inductor's buffers, laid out as `blocks_t_like`)."""
    check_blocks_t(x, dtype)
    qt, st = blocks_t_like(x, dtype) if out is None else out
    if qt.numel():
        launch_blocks_t(x, qt, st)
    return qt, st


def launch_blocks_t(x, qt, st) -> None:
    """quantize_fp8_blocks_t's kernel on a checked, non-empty x, through Triton's JIT (the
    interpreter for CPU tensors)."""
    G, N, K = x.shape
    meta = {} if x.device.type == "cpu" else dict(num_warps=8, **KERNEL_OPTIONS)
    _blocks_t_kernel[(G * N // SCALE_BLOCK * (K // SCALE_BLOCK),)](x, qt, st, N, K, FP8_MAX=FP8_MAX[qt.dtype],
                                                                  BLOCK=SCALE_BLOCK, **meta)


def quantize_fp8_blocks_t(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn):
    """(qt, st) of stacked matrices x (G, N, K) (contiguous; N, K multiples of 128) quantized in
    128×128 blocks and written transposed: qt (G, K, N) contiguous, st (G, K/128, N/128) fp32 —
    bitwise quantize_fp8(x.view(G·N, K), "block128x128", dtype) transposed per matrix (a block
    holds the same values in W_g and W_gᵀ), in one read of x and one fp8 write, without the fp8
    transposed copy. The block recipe's data-gradient b of an experts' weights
    (pingpong.fp8_grouped_training). While torch.compile traces, the
    ``pingpong::quantize_fp8_blocks_t`` op."""
    if traced(x):
        return torch.ops.pingpong.quantize_fp8_blocks_t(x, dtype)
    return quantize_blocks_t_direct(x, dtype)


@torch.library.custom_op("pingpong::quantize_fp8_blocks_t", mutates_args=())
def _quantize_blocks_t_op(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_blocks_t_direct(x, dtype)


@_quantize_blocks_t_op.register_fake
def _(x, dtype):
    inductor.register()
    check_blocks_t(x, dtype, device_checks=False)
    return blocks_t_like(x, dtype)


@inductor.lowered("quantize_fp8_blocks_t")
def quantize_fp8_blocks_t_out(x, *, dtype, out):
    """pingpong::quantize_fp8_blocks_t into inductor's buffers (qt, st) (pingpong.integration.inductor)."""
    quantize_blocks_t_direct(x, dtype, out)


#: quantize_stacked_direct's rows per program: one atomic max per column per that many rows
STACKED_ROWS = 32


def quantize_stacked_direct(x, dtype=torch.float8_e4m3fn, amax=None):
    """(q, s, amax) of stacked matrices x (G, N, K) (contiguous, K ≤ MAX_ROW), one read of x:
    (q (G, N, K), s (G, N)) each row quantized along K, bitwise quantize_fp8(x.view(G·N, K),
    "row", dtype) viewed so, and amax (G, K) fp32, each column's max |x| along N (unclamped):
    what quantize_fp8_columns(x, dtype, amax) casts x along N with in one more read, where it
    would otherwise read x twice. The forward of pingpong.fp8_grouped_training (direct path
    only: it runs inside that module's op). Into `amax` when given (inductor's buffer)."""
    check_columns(x, dtype)
    G, N, K = x.shape
    if K > MAX_ROW:
        raise PingpongError(f"x: rows of K = {K} > {MAX_ROW} elements are not held in registers; quantize the rows"
                            " and the columns separately")
    if keeping(x):  # a kept parameter (pingpong.kept): its maxima handed out as a copy, never the kept tensor
        q, s, kept_amax = kept(x, ("stacked", dtype), lambda: _stacked(x, dtype, None))
        return q, s, kept_amax.clone() if amax is None else amax.copy_(kept_amax)
    return _stacked(x, dtype, amax)


def _stacked(x, dtype, amax):
    """quantize_stacked_direct's launch on checked arguments, never kept."""
    G, N, K = x.shape
    q = torch.empty_like(x, dtype=dtype)
    s = torch.empty(G, N, dtype=torch.float32, device=x.device)
    amax = torch.zeros(G, K, dtype=torch.float32, device=x.device) if amax is None else amax.zero_()
    if x.numel() == 0:
        s.fill_(_EPS / FP8_MAX[dtype])
        return q, s, amax
    launch_stacked(x, q, s, amax)
    return q, s, amax


def launch_stacked(x, q, s, amax) -> None:
    """quantize_stacked_direct's kernel on a checked, non-empty x and its outputs (amax zeroed),
    through Triton's JIT (the interpreter for CPU tensors)."""
    G, N, K = x.shape
    _, bk, bm, warps = _row_tile(K)
    steps = max(1, STACKED_ROWS // bm)
    meta = {} if x.device.type == "cpu" else dict(num_warps=warps, **KERNEL_OPTIONS)
    _stacked_row_kernel[(-(-N // (bm * steps)), G)](x, q, s, amax, N, K, x.stride(1), q.stride(1),
                                                    FP8_MAX=FP8_MAX[q.dtype], BLOCK_M=bm, BLOCK_K=bk, STEPS=steps,
                                                    **meta)
