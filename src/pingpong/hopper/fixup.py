"""The split-K / swap-AB epilogue, inside the GEMM kernel: the last split of a tile to finish
sums every split's partial in a fixed order and writes the result — one launch, no reduction
kernel, no waiting.

    split s of tile t (any order, any program)
        acc ──gl.store──> workspace[s] (fp32, this consumer's rows of tile t)
        every thread: old = atomic_add(arrivals[t, consumer], 1)   release: its stores are published
        last = max over the warpgroup of old == SPLITS·THREADS - 1      (one value per warpgroup)
        not last ─> next unit
        last ─> every thread: atomic_add(arrivals, -SPLITS)   acquire: sees every split's stores;
                                                               the THREADS subtractions reset it to 0
                 acc = ws[0] + ws[1] + ... + ws[SPLITS-1]       fixed order: bitwise repeatable
                 out = cast(act(α·acc + bias) + β·C) ──gl.store──> C (transposed under swap-AB)

α is the kernel's `scale`: any aggregate with apply_outer(acc, off_r, off_c) applied once, to
the sum: Alpha (one runtime factor, the 16-bit kernels) or the FP8 kernel's Fp8Scales
(tensor- and row-wise scales are constant along K, so they scale the sum, not each partial;
block-wise partials come scaled out of the K loop and apply_outer leaves them as they are).

No unit ever waits for another, so no schedule of programs can deadlock. Which unit comes
last changes from run to run; the sum does not: it is read back from the workspace in split
order, the last unit's own partial included. A tile whose product has one split (SPLITS = 1,
e.g. swap-AB alone) skips the workspace and the counter.

The result goes out through pointers (C row-major, or its transpose: the kernel computes
Cᵀ = Bᵀ·Aᵀ under swap-AB), so the epilogue needs no TMA descriptor or staging buffer: the
shared memory is all ring stages. Per element it costs a little more than the TMA store;
split-K and swap-AB are chosen where the output is small next to the operands.

Stream-K (StreamKEpilogue) runs the same fix-up with SPLITS per tile: the programs that share
the tile's k-steps, each writing the slot of its position along K (StreamKScheduler.split).

The arrival counters are int32, one per (tile, consumer half), zero before the launch and
zero again after it, so the plan keeps one buffer per stream (pingpong.runtime.plan.arrival_counters):
launches in one stream's order reuse it, launches on different streams never share one.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate, base_value

from .epilogue import activate, add_bias


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
def _chunk_rows(ROWS, COLS):
    """Rows of one chunk of the final sum: about 16 fp32 per thread of a warpgroup."""
    return max(1, min(ROWS, 2048 // COLS))


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
def arrive(counter, SPLITS_THREADS):
    """Every thread adds 1 to `counter` (acq_rel); True on every thread of the warpgroup whose
    arrivals completed the count (the last split to finish this tile half)."""
    layout: gl.constexpr = _one_per_thread(gl.num_warps())
    ones = gl.full([32 * gl.num_warps()], 1, gl.int32, layout)
    old = gl.atomic_add(counter + ones * 0, ones, sem="acq_rel", scope="gpu")
    return gl.max(old, axis=0) == SPLITS_THREADS - 1


@gluon.jit
def release_counter(counter, splits):
    """The last unit's threads each take `splits` back (acquire: every split's partial stores
    are visible to this thread after it); together they return the counter to 0."""
    layout: gl.constexpr = _one_per_thread(gl.num_warps())
    take = gl.full([32 * gl.num_warps()], 0, gl.int32, layout) - splits
    gl.atomic_add(counter + take * 0, take, sem="acquire", scope="gpu")


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
    counters: gl.tensor  # int32 arrival counters, one per (tile, consumer half)
    out: gl.tensor  # result (r, c) at out + r·out_ld + c (SWAP: out + c·out_ld + r)
    out_ld: gl.tensor
    cin: gl.tensor  # C, laid out like out (read when HAS_C)
    c_ld: gl.tensor
    bias: gl.tensor
    scale: base_value  # Alpha or Fp8Scales (pingpong.hopper.fp8_kernel): apply_outer(acc, off_r, off_c) of the sum
    beta: gl.tensor
    R: gl.tensor  # the kernel's product is R × C (M × N, or N × M under swap-AB)
    C: gl.tensor
    splits: gl.tensor
    HAS_C: gl.constexpr
    SWAP: gl.constexpr  # out and C are stored transposed (swap-AB)
    BIAS: gl.constexpr  # "none" | "col" | "row", of the R × C product
    ACTIVATION: gl.constexpr
    EPI: gl.constexpr  # the EpilogueConstants the four above come from (`with_scale` passes it on)

    @gluon.constexpr_function
    def __init__(self, ws, split_stride, ws_ld, counters, out, out_ld, cin, c_ld, bias, scale, beta, R, C, splits,
                 EPI):
        """EPI: the kernel's CFG.EPI (EpilogueConstants, pingpong.hopper.epilogue); its BUFS is unused here.
        `scale`: α (module docstring), an Alpha or the FP8 kernel's Fp8Scales."""
        self.ws = ws
        self.split_stride = split_stride
        self.ws_ld = ws_ld
        self.counters = counters
        self.out = out
        self.out_ld = out_ld
        self.cin = cin
        self.c_ld = c_ld
        self.bias = bias
        self.scale = scale
        self.beta = beta
        self.R = R
        self.C = C
        self.splits = splits
        self.HAS_C = gl.constexpr(EPI.HAS_C)
        self.SWAP = gl.constexpr(EPI.SWAP)
        self.BIAS = gl.constexpr(EPI.BIAS)
        self.ACTIVATION = gl.constexpr(EPI.ACTIVATION)
        self.EPI = gl.constexpr(EPI)

    @gluon.jit
    def with_scale(self, scale):
        """This epilogue with α = `scale` (the FP8 consumers' tensor-wise sa·sb, loaded before
        the K loop, pingpong.hopper.fp8_kernel.store_tile)."""
        return SplitEpilogue(self.ws, self.split_stride, self.ws_ld, self.counters, self.out, self.out_ld, self.cin,
                             self.c_ld, self.bias, scale, self.beta, self.R, self.C, self.splits, self.EPI)

    @gluon.jit
    def store(self, mma, COPY: gl.constexpr, tile_count, off_r, off_c, batch, split):
        """The unit's partial in (MmaOp `mma`: one accumulator, or two column pieces side by
        side), and, if it completes its tile half, the result out (module docstring). COPY,
        tile_count and batch are the TMA epilogue's; unused here."""
        self.store_part(mma, off_r, off_c, split, self.splits)

    @gluon.jit
    def store_part(self, mma, off_r, off_c, slot, parts):
        """`store` of a unit whose tile is finished from `parts` partials, this one the
        slot-th in the sum's order (split-K: slot = split, parts = splits; stream-K: per tile,
        StreamKEpilogue)."""
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
            counter = self.counters + (off_r // ROWS) * gl.cdiv(self.C, COLS + COLS2) + off_c // (COLS + COLS2)
            if arrive(counter, parts * 32 * gl.num_warps()):
                release_counter(counter, parts)
                self.sum_and_store(off_r, off_c, ROWS, COLS, parts)
                if COLS2:
                    self.sum_and_store(off_r, off_c + COLS, ROWS, COLS2, parts)

    @gluon.jit
    def store_partial(self, acc, off_r, off_c, split):
        """acc into split `split`'s block of the workspace, at (off_r, off_c)."""
        rows, cols, inside = _workspace_indices(acc, off_r, off_c, self.ws_ld)
        offs = gl.expand_dims(rows * self.ws_ld, 1) + gl.expand_dims(cols, 0)  # < 2**31: the plan checks
        gl.store(self.ws + split.to(gl.int64) * self.split_stride + offs, acc, mask=inside)

    @gluon.jit
    def sum_and_store(self, off_r, off_c, ROWS: gl.constexpr, COLS: gl.constexpr, parts):
        """Σ of the `parts` partials of the ROWS × COLS tile half at (off_r, off_c), in split
        order, chunk by chunk of rows (coalesced reads, few registers), each chunk stored.

        This runs on the kernel's tail, so its cost is its memory round trips: the partials of
        four splits are loaded together (a masked one reads as +0.0: the same sum, but for the
        sign of a zero, and the same bits on every run), and the chunks are unrolled."""
        gl.static_assert(ROWS % _chunk_rows(ROWS, COLS) == 0, "chunks must tile the rows")
        CH: gl.constexpr = _chunk_rows(ROWS, COLS)
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
            self.store_result(chunk, off_r + i * CH, off_c)

    @gluon.jit
    def store_result(self, acc, off_r, off_c):
        """out = cast(act(α·acc + bias) + β·C) through pointers (pingpong.fused's order; α: `scale`);
        SWAP: out and C hold the transpose of the R × C product, so the values are first
        rearranged to run along their rows (out's contiguous dimension)."""
        y = activate(add_bias(self.scale.apply_outer(acc, off_r, off_c), self.bias, off_r, off_c, self.R, self.C, self.BIAS), self.ACTIVATION)
        if self.SWAP:
            y = gl.convert_layout(y, _coalesced(y.shape, 0, gl.num_warps()))
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


@aggregate
class StreamKEpilogue:
    """The stream-K kernel's epilogue: SplitEpilogue with the parts counted per tile. The
    scheduler's split(t) is the unit's (slot, parts) (pingpong.hopper.scheduler.StreamKScheduler):
    a data-parallel tile (parts 1) is stored directly; a tile shared by `parts` programs has
    its partials summed in K order by the last of them to arrive, as a split-K tile's splits
    are (module docstring). The workspace holds the most parts of any tile."""

    part: SplitEpilogue

    @gluon.constexpr_function
    def __init__(self, part):
        self.part = part

    @gluon.jit
    def store(self, mma, COPY: gl.constexpr, tile_count, off_r, off_c, batch, split):
        slot, parts = split
        self.part.store_part(mma, off_r, off_c, slot, parts)

    @gluon.jit
    def drain(self):
        pass
