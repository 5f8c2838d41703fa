"""The split-K reduction: out = cast(α·Σ_s partial[s] + β·C), the splits summed in a fixed order.

The GEMM kernel's split-K / swap-AB work units store fp32 partial tiles into a workspace
(pingpong.hopper.scheduler.SplitKScheduler); this kernel reads them back. Each program owns
one BLOCK_R × BLOCK_C block of out and adds the splits in order 0, 1, ..., S-1, so every
run rounds the same way: results are bitwise repeatable (no atomics, no arrival order).

    workspace (fp32)                          out (M × N, row-major)
    ┌──────────────┐ split 0 (R_pad rows)
    │   partial 0  │ ─┐
    ├──────────────┤  │  acc = p0 + p1 + ... + p(S-1)     (fixed order)
    │   partial 1  │ ─┼─> out = cast(α·acc + β·C) ───────> block (r, c)
    ├──────────────┤  │
    │     ...      │ ─┘
    └──────────────┘

SWAP (swap-AB): the workspace holds Cᵀ, element (m, n) of split s at s·split_stride + n·ld + m.
It is read with m fastest (coalesced along the workspace rows) and `convert_layout` turns the
block around through shared memory so the stores to out run along n.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

BLOCK_R = 64
BLOCK_C = 64
NUM_WARPS = 4


@gluon.constexpr_function
def _rows_fastest(num_warps):
    """Blocked layout over a [BLOCK_R, BLOCK_C] block with dim 0 contiguous (transposed reads)."""
    return gl.BlockedLayout([4, 1], [16, 2], [1, num_warps], [0, 1])


@gluon.constexpr_function
def _cols_fastest(num_warps):
    """Blocked layout with dim 1 contiguous (row-major reads and every store to out)."""
    return gl.BlockedLayout([1, 4], [2, 16], [num_warps, 1], [1, 0])


@gluon.jit
def _block_offsets(r0, c0, BR: gl.constexpr, BC: gl.constexpr, layout: gl.constexpr):
    rows = r0 + gl.arange(0, BR, layout=gl.SliceLayout(1, layout))
    cols = c0 + gl.arange(0, BC, layout=gl.SliceLayout(0, layout))
    return gl.expand_dims(rows, 1), gl.expand_dims(cols, 0)


@gluon.jit(do_not_specialize=["M", "N", "splits"])
def reduce_splits(ws_ptr, c_ptr, out_ptr, M, N, splits, split_stride, ws_ld, c_ld, out_ld, alpha, beta,
                  HAS_C: gl.constexpr, SWAP: gl.constexpr, BR: gl.constexpr, BC: gl.constexpr):
    """One BR × BC block of out (row-major, leading dimension out_ld) from `splits` partials.

    Not SWAP: partial (m, n) of split s at ws_ptr + s·split_stride + m·ws_ld + n.
    SWAP:     partial (m, n) of split s at ws_ptr + s·split_stride + n·ws_ld + m.
    """
    store_layout: gl.constexpr = _cols_fastest(gl.num_warps())
    load_layout: gl.constexpr = _rows_fastest(gl.num_warps()) if SWAP else store_layout
    r0 = gl.program_id(0) * BR
    c0 = gl.program_id(1) * BC
    rows, cols = _block_offsets(r0, c0, BR, BC, load_layout)
    inside = (rows < M) & (cols < N)
    if SWAP:
        offs = cols.to(gl.int64) * ws_ld + rows
    else:
        offs = rows.to(gl.int64) * ws_ld + cols
    partial = ws_ptr + offs
    acc = gl.load(partial, mask=inside, other=0.0)
    for _ in range(1, splits):  # fixed order: bitwise repeatable
        partial += split_stride  # pointer steps: no 32-bit product of split and stride
        acc += gl.load(partial, mask=inside, other=0.0)
    acc = gl.convert_layout(acc, store_layout) * alpha
    rows, cols = _block_offsets(r0, c0, BR, BC, store_layout)
    inside = (rows < M) & (cols < N)
    if HAS_C:
        acc += beta * gl.load(c_ptr + rows.to(gl.int64) * c_ld + cols, mask=inside, other=0.0).to(gl.float32)
    gl.store(out_ptr + rows.to(gl.int64) * out_ld + cols, acc.to(out_ptr.dtype.element_ty), mask=inside)
