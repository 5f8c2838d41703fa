"""The Hopper FP8 GEMM (e4m3/e5m2 operands, fp32 accumulation, scaled): orchestration only.

    out = act(scale(A @ B) + bias)        A (M, K) and B as W (N, K): both K-major in shared
                                           memory (fp8 wgmma reads no transposed operand)

The same parts as the 16-bit kernels (pingpong.hopper.kernel): the producer warp and its
TileLoader fill the Ring, the TileScheduler hands out tiles, the two consumer warpgroups run
the ping-pong (PhaseSync turns) or cooperative (64-row halves) schedule, the Epilogue adds
the bias, applies the activation, casts and stores through TMA. What is new is the consumer's
K loop and where the scales go (Fp8Scales):

    SCALING   scale_a          scale_b              applied
    tensor    one fp32          one fp32             acc · sa · sb before the epilogue
    row       (M, 1)            (1, N)               acc · sa[m] · sb[n] before the epilogue
    block     (M, K/128)        (K/128, N/128)       per 128-deep K block, at the promotion:
              per 1×128         per 128×128            acc += part · sa[m, kb] · sb[kb, n/128]
                                or (K/128, N) 1×128

Hopper's fp8 wgmma accumulates with reduced precision. PROMOTE (the default: torch's
use_fast_accum=False) gives every 128-deep K block (one ring slot, BK = 128) a fresh wgmma
accumulator and adds it into the fp32 accumulator in registers; without PROMOTE (fast
accumulation; tensor/row only) the wgmmas accumulate in place, the 16-bit kernels' mainloop.

PROMOTED K LOOP (one consumer warpgroup; the other does the same on its tile or half):

    k-step │ wait ready(k) │ wgmma(slot k) -> part (fresh) ┐ load sa[·, k+1], sb[k+1, ·]
           │               │                              │ (the other buffer; lands by k+1)
           │               │ wait(0) ─────────────────────┘ release(k)
           │               │ acc += part · sa[·, k] · sb[k, ·]    (tensor/row: acc += part)
    cooperative: while this warpgroup promotes, the other's wgmmas (its 64-row half) keep the
    tensor cores busy. Ping-pong holds its turn through the whole promoted K loop, so there
    the promotions are not overlapped; it runs M ≤ 128, where streaming the weight from HBM,
    not the tensor cores, sets the pace.

PING-PONG (PINGPONG): consumer c takes the CTA's tiles c, c+2, ...; its K loop runs in its
turn, the scales and the epilogue of its tile while the other consumer's K loop runs.

    producer  │ load t0 k0..kn │ load t1 k0..kn │ load t2 ...
    consumer0 │ K loop t0 ═════│ scale, epi t0  │ K loop t2 ═════│ ...
    consumer1 │ wait turn      │ K loop t1 ═════│ scale, epi t1  │ ...

COOPERATIVE: both consumers read every slot (RELEASERS = 2), each its 64-row half of A.

    producer  │ load t0 k0..kn │ load t1 k0..kn │ ...
    consumer0 │ K loop t0 rows 0..63   │ scale, epi │ K loop t1 ...
    consumer1 │ K loop t0 rows 64..127 │ scale, epi │ K loop t1 ...

Split-K and swap-AB are not built for FP8 (pingpong.hopper.fp8_launch.select_fp8 says
which tiles run instead).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_wait
from triton.language.core import _aggregate as aggregate

from .epilogue import Epilogue
from .kernel import finish_mainloop, mainloop, producer
from .loader import TileLoader
from .mma import MmaOp
from .phase_sync import PhaseSync
from .pipeline import Ring, first_counter
from .scheduler import TileScheduler

#: K elements per scale block (and per promotion): DeepSeek-V3's 1×128 / 128×128 blocks.
SCALE_BLOCK = gl.constexpr(128)


@aggregate
class Fp8Scales:
    """Where the scales are and how they apply (module docstring's table).

    sa[m, kb] is at sa + m·sa_row + kb·sa_k; sb[kb, n] at sb + (n // SB_COLS)·sb_col + kb·sb_k
    (SB_COLS = 128: one scale per 128 columns; 1: one per column). Tensor-wise scales are the
    first element of each; row-wise, sa_k and sb_k are unused."""

    sa: gl.tensor
    sb: gl.tensor
    sa_row: gl.tensor
    sa_k: gl.tensor
    sb_col: gl.tensor
    sb_k: gl.tensor
    M: gl.tensor
    N: gl.tensor
    SCALING: gl.constexpr
    SB_COLS: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, sa, sb, sa_row, sa_k, sb_col, sb_k, M, N, SCALING, SB_COLS):
        self.sa = sa
        self.sb = sb
        self.sa_row = sa_row
        self.sa_k = sa_k
        self.sb_col = sb_col
        self.sb_k = sb_k
        self.M = M
        self.N = N
        self.SCALING = gl.constexpr(SCALING)
        self.SB_COLS = gl.constexpr(SB_COLS)

    @gluon.jit
    def rows(self, off_m, ROWS: gl.constexpr, layout: gl.constexpr):
        """Row indices off_m .. off_m+ROWS-1 in the accumulator's row layout."""
        return off_m + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))

    @gluon.jit
    def cols(self, off_n, COLS: gl.constexpr, layout: gl.constexpr):
        return off_n + gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))

    @gluon.jit
    def block_scales(self, kb, off_m, off_n, ROWS: gl.constexpr, COLS: gl.constexpr, layout: gl.constexpr):
        """K block kb's scales of the tile's rows and columns: sa[rows, kb] (one per row) and
        sb[kb, ·]: one value for the tile (SB_COLS = 128: BN divides 128, fp8_gemm asserts it)
        or one per column (SB_COLS = 1)."""
        rows = self.rows(off_m, ROWS, layout)
        sa = gl.load(self.sa + rows * self.sa_row + kb * self.sa_k, mask=rows < self.M, other=0.0)
        if self.SB_COLS == 1:
            cols = self.cols(off_n, COLS, layout)
            sb = gl.load(self.sb + cols * self.sb_col + kb * self.sb_k, mask=cols < self.N, other=0.0)
        else:
            sb = gl.load(self.sb + (off_n // self.SB_COLS) * self.sb_col + kb * self.sb_k)
        return sa, sb

    @gluon.jit
    def scale_part(self, part, sa, sb):
        """part·sa[m]·sb[n], multiplied in place (no [ROWS, COLS] factor tensor is built: with
        one scale per column it would hold as many registers as the accumulator)."""
        if self.SB_COLS == 1:
            part = part * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
        else:
            part = part * gl.expand_dims(sa * sb, 1)
        return part

    @gluon.jit
    def apply_outer(self, acc, off_m, off_n):
        """Tensor-wise acc·sa·sb, row-wise acc·sa[m]·sb[n]; block-wise scales are already in acc."""
        layout: gl.constexpr = acc.type.layout
        if self.SCALING == "tensor":
            acc = acc * (gl.load(self.sa) * gl.load(self.sb))
        elif self.SCALING == "row":
            rows = self.rows(off_m, acc.shape[0], layout)
            cols = self.cols(off_n, acc.shape[1], layout)
            sa = gl.load(self.sa + rows * self.sa_row, mask=rows < self.M, other=0.0)
            sb = gl.load(self.sb + cols * self.sb_col, mask=cols < self.N, other=0.0)
            acc = acc * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
        return acc


@gluon.jit
def promoted_mainloop(ring, scales, first, k_steps, k_block0, off_m, off_n, ROW0: gl.constexpr, ROWS: gl.constexpr,
                      COLS: gl.constexpr, acc_layout: gl.constexpr):
    """One consumer's K loop with promotion (module docstring): each ring slot (one 128-deep K
    block) is multiplied into a fresh wgmma accumulator `part`, which is added (block-wise:
    scaled) into the fp32 accumulator. Every slot is released as soon as its wgmma is done.

    `part` is carried through the loop as the wgmma's (ignored, use_acc=False) input so its
    registers are reused, not re-zeroed. Block-wise (128×128 b scales), the loop takes two
    k-steps per iteration with the scales double-buffered (promote_step): step k loads block
    k+1's scales right after issuing its wgmma, into the registers step k-1 read, so they land
    during step k. (A single buffer either ended each iteration with a register copy that
    waited for the load, or, loaded after the promotion, had the compiler hoist the scale
    product above the next wgmma issue, which then waited for it: 0.84 of torch._scaled_mm
    at 8192³.) With one b scale per column (1×128) the registers for a second buffer are not
    there (the compiler spilled): block k's scales load while its own wgmma runs."""
    acc = gl.zeros((ROWS, COLS), dtype=gl.float32, layout=acc_layout)
    part = gl.zeros((ROWS, COLS), dtype=gl.float32, layout=acc_layout)
    if scales.SCALING == "block" and scales.SB_COLS != 1:
        # two k-steps per iteration, the scales double-buffered: each step loads the next
        # step's scales right after issuing its wgmma, into the registers the step before read
        last = k_block0 + k_steps - 1
        sa0, sb0 = scales.block_scales(k_block0, off_m + ROW0, off_n, ROWS, COLS, acc_layout)
        for k in range(0, k_steps - 1, 2):
            part, acc, sa1, sb1 = promote_step(ring, scales, part, acc, first + k, sa0, sb0, k_block0 + k + 1, off_m,
                                               off_n, ROW0, ROWS, COLS, acc_layout)
            part, acc, sa0, sb0 = promote_step(ring, scales, part, acc, first + k + 1, sa1, sb1,
                                               gl.minimum(k_block0 + k + 2, last), off_m, off_n, ROW0, ROWS, COLS,
                                               acc_layout)
        if k_steps % 2:
            part, acc, sa0, sb0 = promote_step(ring, scales, part, acc, first + k_steps - 1, sa0, sb0, last, off_m,
                                               off_n, ROW0, ROWS, COLS, acc_layout)
    else:
        for k in range(k_steps):
            s = ring.wait_ready(first + k)
            a = ring.a_bufs.index(s).slice(ROW0, ROWS, 0)
            b = ring.b_bufs.index(s).permute((1, 0))  # K-major [BN, BK] slot as wgmma's [K, N] view
            part = warpgroup_mma(a, b, part, use_acc=False, is_async=True)
            if scales.SCALING == "block":  # one b scale per column: no registers for a prefetch
                sa_k, sb_k = scales.block_scales(k_block0 + k, off_m + ROW0, off_n, ROWS, COLS, acc_layout)
                part = warpgroup_mma_wait(0, (part,))
                ring.release(first + k)
                acc = acc + scales.scale_part(part, sa_k, sb_k)
            else:
                part = warpgroup_mma_wait(0, (part,))
                ring.release(first + k)
                acc = acc + part
    return acc


@gluon.jit
def promote_step(ring, scales, part, acc, counter, sa, sb, next_kb, off_m, off_n, ROW0: gl.constexpr,
                 ROWS: gl.constexpr, COLS: gl.constexpr, acc_layout: gl.constexpr):
    """One promoted block-wise k-step (ring counter `counter`) with its scales sa, sb already in
    registers; returns (part, acc, the scales of K block next_kb), whose loads are issued
    right after this step's wgmma and so have the rest of this step to land."""
    s = ring.wait_ready(counter)
    a = ring.a_bufs.index(s).slice(ROW0, ROWS, 0)
    b = ring.b_bufs.index(s).permute((1, 0))
    part = warpgroup_mma(a, b, part, use_acc=False, is_async=True)
    sa_next, sb_next = scales.block_scales(next_kb, off_m + ROW0, off_n, ROWS, COLS, acc_layout)
    part = warpgroup_mma_wait(0, (part,))
    ring.release(counter)
    acc = acc + scales.scale_part(part, sa, sb)
    return part, acc, sa_next, sb_next


@gluon.jit
def k_loop(ring, scales, first, k_steps, k_block0, off_m, off_n, ROW0: gl.constexpr, ROWS: gl.constexpr,
           COLS: gl.constexpr, acc_layout: gl.constexpr, PROMOTE: gl.constexpr, sync, CONSUMER: gl.constexpr,
           PINGPONG: gl.constexpr):
    """The tile's fp32 accumulator: promoted, or the 16-bit kernels' in-place mainloop (fast
    accumulation). Under PINGPONG the turn passes to the other consumer once the last wgmma
    is issued (promoted: once it is done)."""
    if PROMOTE:
        acc = promoted_mainloop(ring, scales, first, k_steps, k_block0, off_m, off_n, ROW0, ROWS, COLS, acc_layout)
        if PINGPONG:
            sync.pass_turn(CONSUMER)
    else:
        mma = mainloop(ring, first, k_steps, ROW0, ROWS, COLS, 0, acc_layout, acc_layout, True, True)
        if PINGPONG:
            sync.pass_turn(CONSUMER)
        mma = finish_mainloop(mma, ring, first + k_steps - 1)
        acc = mma.acc
    return acc


@gluon.jit
def store_tile(epi, scales, acc, CONSUMER: gl.constexpr, count, off_m, off_n):
    """The outer scales, then the shared epilogue (bias, activation, cast, TMA store)."""
    acc = scales.apply_outer(acc, off_m, off_n)
    epi.store(MmaOp(acc, gl.to_tensor(0), gl.to_tensor(True), 1), CONSUMER, count, off_m, off_n, 0, 0)


@gluon.jit
def fp8_pingpong_consumer(ring, sched, epi, scales, sync, CONSUMER: gl.constexpr, acc_layout: gl.constexpr,
                          PROMOTE: gl.constexpr):
    """Consumer CONSUMER takes this program's tiles CONSUMER, CONSUMER+2, ... (PhaseSync turns)."""
    for j in range((sched.local_tiles() - CONSUMER + 1) // 2):
        t = 2 * j + CONSUMER
        off_m, off_n = sched.tile_offsets(t)
        first = first_counter(j, sched.k_steps, 2, CONSUMER)
        sync.wait_turn(CONSUMER, j)
        acc = k_loop(ring, scales, first, sched.k_steps, 0, off_m, off_n, 0, sched.BM, sched.BN, acc_layout, PROMOTE,
                     sync, CONSUMER, True)
        store_tile(epi, scales, acc, CONSUMER, j, off_m, off_n)
    epi.drain()


@gluon.jit
def fp8_cooperative_consumer(ring, sched, epi, scales, CONSUMER: gl.constexpr, acc_layout: gl.constexpr,
                             PROMOTE: gl.constexpr):
    """Consumer CONSUMER computes rows [CONSUMER·BM/2, (CONSUMER+1)·BM/2) of every tile."""
    ROWS: gl.constexpr = sched.BM // 2
    for t in range(sched.local_tiles()):
        off_m, off_n = sched.tile_offsets(t)
        first = first_counter(t, sched.k_steps, 1, 0)  # both consumers read every k-step
        acc = k_loop(ring, scales, first, sched.k_steps, 0, off_m, off_n, CONSUMER * ROWS, ROWS, sched.BN, acc_layout,
                     PROMOTE, 0, CONSUMER, False)
        store_tile(epi, scales, acc, CONSUMER, t, off_m + CONSUMER * ROWS, off_n)
    epi.drain()


@gluon.jit(do_not_specialize=["M", "N", "K", "sa_row", "sa_k", "sb_col", "sb_k"])
def fp8_gemm(a_desc, b_desc, c_desc, bias, sa, sb, M, N, K, sa_row, sa_k, sb_col, sb_k,
             SCALING: gl.constexpr, PROMOTE: gl.constexpr, SB_COLS: gl.constexpr,
             BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
             EPI_BUFS: gl.constexpr, PINGPONG: gl.constexpr, acc_layout: gl.constexpr,
             CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr, RELEASERS: gl.constexpr,
             CONSUMER_WARPS: gl.constexpr, PRODUCER_WARPS: gl.constexpr, BIAS: gl.constexpr,
             ACTIVATION: gl.constexpr):
    """Ping-pong or cooperative FP8 GEMM (module docstring): out = act(scale(A·Bᵀ) + bias)."""
    gl.static_assert(STAGES >= 2, "the ring needs at least 2 stages")
    gl.static_assert(RELEASERS == (1 if PINGPONG else 2), "ping-pong: one consumer frees a slot; cooperative: both")
    gl.static_assert(SCALING == "tensor" or SCALING == "row" or SCALING == "block", "SCALING: tensor, row or block")
    gl.static_assert(not PROMOTE or BK == SCALE_BLOCK, "a promotion (and a scale block) is one 128-deep ring slot")
    gl.static_assert(PROMOTE or SCALING != "block", "block scales are applied at the promotion")
    gl.static_assert(SCALING != "block" or SB_COLS == 1 or SB_COLS % BN == 0,
                     "128×128 b scales: a tile's columns share one scale per K block (BN divides 128)")
    sched = TileScheduler.create(M, N, K, BM, BN, BK, GROUP_M, 1)
    ring = Ring.allocate(a_desc, b_desc, STAGES, RELEASERS)
    epi = Epilogue.allocate(c_desc, c_desc, gl.to_tensor(1.0), gl.to_tensor(0.0), False, 2, EPI_BUFS, bias, M, N, BIAS, ACTIVATION)
    scales = Fp8Scales(sa, sb, sa_row, sa_k, sb_col, sb_k, M, N, SCALING, SB_COLS)
    loader = TileLoader(a_desc, b_desc, True, True)
    if PINGPONG:
        sync = PhaseSync.allocate()
        gl.warp_specialize([
            (fp8_pingpong_consumer, (ring, sched, epi, scales, sync, 0, acc_layout, PROMOTE)),
            (fp8_pingpong_consumer, (ring, sched, epi, scales, sync, 1, acc_layout, PROMOTE)),
            (producer, (loader, ring, sched)),
        ], [CONSUMER_WARPS, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (fp8_cooperative_consumer, (ring, sched, epi, scales, 0, acc_layout, PROMOTE)),
            (fp8_cooperative_consumer, (ring, sched, epi, scales, 1, acc_layout, PROMOTE)),
            (producer, (loader, ring, sched)),
        ], [CONSUMER_WARPS, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])
