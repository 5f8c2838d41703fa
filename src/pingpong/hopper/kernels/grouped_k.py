"""Grouped GEMM on Hopper, ragged K: the mixture-of-experts weight gradient in one persistent launch.

    out[g] = a[:, s_g : e_g] @ b[s_g : e_g, :]       g = 0 .. G-1,  e_g = offs[g],  s_g = e_{g-1} (s_0 = 0)

a (M, T) and b (T, N) hold every group's K range one after the other, out is (G, M, N), offs
(G,) int32 the cumulative K ends, read **on the device** (no host sync, CUDA-graph replays
with new offsets). In the backward of the experts' forward this is dW_g = X_gᵀ·dY_g:
a = x.t() of the tokens x (T, M), b = dY (T, N).

Operand storage. Both operands are read with T as their *row* (outer) dimension: x (T, M)
and dY (T, N) row-major, which is how the backward passes them (a = x.t(), a view). The A
box is [BK, BM] (MN-major; wgmma reads it through a transposed view), the B box [BK, BN]
(MN-major). An operand whose T is the contiguous dimension is copied by the caller
(pingpong.grouped): a box starting at a group's row inside the contiguous dimension is what
TMA cannot start at (it faults with an "illegal instruction"), and the ragged descriptor below cannot be ragged
in the contiguous dimension.

The parts are the dense kernel's (its warp-specialized skeleton `run_partitions` with the plain
K loop PlainKLoop, Ring, MmaOp, PhaseSync, Epilogue, TileScheduler); three are new, and the
scheduler's COUNTED tells the skeleton's consumers to count every unit's k-steps, its RAGGED_K
the producer to load through k_range and the ragged loader:

RaggedKScheduler. Every group has the same ceil(M/BM)·ceil(N/BN) output tiles, so the units
are TileScheduler's batched units with the group as the batch: G·tiles units, group after
group, the grouped raster inside each, program p taking units p, p+P, ... The unit count
follows from the shapes alone (the grid does not depend on offs). What differs per unit is
its K loop, ceil(rows_g / BK) k-steps over the group's rows; an empty group's units load
nothing and store zeros (the gradient of an expert that got no token is zero). The ring
counter of a unit's first k-step is the sum of the k-steps of the program's earlier units,
which the producer and each consumer add up on their own (two loads of offs per unit):

    offs = [100, 100, 300], BK = 64       group 0: 100 rows   group 1: empty   group 2: 200 rows
    k-steps of a unit of the group        2                   0                4
    program p │ unit (g0, tile i): ring 0,1 │ unit (g1, tile j): no load, zeros │ unit (g2, tile k): ring 2..5 │
    ping-pong │ consumer 0: units 0, 2, 4 ...; consumer 1: units 1, 3, ...; each walks every unit to count

The K edges (a group starts and ends at any row): a *ragged TMA descriptor* (the
construction of triton.tools.ragged_tma) makes rows outside [s_g, e_g) read as zeros in
hardware. Over t (T, C) row-major with row stride r it describes a rank-4 tensor

    dims (outer first) [2^31 - 2^16, 2^31 - 2^16, 2^30, C]   strides [2^34 - r, r, r, 1]   box [1, 1, BK, BC]

and the box of rows [s + k, s + k + BK) of a group [s, e) is loaded at coordinates
(2^30, e, 2^30 - (e - s) + k, col): the element offset 2^30·(2^34 - r) + e·r + (2^30 - e + s
+ k + i)·r + col wraps (64-bit addresses) to (s + k + i)·r + col, and coordinate 2 is in
bounds exactly when k + i < e - s. So the last k-step of a group reads its own rows and TMA
zero-fills the rest, in A and in B: no register masking, no per-group descriptor in global
memory, and the next group's values (even NaN/Inf) never enter the sum. The alternatives
weighed: masking the boundary k-step's rows in shared memory costs the consumers a
load/store round trip and a fence per unit; per-group device-side descriptors cost a
descriptor write and a fence.proxy.tensormap per group and a global scratch.

Epilogue: the dense one (TMA store of staged sub-tiles, asynchronous) into matrix g of out's
rank-3 descriptor; TMA clips M and N at each matrix's edge.

Bad offsets (device data): ends are clipped to T, a decreasing offset makes its group empty.
No read leaves [0, T) (every box row is inside its group's clipped range or zero-filled).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.language.core import _aggregate as aggregate

from ..device.epilogue import Epilogue
from ..device.pipeline import Ring
from ..device.scheduler import TileScheduler
from .gemm import PlainKLoop, kernel_start, run_partitions

#: the ragged descriptor's row dimension's extent (module docstring; T must not exceed it; the
#: other constants: pingpong.hopper.host.grouped_k)
RAGGED_ROWS = gl.constexpr(2**30)


# ----------------------------------------------------------------------------- the ragged K range


@gluon.jit
def ragged_coords(start, rows, k):
    """The ragged descriptor's three leading coordinates of the box whose first row is row
    `k` of a group of `rows` rows starting at row `start` (module docstring)."""
    return RAGGED_ROWS, start + rows, RAGGED_ROWS - rows + k


@gluon.jit
def group_k_range(offs, g, T):
    """(first row, rows) of group g's K range: ends clipped to T, a decreasing end an empty group."""
    end = gl.minimum(gl.load(offs + g), T)
    start = gl.where(g > 0, gl.minimum(gl.load(offs + gl.maximum(g - 1, 0)), T), 0)
    return start, gl.maximum(end - start, 0)


@gluon.jit
def k_steps_of(rows, BK: gl.constexpr):
    """k-steps of a K range of `rows` ≥ 0 rows (an empty group: none)."""
    return (rows + BK - 1) // BK


@aggregate
class RaggedKScheduler(TileScheduler):
    """TileScheduler's batched units, the group as the batch (module docstring), each with
    its group's K range (TileScheduler's k_steps, of K = T, unused)."""

    offs: gl.tensor
    T: gl.tensor
    COUNTED: gl.constexpr = True
    RAGGED_K: gl.constexpr = True

    @gluon.jit
    def create(offs, G, T, M, N, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr):
        t = TileScheduler.create(M, N, T, BM, BN, BK, GROUP_M, G)
        return RaggedKScheduler(t.pid, t.num_programs, t.num_pid_m, t.num_pid_n, BM, BN, BK, GROUP_M,
                                num_tiles=t.num_tiles, k_steps=t.k_steps, tiles_per_batch=t.tiles_per_batch,
                                rows=t.rows, cols=t.cols, offs=offs, T=T)

    @gluon.jit
    def k_range(self, local_tile):
        """(first row, rows, k-steps) of the unit's group's K range."""
        start, rows = group_k_range(self.offs, self.tile_batch(local_tile), self.T)
        return start, rows, k_steps_of(rows, self.BK)

    @gluon.jit
    def unit_steps(self, local_tile):
        return self.k_range(local_tile)[2]


# ----------------------------------------------------------------------------- loads


@aggregate
class RaggedKLoader:
    """The TMA loads of one k-step: A rows [start + k, start + k + BK) × columns off_m.. of x
    (T, M), B the same rows × columns off_n.. of b (T, N), rows past the group's end zero."""

    a_desc: tma.tensor_descriptor
    b_desc: tma.tensor_descriptor

    @gluon.jit
    def load(self, ring, counter, off_m, off_n, start, rows, k):
        s = ring.acquire_empty(counter)
        bar = ring.ready.index(s)
        mbarrier.expect(bar, self.a_desc.type.nbytes_per_cta + self.b_desc.type.nbytes_per_cta)  # zero fill counts
        c0, c1, c2 = ragged_coords(start, rows, k)
        a_dst = ring.a_bufs.index(s)
        b_dst = ring.b_bufs.index(s)
        tma.async_load(self.a_desc, [c0, c1, c2, off_m], bar, a_dst.reshape([1, 1] + a_dst.shape))
        tma.async_load(self.b_desc, [c0, c1, c2, off_n], bar, b_dst.reshape([1, 1] + b_dst.shape))


# ----------------------------------------------------------------------------- the kernel

_RUNTIME_SCALARS = ["M", "N", "T", "G"]


@gluon.jit(do_not_specialize=_RUNTIME_SCALARS)
def grouped_k_gemm(a_desc, b_desc, c_desc, offs, M, N, T, G, alpha, beta, CFG: gl.constexpr):
    """out[g] = a[:, K_g] @ b[K_g, :] (α = 1, β = 0: the dense epilogue's scalars; module
    docstring): the dense kernel's producer warp and two consumer warpgroups (ping-pong or
    cooperative) over RaggedKScheduler's units, a unit's K loop its group's rows.

        program p │ unit (g, tile) │ unit ...                          ring of STAGES as the dense kernel
        producer  │ A x[s_g+k.., m..], B dY[s_g+k.., n..]  k < rows_g (ragged boxes: rows ≥ e_g read 0) │ ...
        consumer0 │ MMA ═══ (no k-step: zeros) │ TMA store out[g] tile │ (ping-pong: turns as the dense kernel)
        consumer1 │ wait turn │ MMA ═══════════ │ TMA store out[g'] tile │

    CFG: the dense kernel's constexprs (KernelConstants, pingpong.hopper.host.launch), its EPI a plain
    store.
    """
    kernel_start()
    gl.static_assert(CFG.EPI.plain(), "this kernel's epilogue stores α·acc alone (no β·C, bias or activation)")
    gl.static_assert(CFG.BN2 == 0, "ragged-K products take one-piece tiles")
    gl.static_assert(len(a_desc.block_type.shape) == 4, "A: a ragged (rank-4) descriptor")
    gl.static_assert(len(b_desc.block_type.shape) == 4, "B: a ragged (rank-4) descriptor")
    gl.static_assert(len(c_desc.block_type.shape) == 3, "out: a rank-3 (group, row, column) descriptor")
    sched = RaggedKScheduler.create(offs, G, T, M, N, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS, 0, False)
    epi = Epilogue.plain(c_desc, alpha, beta, offs, M, N, 2, CFG.EPI)
    loader = RaggedKLoader(a_desc, b_desc)
    # (the ragged operands are MN-major, whatever CFG's default majors say)
    run_partitions(ring, sched, epi, loader, PlainKLoop(0, CFG.acc_layout, CFG.acc_layout, False, False), CFG)
