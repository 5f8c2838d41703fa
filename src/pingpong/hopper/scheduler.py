"""TileScheduler: which output tiles a persistent program takes, in which order.

Program p of G takes tiles p, p+G, p+2G, ... of a *grouped* raster: tiles are numbered
column-major inside bands of GROUP_M tile-rows, so the ~G tiles in flight at once share few
A row-panels and B column-panels and their loads hit in L2:

    GROUP_M = 2, 4×3 tiles      tile id -> (pid_m, pid_n)
    ┌────┬────┬────┐
    │ 0  │ 2  │ 4  │  band 0
    │ 1  │ 3  │ 5  │
    ├────┼────┼────┤
    │ 6  │ 8  │ 10 │  band 1
    │ 7  │ 9  │ 11 │
    └────┴────┴────┘

A batched product numbers its tiles batch after batch (tile id = batch · tiles_per_batch +
the id above), all in one persistent grid: `tile_batch` and `tile_offsets` split the id.

`tile_coords` and `batch_and_tile` are plain arithmetic: tests call their `.fn(...)` in
Python and check the raster is a permutation of all tiles of all batches.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate


@gluon.jit
def tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """(pid_m, pid_n) of `tile_id` in the grouped raster."""
    tiles_per_band = GROUP_M * num_pid_n
    band = tile_id // tiles_per_band
    first_m = band * GROUP_M
    band_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % tiles_per_band) % band_m
    pid_n = (tile_id % tiles_per_band) // band_m
    return pid_m, pid_n


@gluon.jit
def batch_and_tile(tile_id, tiles_per_batch):
    """(batch, tile id inside that batch's matrix) of a global tile id (batch after batch)."""
    return tile_id // tiles_per_batch, tile_id % tiles_per_batch


@gluon.jit
def tiles_of_program(num_tiles, pid, num_programs):
    """How many tiles program `pid` of `num_programs` takes."""
    return (num_tiles - pid + num_programs - 1) // num_programs


@aggregate
class TileScheduler:
    pid: gl.tensor
    num_programs: gl.tensor
    num_pid_m: gl.tensor
    num_pid_n: gl.tensor
    num_tiles: gl.tensor
    k_steps: gl.tensor
    tiles_per_batch: gl.tensor
    BM: gl.constexpr
    BN: gl.constexpr
    BK: gl.constexpr
    GROUP_M: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, pid, num_programs, num_pid_m, num_pid_n, num_tiles, k_steps, tiles_per_batch, BM, BN, BK,
                 GROUP_M):
        self.pid = pid
        self.num_programs = num_programs
        self.num_pid_m = num_pid_m
        self.num_pid_n = num_pid_n
        self.num_tiles = num_tiles
        self.k_steps = k_steps
        self.tiles_per_batch = tiles_per_batch
        self.BM = gl.constexpr(BM)
        self.BN = gl.constexpr(BN)
        self.BK = gl.constexpr(BK)
        self.GROUP_M = gl.constexpr(GROUP_M)

    @gluon.jit
    def create(M, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr, batches=1):
        num_pid_m = gl.cdiv(M, BM)
        num_pid_n = gl.cdiv(N, BN)
        tiles_per_batch = num_pid_m * num_pid_n
        return TileScheduler(gl.program_id(0), gl.num_programs(0), num_pid_m, num_pid_n, tiles_per_batch * batches,
                             gl.cdiv(K, BK), tiles_per_batch, BM, BN, BK, GROUP_M)

    @gluon.jit
    def local_tiles(self):
        """Number of tiles this program computes."""
        return tiles_of_program(self.num_tiles, self.pid, self.num_programs)

    @gluon.jit
    def tile_offsets(self, local_tile):
        """(off_m, off_n) of this program's `local_tile`-th tile inside its batch's matrix."""
        _, tile_id = batch_and_tile(self.pid + local_tile * self.num_programs, self.tiles_per_batch)
        pid_m, pid_n = tile_coords(tile_id, self.num_pid_m, self.num_pid_n, self.GROUP_M)
        return pid_m * self.BM, pid_n * self.BN

    @gluon.jit
    def tile_batch(self, local_tile):
        """The batch (matrix index) of this program's `local_tile`-th tile."""
        batch, _ = batch_and_tile(self.pid + local_tile * self.num_programs, self.tiles_per_batch)
        return batch
