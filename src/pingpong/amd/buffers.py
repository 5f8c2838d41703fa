"""TileLoader and Buffers: the CDNA ping-pong's LDS double buffer and its global→LDS loads.

Buffers owns four LDS tiles (a_s0, a_s1, b_s0, b_s1; separate allocations so the
compiler's barrier analysis never sees stage 0 and stage 1 as one buffer). Each tile holds a
BM×BK (or BN×BK) operand block stored as 16-row load subtiles (config.py derives their swizzle):

    logical tile [ROWS, BK]              LDS storage [ROW_BLOCKS, 2 halves, SUBTILES_K, 16, SUB_COLS]
    rows   0- 15  half 0 │ 16×SC │16×SC │ ...   one subtile = 16 rows × SUB_COLS = what ONE wave's
    rows  16- 31  half 1 │       │      │       direct-to-LDS instruction writes (64 lanes ×
    rows  32- 47  half 0 │       │      │       LOAD_WIDTH, consecutive bytes), swizzled inside
    rows  48- 63  half 1 │       │      │       by the derived SwizzledSharedLayout
      ...                                       (vec, per_phase, max_phase)
    row = (row_block · 2 + half) · 16 + r       (`storage_row`; half = bit 4 of the row)

The halves are interleaved 16-row stripes, not the top and bottom 128 rows, because that is
how the MFMA layout deals rows to the waves (mma.py): the 16×16 tiles go round-robin over the
wave grid [2 groups, 4 waves] first, so group g's accumulator rows are exactly the stripes
with bit 4 = g (its A operand) and wave w's columns are those with bits 4–5 = w % 4.

TileLoader issues the loads of one operand block for one K-step. Wave w of group g = w // 4
loads subtiles of half g only:
  * A: half g is exactly the A rows group g's MFMAs read ("self-loading"),
    so A is group-private: only group g reads or writes it.
  * B: half h = g; B is *shared* (each wave reads N columns of both halves), which is what
    the schedule's barrier distances protect (cdna_pingpong.py).
Which group reads which half is computed from the layouts by schedule_model.readers, so the
race model follows this mapping (with the top/bottom 128-row halves, A would be read by
both groups and the schedule would race; the checker finds it).
The global addresses each lane fetches are permuted by the compiler (ds_bpermute) so that the
fixed lane→LDS slots receive the swizzled layout: the "effective lane" trick: swizzle the source address, not the destination.

Edges: rows ≥ M (N) and columns ≥ K are masked; a masked lane's offset is pushed out of the
buffer range and the hardware returns 0 (a buffer load past num_records reads 0). Requires K-rows (K · operand bytes)
aligned to the DMA width (K % LOAD_WIDTH == 0), which the host launcher checks.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate


def storage_row(half: int, row_block: int, r: int, sub_rows: int = 16) -> int:
    """Logical row of element row r of subtile (row_block, half): the mapping `_tile_coords`
    and `mma_view` implement (for the race model and tests; the kernel uses tensor math)."""
    return (row_block * 2 + half) * sub_rows + r


def storage_half(row: int, sub_rows: int = 16) -> int:
    """The half that logical row `row` is stored in (inverse of `storage_row`)."""
    return (row // sub_rows) % 2


@gluon.constexpr_function
def load_layout(LOAD_WIDTH, SUB_ROWS, WAVES_PER_GROUP):
    """Distributed layout of the 5-D load tile [row block, half, k subtile, r, c]: 16×4 lanes
    per subtile; waves: the low wave bits over row blocks, the group (wave bit 2) over halves."""
    return gl.BlockedLayout([1, 1, 1, 1, LOAD_WIDTH], [1, 1, 1, SUB_ROWS, 64 // SUB_ROWS],
                            [WAVES_PER_GROUP, 2, 1, 1, 1], [4, 3, 2, 0, 1])


@gluon.constexpr_function
def lds_layout(VEC, PER_PHASE, MAX_PHASE):
    """The swizzled LDS layout derived in CdnaConfig (from the load subtile)."""
    return gl.SwizzledSharedLayout(VEC, PER_PHASE, MAX_PHASE, [4, 3, 2, 1, 0])


@gluon.jit
def _tile_coords(L: gl.constexpr, ROWS: gl.constexpr, SUB_ROWS: gl.constexpr, SUBTILES_K: gl.constexpr,
                 SUB_COLS: gl.constexpr):
    """(row, col) of every element of the 5-D load tile, in the logical ROWS×BK block."""
    RB: gl.constexpr = ROWS // 2 // SUB_ROWS
    rb = gl.arange(0, RB, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, gl.SliceLayout(4, L)))))
    h = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, gl.SliceLayout(4, L)))))
    ks = gl.arange(0, SUBTILES_K, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, gl.SliceLayout(4, L)))))
    r = gl.arange(0, SUB_ROWS, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(4, L)))))
    c = gl.arange(0, SUB_COLS, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, L)))))
    row = (rb[:, None, None, None, None] * 2 + h[None, :, None, None, None]) * SUB_ROWS \
        + r[None, None, None, :, None]  # storage_row
    col = ks[None, None, :, None, None] * SUB_COLS + c[None, None, None, None, :]
    return row, col


@aggregate
class TileLoader:
    """Direct-to-LDS loads of one ROWS×BK operand block (A: rows of M, B: rows of N; K-major)."""

    ptr: gl.tensor
    offs: gl.tensor  # element offsets of the block at k = 0
    row_ok: gl.tensor
    col: gl.tensor
    K: gl.tensor

    @gluon.constexpr_function
    def __init__(self, ptr, offs, row_ok, col, K):
        self.ptr = ptr
        self.offs = offs
        self.row_ok = row_ok
        self.col = col
        self.K = K

    @gluon.jit
    def create(ptr, row0, rows, stride, K, ROWS: gl.constexpr, L: gl.constexpr, SUB_ROWS: gl.constexpr,
               SUBTILES_K: gl.constexpr, SUB_COLS: gl.constexpr):
        row, col = _tile_coords(L, ROWS, SUB_ROWS, SUBTILES_K, SUB_COLS)
        offs = (row0 + row) * stride + col
        return TileLoader(ptr, offs, (row0 + row) < rows, col, K)

    @gluon.jit
    def load(self, dest, k):
        """Issue this wave's DMA instructions for K-step starting at column k; one commit group."""
        mask = self.row_ok & (self.col < self.K - k)
        gl.amd.cdna4.async_copy.buffer_load_to_shared(dest, self.ptr, self.offs + k, mask=mask)
        gl.amd.cdna4.async_copy.commit_group()


@aggregate
class Buffers:
    """The 2-stage LDS double buffer: A and B tiles for stage 0 and stage 1."""

    a0: gl.shared_memory_descriptor
    a1: gl.shared_memory_descriptor
    b0: gl.shared_memory_descriptor
    b1: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, a0, a1, b0, b1):
        self.a0 = a0
        self.a1 = a1
        self.b0 = b0
        self.b1 = b1

    @gluon.jit
    def allocate(BM: gl.constexpr, BN: gl.constexpr, SUB_ROWS: gl.constexpr, SUBTILES_K: gl.constexpr,
                 SUB_COLS: gl.constexpr, SH: gl.constexpr, DTYPE: gl.constexpr):
        """DTYPE: the operands' element type (bf16 or the target's fp8)."""
        a_shape: gl.constexpr = [BM // 2 // SUB_ROWS, 2, SUBTILES_K, SUB_ROWS, SUB_COLS]
        b_shape: gl.constexpr = [BN // 2 // SUB_ROWS, 2, SUBTILES_K, SUB_ROWS, SUB_COLS]
        return Buffers(gl.allocate_shared_memory(DTYPE, a_shape, SH),
                       gl.allocate_shared_memory(DTYPE, a_shape, SH),
                       gl.allocate_shared_memory(DTYPE, b_shape, SH),
                       gl.allocate_shared_memory(DTYPE, b_shape, SH))


@gluon.jit
def mma_view(tile, ROWS: gl.constexpr, BK: gl.constexpr):
    """The [ROWS, BK] view of a subtiled LDS tile that MmaOp reads: storage [row block, half,
    k subtile, r, c] → [row block, half, r, k subtile, c], i.e. row = (rb·2 + half)·16 + r."""
    return tile.permute([0, 1, 3, 2, 4]).reshape([ROWS, BK])
