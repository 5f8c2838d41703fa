"""The split-K / swap-AB epilogue, inside the GEMM kernel: the last split of a tile to finish
sums every split's partial in a fixed order and writes the result — one launch, no reduction
kernel, no waiting.

    split s of tile t (any order, any program)
        acc ──gl.store──> workspace[s] (fp32, this consumer's rows of tile t)
        barrier over the warpgroup                        every thread's stores before the arrival
        first thread: old = atomic_add(arrivals[t, consumer], 1)   acq_rel: releases the
                                         warpgroup's stores, acquires the earlier arrivals'
        last = (old == SPLITS - 1), broadcast to the warpgroup through shared memory and a barrier
        not last ─> next unit
        last ─> first thread: atomic_add(arrivals, -SPLITS)   relaxed: back to 0 for the next launch
                 acc = ws[0] + ws[1] + ... + ws[SPLITS-1]       fixed order: bitwise repeatable
                 out = cast(act(α·acc + bias) + β·C) ──gl.store──> C (transposed under swap-AB)

One thread per warpgroup arrives, after a barrier, as CUTLASS's semaphores do: 128 threads'
acq_rel atomics on one counter each cost an ordered round trip at the same L2 address, on the
kernel's tail.

α is the kernel's `scale`: any aggregate with apply_outer(acc, off_r, off_c) applied once, to
the sum: Alpha (one runtime factor, the 16-bit kernels) or the FP8 kernel's Fp8Scales
(tensor- and row-wise scales are constant along K, so they scale the sum, not each partial;
block-wise partials come scaled out of the K loop and apply_outer leaves them as they are).

No unit ever waits for another, so no schedule of programs can deadlock. Which unit comes
last changes from run to run; the sum does not: it is read back from the workspace in split
order, the last unit's own partial included. A tile whose product has one split (SPLITS = 1,
e.g. a ping-pong swap-AB tile alone) skips the workspace and the counter.

The result goes out through pointers (C row-major, or its transpose: the kernel computes
Cᵀ = Bᵀ·Aᵀ under swap-AB), so the epilogue needs no TMA descriptor or staging buffer: the
shared memory is all ring stages. Per element it costs more than the TMA store (an unsplit
cooperative swap-AB tile, 16-bit or FP8, therefore takes the TMA epilogue, staged transposed:
pingpong.hopper.host.config.staged_swap); split-K is chosen where the output is small next to
the operands.

Stream-K (StreamKEpilogue) stores whole-tile units through the TMA epilogue and runs this
fix-up for shared tiles only, with SPLITS per tile (the programs that share the tile's
k-steps, each the slot of its position along K: StreamKScheduler.split). Its last arriver
writes the sum through the TMA epilogue too (StreamKEpilogue.finish: the rows' chunks into a
staging buffer, one TMA store), where the tile half is one staging buffer; with β·C, two
column pieces or epilogue sub-tiles it keeps its own partial in registers and stores
through pointers (fix_up, sum_into), which costs far more per tile (docs/design.md,
Stream-K).

The arrival counters are int32, one per 16 rows of tiles and column of tiles (a tile half's is
its first row's: `tile_counter`), zero before the launch and
zero again after it, so the plan keeps one buffer per stream (pingpong.runtime.plan.split_scratch):
launches in one stream's order reuse it, launches on different streams never share one.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate, base_value

from .epilogue import Epilogue, Fusion, column_halves
from .mma import MmaOp
from .scheduler import ALIGN, StreamKScheduler


@gluon.constexpr_function
def _one_per_thread(num_warps):
    """A 1-D layout with exactly one element per thread of the partition."""
    return gl.BlockedLayout([1], [32], [num_warps], [0])


@gluon.constexpr_function
def _coalesced(shape, FAST, num_warps):
    """A blocked layout of a `shape` tile whose dimension FAST (0 or 1) runs along memory:
    4 consecutive fp32 per thread, a warp's threads along FAST first."""
    vec = min(4, shape[FAST])
    along = min(32, shape[FAST] // vec)
    if FAST == 1:
        return gl.BlockedLayout([1, vec], [32 // along, along], [num_warps, 1], [1, 0])
    return gl.BlockedLayout([vec, 1], [along, 32 // along], [1, num_warps], [0, 1])


@gluon.constexpr_function
def _chunk_rows(ROWS, COLS, STAGED=False):
    """Rows of one chunk of the final sum: about 16 fp32 per thread of a warpgroup; STAGED
    (written into a swizzled staging buffer, StreamKEpilogue.finish): half as many, for the
    scales' and the activation's registers, but whole 8-row swizzle atoms."""
    rows = max(1, min(ROWS, 2048 // COLS))
    return min(ROWS, max(8, rows // 2)) if STAGED else rows


#: columns of the stream-K fix-up's sums (SplitEpilogue.sum_into): a 64-row sub-tile of them is
#: 16 fp32 a thread, its sum and one partial beside a 128×256 tile's accumulator
SUM_COLS = gl.constexpr(32)


@gluon.jit
def _ranges(x, off_r, off_c):
    """Row and column index vectors of x's tile at (off_r, off_c), in x's own layout."""
    rows = off_r + gl.arange(0, x.shape[0], layout=gl.SliceLayout(1, x.type.layout))
    cols = off_c + gl.arange(0, x.shape[1], layout=gl.SliceLayout(0, x.type.layout))
    return rows, cols


@gluon.jit
def _indices(x, off_r, off_c, R, C):
    """_ranges and the mask of the elements inside the R × C product."""
    rows, cols = _ranges(x, off_r, off_c)
    return rows, cols, gl.expand_dims(rows < R, 1) & gl.expand_dims(cols < C, 0)


@gluon.jit
def _workspace_indices(x, off_r, off_c, ws_ld):
    """_ranges and the mask of x's place in a split's workspace block: every tile row is
    inside it (its rows are whole tiles) and a row holds ws_ld columns, a multiple of 4 (so
    the mask is constant over 4 columns and the accesses vectorize). Columns past the
    product's are partials of TMA's zero fill: zeros, never stored to out."""
    rows, cols = _ranges(x, off_r, off_c)
    return rows, cols, gl.expand_dims(rows >= 0, 1) & gl.expand_dims(cols < ws_ld, 0)


@gluon.jit
def _first_thread():
    """Per thread of the partition (one element each): whether it is the warpgroup's first."""
    layout: gl.constexpr = _one_per_thread(gl.num_warps())
    return gl.arange(0, 32 * gl.num_warps(), layout=layout) == 0


@gluon.jit
def _broadcast(first, value):
    """`value` of the first thread, on every thread of the warpgroup. The cross-warp reduction
    goes through shared memory and a barrier: what the first thread acquired before it is
    ordered before every thread's next memory access (CTA-scope synchronization)."""
    return gl.max(gl.where(first, value, -(2 ** 30)), axis=0)


@gluon.jit
def arrive(counter, PARTS):
    """The warpgroup's arrival: a barrier (every thread's partial stores come before it), then
    its first thread adds 1 to `counter` (acq_rel: releases the warpgroup's stores, cumulative
    over the barrier, and acquires the other arrivals'); True on every thread of the warpgroup
    when its add completed the count of PARTS (the last unit of this tile half to finish)."""
    first = _first_thread()
    gl.barrier()
    old = gl.atomic_add(counter + first.to(gl.int32) * 0, first.to(gl.int32), mask=first, sem="acq_rel", scope="gpu")
    return _broadcast(first, old) == PARTS - 1


@gluon.jit
def release_counter(counter, parts):
    """The last unit's first thread takes `parts` back, returning the counter to 0 for the next
    launch (relaxed: its arrival already acquired the other units' stores)."""
    first = _first_thread()
    gl.atomic_add(counter + first.to(gl.int32) * 0, first.to(gl.int32) * (0 - parts), mask=first, sem="relaxed",
                  scope="gpu")


@aggregate
class Alpha:
    """The 16-bit kernels' α as a SplitEpilogue scale: acc·α."""

    alpha: gl.tensor

    @gluon.constexpr_function
    def __init__(self, alpha):
        self.alpha = alpha

    @gluon.jit
    def apply_outer(self, acc, off_r, off_c):
        return acc * self.alpha


@aggregate
class SplitEpilogue:
    ws: gl.tensor  # fp32 workspace: split s's partial (r, c) at ws + s·split_stride + r·ws_ld + c
    split_stride: gl.tensor
    ws_ld: gl.tensor
    counters: gl.tensor  # int32 arrival counters, one per 16 rows of tiles and column of tiles (tile_counter)
    out: gl.tensor  # result (r, c) at out + r·out_ld + c (SWAP: out + c·out_ld + r)
    out_ld: gl.tensor
    cin: gl.tensor  # C, laid out like out (read when HAS_C)
    c_ld: gl.tensor
    fusion: Fusion  # the bias and the activation (pingpong.hopper.device.epilogue), of the R × C product
    scale: base_value  # Alpha or Fp8Scales (kernels.fp8_gemm): apply_outer(acc, off_r, off_c) of the sum
    beta: gl.tensor
    R: gl.tensor  # the kernel's product is R × C (M × N, or N × M under swap-AB)
    C: gl.tensor
    splits: gl.tensor
    HAS_C: gl.constexpr
    SWAP: gl.constexpr  # out and C are stored transposed (swap-AB)
    EPI: gl.constexpr  # the EpilogueConstants the two above come from (`with_scale` passes it on)

    @gluon.constexpr_function
    def __init__(self, ws, split_stride, ws_ld, counters, out, out_ld, cin, c_ld, fusion, scale, beta, R, C, splits,
                 EPI):
        """EPI: the kernel's CFG.EPI (EpilogueConstants, pingpong.hopper.device.epilogue); its BUFS is unused here.
        `scale`: α (module docstring), an Alpha or the FP8 kernel's Fp8Scales."""
        self.ws = ws
        self.split_stride = split_stride
        self.ws_ld = ws_ld
        self.counters = counters
        self.out = out
        self.out_ld = out_ld
        self.cin = cin
        self.c_ld = c_ld
        self.fusion = fusion
        self.scale = scale
        self.beta = beta
        self.R = R
        self.C = C
        self.splits = splits
        self.HAS_C = gl.constexpr(EPI.HAS_C)
        self.SWAP = gl.constexpr(EPI.SWAP)
        self.EPI = gl.constexpr(EPI)

    @gluon.jit
    def of(ops, ws, split_stride, ws_ld, counters, out_ld, c_ld, scale, beta, R, C, splits, EPI: gl.constexpr):
        """The split epilogue of a kernel's EpilogueOperands (pingpong.hopper.device.epilogue): out and
        cin its pointers (no cin: out stands in, never read); the rest as __init__'s."""
        if ops.cin is None:
            epi = SplitEpilogue(ws, split_stride, ws_ld, counters, ops.out, out_ld, ops.out, c_ld, Fusion.of(ops, EPI),
                                scale, beta, R, C, splits, EPI)
        else:
            epi = SplitEpilogue(ws, split_stride, ws_ld, counters, ops.out, out_ld, ops.cin, c_ld, Fusion.of(ops, EPI),
                                scale, beta, R, C, splits, EPI)
        return epi

    @gluon.jit
    def with_scale(self, scale):
        """This epilogue with α = `scale` (the FP8 consumers' tensor-wise sa·sb, loaded before
        the K loop, pingpong.hopper.kernels.fp8_gemm.store_tile)."""
        return SplitEpilogue(self.ws, self.split_stride, self.ws_ld, self.counters, self.out, self.out_ld, self.cin,
                             self.c_ld, self.fusion, scale, self.beta, self.R, self.C, self.splits, self.EPI)

    @gluon.jit
    def store(self, mma, COPY: gl.constexpr, tile_count, off_r, off_c, batch, split):
        """The unit's partial in (MmaOp `mma`: one accumulator, or two column pieces side by
        side), and, if it completes its tile half, the result out (module docstring). COPY,
        tile_count and batch are the TMA epilogue's; unused here."""
        self.store_part(mma, off_r, off_c, split, self.splits)

    @gluon.jit
    def store_part(self, mma, off_r, off_c, slot, parts):
        """`store` of a split-K unit whose tile is finished from `parts` partials (the splits),
        this one the slot-th in the sum's order (stream-K's: fix_up)."""
        ROWS: gl.constexpr = mma.acc.shape[0]
        COLS: gl.constexpr = mma.acc.shape[1]
        COLS2: gl.constexpr = mma.acc2.shape[1] if mma.PIECES == 2 else 0
        if parts == 1:
            self.store_result(mma.acc, off_r, off_c)
            if COLS2:
                self.store_result(mma.acc2, off_r, off_c + COLS)
        else:
            self.store_partial(mma.acc, off_r, off_c, slot)
            if COLS2:
                self.store_partial(mma.acc2, off_r, off_c + COLS, slot)
            counter = self.tile_counter(off_r, off_c, ROWS, COLS + COLS2)
            if arrive(counter, parts):
                release_counter(counter, parts)
                self.sum_and_store(off_r, off_c, ROWS, COLS, parts)
                if COLS2:
                    self.sum_and_store(off_r, off_c + COLS, ROWS, COLS2, parts)

    @gluon.jit
    def tile_counter(self, off_r, off_c, ROWS: gl.constexpr, WIDTH: gl.constexpr):
        """The arrival counter of the ROWS × WIDTH tile half at (off_r, off_c): one per ALIGN
        (16) rows of each column of tiles, so a tile half's is its first row's (a moved last
        row of tiles starts at any multiple of 16, SplitKScheduler's CLAMP)."""
        return self.counters + (off_r // ALIGN) * gl.cdiv(self.C, WIDTH) + off_c // WIDTH

    @gluon.jit
    def fix_up(self, mma, off_r, off_c, slot, parts):
        """A stream-K unit of slot `slot` of a tile of `parts` > 1 partials (StreamKEpilogue's
        drawing): the last to arrive keeps its partial in registers and adds the others'."""
        ROWS: gl.constexpr = mma.acc.shape[0]
        COLS: gl.constexpr = mma.acc.shape[1]
        COLS2: gl.constexpr = mma.acc2.shape[1] if mma.PIECES == 2 else 0
        counter = self.tile_counter(off_r, off_c, ROWS, COLS + COLS2)
        arrived = parts - 1
        last = published(counter, arrived)
        if not last:
            self.store_partial(mma.acc, off_r, off_c, slot)
            if COLS2:
                self.store_partial(mma.acc2, off_r, off_c + COLS, slot)
            last = arrive(counter, parts)
            arrived = parts
        if last:
            release_counter(counter, arrived)
            self.sum_into(mma.acc, off_r, off_c, slot, parts)
            if COLS2:
                self.sum_into(mma.acc2, off_r, off_c + COLS, slot, parts)

    @gluon.jit
    def sum_into(self, x, off_r, off_c, slot, parts):
        """Σ over the slots in order of the tile's partials at (off_r, off_c), x (this unit's,
        in registers) as slot `slot`, the others read from the workspace; stored (store_result).
        Column halves (register renames, epilogue.column_halves) down to SUM_COLS columns, so
        that a sum, one partial and their 32-bit offsets fit beside the accumulator."""
        HALF: gl.constexpr = x.shape[1] // 2
        if x.shape[1] > SUM_COLS:
            left, right = column_halves(x)
            self.sum_into(left, off_r, off_c, slot, parts)
            self.sum_into(right, off_r, off_c + HALF, slot, parts)
        else:
            rows, cols, inside = _workspace_indices(x, off_r, off_c, self.ws_ld)
            offs = gl.expand_dims(rows * self.ws_ld, 1) + gl.expand_dims(cols, 0)
            base = self.ws
            total = gl.zeros_like(x)
            for s in range(parts):  # fixed order: bitwise repeatable
                p = gl.load(base + offs, mask=inside & (s != slot), other=0.0)
                total = total + gl.where(s == slot, x, p)
                base += self.split_stride  # pointer steps: no 32-bit product of slot and stride
            self.store_result(total, off_r, off_c)

    @gluon.jit
    def store_partial(self, acc, off_r, off_c, split):
        """acc into split `split`'s block of the workspace, at (off_r, off_c)."""
        rows, cols, inside = _workspace_indices(acc, off_r, off_c, self.ws_ld)
        offs = gl.expand_dims(rows * self.ws_ld, 1) + gl.expand_dims(cols, 0)  # < 2**31: the plan checks
        gl.store(self.ws + split.to(gl.int64) * self.split_stride + offs, acc, mask=inside)

    @gluon.jit
    def sum_and_store(self, off_r, off_c, ROWS: gl.constexpr, COLS: gl.constexpr, parts, staging=None):
        """Σ of the `parts` partials of the ROWS × COLS tile half at (off_r, off_c), in split
        order, chunk by chunk of rows (coalesced reads, few registers), each chunk stored:
        through pointers (store_result), or into its rows of `staging` (a ROWS × COLS shared
        buffer that the caller then stores with TMA: StreamKEpilogue.finish).

        This runs on the kernel's tail, so its cost is its memory round trips: the partials of
        four splits are loaded together (a masked one reads as +0.0: the same sum, but for the
        sign of a zero, and the same bits on every run), and the chunks are unrolled."""
        CH: gl.constexpr = _chunk_rows(ROWS, COLS, staging is not None)
        gl.static_assert(ROWS % CH == 0, "chunks must tile the rows")
        layout: gl.constexpr = _coalesced([CH, COLS], 1, gl.num_warps())
        for i in gl.static_range(ROWS // CH):
            chunk = gl.zeros([CH, COLS], gl.float32, layout)
            rows, cols, inside = _workspace_indices(chunk, off_r + i * CH, off_c, self.ws_ld)
            part = self.ws + (gl.expand_dims(rows * self.ws_ld, 1) + gl.expand_dims(cols, 0))
            for s in range(0, parts, 4):  # fixed order: bitwise repeatable
                p0 = gl.load(part, mask=inside, other=0.0)  # four splits' loads in flight together
                p1 = gl.load(part + self.split_stride, mask=inside & (s + 1 < parts), other=0.0)
                p2 = gl.load(part + 2 * self.split_stride, mask=inside & (s + 2 < parts), other=0.0)
                p3 = gl.load(part + 3 * self.split_stride, mask=inside & (s + 3 < parts), other=0.0)
                chunk = (((chunk + p0) + p1) + p2) + p3
                part += 4 * self.split_stride  # pointer steps: no 32-bit product of split and stride
            if staging is None:
                self.store_result(chunk, off_r + i * CH, off_c)
            else:
                y = self.result(chunk, off_r + i * CH, off_c)
                staging.slice(i * CH, CH, 0).store(y.to(staging.dtype))

    @gluon.jit
    def result(self, acc, off_r, off_c):
        """act(α·acc + bias) of the sum at (off_r, off_c), in fp32 (docs/epilogue.md's order; α: `scale`)."""
        return self.fusion.apply(self.scale.apply_outer(acc, off_r, off_c), off_r, off_c, self.R, self.C)

    @gluon.jit
    def store_result(self, acc, off_r, off_c):
        """out = cast(act(α·acc + bias) + β·C) through pointers (docs/epilogue.md's order; α: `scale`);
        SWAP: out and C hold the transpose of the R × C product; the values are stored from
        the accumulator's layout, whose 8 lanes of a column hold 8 consecutive rows: 16 bytes
        of one row of out. No rearranging through shared memory, which the ring takes instead
        (the output of a swapped product is small next to the operands it streams)."""
        y = self.result(acc, off_r, off_c)
        rows, cols, inside = _indices(y, off_r, off_c, self.R, self.C)
        r = gl.expand_dims(rows.to(gl.int64), 1)
        c = gl.expand_dims(cols.to(gl.int64), 0)
        if self.SWAP:
            out_offs = c * self.out_ld + r
            c_offs = c * self.c_ld + r
        else:
            out_offs = r * self.out_ld + c
            c_offs = r * self.c_ld + c
        if self.HAS_C:
            y += self.beta * gl.load(self.cin + c_offs, mask=inside, other=0.0).to(gl.float32)
        gl.store(self.out + out_offs, y.to(self.out.dtype.element_ty), mask=inside)

    @gluon.jit
    def drain(self):
        """Nothing in flight: every store above is a plain global store."""
        pass


@gluon.jit
def published(counter, expected):
    """The warpgroup's first thread reads `counter` (an acquire: the stores released by the
    arrivals it counts are visible after it, to every thread through _broadcast's barrier);
    True on every thread when it read `expected` (the others' arrivals all in: this unit is
    the tile's last, and knows it before storing)."""
    first = _first_thread()
    seen = gl.atomic_add(counter + first.to(gl.int32) * 0, first.to(gl.int32) * 0, mask=first, sem="acquire",
                         scope="gpu")
    return _broadcast(first, seen) == expected


@aggregate
class StreamKEpilogue:
    """The stream-K kernels' epilogue. A unit of parts 1 (a data-parallel tile, or a share
    that holds a whole tile) goes out through the data-parallel kernel's TMA epilogue (`tile`,
    its α 1: the scale goes on first, as `part`'s); only a tile shared by `parts` programs
    takes the fix-up, summed in K order by the last of them to arrive. Where the consumer's
    tile half is one staging buffer (no β·C, one piece, no sub-tiles), `finish`:

        unit of slot s, parts P > 1: ws[s] ← acc; arrive (acq_rel); last? ─> counter -= P
        last ─> per chunk of rows: Σ_{j < P} ws[j] in slot order ─> act(scale(Σ) + bias)
                ─> its rows of a drained staging buffer; then one TMA store of the tile half

    Otherwise `fix_up` (the pointer epilogue, slower per tile):

        unit of slot s, parts P > 1 (its accumulator in registers)
        all P - 1 others arrived? (published: acquire-read the tile's counter)
          yes ─> this unit is last: it writes no slot of its own;  counter -= P-1
          no  ─> ws[s] ← acc; arrive (acq_rel); last? ─> counter -= P
        last ─> per column sub-tile: Σ_{j < P} (j == s ? acc : ws[j]), in slot order (the
                same order and values whoever is last: bitwise repeatable);
                out = cast(act(scale(Σ) + bias) + β·C) ──gl.store──> out

    The first check costs one read of the counter and saves the last unit's partial store
    and load where the others are done before it (the tile's slot 0, its first k-steps, is
    the end of a program's share: usually the last). `sched` and PINGPONG number the TMA
    epilogue's tiles per consumer (StreamKScheduler.whole_before). The workspace holds the
    most parts of any tile."""

    tile: Epilogue
    part: SplitEpilogue
    sched: StreamKScheduler
    PINGPONG: gl.constexpr
    WHOLE: gl.constexpr  # every unit it stores holds a whole tile (`whole_only`): no fix-up code

    @gluon.constexpr_function
    def __init__(self, tile, part, sched, PINGPONG, WHOLE=False):
        self.tile = tile
        self.part = part
        self.sched = sched
        self.PINGPONG = gl.constexpr(PINGPONG)
        self.WHOLE = gl.constexpr(WHOLE)

    @gluon.jit
    def with_scale(self, scale):
        """This epilogue with `scale` as α (SplitEpilogue.with_scale: the FP8 tensor-wise factor)."""
        return StreamKEpilogue(self.tile, self.part.with_scale(scale), self.sched, self.PINGPONG, self.WHOLE)

    @gluon.jit
    def whole_only(self):
        """This epilogue for the units after the program's streamed ones (the consumer's second
        loop, pingpong.hopper.kernels.gemm.consumer), all whole tiles: its store has no fix-up,
        whose code, compiled into that loop and never run, slowed its tiles (docs/design.md, Stream-K)."""
        return StreamKEpilogue(self.tile, self.part, self.sched, self.PINGPONG, True)

    @gluon.jit
    def store(self, mma, COPY: gl.constexpr, tile_count, off_r, off_c, batch, split):
        """The unit's result (parts 1) or partial (kernel's PlainKLoop.store interface);
        tile_count: the consumer's units before (ping-pong: its j-th, the program's 2j + COPY)."""
        slot, parts = split
        COLS: gl.constexpr = mma.acc.shape[1]
        EPI_N: gl.constexpr = self.tile.c_desc.block_type.shape[-1]
        if self.WHOLE:  # constexpr: the branches below are not compiled at all (whole_only)
            self.store_whole(mma, COPY, tile_count, off_r, off_c, batch)
        elif parts == 1:
            self.store_whole(mma, COPY, tile_count, off_r, off_c, batch)
        elif self.tile.HAS_C or mma.PIECES == 2 or EPI_N != COLS:  # the staging holds no whole tile half
            self.part.fix_up(mma, off_r, off_c, slot, parts)
        else:
            self.finish(mma, COPY, tile_count, off_r, off_c, batch, slot, parts)

    @gluon.jit
    def store_whole(self, mma, COPY: gl.constexpr, tile_count, off_r, off_c, batch):
        """A unit of parts 1 through the TMA epilogue, its scale applied first."""
        COLS: gl.constexpr = mma.acc.shape[1]
        acc = self.part.scale.apply_outer(mma.acc, off_r, off_c)
        acc2 = mma.acc2
        if mma.PIECES == 2:
            acc2 = self.part.scale.apply_outer(mma.acc2, off_r, off_c + COLS)
        self.tile.store(MmaOp(acc, acc2, mma.use_acc, mma.PIECES), COPY, self.whole(tile_count, COPY), off_r, off_c,
                        batch, 0)

    @gluon.jit
    def whole(self, tile_count, COPY: gl.constexpr):
        """The consumer's units stored whole (through the TMA epilogue) before its `tile_count`-th."""
        if self.PINGPONG:
            whole = self.sched.whole_before(2 * tile_count + COPY, 2, COPY)
        else:
            whole = self.sched.whole_before(tile_count, 1, 0)
        return whole

    @gluon.jit
    def finish(self, mma, COPY: gl.constexpr, tile_count, off_r, off_c, batch, slot, parts):
        """A shared tile half whose result leaves through the TMA epilogue (class docstring):
        every unit's partial into the workspace; the last to arrive sums them in slot order,
        chunk by chunk of rows, into a drained staging buffer, and stores it with TMA. Its
        buffer is the one before the next whole unit's (seq whole - 1, mod BUFS), so that the
        next store, which waits for all but BUFS - 1 stores, never rewrites a buffer in flight."""
        ROWS: gl.constexpr = mma.acc.shape[0]
        COLS: gl.constexpr = mma.acc.shape[1]
        part = self.part
        part.store_partial(mma.acc, off_r, off_c, slot)
        counter = part.tile_counter(off_r, off_c, ROWS, COLS)
        if arrive(counter, parts):
            release_counter(counter, parts)
            staging = self.tile.drained_buffer(COPY, self.whole(tile_count, COPY) + self.tile.BUFS - 1)
            part.sum_and_store(off_r, off_c, ROWS, COLS, parts, staging)
            self.tile.store_staged(staging, off_r, off_c, batch)

    @gluon.jit
    def drain(self):
        self.tile.drain()
