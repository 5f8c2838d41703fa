"""The Hopper GEMM kernels: orchestration only. Each schedule is a short function that reads
top-down; the parts (Ring, TileLoader, MmaOp, Epilogue, TileScheduler, PhaseSync) do the work.

ONE SKELETON. Every warp-specialized Hopper kernel (these, the FP8 ones of
pingpong.hopper.kernels.fp8_gemm, the grouped ones of pingpong.hopper.kernels.grouped, fp8_grouped,
grouped_k and fp8_grouped_k) is `run_partitions`: one warp_specialize of one producer function and one
consumer function (both schedules; CFG.PINGPONG picks the units and rows of each consumer
warpgroup), with the parts that differ passed in as aggregates:

    run_partitions(ring, sched, epi, loader, kloop, CFG)
        producer   (loader, ring, sched)      loader.load per k-step of every unit of sched
        consumer   (ring, sched, epi, kloop,  per unit: kloop.locate │ [ping-pong: wait turn] │
                    sync, CONSUMER, PINGPONG)  kloop.run (K loop; passes the turn) │ kloop.store → epi
    sched   a RasterScheduler (pingpong.hopper.device.scheduler): TileScheduler, SplitKScheduler,
            StreamKScheduler, GroupedScheduler, RaggedKScheduler and PaddedKScheduler (TileSchedulers
            whose COUNTED has the consumers count k-steps unit by unit); the data-parallel
            kernels' last row and column of tiles end at M and N (scheduler.tile_offset), the
            16-bit split-K kernels' last row at M (scheduler.split_tile_offset), unless β·C is
            read
    kloop   PlainKLoop (wgmmas accumulate in place), fp8_kernel.Fp8KLoop (promoted, paired or
            plain; the outer scales at the store)
    loader  TileLoader, fp8_kernel.Fp8Loader (+ block scales), grouped_k.RaggedKLoader
    epi     Epilogue, fixup.SplitEpilogue / StreamKEpilogue, grouped.GroupedEpilogue

PING-PONG (schedule="pingpong"): one producer warp, two consumer warpgroups, each consumer
owns whole output tiles and they take turns on the tensor cores.

    producer  │ load t0 k0..kn │ load t1 k0..kn │ load t2 k0..kn │ load t3 ...   (ring of STAGES)
    consumer0 │ MMA t0 ════════│ epi t0 ──┐     │ MMA t2 ════════│ epi t2 ...
    consumer1 │ wait turn      │ MMA t1 ════════│ epi t1 ──┐     │ MMA t3 ...
              ▲ consumer 0's first turn is free   arrive(turn[other]) after its last wgmma

COOPERATIVE (schedule="cooperative"): the same producer; both consumers work on one tile,
each on its 64-row half, and both release each stage (empty barrier count 2).

    producer  │ load t0 k0..kn │ load t1 k0..kn │ ...
    consumer0 │ MMA t0 rows 0..63   │ epi │ MMA t1 rows 0..63   │ epi
    consumer1 │ MMA t0 rows 64..127 │ epi │ MMA t1 rows 64..127 │ epi

PERSISTENT (schedule="persistent"): no warp specialization; the same warps issue the TMA
load of k-step c+STAGES-1 right after the wgmma of k-step c (the ring runs ahead across
tile boundaries, so the next tile's loads overlap this tile's epilogue).

    prologue: load c=0..STAGES-2
    for each tile, each k: wait ready(c) · wgmma(c) · wait(1) · barrier · release(c-1) · load(c+STAGES-1)
    epilogue (act(α·acc + bias) + β·C, TMA store)

LAUNCH (every kernel here and in the modules above, `kernel_start` first): programmatic
dependent launch (launch_options: launch_pdl), so the launch and the CTAs' start overlap the
end of the kernel before it on the stream:

    kernel before │ ... its last tiles ...        │ exits, its writes visible
    this kernel   │ launched, CTAs placed on free SMs │ griddepcontrol.wait ┘ │ launch_dependents │ loads ...

A batched product (B matrices) runs the same schedules over B·tiles tile ids in one grid;
each step carries the tile's batch index to the loader and the epilogue (rank-3 TMA
descriptors, pingpong.hopper.device.batched).

SPLIT-K / SWAP-AB (split_k_gemm; KernelConfig.split_k > 1 or swap_ab, warp-specialized
schedules): the same producer and consumers over the work units of SplitKScheduler (a tile
and a K range each); the epilogue (SplitEpilogue, pingpong.hopper.device.fixup) stores the fp32
partial into a workspace and counts arrivals; the last split of a tile to arrive sums the
partials in split order and writes the result. Swap-AB is the same kernel on (Bᵀ, Aᵀ): N
fills the 64-row wgmma side and the result is written transposed. An unsplit cooperative
swap-AB tile runs warp_specialized_gemm instead (FP8: fp8_gemm) (config.staged_swap): the TMA
epilogue (EPI.SWAP) writes each sub-tile into its buffer's transposed view and stores the
buffer as a box of out at (column, row):

    consumer │ MMA Cᵀ tile (N rows × M columns) │ sub-tile ──stmatrix.trans──> buffer (M × N) ──TMA──> out

    program p │ unit p: tile t, split 0        │ unit p+G: tile t', split 1 │ ...
              │ MMA k-steps [0, S) │ ws[0] ← acc, arrive  │ MMA [S, 2S) │ ws[1] ← acc, arrive, last:
              │                                            │   out = cast(act(α·(ws[0] + ws[1] + ...) + bias) + β·C)

STREAM-K (stream_k_gemm; KernelConfig.stream_k; FP8: fp8_kernel.fp8_stream_gemm): the same
partitions over StreamKScheduler's units: whole waves of tiles data-parallel, the last wave's
k-steps shared evenly; a unit's K range varies, so each consumer's ring counter is the
scheduler's first_step. A unit holding its whole tile goes out through the TMA epilogue; a
shared tile's units through the fix-up (StreamKEpilogue.finish), the last to arrive summing
the partials in K order into a staging buffer and storing it with TMA (with β·C or epilogue
sub-tiles: StreamKEpilogue's fix_up, its own partial in registers, stored through pointers):

    program p │ head of tile t+2 (slot 0)    │ whole tile t+1          │ tail of tile t (slot 1 of 2)   │ dp tiles
              │ MMA │ ws[0] ← acc, arrive     │ MMA │ epi ──TMA──> out  │ MMA │ ws[1] ← acc, arrive:     │ MMA │ epi
              │                              │                        │  last? Σ ws[0..] ──TMA──> out    │

(its share of tiles t..t+2 run from the last piece back: each program starts at k-step 0 of
a tile, so programs read the panels they share at nearby K offsets; StreamKScheduler)

CLUSTERS (KernelConfig.cluster_m=2; CLUSTER = 2, launched with num_ctas=2): one
program is a pair of CTAs on two SMs of one GPC, and the kernel describes the pair (Triton's
CTA layouts: BM is the pair's 2·block_m rows, A's box and the accumulator split over the two
CTAs by rows, B's box shared). The pair takes vertically adjacent tiles, the same columns, so
they need the same B tile: the leader loads it once, multicast into both CTAs' slot.

    CTA 0 producer │ wait empty[s], pair_empty[s] │ A rows 0..BM-1 → own slot │ B → slot s of BOTH
    CTA 1 producer │ wait empty[s]                │ A rows BM..2BM-1 → own slot
    CTA r consumer │ wait ready[s] (own) │ wgmma │ ... │ arrive empty[s] (own) + pair_empty[s] (CTA 0's)
                   ▲ the leader refills slot s only when BOTH CTAs' consumers released it
    kernel entry   │ init barriers · fence · cluster barrier (no arrival on an uninitialized partner)

A cooperative pair orders its 2·block_m rows consumer-major: consumer c computes pair rows
[c·block_m, (c+1)·block_m), half in each CTA, from its own A box of the slot (A_BOXES = 2).

All three share one mainloop contract (pingpong.hopper.device.pipeline docstring): wait ready with
ring_phase, keep one k-step's wgmma in flight, release a slot once its wgmma has completed.

TWO-PIECE TILES (BN2 > 0, block_n = P1 + P2, powers of two, P1 the largest below block_n,
P2 = BN2 ≥ 16, P1/P2 ≤ 8; config.column_pieces): the same orchestration. The producer loads B
as B1_BOXES = P1/P2 boxes of P2 columns into the first piece's buffer and one more into the
second's (two buffers per slot), the MmaOp issues two wgmma groups per k-step into two
accumulators (N = P1 and P2), and the epilogue stores the first piece's columns, then the
second's:

    producer  │ A, B[0:P2], ..., B[P1-P2:P1] -> slot.a, slot.b ; B[P1:P1+P2] -> slot.b2 │ ...
    consumer  │ wgmma(a, b) -> acc ; wgmma(a, b2) -> acc2 ; wait(1 k-step)             │ ... │ epi acc | acc2
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ..device.epilogue import Epilogue
from ..device.fixup import Alpha, SplitEpilogue, StreamKEpilogue
from ..device.loader import TileLoader
from ..device.mma import MmaOp
from ..device.phase_sync import PhaseSync
from ..device.pipeline import Ring
from ..device.scheduler import SplitKScheduler, StreamKScheduler, TileScheduler, residues_in


# ----------------------------------------------------------------------------- shared steps


@gluon.jit
def kernel_start():
    """The first step of every Hopper GEMM kernel (launched with programmatic dependent launch,
    module docstring, LAUNCH): wait until the kernel before it on the stream has finished and its
    writes are visible (griddepcontrol.wait), before any global read or write (operands, scales,
    group tables, workspaces, counters); then let the next such kernel launch, whose CTAs take
    the SMs this grid leaves free and wait there the same way. Both are no-ops in a launch
    without PDL."""
    gdc_wait()
    gdc_launch_dependents()


@gluon.jit
def mainloop(ring, first, k_steps, ROW0: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr, COLS2: gl.constexpr,
             acc_layout: gl.constexpr, acc_layout2: gl.constexpr, A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr):
    """One consumer's K loop over ring counters first .. first+k_steps-1 (COLS2 > 0: the
    tile's last COLS2 columns are a second piece, pingpong.hopper.device.mma).

    Returns with the last wgmma still in flight and its slot not yet released: the caller
    decides what happens in that gap (ping-pong hands the tensor cores to the other consumer).
    """
    mma = MmaOp.start(ROWS, COLS, acc_layout, COLS2, acc_layout2)
    for k in range(k_steps):
        s = ring.wait_ready(first + k)
        mma = mma.issue(ring, s, ROW0, ROWS, A_KMAJOR, B_KMAJOR)
        mma = mma.wait(1)
        if k > 0:
            ring.release(first + k - 1)
    return mma


@gluon.jit
def finish_mainloop(mma, ring, last):
    """Drain the last wgmma and release its slot."""
    mma = mma.wait(0)
    ring.release(last)
    return mma


@gluon.jit
def producer(loader, ring, sched):
    """The TMA warp: every k-step of every work unit of this program, in order, into the ring
    (RAGGED_K: the unit's K range as the scheduler reads it from device data, k-steps past its
    end zero-filled by the loader's ragged boxes)."""
    counter = 0
    for t in range(sched.local_tiles()):
        off_m, off_n = sched.tile_offsets(t)
        if sched.RAGGED_K:
            start, rows, steps = sched.k_range(t)
            for k in range(steps):
                loader.load(ring, counter, off_m, off_n, start, rows, k * sched.BK)
                counter += 1
        else:
            k0 = sched.k_begin(t)
            batch = sched.tile_batch(t)
            for k in range(sched.unit_steps(t)):
                loader.load(ring, counter, off_m, off_n, k0 + k * sched.BK, batch)
                counter += 1


# ----------------------------------------------------------------------------- K loops


@aggregate
class PlainKLoop:
    """The 16-bit kernels' K loop (and FP8's with fast accumulation): the wgmmas accumulate in
    place (mainloop). A K-loop variant is what the skeleton's consumers (below) call at four
    points of every unit; its unit record is whatever `locate` returns:

        outer_factor()                                       once per consumer, before its first unit
        locate(sched, t)                  -> unit            before the consumer's turn (COUNTED
                                                               schedulers: counted(sched, t, first, steps))
        run(ring, sched, t, unit, ROW0, ROWS, sync, C, PP)   -> MmaOp, drained, slots released (PP: the
                                                               turn passed once the last wgmma is issued)
        store(epi, sched, mma, factor, C, count, t, unit, ROW0)   the epilogue

    Here the unit is (first ring counter, k-steps); the tile's place is asked of the scheduler
    after the K loop, when the epilogue needs it. The FP8 variant: fp8_kernel.Fp8KLoop."""

    COLS2: gl.constexpr
    acc_layout: gl.constexpr
    acc_layout2: gl.constexpr
    A_KMAJOR: gl.constexpr
    B_KMAJOR: gl.constexpr

    @gluon.jit
    def of(CFG: gl.constexpr):
        """The K loop of a kernel's constants (KernelConstants): its pieces, layouts, majors."""
        return PlainKLoop(CFG.BN2, CFG.acc_layout, CFG.acc_layout2, CFG.A_KMAJOR, CFG.B_KMAJOR)

    @gluon.jit
    def outer_factor(self):
        return gl.to_tensor(1.0)  # (unused: no scales)

    @gluon.jit
    def locate(self, sched, t):
        return sched.first_step(t), sched.unit_steps(t)

    @gluon.jit
    def counted(self, sched, t, first, steps):
        """The unit of a COUNTED scheduler, whose first ring counter and k-steps the consumer
        added up itself."""
        return first, steps

    @gluon.jit
    def accumulate(self, ring, first, steps, ROW0: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr, sync,
                   CONSUMER: gl.constexpr, PINGPONG: gl.constexpr, MAY_BE_EMPTY: gl.constexpr = False):
        """k-steps first .. first+steps-1 into ROWS × COLS accumulators (rows ROW0.. of the A
        tile). MAY_BE_EMPTY: a unit of no k-step issues no wgmma, holds no slot, and gives zeros."""
        mma = mainloop(ring, first, steps, ROW0, ROWS, COLS, self.COLS2, self.acc_layout, self.acc_layout2,
                       self.A_KMAJOR, self.B_KMAJOR)
        if PINGPONG:
            sync.pass_turn(CONSUMER)
        if MAY_BE_EMPTY:
            if steps > 0:
                mma = finish_mainloop(mma, ring, first + steps - 1)
        else:
            mma = finish_mainloop(mma, ring, first + steps - 1)
        return mma

    @gluon.jit
    def run(self, ring, sched, t, unit, ROW0: gl.constexpr, ROWS: gl.constexpr, sync, CONSUMER: gl.constexpr,
            PINGPONG: gl.constexpr):
        first, steps = unit
        return self.accumulate(ring, first, steps, ROW0, ROWS, sched.BN, sync, CONSUMER, PINGPONG, sched.COUNTED)

    @gluon.jit
    def store(self, epi, sched, mma, factor, CONSUMER: gl.constexpr, count, t, unit, ROW0: gl.constexpr):
        off_m, off_n = sched.tile_offsets(t)
        epi.store(mma, CONSUMER, count, off_m + ROW0, off_n, sched.tile_batch(t), sched.split(t))


# ----------------------------------------------------------------------------- consumers


@gluon.jit
def consumer(ring, sched, epi, kloop, sync, CONSUMER: gl.constexpr, PINGPONG: gl.constexpr):
    """Consumer warpgroup CONSUMER of either schedule (module docstring), each unit through the
    K-loop variant `kloop` (PlainKLoop's docstring). Ping-pong: the program's units CONSUMER,
    CONSUMER+2, ..., each in its turn (PhaseSync); cooperative: every unit, its rows
    [CONSUMER·BM/2, (CONSUMER+1)·BM/2). COUNTED: it walks every unit, adding up the k-steps
    (the other consumer's too) to find its ring position (kloop.counted: the unit at it)."""
    EVERY: gl.constexpr = 2 if PINGPONG else 1  # units taken in turns, or each by both
    FIRST: gl.constexpr = CONSUMER % EVERY
    factor = kloop.outer_factor()
    if sched.COUNTED:
        first = 0
        for t in range(sched.local_tiles()):
            steps = sched.unit_steps(t)
            if t % EVERY == FIRST:
                consumer_unit(ring, sched, epi, kloop, sync, factor, CONSUMER, PINGPONG, t, t // EVERY,
                              kloop.counted(sched, t, first, steps))
            first += steps
    else:
        jobs = (sched.local_tiles() - FIRST + (EVERY - 1)) // EVERY
        lead = 0
        if sched.LEADING:  # the units that may share a tile first, then a loop of whole tiles
            lead = residues_in(0, sched.leading(), FIRST, EVERY)  # this consumer's turns among them
            for j in range(lead):
                t = EVERY * j + FIRST
                consumer_unit(ring, sched, epi, kloop, sync, factor, CONSUMER, PINGPONG, t, j, kloop.locate(sched, t))
            rest = epi.whole_only()
        else:
            rest = epi
        for j in range(lead, jobs):
            t = EVERY * j + FIRST
            consumer_unit(ring, sched, rest, kloop, sync, factor, CONSUMER, PINGPONG, t, j, kloop.locate(sched, t))
    epi.drain()


@gluon.jit
def consumer_unit(ring, sched, epi, kloop, sync, factor, CONSUMER: gl.constexpr, PINGPONG: gl.constexpr, t, j, unit):
    """The consumer's j-th unit (the program's t-th): its K loop (ping-pong: in its turn, over
    every row; cooperative: over its half's rows), then its epilogue."""
    ROWS: gl.constexpr = sched.BM if PINGPONG else sched.BM // 2
    ROW0: gl.constexpr = 0 if PINGPONG else CONSUMER * ROWS
    if PINGPONG:
        sync.wait_turn(CONSUMER, j)
    mma = kloop.run(ring, sched, t, unit, ROW0, ROWS, sync, CONSUMER, PINGPONG)
    kloop.store(epi, sched, mma, factor, CONSUMER, j, t, unit, ROW0)


# ----------------------------------------------------------------------------- kernels

# Sizes stay runtime values even when 1 (Triton would otherwise fold them into constants,
# and the parts hold them as tensors).
_RUNTIME_SCALARS = ["M", "N", "K", "batches"]
_SPLIT_RUNTIME_SCALARS = ["M", "N", "K", "splits", "split_stride16", "ws_ld16", "out_ld", "c_ld"]
_STREAM_RUNTIME_SCALARS = ["M", "N", "K", "dp_tiles", "streamers", "split_stride16", "ws_ld16", "out_ld", "c_ld"]


@gluon.jit
def run_partitions(ring, sched, epi, loader, kloop, CFG: gl.constexpr):
    """The warp-specialized skeleton of every Hopper GEMM: the producer warp (`loader`'s loads
    of `sched`'s units into the ring) and the two consumer warpgroups of the ping-pong
    (CFG.PINGPONG: their turns a PhaseSync) or cooperative schedule, each unit's K loop the
    variant `kloop` (PlainKLoop, fp8_kernel.Fp8KLoop), its result into `epi`; the partitions'
    warps and registers come from CFG."""
    gl.static_assert(CFG.STAGES >= 2, "the ring needs at least 2 stages")
    gl.static_assert(CFG.RELEASERS == (1 if CFG.PINGPONG else 2),
                     "ping-pong: one consumer frees a slot; cooperative: both")
    PINGPONG: gl.constexpr = CFG.PINGPONG
    if PINGPONG:
        sync = PhaseSync.allocate()
    else:
        sync = 0  # (no turns)
    gl.warp_specialize([
        (consumer, (ring, sched, epi, kloop, sync, 0, PINGPONG)),
        (consumer, (ring, sched, epi, kloop, sync, 1, PINGPONG)),
        (producer, (loader, ring, sched)),
    ], [CFG.CONSUMER_WARPS, CFG.PRODUCER_WARPS], [CFG.CONSUMER_REGS, CFG.PRODUCER_REGS])


@gluon.jit(do_not_specialize=_RUNTIME_SCALARS)
def warp_specialized_gemm(a_desc, b_desc, ops, M, N, K, alpha, beta, batches, CFG: gl.constexpr):
    """Ping-pong or cooperative: producer warp + two consumer warpgroups (module docstring),
    one work unit per output tile (of every batch), the TMA epilogue. CFG.CLUSTER = 2: a 2-CTA
    cluster kernel (module docstring, CLUSTERS), CFG.BM is the pair's rows.

    Arguments: the runtime ones (A's and B's descriptors; `ops`, the epilogue's tensors in one
    EpilogueOperands of pingpong.hopper.device.epilogue: out's and C's descriptors, the bias;
    sizes, α, β, batches), then CFG, every constexpr in one KernelConstants
    (pingpong.hopper.host.launch: tile, ring, schedule, layouts, and CFG.EPI, the epilogue's
    EpilogueConstants). RELEASERS and the worker warps come from config.SCHEDULE_FACTS.
    """
    kernel_start()
    gl.static_assert(CFG.CLUSTER == gl.num_ctas(), "CLUSTER is the launch's num_ctas")
    gl.static_assert(CFG.CLUSTER == 1 or CFG.BN2 == 0, "clusters: one-piece tiles (config.validate)")
    sched = TileScheduler.create(M, N, K, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M, batches, not CFG.EPI.HAS_C)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS, CFG.BN2, CFG.B_KMAJOR, CFG.CLUSTER,
                         CFG.B1_BOXES)
    epi = Epilogue.of(ops, alpha, beta, M, N, 2, CFG.EPI)
    loader = TileLoader(a_desc, b_desc, CFG.A_KMAJOR, CFG.B_KMAJOR, CFG.BN2, CFG.CLUSTER > 1, CFG.B1_BOXES)
    run_partitions(ring, sched, epi, loader, PlainKLoop.of(CFG), CFG)


@gluon.jit(do_not_specialize=_SPLIT_RUNTIME_SCALARS)
def split_k_gemm(a_desc, b_desc, ws, counters, ops, M, N, K, alpha, beta, splits, split_stride16, ws_ld16, out_ld,
                 c_ld, CFG: gl.constexpr):
    """The same partitions over `splits` K-ranges per tile (SplitKScheduler), finished by the
    last split of each tile (SplitEpilogue, pingpong.hopper.device.fixup). The product is M × N as the
    kernel sees it: Cᵀ (N_c × M_c of the caller's C) under CFG.EPI.SWAP, where out and C are
    read and written transposed. `ops` (EpilogueOperands): out's and C's pointers, the bias. The workspace's strides come in 16-byte units (4 fp32), so the
    compiler knows its rows are aligned and vectorizes the partials' loads and stores. CFG: as
    warp_specialized_gemm's (its EPI's BUFS unused: no staging)."""
    kernel_start()
    gl.static_assert(CFG.CLUSTER == 1, "split-K / swap-AB units are not paired (config.validate)")
    sched = SplitKScheduler.create(M, N, K, splits, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M, not CFG.EPI.HAS_C)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS, CFG.BN2, CFG.B_KMAJOR, B1_BOXES=CFG.B1_BOXES)
    epi = SplitEpilogue.of(ops, ws, split_stride16 * 4, ws_ld16 * 4, counters, out_ld, c_ld, Alpha(alpha), beta, M, N,
                           splits, CFG.EPI)
    loader = TileLoader(a_desc, b_desc, CFG.A_KMAJOR, CFG.B_KMAJOR, CFG.BN2, B1_BOXES=CFG.B1_BOXES)
    run_partitions(ring, sched, epi, loader, PlainKLoop.of(CFG), CFG)


@gluon.jit(do_not_specialize=_STREAM_RUNTIME_SCALARS)
def stream_k_gemm(a_desc, b_desc, ws, counters, ops, M, N, K, alpha, beta, dp_tiles, streamers, split_stride16, ws_ld16,
                  out_ld, c_ld, CFG: gl.constexpr):
    """The same partitions over StreamKScheduler's units: the first dp_tiles tiles whole, the
    rest's k-steps shared evenly by `streamers` programs. A unit that holds its whole tile is
    stored through the TMA epilogue (ops.tile_out, ops.tile_cin: warp_specialized_gemm's
    descriptors); a shared tile is finished by the last of its programs to arrive
    (StreamKEpilogue, pingpong.hopper.device.fixup: the pointer fix-up, ops.out and ops.cin as
    split_k_gemm's, the workspace's slots as its splits). Arguments as split_k_gemm's, `ops`
    with the two descriptors, and the decomposition (pingpong.hopper.host.splits.stream_k_split) instead of `splits`."""
    kernel_start()
    gl.static_assert(CFG.CLUSTER == 1 and not CFG.EPI.SWAP, "stream-K units are not paired nor swapped (config.validate)")
    sched = StreamKScheduler.create(M, N, K, dp_tiles, streamers, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS, CFG.BN2, CFG.B_KMAJOR, B1_BOXES=CFG.B1_BOXES)
    epi = stream_k_epilogue(sched, ops, ws, split_stride16, ws_ld16, counters, out_ld, c_ld, Alpha(alpha), beta, M, N,
                            streamers, CFG)
    loader = TileLoader(a_desc, b_desc, CFG.A_KMAJOR, CFG.B_KMAJOR, CFG.BN2, B1_BOXES=CFG.B1_BOXES)
    run_partitions(ring, sched, epi, loader, PlainKLoop.of(CFG), CFG)


@gluon.jit
def stream_k_epilogue(sched, ops, ws, split_stride16, ws_ld16, counters, out_ld, c_ld, scale, beta, M, N, streamers,
                      CFG: gl.constexpr):
    """The stream-K kernels' StreamKEpilogue of their EpilogueOperands: the TMA epilogue on
    ops.tile_out / ops.tile_cin (α 1: `scale`, an Alpha or the FP8 kernel's Fp8Scales, goes on
    first) and the fix-up on ops.out / ops.cin (its splits unused)."""
    tile = Epilogue.into(ops.tile_out, ops.tile_cin, ops, gl.to_tensor(1.0), beta, M, N, 2, CFG.EPI)
    part = SplitEpilogue.of(ops, ws, split_stride16 * 4, ws_ld16 * 4, counters, out_ld, c_ld, scale, beta, M, N,
                            streamers, CFG.EPI)
    return StreamKEpilogue(tile, part, sched, CFG.PINGPONG)


@gluon.jit(do_not_specialize=_RUNTIME_SCALARS)
def persistent_gemm(a_desc, b_desc, ops, M, N, K, alpha, beta, batches, CFG: gl.constexpr):
    """The baseline: persistent, pipelined, not warp-specialized (module docstring). Arguments
    as warp_specialized_gemm's; CFG's schedule fields (PINGPONG, warps, registers) unused."""
    kernel_start()
    STAGES: gl.constexpr = CFG.STAGES
    BM: gl.constexpr = CFG.BM
    A_KMAJOR: gl.constexpr = CFG.A_KMAJOR
    B_KMAJOR: gl.constexpr = CFG.B_KMAJOR
    gl.static_assert(STAGES >= 2, "the ring needs at least 2 stages")
    gl.static_assert(CFG.BN2 == 0, "two-piece tiles run on the warp-specialized schedules (config.validate)")
    gl.static_assert(CFG.CLUSTER == 1, "clusters run on the warp-specialized schedules (config.validate)")
    sched = TileScheduler.create(M, N, K, BM, CFG.BN, CFG.BK, CFG.GROUP_M, batches, not CFG.EPI.HAS_C)
    ring = Ring.allocate(a_desc, b_desc, STAGES, 1)
    epi = Epilogue.of(ops, alpha, beta, M, N, 1, CFG.EPI)
    loader = TileLoader(a_desc, b_desc, A_KMAJOR, B_KMAJOR)

    total = sched.local_tiles() * sched.k_steps
    produced = 0
    for _ in gl.static_range(STAGES - 1):
        produced = produce_step(loader, ring, sched, produced, total)
    for t in range(sched.local_tiles()):
        mma = MmaOp.start(BM, CFG.BN, CFG.acc_layout)
        for k in range(sched.k_steps):
            c = t * sched.k_steps + k
            s = ring.wait_ready(c)
            mma = mma.issue(ring, s, 0, BM, A_KMAJOR, B_KMAJOR)
            mma = mma.wait(1)
            gl.barrier()  # both warpgroups' wgmma(c-1) are done before its slot is released
            if k > 0:
                ring.release(c - 1)
            produced = produce_step(loader, ring, sched, produced, total)
        mma = mma.wait(0)
        gl.barrier()
        ring.release(t * sched.k_steps + sched.k_steps - 1)
        off_m, off_n = sched.tile_offsets(t)
        epi.store(mma, 0, t, off_m, off_n, sched.tile_batch(t), 0)
    epi.drain()


@gluon.jit
def produce_step(loader, ring, sched, produced, total):
    """Persistent schedule: load ring counter `produced` (if any is left); returns the next."""
    if produced < total:
        t = produced // sched.k_steps
        off_m, off_n = sched.tile_offsets(t)
        loader.load(ring, produced, off_m, off_n, (produced - t * sched.k_steps) * sched.BK, sched.tile_batch(t))
        produced += 1
    return produced
