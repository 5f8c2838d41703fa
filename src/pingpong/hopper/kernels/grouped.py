"""Grouped GEMM on Hopper: ragged groups of rows (mixture-of-experts), one persistent launch.

    out[s_g : e_g, :] = a[s_g : e_g, :] @ b[g]        g = 0 .. G-1,  e_g = offs[g],  s_g = e_{g-1} (s_0 = 0)

a (T, K) holds every group's rows one after the other, b (G, K, N) one matrix per group,
offs (G,) int32 the groups' cumulative row ends, read **on the device**: the host knows T, G,
K, N only, so a call never waits for the GPU and a CUDA graph replays it with new offsets.

The parts are the ones of the dense kernel (pingpong.hopper.kernels.gemm: Ring, TileLoader, MmaOp,
the producer / consumer partitions, `run_partitions`); two are new and swap in behind the
existing interfaces:

GroupedScheduler (the TileScheduler interface). The m-tiles of all groups are laid end to
end as one "virtual M" axis of `total_m` tiles (group g owns ceil(rows_g / BM) of them, an
empty group none), and the dense grouped raster (`tile_coords`, GROUP_M bands) runs over
total_m × num_pid_n. Program p of P takes units p, p+P, p+2P, ... as in the dense kernel:

    offs = [3, 3, 200, 201]  (BM = 128)     virtual m-tile -> (group, row)      units (num_pid_n = 2,
    group 0: rows 0..2      1 tile          vm 0 -> g 0, rows   0..127 (3 real)   GROUP_M = 2)
    group 1: empty          0 tiles         --                                    band 0: vm 0,1 × n 0,1
    group 2: rows 3..199    2 tiles         vm 1 -> g 2, rows   3..130            band 1: vm 2,3 × n 0,1
                                            vm 2 -> g 2, rows 131..258 (69 real)
    group 3: row 200        1 tile          vm 3 -> g 3, rows 200..327 (1 real)

    program p │ unit p: (vm, n) ── locate: g, first row ──> producer: TMA A rows, B[g] │ unit p+P ...
              │ consumers: wgmma over K (unchanged) ──> GroupedEpilogue: rows < e_g only

Every unit's group is found from offs by each partition on its own (`group_table`: a vector
of G_PAD group sizes per warp, a cumulative sum and a compare): a few hundred cycles per tile,
no shared state, no host sync. Empty groups own no virtual tile, so they cost nothing. The
number of units depends on offs, so the grid is the SM count (or fewer when an upper bound
of the units, (ceil(T/BM) + G)·num_pid_n, is smaller) and each program counts its own.

Rows past a group's end inside its last tile (the "row ends inside a tile"): the A box is
loaded at the group's row, so it reads the next group's first rows (or TMA's zero fill past
T). Every output row depends on its own A row only, so those rows' results are garbage but
harmless: they are never stored. (The alternatives: device-side TMA descriptors per group
cost a descriptor write + fence per tile and a global scratch; DeepGEMM's padding to BM
changes the caller's layout. See "Grouped GEMM" in
benchmarks/results/2026-11-28-design-history.md.) A is read K-major only: an MN-major A box
would start at a group's row in its contiguous dimension, which faults with an "illegal
instruction", so the caller copies such an A.

GroupedEpilogue (the Epilogue interface, `store(mma, COPY, tile_count, off_m, off_n, batch,
split)`; `batch` is the group):

    off_m + rows ≤ e_g   (inside)   the dense TMA epilogue (Epilogue, nested): staged, stored
                                    asynchronously, overlapping the next tile's mainloop
    off_m + rows > e_g   (cut)      predicated pointer stores of rows < e_g from registers

Only the cut tile takes pointers: the consumers wait on pointer stores, while a TMA store
drains under the next tile's mainloop ("Grouped GEMM" in
benchmarks/results/2026-11-28-design-history.md). The output strides are arguments: a
column-major out (3-D × 2-D products, the kernel on transposed views) takes the pointer path
for every tile.

Bad offsets (device data, not checked on the host): an offset is clipped to [0, T]; a
decreasing offset makes that group empty (and the next group starts at the smaller value,
overlapping earlier rows: those rows are then unspecified). No read or write leaves a or out.

`tiles_of_rows` and `group_tile_row` are plain arithmetic: the CPU tests call their `.fn`
with `scheduler.tile_coords.fn` to enumerate the units of ragged, empty and single-row groups.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate

from ..device.epilogue import Epilogue
from ..device.loader import TileLoader
from ..device.pipeline import Ring
from ..device.scheduler import RasterScheduler, program, tile_coords
from .gemm import PlainKLoop, kernel_start, run_partitions


# ----------------------------------------------------------------------------- the (group, tile) arithmetic


@gluon.jit
def tiles_of_rows(rows, BM: gl.constexpr):
    """m-tiles of a group of `rows` ≥ 0 rows (an empty group: none)."""
    return (rows + BM - 1) // BM


@gluon.jit
def group_tile_row(vm, tiles_before, row_start, BM: gl.constexpr):
    """First row of virtual m-tile `vm`, the (vm - tiles_before)-th tile of a group whose rows
    start at `row_start` and whose first tile is virtual tile `tiles_before`."""
    return row_start + (vm - tiles_before) * BM


@gluon.constexpr_function
def _group_layout(num_warps):
    return gl.BlockedLayout([1], [32], [num_warps], [0])


@gluon.jit
def group_table(offs, G, T, BM: gl.constexpr, G_PAD: gl.constexpr):
    """(index, first row, m-tiles) of every group, as G_PAD-vectors (entries ≥ G: empty groups).
    Offsets are clipped to [0, T] (a negative one would start a group, and its stores, before
    row 0); a decreasing end makes its group empty."""
    layout: gl.constexpr = _group_layout(gl.num_warps())
    idx = gl.arange(0, G_PAD, layout=layout)
    ends = gl.minimum(gl.maximum(gl.load(offs + idx, mask=idx < G, other=0), 0), T)
    starts = gl.minimum(gl.maximum(gl.load(offs + idx - 1, mask=(idx > 0) & (idx < G), other=0), 0), T)
    return idx, starts, tiles_of_rows(gl.maximum(ends - starts, 0), BM)


@aggregate
class GroupedScheduler(RasterScheduler):
    """The TileScheduler interface over the (group, tile) units of a ragged product (module
    docstring): the raster's num_pid_m is total_m, the virtual m-tiles; `tile_batch` is the
    unit's group."""

    offs: gl.tensor
    G: gl.tensor
    T: gl.tensor
    num_tiles: gl.tensor
    k_steps: gl.tensor
    G_PAD: gl.constexpr

    @gluon.jit
    def create(offs, G, T, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
               G_PAD: gl.constexpr):
        _, _, tiles = group_table(offs, G, T, BM, G_PAD)
        total_m = gl.sum(tiles, axis=0)
        num_pid_n = gl.cdiv(N, BN)
        pid, num_programs = program()
        return GroupedScheduler(pid, num_programs, total_m, num_pid_n, BM, BN, BK, GROUP_M, offs=offs, G=G, T=T,
                                num_tiles=total_m * num_pid_n, k_steps=gl.cdiv(K, BK), G_PAD=G_PAD)

    @gluon.jit
    def locate(self, local_tile):
        """(group, first row, off_n) of this program's `local_tile`-th unit."""
        vm, pid_n = tile_coords(self.pid + local_tile * self.num_programs, self.num_pid_m, self.num_pid_n,
                                self.GROUP_M)
        idx, starts, tiles = group_table(self.offs, self.G, self.T, self.BM, self.G_PAD)
        ends = gl.cumsum(tiles, axis=0)  # virtual tiles [ends - tiles, ends) belong to the group
        g = gl.sum((ends <= vm).to(gl.int32), axis=0)
        before = gl.sum(gl.where(idx == g, ends - tiles, 0), axis=0)
        row = gl.sum(gl.where(idx == g, starts, 0), axis=0)
        return g, group_tile_row(vm, before, row, self.BM), pid_n * self.BN

    @gluon.jit
    def tile_batch(self, local_tile):
        """The unit's group: B's matrix, and the epilogue's row end."""
        g, off_m, off_n = self.locate(local_tile)
        return g


# ----------------------------------------------------------------------------- epilogue


@aggregate
class GroupedEpilogue:
    """A tile wholly inside its group goes out through the dense kernel's TMA epilogue
    (`tma`, an Epilogue over out (T, N): asynchronous, its store overlaps the next mainloop);
    a group's last tile, which its end cuts, through predicated pointer stores straight from
    the accumulator's registers (rows < e_g only). TMA_STORE = False (out not TMA-legal, or
    written transposed): every tile through pointers."""

    tma: Epilogue
    out: gl.tensor  # result (r, c) at out + r·sr + c·sc
    sr: gl.tensor
    sc: gl.tensor
    offs: gl.tensor
    T: gl.tensor
    N: gl.tensor
    TMA_STORE: gl.constexpr

    @gluon.jit
    def store(self, mma, COPY: gl.constexpr, tile_count, off_m, off_n, batch, split):
        """The tile's rows of group `batch` (module docstring)."""
        ROWS: gl.constexpr = mma.acc.shape[0]
        end = gl.minimum(gl.load(self.offs + batch), self.T)
        if self.TMA_STORE:
            if off_m + ROWS <= end:
                self.tma.store(mma, COPY, tile_count, off_m, off_n, 0, 0)
            else:
                self.store_rows(mma.acc, off_m, off_n, end)
        else:
            self.store_rows(mma.acc, off_m, off_n, end)

    @gluon.jit
    def store_rows(self, acc, off_m, off_n, end):
        """Rows < end of the tile at (off_m, off_n), cast, predicated stores from the
        accumulator's own layout (no shared memory)."""
        y = acc.to(self.out.dtype.element_ty)
        rows = off_m + gl.arange(0, y.shape[0], layout=gl.SliceLayout(1, y.type.layout))
        cols = off_n + gl.arange(0, y.shape[1], layout=gl.SliceLayout(0, y.type.layout))
        inside = gl.expand_dims(rows < end, 1) & gl.expand_dims(cols < self.N, 0)
        offsets = gl.expand_dims(rows.to(gl.int64) * self.sr, 1) + gl.expand_dims(cols.to(gl.int64) * self.sc, 0)
        gl.store(self.out + offsets, y, mask=inside)

    @gluon.jit
    def drain(self):
        if self.TMA_STORE:
            self.tma.drain()


# ----------------------------------------------------------------------------- the kernel

_RUNTIME_SCALARS = ["T", "N", "K", "G", "out_sr", "out_sc"]


@gluon.jit(do_not_specialize=_RUNTIME_SCALARS)
def grouped_gemm(a_desc, b_desc, c_desc, out, offs, T, N, K, G, out_sr, out_sc, alpha, beta, CFG: gl.constexpr,
                 TMA_STORE: gl.constexpr, G_PAD: gl.constexpr):
    """out = a @ b per group of rows (α = 1, β = 0: the dense epilogue's scalars; module docstring): the dense kernel's producer warp and two
    consumer warpgroups (ping-pong or cooperative) over GroupedScheduler's units, B read from
    matrix `group` of its rank-3 descriptor, GroupedEpilogue's predicated stores.

        program p │ unit (g, vm, n) │ unit ...            ring of STAGES as the dense kernel
        producer  │ A rows [row, row+BM) · B[g] k0..kn │ next unit ...
        consumer0 │ MMA ═══════════ │ store rows < e_g │ (ping-pong: turns as the dense kernel)
        consumer1 │ wait turn │ MMA ═══════════ │ store rows < e_g' │

    CFG: the dense kernel's constexprs (KernelConstants, pingpong.hopper.host.launch), its EPI a plain
    store; then whether out takes TMA stores (TMA_STORE) and the group table's length (G_PAD).
    """
    kernel_start()
    gl.static_assert(CFG.EPI.plain(), "this kernel's epilogue stores α·acc alone (no β·C, bias or activation)")
    gl.static_assert(CFG.BN2 == 0, "grouped products take one-piece tiles (a batch's B box fills one buffer)")
    gl.static_assert(G_PAD >= 32, "the group table holds at least one element per lane")
    sched = GroupedScheduler.create(offs, G, T, N, K, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M, G_PAD)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS, 0, CFG.B_KMAJOR)
    tma_epi = Epilogue.plain(c_desc, alpha, beta, out, T, N, 2, CFG.EPI)
    epi = GroupedEpilogue(tma_epi, out, out_sr, out_sc, offs, T, N, TMA_STORE)
    run_partitions(ring, sched, epi, TileLoader(a_desc, b_desc, CFG.A_KMAJOR, CFG.B_KMAJOR, 0), PlainKLoop.of(CFG), CFG)
