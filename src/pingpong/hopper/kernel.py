"""The Hopper GEMM kernels: orchestration only. Each schedule is a short function that reads
top-down; the parts (Ring, TileLoader, MmaOp, Epilogue, TileScheduler, PhaseSync) do the work.

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
    epilogue (α·acc + β·C, TMA store)

SPLIT-K / SWAP-AB (KernelConfig.split_k > 1 or swap_ab, warp-specialized schedules): the same
producer and consumers over the work units of SplitKScheduler (a tile and a K range each);
the epilogue stores fp32 partials into a workspace, a second kernel reduces them in order
(pingpong.hopper.reduce). Swap-AB is the same kernel on (Bᵀ, Aᵀ): N fills the 64-row wgmma side.

    program p │ unit p: tile t, k-steps [0, S)   │ unit p+G: tile t', k-steps [S, 2S) │ ...
              │ producer/consumers as above, epilogue → workspace rows split·R_pad + off_m
    reduce    │ out block = cast(α·(partial 0 + partial 1 + ...) + β·C)   (fixed order)

All three share one mainloop contract (pingpong.hopper.pipeline docstring): wait ready with
ring_phase, keep one wgmma group in flight, release a slot once its wgmma has completed.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .epilogue import Epilogue
from .loader import TileLoader
from .mma import MmaOp
from .phase_sync import PhaseSync
from .pipeline import Ring, first_counter
from .scheduler import TileScheduler, create_scheduler


# ----------------------------------------------------------------------------- shared steps


@gluon.jit
def mainloop(ring, first, k_steps, ROW0: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr,
             acc_layout: gl.constexpr, A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr):
    """One consumer's K loop over ring counters first .. first+k_steps-1.

    Returns with the last wgmma still in flight and its slot not yet released: the caller
    decides what happens in that gap (ping-pong hands the tensor cores to the other consumer).
    """
    mma = MmaOp.start(ROWS, COLS, acc_layout)
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
    """The TMA warp: every k-step of every work unit of this program, in order, into the ring."""
    counter = 0
    for t in range(sched.local_tiles()):
        off_m, off_n = sched.tile_offsets(t)
        k0 = sched.k_begin(t)
        for k in range(sched.k_steps):
            loader.load(ring, counter, off_m, off_n, k0 + k * sched.BK)
            counter += 1


# ----------------------------------------------------------------------------- consumers


@gluon.jit
def pingpong_consumer(ring, sched, epi, sync, CONSUMER: gl.constexpr, acc_layout: gl.constexpr,
                      A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr):
    """Consumer CONSUMER takes this program's tiles CONSUMER, CONSUMER+2, ... (PhaseSync turns)."""
    for j in range((sched.local_tiles() - CONSUMER + 1) // 2):
        first = first_counter(j, sched.k_steps, 2, CONSUMER)
        sync.wait_turn(CONSUMER, j)
        mma = mainloop(ring, first, sched.k_steps, 0, sched.BM, sched.BN, acc_layout, A_KMAJOR, B_KMAJOR)
        sync.pass_turn(CONSUMER)
        mma = finish_mainloop(mma, ring, first + sched.k_steps - 1)
        off_m, off_n = sched.store_offsets(2 * j + CONSUMER)
        epi.store(mma.acc, CONSUMER, j, off_m, off_n)
    epi.drain()


@gluon.jit
def cooperative_consumer(ring, sched, epi, CONSUMER: gl.constexpr, acc_layout: gl.constexpr,
                         A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr):
    """Consumer CONSUMER computes rows [CONSUMER·BM/2, (CONSUMER+1)·BM/2) of every tile."""
    ROWS: gl.constexpr = sched.BM // 2
    for t in range(sched.local_tiles()):
        first = first_counter(t, sched.k_steps, 1, 0)  # both consumers read every k-step
        mma = mainloop(ring, first, sched.k_steps, CONSUMER * ROWS, ROWS, sched.BN, acc_layout, A_KMAJOR,
                       B_KMAJOR)
        mma = finish_mainloop(mma, ring, first + sched.k_steps - 1)
        off_m, off_n = sched.store_offsets(t)
        epi.store(mma.acc, CONSUMER, t, off_m + CONSUMER * ROWS, off_n)
    epi.drain()


# ----------------------------------------------------------------------------- kernels

# Sizes stay runtime values even when 1 (Triton would otherwise fold them into constants,
# and the parts hold them as tensors).
_RUNTIME_SCALARS = ["M", "N", "K", "splits"]


@gluon.jit(do_not_specialize=_RUNTIME_SCALARS)
def warp_specialized_gemm(a_desc, b_desc, c_desc, cin_desc, M, N, K, alpha, beta,
                          HAS_C: gl.constexpr, A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr,
                          BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                          GROUP_M: gl.constexpr, EPI_BUFS: gl.constexpr, PINGPONG: gl.constexpr, acc_layout: gl.constexpr,
                          CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                          RELEASERS: gl.constexpr, CONSUMER_WARPS: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
                          SPLIT_K: gl.constexpr, splits):
    """Ping-pong or cooperative: producer warp + two consumer warpgroups (module docstring).

    RELEASERS and the worker warps come from config.SCHEDULE_FACTS. SPLIT_K: the work units
    are `splits` K-ranges of each tile (SplitKScheduler) and c_desc is the fp32 workspace.
    """
    gl.static_assert(STAGES >= 2, "the ring needs at least 2 stages")
    gl.static_assert(RELEASERS == (1 if PINGPONG else 2), "ping-pong: one consumer frees a slot; cooperative: both")
    sched = create_scheduler(M, N, K, splits, BM, BN, BK, GROUP_M, SPLIT_K)
    ring = Ring.allocate(a_desc, b_desc, STAGES, RELEASERS)
    epi = Epilogue.allocate(c_desc, cin_desc, alpha, beta, HAS_C, 2, EPI_BUFS)
    loader = TileLoader(a_desc, b_desc, A_KMAJOR, B_KMAJOR)
    if PINGPONG:
        sync = PhaseSync.allocate()
        gl.warp_specialize([
            (pingpong_consumer, (ring, sched, epi, sync, 0, acc_layout, A_KMAJOR, B_KMAJOR)),
            (pingpong_consumer, (ring, sched, epi, sync, 1, acc_layout, A_KMAJOR, B_KMAJOR)),
            (producer, (loader, ring, sched)),
        ], [CONSUMER_WARPS, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (cooperative_consumer, (ring, sched, epi, 0, acc_layout, A_KMAJOR, B_KMAJOR)),
            (cooperative_consumer, (ring, sched, epi, 1, acc_layout, A_KMAJOR, B_KMAJOR)),
            (producer, (loader, ring, sched)),
        ], [CONSUMER_WARPS, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])


@gluon.jit(do_not_specialize=_RUNTIME_SCALARS)
def persistent_gemm(a_desc, b_desc, c_desc, cin_desc, M, N, K, alpha, beta,
                    HAS_C: gl.constexpr, A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr,
                    BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                    GROUP_M: gl.constexpr, EPI_BUFS: gl.constexpr, acc_layout: gl.constexpr):
    """The baseline: persistent, pipelined, not warp-specialized (module docstring)."""
    gl.static_assert(STAGES >= 2, "the ring needs at least 2 stages")
    sched = TileScheduler.create(M, N, K, BM, BN, BK, GROUP_M)
    ring = Ring.allocate(a_desc, b_desc, STAGES, 1)
    epi = Epilogue.allocate(c_desc, cin_desc, alpha, beta, HAS_C, 1, EPI_BUFS)
    loader = TileLoader(a_desc, b_desc, A_KMAJOR, B_KMAJOR)

    total = sched.local_tiles() * sched.k_steps
    produced = 0
    for _ in gl.static_range(STAGES - 1):
        produced = produce_step(loader, ring, sched, produced, total)
    for t in range(sched.local_tiles()):
        mma = MmaOp.start(BM, BN, acc_layout)
        for k in range(sched.k_steps):
            c = t * sched.k_steps + k
            s = ring.wait_ready(c)
            mma = mma.issue(ring, s, 0, BM, A_KMAJOR, B_KMAJOR)
            mma = mma.wait(1)
            gl.thread_barrier()  # both warpgroups' wgmma(c-1) are done before its slot is released
            if k > 0:
                ring.release(c - 1)
            produced = produce_step(loader, ring, sched, produced, total)
        mma = mma.wait(0)
        gl.thread_barrier()
        ring.release(t * sched.k_steps + sched.k_steps - 1)
        off_m, off_n = sched.tile_offsets(t)
        epi.store(mma.acc, 0, t, off_m, off_n)
    epi.drain()


@gluon.jit
def produce_step(loader, ring, sched, produced, total):
    """Persistent schedule: load ring counter `produced` (if any is left); returns the next."""
    if produced < total:
        t = produced // sched.k_steps
        off_m, off_n = sched.tile_offsets(t)
        loader.load(ring, produced, off_m, off_n, (produced - t * sched.k_steps) * sched.BK)
        produced += 1
    return produced
