"""Tile schedulers: which work units a persistent program takes, in which order.

Every scheduler is a RasterScheduler (an aggregate extending it: its fields first, its answers
where the scheduler's units are the common ones), with the same interface, so a kernel takes
either:

    locate(t)               (batch, off_m, off_n) of the program's t-th unit
    local_tiles()           work units of this program
    tile_offsets(t)         (off_m, off_n) of the output tile of the program's t-th unit
    k_begin(t)              first K element the unit reads
    unit_steps(t)           k-steps of the unit
    first_step(t)           k-steps of the program's units before it (its first ring counter)
    tile_batch(t)           the matrix of a batched product the unit belongs to (0 if unbatched)
    split(t)                the unit's K split (0 when a unit runs the whole K loop); stream-K:
                            (slot, parts) of its tile's fix-up
    COUNTED                 (constexpr) the units' k-steps are device data (the K-grouped
                            kernels, pingpong.hopper.kernels.grouped_k and fp8_grouped_k): first_step
                            has no closed form, so the consumers count them unit by unit, and a
                            unit may have none
    LEADING                 (constexpr) a program's first `leading()` units may share their tile
                            (stream-K's streamed units); the rest are whole tiles, which the
                            consumers run in a loop of their own with `epi.whole_only()`
    RAGGED_K                (constexpr) COUNTED, and the producer loads each unit's K range
                            through the scheduler's k_range and a ragged loader (grouped_k)

TileScheduler (data-parallel): one unit per output tile, the whole K loop. SplitKScheduler:
SPLITS units per tile. StreamKScheduler: whole waves of tiles, then the remaining tiles' k-steps
divided evenly between the programs (module end). Each kernel names the one it runs.

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

from .pipeline import first_counter


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


@gluon.jit
def program():
    """(pid, num_programs) of this persistent program, computed before a scheduler's other
    fields (the schedulers' `create` pass those by keyword, which Triton evaluates first)."""
    return gl.program_id(0), gl.num_programs(0)


@aggregate
class RasterScheduler:
    """What every scheduler shares, its fields first in each one's: program `pid` of
    `num_programs` over the grouped raster of num_pid_m × num_pid_n output tiles of BM × BN,
    K in steps of BK; and the interface's common answers (one unit per tile, unbatched, the
    whole K loop of k_steps from K offset 0; num_tiles and k_steps are the scheduler's own
    fields), which a scheduler overrides where its units differ. COUNTED, RAGGED_K: module docstring."""

    pid: gl.tensor
    num_programs: gl.tensor
    num_pid_m: gl.tensor
    num_pid_n: gl.tensor
    BM: gl.constexpr
    BN: gl.constexpr
    BK: gl.constexpr
    GROUP_M: gl.constexpr
    COUNTED: gl.constexpr = False
    RAGGED_K: gl.constexpr = False
    LEADING: gl.constexpr = False

    @gluon.jit
    def local_tiles(self):
        """Number of units this program computes (one per tile: program p of P takes tiles
        p, p+P, ... of num_tiles)."""
        return tiles_of_program(self.num_tiles, self.pid, self.num_programs)

    @gluon.jit
    def tile_offsets(self, local_tile):
        """(off_m, off_n) of this program's `local_tile`-th unit's tile (inside its batch's matrix)."""
        _, off_m, off_n = self.locate(local_tile)
        return off_m, off_n

    @gluon.jit
    def raster_offsets(self, tile_id):
        """(off_m, off_n) of tile `tile_id` of the grouped raster."""
        pid_m, pid_n = tile_coords(tile_id, self.num_pid_m, self.num_pid_n, self.GROUP_M)
        return pid_m * self.BM, pid_n * self.BN

    @gluon.jit
    def tile_batch(self, local_tile):
        """Unbatched: matrix 0."""
        return 0

    @gluon.jit
    def k_begin(self, local_tile):
        """Every unit runs the whole K loop."""
        return 0

    @gluon.jit
    def unit_steps(self, local_tile):
        return self.k_steps

    @gluon.jit
    def first_step(self, local_tile):
        return first_counter(local_tile, self.k_steps, 1, 0)  # the schedule model's helper

    @gluon.jit
    def split(self, local_tile):
        """Every unit is the whole K loop: split 0."""
        return 0


#: elements a moved tile's offset is a multiple of (tile_offset): 16 bytes of FP8, 32 of bf16
ALIGN = gl.constexpr(16)


@gluon.jit
def tile_offset(pid, B: gl.constexpr, extent, CLAMP: gl.constexpr):
    """First row (column) of tile-row (tile-column) `pid` of B rows (columns) over `extent`;
    CLAMP: the last one moved back to end at `extent` (when extent ≥ B), overlapping the one
    before it:

        M = 406, BM = 128     rows   0..127   128..255   256..383   288..415 (not 384..511)

    so no TMA box of A or B runs past its operand's end by more than 15 rows. A box that does,
    with fewer than half its rows inside, loads at a fraction of the full box's rate
    (docs/design.md, the last row and column of tiles). The moved offset is a multiple of 16
    (ALIGN: a TMA box's innermost
    coordinate must be 16-byte aligned, and the offset may be one: out's N, A's M when A is
    stored M-major). The overlapped rows are computed twice, the same way, and stored twice
    with the same values, so a kernel clamps only when its epilogue does not read C (β·C may
    be read in place)."""
    off = pid * B
    if CLAMP:
        off = min(off, max((extent - B + ALIGN - 1) // ALIGN * ALIGN, 0))  # extent - B rounded up
    return off


@aggregate
class TileScheduler(RasterScheduler):
    """One unit per output tile (of every batch), the whole K loop each; CLAMP: the last row
    and column of tiles end at row M and column N (`tile_offset`)."""

    num_tiles: gl.tensor
    k_steps: gl.tensor
    tiles_per_batch: gl.tensor
    rows: gl.tensor  # M × N: (each batch's) output
    cols: gl.tensor
    CLAMP: gl.constexpr = False

    @gluon.jit
    def create(M, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr, batches=1,
               CLAMP: gl.constexpr = False):
        num_pid_m = gl.cdiv(M, BM)
        num_pid_n = gl.cdiv(N, BN)
        tiles_per_batch = num_pid_m * num_pid_n
        pid, num_programs = program()
        return TileScheduler(pid, num_programs, num_pid_m, num_pid_n, BM, BN, BK, GROUP_M,
                             num_tiles=tiles_per_batch * batches, k_steps=gl.cdiv(K, BK),
                             tiles_per_batch=tiles_per_batch, rows=M, cols=N, CLAMP=CLAMP)

    @gluon.jit
    def raster_offsets(self, tile_id):
        """(off_m, off_n) of tile `tile_id` of the grouped raster, the last row and column of
        tiles moved under CLAMP (`tile_offset`)."""
        pid_m, pid_n = tile_coords(tile_id, self.num_pid_m, self.num_pid_n, self.GROUP_M)
        return tile_offset(pid_m, self.BM, self.rows, self.CLAMP), tile_offset(pid_n, self.BN, self.cols, self.CLAMP)

    @gluon.jit
    def locate(self, local_tile):
        """(batch, off_m, off_n) of this program's `local_tile`-th tile, in one call (as
        pingpong.hopper.kernels.grouped.GroupedScheduler.locate: (group, first row, off_n))."""
        batch, tile_id = batch_and_tile(self.pid + local_tile * self.num_programs, self.tiles_per_batch)
        off_m, off_n = self.raster_offsets(tile_id)
        return batch, off_m, off_n

    @gluon.jit
    def tile_batch(self, local_tile):
        """The batch (matrix index) of this program's `local_tile`-th tile."""
        batch, _ = batch_and_tile(self.pid + local_tile * self.num_programs, self.tiles_per_batch)
        return batch


# ----------------------------------------------------------------------------- split-K


@gluon.jit
def split_work(unit, num_tiles):
    """(tile id, split) of work unit `unit`: split-major, so the programs running at the same
    time share one split's K range and the grouped raster's panels stay hot in L2."""
    return unit % num_tiles, unit // num_tiles


@gluon.jit
def split_tile_offset(pid, B: gl.constexpr, extent, CLAMP: gl.constexpr):
    """tile_offset of the split-K kernels' tile-rows: under CLAMP the last one moved back by a
    multiple of 16 rows but never by half a tile (then by 16 fewer), so no half of it starts
    at the row a half of the tile-row before it starts at (the fix-up's arrival counter is a
    tile half's first row's: fixup.SplitEpilogue.tile_counter)."""
    off = tile_offset(pid, B, extent, CLAMP)
    if CLAMP:
        if pid * B - off == B // 2:
            off += ALIGN
    return off


@aggregate
class SplitKScheduler(RasterScheduler):
    """SPLITS work units per output tile, each over a contiguous range of k_steps k-steps:

        units   0 .. T-1      split 0 of tiles 0 .. T-1  (grouped raster)   k-steps [0, S)
                T .. 2T-1     split 1                                      k-steps [S, 2S)
                ...
        program p takes units p, p+G, p+2G, ... (G programs)

    The last split's range may run past K: TMA zero-fills it, adding exact zeros. A unit's
    fp32 partial tile goes to split `split`'s block of the workspace, at its rows and columns;
    the last split of a tile to finish sums the blocks in order 0, 1, ...
    (pingpong.hopper.device.fixup). CLAMP: the last row of tiles ends at row M
    (`split_tile_offset`); two tiles write the rows they share into a split's block, the same
    values, and each one's last split sums them as its own. The 16-bit kernels move their rows
    (not where β·C is read), not their columns; the FP8 kernels nothing: moving the columns
    too, or FP8's rows, spilled registers in the FP8 row-wise GELU kernel's fix-up.
    """

    num_tiles: gl.tensor
    num_units: gl.tensor
    k_steps: gl.tensor  # k-steps of one split
    rows: gl.tensor  # M: the output's
    CLAMP: gl.constexpr = False

    @gluon.jit
    def create(M, N, K, splits, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
               CLAMP: gl.constexpr = False):
        num_pid_m = gl.cdiv(M, BM)
        num_pid_n = gl.cdiv(N, BN)
        num_tiles = num_pid_m * num_pid_n
        pid, num_programs = program()
        return SplitKScheduler(pid, num_programs, num_pid_m, num_pid_n, BM, BN, BK, GROUP_M,
                               num_tiles=num_tiles, num_units=num_tiles * splits,
                               k_steps=gl.cdiv(gl.cdiv(K, BK), splits), rows=M, CLAMP=CLAMP)

    @gluon.jit
    def raster_offsets(self, tile_id):
        """(off_m, off_n) of tile `tile_id` of the grouped raster, the last row of tiles moved
        under CLAMP (class docstring)."""
        pid_m, pid_n = tile_coords(tile_id, self.num_pid_m, self.num_pid_n, self.GROUP_M)
        return split_tile_offset(pid_m, self.BM, self.rows, self.CLAMP), pid_n * self.BN

    @gluon.jit
    def local_tiles(self):
        return tiles_of_program(self.num_units, self.pid, self.num_programs)

    @gluon.jit
    def unit(self, local_tile):
        """(tile id, split) of this program's `local_tile`-th unit."""
        return split_work(self.pid + local_tile * self.num_programs, self.num_tiles)

    @gluon.jit
    def locate(self, local_tile):
        """(batch 0, off_m, off_n) of this program's `local_tile`-th unit (TileScheduler.locate's form)."""
        tile, split = self.unit(local_tile)
        off_m, off_n = self.raster_offsets(tile)
        return 0, off_m, off_n

    @gluon.jit
    def k_begin(self, local_tile):
        tile, split = self.unit(local_tile)
        return split * self.k_steps * self.BK

    @gluon.jit
    def split(self, local_tile):
        """The K split (0 .. SPLITS-1) of this program's `local_tile`-th unit."""
        tile, split = self.unit(local_tile)
        return split


# ----------------------------------------------------------------------------- stream-K

@gluon.jit
def stream_bound(p, programs, total):
    """The first streamed k-step of program `p` when `programs` divide `total` k-steps
    evenly (the first `total % programs` programs one more); p = programs: total."""
    return p * (total // programs) + min(p, total % programs)


@gluon.jit
def stream_owner(step, programs, total):
    """The streaming program whose share holds streamed k-step `step` (stream_bound's inverse)."""
    per = max(total // programs, 1)  # (≥ 1 whenever a program streams; no division by 0 otherwise)
    big = (total % programs) * (per + 1)  # the programs of one more k-step end here
    owner = step // (per + 1)
    if step >= big:
        owner = total % programs + (step - big) // per
    return owner


@gluon.jit
def stream_units(begin, end, k_steps):
    """Units of the share [begin, end): the streamed tiles it touches (an empty share is a
    non-streaming program's, at total, a multiple of k_steps: 0)."""
    return (end + k_steps - 1) // k_steps - begin // k_steps


@gluon.jit
def stream_unit(begin, end, u, k_steps):
    """(streamed tile, first, end) of the `u`-th unit a program runs of its share [begin, end):
    the share cut at tile boundaries, run from its last piece back (StreamKScheduler); the unit
    runs the tile's k-steps [first, end) - tile·k_steps."""
    tile = (end - 1) // k_steps - u
    return tile, max(begin, tile * k_steps), min(end, tile * k_steps + k_steps)


@gluon.jit
def residues_in(a, b, r, EVERY: gl.constexpr):
    """How many x in [a, b) have x % EVERY == r (0 ≤ a, 0 ≤ r < EVERY; none when b ≤ a)."""
    return max((b - r + EVERY - 1) // EVERY - (a - r + EVERY - 1) // EVERY, 0)


@aggregate
class StreamKScheduler(RasterScheduler):
    """Stream-K (hybrid): the first DP tiles are data-parallel (program p takes tiles p, p+G,
    ... of them, the whole K loop each); the k-steps of the remaining tiles are one streamed
    sequence, tile after tile, divided evenly between the first P programs (stream_bound):

        streamed k-steps  │ tile DP          │ tile DP+1        │ tile DP+2        │ ...
        shares            │ program 0          │ program 1          │ program 2       ...
        units             │ p0 u1            │p0│ p1 u1         │p1│ p2 u1    ...
                                               u0                 u0

    A program's units: its share cut at tile boundaries, run from the last piece back (u0 is
    the share's last piece), then its data-parallel tiles. So every program's first unit
    starts its tile at k-step 0 (or is a share inside one tile) and the programs, which start
    together and step at one rate, read A and B at nearby K offsets, within T - S k-steps of
    one another (T a tile's k-steps, S a share's, S < T): the panels they share are read
    once from memory, not once per program, as they would be in share order (the K offsets
    spread over all of K). A tile whose k-steps lie in one share is stored directly (parts 1);
    one shared by `parts` programs is finished by the last of them to arrive, which sums the
    partials in K order (slot 0 first; pingpong.hopper.device.fixup). The host picks DP and P
    (stream_k_split); units differ in K range, so the ring counters are sums (first_step).
    """

    k_steps: gl.tensor  # k-steps of one whole tile
    dp_tiles: gl.tensor
    streamers: gl.tensor  # P: programs sharing the streamed k-steps
    total: gl.tensor  # streamed k-steps
    begin: gl.tensor  # this program's share [begin, end)
    end: gl.tensor
    units: gl.tensor  # this program's streamed units
    LEADING: gl.constexpr = True

    @gluon.jit
    def create(M, N, K, dp_tiles, streamers, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
               GROUP_M: gl.constexpr):
        pid = gl.program_id(0)
        num_pid_m = gl.cdiv(M, BM)
        num_pid_n = gl.cdiv(N, BN)
        k_steps = gl.cdiv(K, BK)
        total = (num_pid_m * num_pid_n - dp_tiles) * k_steps
        begin = stream_bound(min(pid, streamers), streamers, total)
        end = stream_bound(min(pid + 1, streamers), streamers, total)
        num_programs = gl.num_programs(0)
        return StreamKScheduler(pid, num_programs, num_pid_m, num_pid_n, BM, BN, BK, GROUP_M, k_steps=k_steps,
                                dp_tiles=dp_tiles, streamers=streamers, total=total, begin=begin, end=end,
                                units=stream_units(begin, end, k_steps))

    @gluon.jit
    def local_tiles(self):
        return self.units + tiles_of_program(self.dp_tiles, self.pid, self.num_programs)

    @gluon.jit
    def leading(self):
        """The program's streamed units, which come first (LEADING); its data-parallel tiles follow."""
        return self.units

    @gluon.jit
    def unit(self, local_tile):
        """(tile id, first k-step inside the tile, k-steps, first streamed k-step) of this
        program's `local_tile`-th unit (a data-parallel tile: its whole K loop, streamed -1)."""
        tile, first, last = stream_unit(self.begin, self.end, local_tile, self.k_steps)
        tile_id = self.dp_tiles + tile
        k0 = first - tile * self.k_steps
        steps = last - first
        if local_tile >= self.units:
            tile_id = self.pid + (local_tile - self.units) * self.num_programs
            k0 = 0
            steps = self.k_steps
            first = -1
        return tile_id, k0, steps, first

    @gluon.jit
    def locate(self, local_tile):
        """(batch 0, off_m, off_n) of this program's `local_tile`-th unit."""
        tile_id, k0, steps, first = self.unit(local_tile)
        off_m, off_n = self.raster_offsets(tile_id)
        return 0, off_m, off_n

    @gluon.jit
    def k_begin(self, local_tile):
        tile_id, k0, steps, first = self.unit(local_tile)
        return k0 * self.BK

    @gluon.jit
    def unit_steps(self, local_tile):
        tile_id, k0, steps, first = self.unit(local_tile)
        return steps

    @gluon.jit
    def first_step(self, local_tile):
        """Streamed units run the share's pieces from the last back, so those before a unit
        hold the share's k-steps after it, [last, end); the data-parallel tiles follow."""
        tile, first, last = stream_unit(self.begin, self.end, local_tile, self.k_steps)
        step = self.end - last
        if local_tile >= self.units:
            step = self.end - self.begin + (local_tile - self.units) * self.k_steps
        return step

    @gluon.jit
    def whole_before(self, local_tile, EVERY: gl.constexpr, FIRST: gl.constexpr):
        """Units of parts 1 (stored whole, through the TMA epilogue) among this program's units
        FIRST, FIRST + EVERY, ... before `local_tile` (a consumer's: ping-pong EVERY = 2,
        FIRST = the consumer; cooperative 1, 0): the streamed units that hold a whole tile, the
        run [lo, hi) of the units (all but the partial pieces at the share's ends: its last
        piece is unit 0), then every data-parallel tile."""
        lo = self.units - (self.end // self.k_steps - self.begin // self.k_steps)
        hi = self.units - ((self.begin + self.k_steps - 1) // self.k_steps - self.begin // self.k_steps)
        return (residues_in(lo, min(hi, local_tile), FIRST, EVERY)
                + residues_in(self.units, local_tile, FIRST, EVERY))

    @gluon.jit
    def split(self, local_tile):
        """(slot, parts) of the unit's tile fix-up: the tile's k-steps are shared by `parts`
        programs (the owners of its first and last k-step and those between), and the unit's
        partial is the slot-th along K; a data-parallel tile (0, 1)."""
        tile, first, last = stream_unit(self.begin, self.end, local_tile, self.k_steps)
        head = stream_owner(tile * self.k_steps, self.streamers, self.total)
        slot = stream_owner(first, self.streamers, self.total) - head
        parts = stream_owner(tile * self.k_steps + self.k_steps - 1, self.streamers, self.total) - head + 1
        if local_tile >= self.units:
            slot = 0
            parts = 1
        return slot, parts
