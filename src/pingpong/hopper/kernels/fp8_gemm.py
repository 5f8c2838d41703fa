"""The Hopper FP8 GEMM (e4m3/e5m2 operands, fp32 accumulation, scaled): orchestration only.

    out = act(scale(A @ B) + bias)        A (M, K) and B as W (N, K): both K-major in shared
                                           memory (fp8 wgmma reads no transposed operand)

The same parts as the 16-bit kernels (pingpong.hopper.kernels.gemm): the producer warp fills the
Ring (Fp8Loader: TileLoader's A and B boxes, and block-wise the slot's scales), the
TileScheduler hands out tiles, the two consumer warpgroups run the ping-pong (PhaseSync
turns) or cooperative (64-row halves) schedule, the Epilogue adds the bias, applies the
activation, casts and stores through TMA; the partitions are the 16-bit kernels' skeleton
(run_partitions). What is new is the consumer's K loop (Fp8KLoop, the K-loop variant the
skeleton's consumers call) and where the scales go (Fp8Scales):

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

BLOCK SCALES IN THE RING: K block kb's scales travel with its A and B tiles, loaded by the
producer with TMA into the slot's sa and sb boxes and counted on the slot's ready barrier,
so a consumer reads them from shared memory once its wgmma is done, never from global
memory in the K loop (a loop that loaded them from global memory into registers one k-step
ahead ran well behind this one: docs/design.md, FP8):

    slot s   │ A tile [BM, 128] │ B tile [BN, 128] │ sa[kb, off_m : off_m+BM] │ sb box
             ╰──────────── one ready[s] barrier: expect(A + B + sa + sb bytes) ───────╯

PROMOTED K LOOP (one consumer warpgroup; the other does the same on its tile or half):

    k-step │ wait ready(k) │ wgmma(slot k) -> part (fresh) │ wait(0) │
           │ acc += part · (sa[rows, k] · sb[k])    (shared memory; tensor/row: acc += part)
           │ release(k)
    two k-steps per loop iteration into two parts: ptxas then issues k+1's wgmma before k's
    promotion FFMAs (seen in the SASS; faster than one k-step per iteration: docs/design.md,
    FP8). Ping-pong, and cooperative tiles of ≤ 64
    columns, issue both K blocks' wgmmas before waiting for the first (`paired`).
    cooperative: while this warpgroup promotes, the other's wgmmas (its 64-row half) keep the
    tensor cores busy (unless its 64-column wgmmas are too short: `paired`). Ping-pong holds
    its turn through the whole promoted K loop, so there only the second K block's wgmma runs
    under a promotion; it runs M ≤ 128, where streaming the weight from HBM, not the tensor
    cores, sets the pace.

TWO-PIECE TILES (CFG.BN2 > 0: P1 + P2 columns, config.column_pieces, e.g. 128×192 = 128 + 64,
128×144 = 128 + 16; cooperative, unsplit, tensor- and row-wise): the producer loads B as
P1/P2 + 1 boxes into two buffers per slot (TileLoader), each k-step issues one wgmma per
piece, and the promoted loop keeps one set of parts (a 64×192 half's accumulators and parts
fill 192 registers a thread: promoted_pieces):

    k-step │ wait ready(k) │ wgmma(a, b) -> part, wgmma(a, b2) -> part2 │ wait(0) │
           │ acc += part, acc2 += part2 │ release(k)       the epilogue: acc's columns, then acc2's

PING-PONG (PINGPONG): consumer c takes the CTA's tiles c, c+2, ...; its K loop runs in its
turn, the scales and the epilogue of its tile while the other consumer's K loop runs.

    producer  │ load t0 k0..kn │ load t1 k0..kn │ load t2 ...
    consumer0 │ K loop t0 ═════│ scale, epi t0  │ K loop t2 ═════│ ...
    consumer1 │ wait turn      │ K loop t1 ═════│ scale, epi t1  │ ...

COOPERATIVE: both consumers read every slot (RELEASERS = 2), each its 64-row half of A.

    producer  │ load t0 k0..kn │ load t1 k0..kn │ ...
    consumer0 │ K loop t0 rows 0..63   │ scale, epi │ K loop t1 ...
    consumer1 │ K loop t0 rows 64..127 │ scale, epi │ K loop t1 ...

The grouped FP8 kernel (pingpong.hopper.kernels.fp8_grouped) runs these partitions too
(run_fp8_partitions) over its GroupedScheduler: `locate` gives each unit's group as the batch
(b's matrix, the group's b scales), and its tiles start at any row (Fp8Scales.ANY_ROW).

SPLIT-K (fp8_split_gemm; KernelConfig.split_k > 1): the same partitions over SplitKScheduler's
units (a tile and a contiguous range of its K blocks each), as the 16-bit split_k_gemm
(pingpong.hopper.kernels.gemm). A unit's K loop is the one above over its K blocks (block-wise: with
those blocks' scales, so its partial is already scaled); its fp32 partial goes to the
workspace; the last split of a tile to arrive sums the partials in split order and applies
the rest once (SplitEpilogue, pingpong.hopper.device.fixup, with Fp8Scales as its α):

    unit (tile t, split s) │ K blocks [s·S, (s+1)·S) │ ws[s] ← acc, arrive │ last: Σ ws[0..] in order
                           │   → tensor/row scales → bias → activation → cast ──gl.store──> out

STREAM-K (fp8_stream_gemm; KernelConfig.stream_k): the same partitions over StreamKScheduler's
units (pingpong.hopper.kernels.gemm, STREAM-K). A k-step is one 128-deep scale block, so every
split of a tile's K falls on a scale-block boundary: a unit's promoted partial holds whole
blocks, block-wise already scaled, and the fix-up adds fp32 partials as split-K's does.
Whole-tile units take the TMA epilogue (outer scales first), shared tiles the fix-up, whose
sum also leaves through TMA (StreamKEpilogue.finish; pointers with two column pieces):

    whole unit  │ K blocks of the tile │ tensor/row scales → bias → act → cast ──TMA──> out
    shared tile │ unit s: its K blocks │ last to arrive: Σ partials in K order (its own
                │                      │   too) → scales → bias → act → cast ──TMA──> out

SWAP-AB (KernelConfig.swap_ab; tensor- and row-wise scales): the kernels on the exchanged
operands, Cᵀ = W·Aᵀ, so that N fills the wgmma's rows and M its columns (a decode batch's
M ≤ 32 in 16 or 32; a mid-sized M in 128–192). Both operands are K-major, so only their
descriptors trade places, and the scales their roles (fp8_launch.kernel_operands: sa is
scale_b, one per row = n; sb is scale_a, one per column = m); the kernels are unchanged.
An unsplit cooperative tile runs fp8_gemm, whose Epilogue (SWAP) writes each sub-tile
through its staging buffer's transposed view and stores it as a box of out (config.staged_swap);
ping-pong and split tiles run fp8_split_gemm, whose pointer epilogue stores the transposed
tile (SplitEpilogue's SWAP, shared with the 16-bit swap path), with one split or several:

    A ring box  W[n0 : n0+BM, k]   (BM = 64 rows of N)     kernel product R × C = N × M
    B ring box  A[m0 : m0+BN, k]   (BN = 16 or 32 of M)    out[m, n] ← acc[n - n0, m - m0]

A swapped tile may be two column pieces of M, unsplit (BN = 144 = 128 + 16 or 160 = 128 + 32,
for 129-160 rows that a 128-row tile covers in two tile-rows, the second almost empty): its
A boxes load as the dense two-piece tile's B boxes do and promoted_pieces runs its K loop; the
pointer epilogue stores each piece. Block-wise scales do not swap (check_fp8_config says why).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma, warpgroup_mma_wait
from triton.language.core import _aggregate as aggregate

from ...runtime.spec import SCALE_BLOCK as _SCALE_BLOCK
from ..device.epilogue import Epilogue
from ..device.fixup import Alpha, SplitEpilogue
from ..device.loader import TileLoader
from ..device.mma import MmaOp
from ..device.pipeline import Ring, ring_index
from ..device.scheduler import SplitKScheduler, StreamKScheduler, TileScheduler
from .gemm import PlainKLoop, kernel_start, run_partitions, stream_k_epilogue

#: K elements per scale block (and per promotion; runtime.spec.SCALE_BLOCK) as the kernels read it.
SCALE_BLOCK = gl.constexpr(_SCALE_BLOCK)


@gluon.constexpr_function
def unused_layout(num_ctas):
    """Shared layout of a placeholder allocation: in a cluster kernel every CTA holds its own
    copy (the CTA bit moves no element)."""
    return gl.SwizzledSharedLayout(1, 1, 1, [1, 0], [[0, 0]] if num_ctas > 1 else [])


@aggregate
class Fp8Scales:
    """Where the scales are and how they apply (module docstring's table).

    Tensor- and row-wise: sa, sb are pointers, read once per tile (apply_outer); sa[m] of
    batch (group) g at sa + g·sa_g + m·sa_row, sb[n] at sb + g·sb_g + n·sb_col (sa_g: the
    K-grouped kernel's per-expert row scales; 0 elsewhere). Block-wise: sa, sb are
    the TMA descriptors of the scales' K-major storage, staged by the producer into sa_bufs /
    sb_bufs beside each ring slot (load) and read by the consumers from shared memory at the
    promotion (promote):

        sa_desc   (K/128, M) fp32: sa[rows of the tile, kb]. Tiles at multiples of BM (the
                  dense kernel): box [1, BM] at off_m. ANY_ROW (the grouped kernel, whose tiles
                  start at any row): box [1, 2·BM] (a power of two ≥ BM + 3) from the 16-byte
                  boundary at or below off_m; the tile's first row is element sa_phase = off_m % 4
        sb_desc   SB_COLS = 128: the b scales' storage seen from its base as one row [1, ·]
                  (row stride sb_col per 128 columns, sb_g per batch), box [1, 32] from the
                  16-byte boundary at or below g·sb_g + n_blk·sb_col + kb (a box's innermost
                  coordinate must be 16-byte aligned): sb[g, n_blk, kb] is one of its first 4
                  elements (sb_phase); 128 bytes, so that each slot's box is 128-byte aligned
                  as TMA writes shared memory
                  SB_COLS = 1: (K/128, N), box [1, BN]: sb[kb, columns of the tile]"""

    sa: gl.tensor | tma.tensor_descriptor  # pointers (tensor-/row-wise) or TMA descriptors (block-wise)
    sb: gl.tensor | tma.tensor_descriptor
    sa_row: gl.tensor
    sb_col: gl.tensor
    sb_g: gl.tensor
    sa_g: gl.tensor
    M: gl.tensor
    N: gl.tensor
    sa_bufs: gl.shared_memory_descriptor
    sb_bufs: gl.shared_memory_descriptor
    SCALING: gl.constexpr
    SB_COLS: gl.constexpr
    ANY_ROW: gl.constexpr

    @gluon.jit
    def allocate(sa, sb, sa_row, sb_col, sb_g, sa_g, M, N, STAGES: gl.constexpr, SCALING: gl.constexpr,
                 SB_COLS: gl.constexpr, ANY_ROW: gl.constexpr = False):
        """Block-wise: one sa box and one sb box per ring slot."""
        if SCALING == "block":
            gl.static_assert(sa.block_type.nbytes % 128 == 0 and sb.block_type.nbytes % 128 == 0,
                             "each slot's scale boxes must start 128-byte aligned (TMA's shared-memory"
                             " destinations): block_m and block_n ≥ 32")
            gl.static_assert(not ANY_ROW or SB_COLS != 1, "tiles at any row: 128×128 b scales only (a gathered sb)")
            sa_bufs = gl.allocate_shared_memory(gl.float32, [STAGES] + sa.block_type.shape, sa.layout)
            sb_bufs = gl.allocate_shared_memory(gl.float32, [STAGES] + sb.block_type.shape, sb.layout)
        else:  # never read (in a 2-CTA cluster, as every shared allocation, with the pair's CTA layout)
            sa_bufs = gl.allocate_shared_memory(gl.float32, [1, 4], unused_layout(gl.num_ctas()))
            sb_bufs = sa_bufs
        return Fp8Scales(sa, sb, sa_row, sb_col, sb_g, sa_g, M, N, sa_bufs, sb_bufs, SCALING, SB_COLS, ANY_ROW)

    @gluon.constexpr_function
    def nbytes(self):
        """Bytes the producer's scale loads add to a slot's ready barrier."""
        if self.SCALING == "block":
            return self.sa.type.nbytes_per_cta + self.sb.type.nbytes_per_cta
        return 0

    @gluon.jit
    def load(self, s, off_m, off_n, k, bar, batch=0):
        """Producer, block-wise: slot s's scales for K offset k (element units) of batch (group)
        `batch` -> sa_bufs[s], sb_bufs[s]."""
        if self.SCALING == "block":
            kb = k // SCALE_BLOCK
            tma.async_load(self.sa, [kb, off_m - self.sa_phase(off_m)], bar, self.sa_bufs.index(s))
            if self.SB_COLS == 1:
                tma.async_load(self.sb, [kb, off_n], bar, self.sb_bufs.index(s))
            else:
                at = batch * self.sb_g + (off_n // self.SB_COLS) * self.sb_col + kb
                tma.async_load(self.sb, [0, at - at % 4], bar, self.sb_bufs.index(s))  # 16-byte aligned start

    @gluon.jit
    def sa_phase(self, off_m):
        """Where a tile's first row sits in its slot's sa box: off_m % 4 when tiles start at any
        row (ANY_ROW: the box starts at the 16-byte boundary at or below off_m), else 0."""
        if self.ANY_ROW:
            phase = off_m % 4
        else:
            phase = 0
        return phase

    @gluon.jit
    def sb_phase(self, off_n, batch=0):
        """Where a tile's first b scale sits in its slot's sb box (SB_COLS = 128): K block kb's is
        element (sb_phase + kb) % 4, as the producer starts each box at the 16-byte boundary at
        or below it (a TMA box's innermost coordinate must be 16-byte aligned, Triton's TMA
        notes; unaligned ones are the likely cause of the "illegal instruction" an earlier
        loop faulted with, docs/design.md, FP8)."""
        if self.SCALING == "block" and self.SB_COLS != 1:
            phase = (batch * self.sb_g + (off_n // self.SB_COLS) * self.sb_col) % 4
        else:
            phase = 0
        return phase

    @gluon.jit
    def promote(self, acc, part, s, j, sa_phase, ROW0: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr):
        """acc + part, block-wise scaled by slot s's scales: part·(sa[m]·sb) (one factor per row,
        one FFMA per element; sb is element j of the slot's sb box) or, with one b scale per
        column, (part·sb[n])·sa[m]. ANY_ROW: the tile's rows start at element sa_phase of its sa
        box; both scales are read by per-thread gathers from shared memory (a runtime offset)."""
        if self.SCALING == "block":
            layout: gl.constexpr = acc.type.layout
            flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
            BOX: gl.constexpr = self.sa_bufs.shape[2]
            sa_box = self.sa_bufs.index(s).reinterpret(shape=[BOX], layout=flat)
            sb_box = self.sb_bufs.index(s).reinterpret(shape=[self.sb_bufs.shape[2]], layout=flat)
            if self.ANY_ROW:  # runtime starts (a slice's is a constant multiple of its length): gathers
                rows = self.rows(ROW0, ROWS, layout)
                factor = sa_box.gather(sa_phase + rows, 0) * sb_box.gather(j + 0 * rows, 0)
                acc = acc + part * gl.expand_dims(factor, 1)
            elif self.SB_COLS == 1:
                sa = sa_box.slice(ROW0, ROWS).load(gl.SliceLayout(1, layout))
                sb = sb_box.slice(0, COLS).load(gl.SliceLayout(0, layout))
                acc = acc + part * gl.expand_dims(sb, 0) * gl.expand_dims(sa, 1)
            else:
                sa = sa_box.slice(ROW0, ROWS).load(gl.SliceLayout(1, layout))
                four: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])  # each thread: all 4
                sb = gl.sum(gl.where(gl.arange(0, 4, layout=four) == j, sb_box.slice(0, 4).load(four), 0.0), axis=0)
                acc = acc + part * gl.expand_dims(sa * sb, 1)
        else:
            acc = acc + part
        return acc

    @gluon.jit
    def rows(self, off_m, ROWS: gl.constexpr, layout: gl.constexpr):
        """Row indices off_m .. off_m+ROWS-1 in the accumulator's row layout."""
        return off_m + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))

    @gluon.jit
    def cols(self, off_n, COLS: gl.constexpr, layout: gl.constexpr):
        return off_n + gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))

    @gluon.jit
    def tensor_factor(self):
        """Tensor-wise sa·sb (1 in the other modes). A consumer loads it once, before its first
        tile, so that the load's latency (a DRAM round trip when the scales are cold) hides under
        the K loop instead of delaying every tile's epilogue."""
        if self.SCALING == "tensor":
            factor = gl.load(self.sa) * gl.load(self.sb)
        else:
            factor = gl.to_tensor(1.0)
        return factor

    @gluon.jit
    def apply_outer(self, acc, off_m, off_n, batch=0, factor=None):
        """Tensor-wise acc·sa·sb (`factor`: tensor_factor, loaded earlier; None: loaded here),
        row-wise acc·sa[m]·sb[batch, n] (masked past M and N: rows and columns never stored);
        block-wise scales are already in acc."""
        layout: gl.constexpr = acc.type.layout
        if self.SCALING == "tensor":
            if factor is None:
                factor = self.tensor_factor()
            acc = acc * factor
        elif self.SCALING == "row":
            rows = self.rows(off_m, acc.shape[0], layout)
            cols = self.cols(off_n, acc.shape[1], layout)
            sa = gl.load(self.sa + batch * self.sa_g + rows * self.sa_row, mask=rows < self.M, other=0.0)
            sb = gl.load(self.sb + batch * self.sb_g + cols * self.sb_col, mask=cols < self.N, other=0.0)
            acc = acc * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
        return acc


@aggregate
class Fp8Loader:
    """The producer's k-step: TileLoader's A and B boxes plus, block-wise, the slot's scales,
    all on the slot's one ready barrier."""

    tiles: TileLoader
    scales: Fp8Scales

    @gluon.jit
    def load(self, ring, counter, off_m, off_n, k, batch=0):
        s = self.tiles.load(ring, counter, off_m, off_n, k, batch, self.scales.nbytes())
        self.scales.load(s, off_m, off_n, k, ring.ready.index(s), batch)


@gluon.jit
def promoted_mainloop(ring, scales, first, k_steps, shift, sa_phase, ROW0: gl.constexpr, ROWS: gl.constexpr,
                      COLS: gl.constexpr, acc_layout: gl.constexpr, PAIRED: gl.constexpr):
    """One consumer's K loop with promotion (module docstring): each ring slot (one 128-deep K
    block) is multiplied into a fresh wgmma accumulator `part`, which is added (block-wise:
    scaled, Fp8Scales.promote) into the fp32 accumulator; then the slot is released.

    `part` is carried through the loop as the wgmma's (ignored, use_acc=False) input so its
    registers are reused, not re-zeroed. Not built: issuing k-step k+1's wgmma, then
    wait(1) and promoting k (two parts, one in flight across the loop's back edge) — ptxas
    copies the in-flight part between loop iterations and then serializes every wgmma
    (C7514 "wgmma.mma_async instructions are serialized due to non wgmma instructions reading
    accumulator registers"), checked offline. The loop is unrolled by two instead (two parts,
    straight-line code, distinct registers, nothing in flight at the back edge):

      PAIRED      issue k, issue k+1, wait(1), promote k, release k, wait(0), promote k+1, ...
      otherwise   issue k, wait(0), promote k, release k, issue k+1, wait(0), ...
                  (ptxas moves k+1's issue above k's promotion FFMAs)

    PAIRED (`paired`): ping-pong, and cooperative consumer tiles of ≤ 64 columns. Ping-pong holds
    its turn through the K loop, so nothing else hides a promotion there: with both K blocks in
    flight, k's promotion runs under k+1's wgmma. A cooperative consumer's 64×64 wgmma is too
    short for the other warpgroup's to hide its promotion, so 128×64 tiles pair too. With 64×128
    consumer tiles the other warpgroup's wgmmas already run under a promotion, and holding slot
    k until k+1 has arrived only keeps it from the producer longer, which slows the large
    products (the measurements: docs/design.md, FP8)."""
    acc = gl.zeros((ROWS, COLS), dtype=gl.float32, layout=acc_layout)
    p0 = gl.zeros((ROWS, COLS), dtype=gl.float32, layout=acc_layout)
    p1 = gl.zeros((ROWS, COLS), dtype=gl.float32, layout=acc_layout)
    for k in range(0, k_steps - 1, 2):
        if PAIRED:  # both K blocks' wgmmas in flight; k's promotion runs under k+1's wgmma
            p0 = issue(ring, first + k, p0, ROW0, ROWS)
            p1 = issue(ring, first + k + 1, p1, ROW0, ROWS)
            p0, p1 = warpgroup_mma_wait(1, (p0, p1))
            acc = retire(ring, scales, acc, p0, first + k, shift, sa_phase, ROW0, ROWS, COLS)
            p1 = warpgroup_mma_wait(0, (p1,))
            acc = retire(ring, scales, acc, p1, first + k + 1, shift, sa_phase, ROW0, ROWS, COLS)
        else:
            p0, acc = step(ring, scales, acc, p0, first + k, shift, sa_phase, ROW0, ROWS, COLS)
            p1, acc = step(ring, scales, acc, p1, first + k + 1, shift, sa_phase, ROW0, ROWS, COLS)
    if k_steps % 2:
        p0, acc = step(ring, scales, acc, p0, first + k_steps - 1, shift, sa_phase, ROW0, ROWS, COLS)
    return acc


@gluon.constexpr_function
def paired(PINGPONG, COLS):
    """Whether a promoted K loop keeps two K blocks' wgmmas in flight (promoted_mainloop's
    PAIRED): on ping-pong, and on cooperative consumer tiles of at most 64 columns."""
    return PINGPONG or COLS <= 64


@gluon.jit
def step(ring, scales, acc, part, counter, shift, sa_phase, ROW0: gl.constexpr, ROWS: gl.constexpr,
         COLS: gl.constexpr):
    """One promoted k-step: (part, acc + promoted part)."""
    part = issue(ring, counter, part, ROW0, ROWS)
    part = warpgroup_mma_wait(0, (part,))
    return part, retire(ring, scales, acc, part, counter, shift, sa_phase, ROW0, ROWS, COLS)


@gluon.jit
def issue(ring, counter, part, ROW0: gl.constexpr, ROWS: gl.constexpr):
    """Wait for k-step `counter`'s slot, issue its wgmma into a fresh `part` (async)."""
    s = ring.wait_ready(counter)
    if ring.A_BOXES > 1:  # a cluster's cooperative consumer: its own A box is its rows
        a = ring.a_box(s, ROW0 // ROWS)
    else:
        a = ring.a_bufs.index(s).slice(ROW0, ROWS, 0)
    b = ring.b_bufs.index(s).permute((1, 0))  # K-major [BN, BK] slot as wgmma's [K, N] view
    return warpgroup_mma(a, b, part, use_acc=False, is_async=True)


@gluon.jit
def retire(ring, scales, acc, part, counter, shift, sa_phase, ROW0: gl.constexpr, ROWS: gl.constexpr,
           COLS: gl.constexpr):
    """k-step `counter`'s wgmma is done: promote `part` with its slot's scales (its b scale:
    element (counter + shift) % 4 of the sb box; its rows from element sa_phase of the sa
    box: Fp8Scales), free the slot."""
    acc = scales.promote(acc, part, ring_index(counter, ring.STAGES), (counter + shift) % 4, sa_phase, ROW0, ROWS,
                         COLS)
    ring.release(counter)
    return acc


@gluon.jit
def promoted_pieces(ring, first, k_steps, ROW0: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr,
                    COLS2: gl.constexpr, acc_layout: gl.constexpr, acc_layout2: gl.constexpr):
    """The promoted K loop of a two-piece tile (COLS = P1 + P2 columns, config.column_pieces;
    tensor- and row-wise scales): each k-step issues both pieces' wgmmas into fresh parts
    (MmaOp), waits for them and adds them into the two fp32 accumulators, then frees the slot.

        k-step │ wait ready(k) │ wgmma(a, b) -> part, wgmma(a, b2) -> part2 │ wait(0) │
               │ acc += part, acc2 += part2 │ release(k)

    One set of parts (a 64×192 consumer tile's accumulators and parts fill 192 registers a
    thread): nothing hides this warpgroup's additions but the other cooperative consumer's
    wgmmas."""
    parts = MmaOp.start(ROWS, COLS, acc_layout, COLS2, acc_layout2)
    acc = gl.zeros((ROWS, COLS - COLS2), dtype=gl.float32, layout=acc_layout)
    acc2 = gl.zeros((ROWS, COLS2), dtype=gl.float32, layout=acc_layout2)
    for k in range(k_steps):
        s = ring.wait_ready(first + k)
        parts = MmaOp(parts.acc, parts.acc2, gl.to_tensor(False), 2).issue(ring, s, ROW0, ROWS, True, True)
        parts = parts.wait(0)
        acc = acc + parts.acc
        acc2 = acc2 + parts.acc2
        ring.release(first + k)
    return MmaOp(acc, acc2, gl.to_tensor(True), 2)


@aggregate
class Fp8KLoop:
    """The FP8 consumers' K-loop variant (the interface of pingpong.hopper.kernels.gemm.PlainKLoop):
    a unit is located before the consumer's turn, as (batch or group, off_m, off_n, first ring
    counter, k-steps), since the promotion reads the tile's scale phases; its K loop is promoted
    (PROMOTE: promoted_mainloop, paired on ping-pong, or promoted_pieces) or the plain one
    (fast accumulation); the outer scales go on at the store (store_tile, SPLIT: into a
    SplitEpilogue), with the tensor-wise factor read once per consumer."""

    scales: Fp8Scales
    plain: PlainKLoop
    PROMOTE: gl.constexpr
    SPLIT: gl.constexpr

    @gluon.jit
    def outer_factor(self):
        return self.scales.tensor_factor()

    @gluon.jit
    def locate(self, sched, t):
        return self.counted(sched, t, sched.first_step(t), sched.unit_steps(t))

    @gluon.jit
    def counted(self, sched, t, first, steps):
        batch, off_m, off_n = sched.locate(t)
        return batch, off_m, off_n, first, steps

    @gluon.jit
    def run(self, ring, sched, t, unit, ROW0: gl.constexpr, ROWS: gl.constexpr, sync, CONSUMER: gl.constexpr,
            PINGPONG: gl.constexpr):
        """The fp32 accumulators (an MmaOp: one, or with COLS2 > 0 two column pieces) of the
        unit's tile over its K blocks kb0 .. kb0+steps-1 (kb0 > 0: a split-K or stream-K unit). Under
        PINGPONG the turn passes to the other consumer once the last wgmma is issued
        (promoted: once it is done)."""
        batch, off_m, off_n, first, steps = unit
        kb0 = sched.k_begin(t) // sched.BK
        COLS2: gl.constexpr = self.plain.COLS2
        if self.PROMOTE:
            if COLS2:
                mma = promoted_pieces(ring, first, steps, ROW0, ROWS, sched.BN, COLS2, self.plain.acc_layout,
                                      self.plain.acc_layout2)
            else:
                # counter + shift = the tile's sb phase + its K block (Fp8Scales.sb_phase)
                acc = promoted_mainloop(ring, self.scales, first, steps,
                                        self.scales.sb_phase(off_n, batch) + kb0 - first, self.scales.sa_phase(off_m),
                                        ROW0, ROWS, sched.BN, self.plain.acc_layout, paired(PINGPONG, sched.BN))
                mma = MmaOp(acc, gl.to_tensor(0), gl.to_tensor(True), 1)
            if PINGPONG:
                sync.pass_turn(CONSUMER)
        else:
            mma = self.plain.accumulate(ring, first, steps, ROW0, ROWS, sched.BN, sync, CONSUMER, PINGPONG,
                                        sched.COUNTED)
        return mma

    @gluon.jit
    def store(self, epi, sched, mma, factor, CONSUMER: gl.constexpr, count, t, unit, ROW0: gl.constexpr):
        batch, off_m, off_n, first, steps = unit
        store_tile(epi, self.scales, mma, CONSUMER, count, batch, off_m + ROW0, off_n, sched.split(t), self.SPLIT,
                   factor)


@gluon.jit
def store_tile(epi, scales, mma, CONSUMER: gl.constexpr, count, batch, off_m, off_n, split, SPLIT: gl.constexpr,
               factor):
    """The outer scales (tensor-wise: `factor`, Fp8Scales.tensor_factor) on each column piece
    of `mma`, then the epilogue (dense: bias, activation, cast, TMA store; grouped: the rows of
    group `batch`). SPLIT (one-piece tiles): the accumulator is split `split`'s partial and the
    split epilogue (pingpong.hopper.device.fixup) applies the outer scales once, to the sum of the
    partials (tensor-wise: `factor` as its α, so that the scales are not loaded after the K
    loop, a memory round trip on the tile's critical path)."""
    if not SPLIT:
        acc = scales.apply_outer(mma.acc, off_m, off_n, batch, factor)
        acc2 = mma.acc2
        if mma.PIECES == 2:
            acc2 = scales.apply_outer(mma.acc2, off_m, off_n + mma.acc.shape[1], batch, factor)
        mma = MmaOp(acc, acc2, mma.use_acc, mma.PIECES)
    elif scales.SCALING == "tensor":
        epi = epi.with_scale(Alpha(factor))
    epi.store(mma, CONSUMER, count, off_m, off_n, batch, split)


@gluon.jit(do_not_specialize=["M", "N", "K", "sa_row", "sb_col"])
def fp8_gemm(a_desc, b_desc, ops, M, N, K, sa_row, sb_col, CFG: gl.constexpr,
             SCALING: gl.constexpr, PROMOTE: gl.constexpr, SB_COLS: gl.constexpr):
    """Ping-pong or cooperative FP8 GEMM (module docstring): out = act(scale(A·Bᵀ) + bias).
    `ops` (EpilogueOperands, pingpong.hopper.device.epilogue): out's TMA descriptor, the bias,
    the scales sa, sb (no C). CFG: the dense kernel's constexprs (KernelConstants,
    pingpong.hopper.host.launch; its EPI: bias, activation, staging buffers, no β·C: the scales
    take α's place); then the scaling."""
    kernel_start()
    check_constants(CFG, SCALING, PROMOTE, SB_COLS)
    gl.static_assert(CFG.CLUSTER == gl.num_ctas(), "CLUSTER is the launch's num_ctas")
    gl.static_assert(CFG.CLUSTER == 1 or SCALING != "block", "clusters: tensor- and row-wise scales only")
    gl.static_assert(CFG.BN2 == 0 or (not CFG.PINGPONG and SCALING != "block" and CFG.CLUSTER == 1),
                     "two-piece tiles: cooperative, one CTA, tensor- and row-wise scales (check_fp8_config)")
    # the last row and column of tiles end at M and N (scheduler.tile_offset), but block-wise:
    # sa's box starts at a 16-byte boundary and sb's blocks are 128 columns (Fp8Scales)
    sched = TileScheduler.create(M, N, K, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M, 1, SCALING != "block")
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS, CFG.BN2, True, CFG.CLUSTER, CFG.B1_BOXES)
    epi = Epilogue.of(ops, gl.to_tensor(1.0), gl.to_tensor(0.0), M, N, 2, CFG.EPI)
    zero = gl.to_tensor(0)  # one batch: no batch strides
    scales = Fp8Scales.allocate(ops.sa, ops.sb, sa_row, sb_col, zero, zero, M, N, CFG.STAGES, SCALING, SB_COLS)
    loader = TileLoader(a_desc, b_desc, True, True, CFG.BN2, CFG.CLUSTER > 1, CFG.B1_BOXES)
    run_fp8_partitions(ring, sched, epi, scales, loader, CFG, PROMOTE)


@gluon.jit(do_not_specialize=["M", "N", "K", "sa_row", "sb_col", "splits", "split_stride16", "ws_ld16", "out_ld"])
def fp8_split_gemm(a_desc, b_desc, ws, counters, ops, M, N, K, sa_row, sb_col, splits, split_stride16, ws_ld16, out_ld,
                   CFG: gl.constexpr, SCALING: gl.constexpr, PROMOTE: gl.constexpr,
                   SB_COLS: gl.constexpr):
    """Split-K FP8 GEMM (module docstring, SPLIT-K): fp8_gemm's partitions over `splits` K
    ranges per tile (SplitKScheduler), each unit's fp32 partial into the workspace; the last
    split of a tile sums them in split order and applies the outer scales, the bias, the
    activation and the cast once (SplitEpilogue with the scales as its α, pingpong.hopper.device.fixup).
    `ops`: fp8_gemm's with out's pointer; the other arguments split_k_gemm's (pingpong.hopper.kernels.gemm). Under
    CFG.EPI.SWAP (module docstring, SWAP-AB) the operands, M and N and the scales come exchanged
    and the result is stored transposed."""
    kernel_start()
    check_constants(CFG, SCALING, PROMOTE, SB_COLS)
    gl.static_assert(CFG.BN2 == 0 or CFG.EPI.SWAP, "two-piece tiles: swap-AB units, unsplit (check_fp8_config)")
    gl.static_assert(not CFG.EPI.SWAP or SCALING != "block", "swap-AB: tensor- and row-wise scales only")
    sched = SplitKScheduler.create(M, N, K, splits, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS, CFG.BN2, True, B1_BOXES=CFG.B1_BOXES)
    zero = gl.to_tensor(0)
    scales = Fp8Scales.allocate(ops.sa, ops.sb, sa_row, sb_col, zero, zero, M, N, CFG.STAGES, SCALING, SB_COLS)
    epi = SplitEpilogue.of(ops, ws, split_stride16 * 4, ws_ld16 * 4, counters, out_ld, out_ld, scales, gl.to_tensor(0.0),
                           M, N, splits, CFG.EPI)
    loader = TileLoader(a_desc, b_desc, True, True, CFG.BN2, False, CFG.B1_BOXES)
    run_fp8_partitions(ring, sched, epi, scales, loader, CFG, PROMOTE, True)


@gluon.jit(do_not_specialize=["M", "N", "K", "sa_row", "sb_col", "dp_tiles", "streamers", "split_stride16",
                                "ws_ld16", "out_ld"])
def fp8_stream_gemm(a_desc, b_desc, ws, counters, ops, M, N, K, sa_row, sb_col, dp_tiles, streamers, split_stride16, ws_ld16, out_ld, CFG: gl.constexpr, SCALING: gl.constexpr,
                    PROMOTE: gl.constexpr, SB_COLS: gl.constexpr):
    """Stream-K FP8 GEMM (module docstring, STREAM-K): fp8_gemm's partitions over
    StreamKScheduler's units (pingpong.hopper.kernels.gemm.stream_k_gemm): a unit holding its whole
    tile goes out through the TMA epilogue (ops.tile_out), its outer scales applied first; a
    tile shared by several programs is finished by the last to arrive, which applies them once
    to the sum (StreamKEpilogue, the scales as its α). Arguments: fp8_split_gemm's, ops.tile_out added,
    the decomposition (scheduler.stream_k_split) instead of `splits`."""
    kernel_start()
    check_constants(CFG, SCALING, PROMOTE, SB_COLS)
    gl.static_assert(CFG.BN2 == 0 and CFG.CLUSTER == 1 and not CFG.EPI.SWAP,
                     "stream-K units: one-piece tiles, one CTA, unswapped (check_fp8_config)")
    sched = StreamKScheduler.create(M, N, K, dp_tiles, streamers, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS)
    zero = gl.to_tensor(0)
    scales = Fp8Scales.allocate(ops.sa, ops.sb, sa_row, sb_col, zero, zero, M, N, CFG.STAGES, SCALING, SB_COLS)
    epi = stream_k_epilogue(sched, ops, ws, split_stride16, ws_ld16, counters, out_ld, out_ld, scales,
                            gl.to_tensor(0.0), M, N, streamers, CFG)
    run_fp8_partitions(ring, sched, epi, scales, TileLoader(a_desc, b_desc, True, True), CFG, PROMOTE, True)


@gluon.jit
def check_constants(CFG: gl.constexpr, SCALING: gl.constexpr, PROMOTE: gl.constexpr, SB_COLS: gl.constexpr):
    """The FP8 kernels' compile-time contract (fp8_gemm's and fp8_split_gemm's)."""
    gl.static_assert(SCALING == "tensor" or SCALING == "row" or SCALING == "block", "SCALING: tensor, row or block")
    gl.static_assert(not PROMOTE or CFG.BK == SCALE_BLOCK, "a promotion (and a scale block) is one 128-deep ring slot")
    gl.static_assert(PROMOTE or SCALING != "block", "block scales are applied at the promotion")
    gl.static_assert(SCALING != "block" or SB_COLS == 1 or SB_COLS % CFG.BN == 0,
                     "128×128 b scales: a tile's columns share one scale per K block (BN divides 128)")
    gl.static_assert(not CFG.EPI.HAS_C, "the FP8 GEMM reads no C (its epilogue: act(scale(acc) + bias))")


@gluon.jit
def run_fp8_partitions(ring, sched, epi, scales, tiles, CFG: gl.constexpr, PROMOTE: gl.constexpr,
                       SPLIT: gl.constexpr = False):
    """The Hopper skeleton (pingpong.hopper.kernels.gemm.run_partitions) with FP8's producer loads
    (Fp8Loader: `tiles`' A and B boxes, block-wise the scales) and K loop (Fp8KLoop), over
    `sched`'s units: the dense kernel's (TileScheduler), the grouped one's
    (pingpong.hopper.kernels.fp8_grouped: GroupedScheduler, whose `locate` gives each unit's group as
    the batch) and the split kernel's (SPLIT: SplitKScheduler's units into a SplitEpilogue,
    store_tile)."""
    kloop = Fp8KLoop(scales, PlainKLoop.of(CFG), PROMOTE, SPLIT)
    run_partitions(ring, sched, epi, Fp8Loader(tiles, scales), kloop, CFG)
