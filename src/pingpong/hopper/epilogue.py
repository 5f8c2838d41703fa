"""Epilogue: out = α·acc + β·C, cast, store through TMA — fused, no second pass over C.

    acc (registers, fp32, ROWS × COLS) ── column_halves ... ──> sub-tiles of ROWS × EPI_N
    for each sub-tile i (buffer i % BUFS):
        tma.store_wait(BUFS - 1)              the store that last read this buffer has drained
        C sub-tile ──TMA load──> buffer ──┐   (only when HAS_C: β ≠ 0 and a C was given)
        sub-tile ──×α──────────(+ β·C)── cast ──> buffer ──TMA store──> out

Sub-tiling (KernelConfig.epilogue_n) keeps the staging at 2 small buffers per consumer
instead of one whole tile, and the shared memory saved becomes ring stages: a cooperative
128×256 fp32 tile would stage 128 KB and leave the ring 2 stages; 64-column sub-tiles
stage 64 KB and leave 3. One sub-tile's store overlaps writing the next; the last ones
overlap the mainloop of the next tile and are waited for only when their buffer is needed
again. With one whole-tile buffer (the default where it fits, measured faster: fewer
store waits) the previous tile's store is long done when the next tile needs the buffer.

The sub-tile arithmetic lives in the helpers below (`first_subtile`, `staging_slot`,
`c_parity`, `stores_left_in_flight`), which `pingpong.schedule` calls as plain Python to build
its model of this protocol: change one and the checked model changes with it.

C is read through TMA too, into the same staging buffer, so
it costs no extra shared memory and no per-element address registers; C must therefore be
TMA-legal with out's dtype (the API copies it otherwise). C may alias out (`gemm_`): each
tile is read before its own store and tiles are disjoint.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.language.core import _aggregate as aggregate


@gluon.jit
def column_halves(x):
    """Split a [ROWS, COLS] register tensor into its left and right [ROWS, COLS/2] halves.

    A column's high bit is a register index in the wgmma accumulator layout, so the
    reshape/permute/split only renames registers: no data moves."""
    ROWS: gl.constexpr = x.shape[0]
    COLS: gl.constexpr = x.shape[1]
    return x.reshape([ROWS, 2, COLS // 2]).permute(0, 2, 1).split()


@gluon.jit
def first_subtile(tile_count, SUBTILES: gl.constexpr):
    """Number of a partition's first sub-tile store of its `tile_count`-th tile: sub-tile
    stores are numbered 0, 1, 2, ... across the partition's tiles, left to right."""
    return tile_count * SUBTILES


@gluon.jit
def staging_slot(seq, BUFS: gl.constexpr):
    """Staging buffer (of the partition's BUFS) that sub-tile store number `seq` uses."""
    return seq % BUFS


@gluon.jit
def c_parity(seq):
    """Parity of the partition's c_ready barrier that sub-tile `seq`'s C load completes: each
    sub-tile's load is one phase, so the parity alternates."""
    return seq & 1


@gluon.constexpr_function
def stores_left_in_flight(BUFS):
    """tma.store_wait count before a staging buffer is rewritten: stores retire in order, so
    waiting until at most BUFS - 1 are pending retires the one that last read this buffer."""
    return BUFS - 1


@aggregate
class Epilogue:
    c_desc: tma.tensor_descriptor  # its box is one sub-tile: [consumer rows, EPI_N]
    cin_desc: tma.tensor_descriptor
    alpha: gl.tensor
    beta: gl.tensor
    staging: gl.shared_memory_descriptor  # [COPIES * BUFS, rows, EPI_N]: BUFS per consumer partition
    c_ready: gl.shared_memory_descriptor  # [COPIES, 1] mbarriers for the C loads
    HAS_C: gl.constexpr
    BUFS: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, c_desc, cin_desc, alpha, beta, staging, c_ready, HAS_C, BUFS):
        self.c_desc = c_desc
        self.cin_desc = cin_desc
        self.alpha = alpha
        self.beta = beta
        self.staging = staging
        self.c_ready = c_ready
        self.HAS_C = gl.constexpr(HAS_C)
        self.BUFS = gl.constexpr(BUFS)

    @gluon.jit
    def allocate(c_desc, cin_desc, alpha, beta, HAS_C: gl.constexpr, COPIES: gl.constexpr, BUFS: gl.constexpr):
        staging = gl.allocate_shared_memory(c_desc.dtype, [COPIES * BUFS] + c_desc.block_type.shape, c_desc.layout)
        c_ready = gl.allocate_shared_memory(gl.int64, [COPIES, 1], mbarrier.MBarrierLayout())
        if HAS_C:  # only barriers that are used get initialized (pingpong.hopper.pipeline.Ring)
            for i in gl.static_range(COPIES):
                mbarrier.init(c_ready.index(i), count=1)
        return Epilogue(c_desc, cin_desc, alpha, beta, staging, c_ready, HAS_C, BUFS)

    @gluon.jit
    def store(self, acc, COPY: gl.constexpr, tile_count, off_m, off_n):
        """Write α·acc + β·C of the tile at (off_m, off_n), sub-tile by sub-tile, through
        consumer COPY's staging buffers. `tile_count` = tiles this partition stored before."""
        EPI_N: gl.constexpr = self.c_desc.block_type.shape[1]
        SUBTILES: gl.constexpr = acc.shape[1] // EPI_N
        gl.static_assert(acc.shape[1] % EPI_N == 0, "the epilogue sub-tile must divide the tile width")
        gl.static_assert(SUBTILES == 1 or SUBTILES % self.BUFS == 0, "sub-tiles must cycle whole buffer rounds")
        self.store_columns(acc, COPY, first_subtile(tile_count, SUBTILES), off_m, off_n)

    @gluon.jit
    def store_columns(self, x, COPY: gl.constexpr, seq, off_m, off_n):
        """Halve x until it is one sub-tile wide; store the sub-tiles left to right.
        `seq` numbers this partition's sub-tile stores (buffer and C-barrier parity)."""
        EPI_N: gl.constexpr = self.c_desc.block_type.shape[1]
        HALF: gl.constexpr = x.shape[1] // 2
        if x.shape[1] == EPI_N:
            self.store_subtile(x, COPY, seq, off_m, off_n)
        else:
            left, right = column_halves(x)
            self.store_columns(left, COPY, seq, off_m, off_n)
            self.store_columns(right, COPY, seq + HALF // EPI_N, off_m, off_n + HALF)

    @gluon.jit
    def store_subtile(self, x, COPY: gl.constexpr, seq, off_m, off_n):
        """One sub-tile: wait for its buffer's previous store, (+ β·C), cast, TMA store."""
        staging = self.staging.index(COPY * self.BUFS + staging_slot(seq, self.BUFS))
        c_ready = self.c_ready.index(COPY)
        out = x * self.alpha
        tma.store_wait(stores_left_in_flight(self.BUFS))  # the store that last read this buffer has drained
        if self.HAS_C:
            mbarrier.expect(c_ready, self.cin_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(self.cin_desc, [off_m, off_n], c_ready, staging)
            mbarrier.wait(c_ready, c_parity(seq))
            out = out + self.beta * staging.load(x.type.layout).to(gl.float32)
        staging.store(out.to(self.c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(self.c_desc, [off_m, off_n], staging)

    @gluon.jit
    def drain(self):
        """Wait for every TMA store of this partition before the program exits."""
        tma.store_wait(0)
