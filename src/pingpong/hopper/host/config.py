"""KernelConfig: the one place where the Hopper GEMM's shape and schedule are chosen and every
other number is derived (docs/design.md "The parts").

    KernelConfig(block, stages, schedule, group_m)        what a user chooses
        │ derive(in_bytes, out_bytes)  -> Derived          everything that follows from it
        ▼
    instruction shape (wgmma m64·N·k16) · swizzle widths · stage count from the shared-memory
    budget · warps per partition · register budgets (setmaxnreg) · shared-memory bytes ·
    column pieces (block_n = P1 + P2, each a power of two; `column_pieces`)

Schedules (each a different orchestration of the same parts, see pingpong.hopper.kernels.gemm);
their numbers live in SCHEDULE_FACTS, which derivation, the kernel's constexprs and the
launcher all read:

    | schedule     | warps                         | who owns an output tile                 |
    |--------------|-------------------------------|-----------------------------------------|
    | persistent   | 1 partition, BM/64 warpgroups | all warps, loads issued in-line          |
    | cooperative  | producer warp + 2 consumer WGs| both consumers split one BM×BN tile      |
    | pingpong     | producer warp + 2 consumer WGs| each consumer owns a whole tile; turns   |

Work decomposition (pingpong.hopper.device.scheduler), orthogonal to the schedule:

    split_k = 1   one work unit per output tile, the whole K loop, α·acc + β·C stored directly
    split_k = S   S work units per tile, each a contiguous 1/S of the k-steps; fp32 partials go
                  to a workspace [S, rows, cols] and the last split of each tile to finish sums
                  them in split order (bitwise repeatable), applies α, β·C and the cast, in the
                  same kernel (pingpong.hopper.device.fixup)
    stream_k      whole waves of tiles data-parallel, the k-steps of the rest (the last,
                  partial wave) divided evenly between the programs; a unit holding a whole
                  tile is stored through the TMA epilogue, a tile shared by several is
                  finished as a split-K tile is, its partials summed in K order
                  (pingpong.hopper.device.scheduler.StreamKScheduler, pingpong.hopper.device.fixup)
    swap_ab       the kernel computes Cᵀ = Bᵀ·Aᵀ: N on the wgmma M side (block_m tiles N),
                  M on the wgmma N side (block_n = 16..64 fits a decode batch, 144 a mid-sized
                  M in few tiles); the result is written to C transposed: unsplit and
                  cooperative through the TMA epilogue, the tile staged transposed
                  (`staged_swap`); otherwise through pointers
    Split-K (and the other swap-AB configs) store through pointers, not TMA: no epilogue staging (swap-AB
    stores from the accumulator's registers, transposed), the rest of the shared memory is
    ring. Stream-K stages as the data-parallel kernel does (its fix-up's stores: pointers).

`validate()` (called by `derive`) raises ConfigError naming the violated constraint.
"""

from __future__ import annotations

import dataclasses
import functools

from ...errors import ConfigError

@dataclasses.dataclass(frozen=True)
class ScheduleFacts:
    """The numbers that make a schedule what it is (one row of SCHEDULE_FACTS)."""

    consumers: int  # consumer warpgroup partitions, each with its own accumulator
    row_split: int  # consumers that split one tile's block_m between them (cooperative: 2)
    releasers: int  # arrivals on a ring slot's empty barrier before it may be refilled
    warp_specialized: bool  # a producer warp feeds consumer partitions (gl.warp_specialize)
    worker_warps: tuple  # warps of each worker partition: (consumer 1, producer)
    producer_regs: int | None  # setmaxnreg budget of the producer warp (the consumers get the rest)


#: schedule -> its facts. Every other place reads them from here (config derivation, the
#: kernel through the launcher's constexprs).
SCHEDULE_FACTS = {
    "persistent": ScheduleFacts(consumers=1, row_split=1, releasers=1, warp_specialized=False, worker_warps=(),
                                producer_regs=None),
    "cooperative": ScheduleFacts(consumers=2, row_split=2, releasers=2, warp_specialized=True, worker_warps=(4, 1),
                                 producer_regs=40),
    "pingpong": ScheduleFacts(consumers=2, row_split=1, releasers=1, warp_specialized=True, worker_warps=(4, 1),
                              producer_regs=40),
}
SCHEDULES = tuple(SCHEDULE_FACTS)
#: CTAs per cluster along M (KernelConfig.cluster_m) and the schedules that pair them. In the
#: cluster kernel a tensor's rows split over the two CTAs: a ping-pong consumer's tile is the
#: pair's 2·block_m rows; a cooperative consumer's is its block_m/2 rows in each CTA, so the
#: pair's tile is ordered consumer-major (consumer c: pair rows [c·block_m, (c+1)·block_m),
#: the first half in CTA 0) and each consumer reads its own A box of the slot.
CLUSTER_SIZES = (1, 2)
CLUSTER_SCHEDULES = ("pingpong", "cooperative")
#: Most K splits of one tile (the workspace holds split_k fp32 partial tiles).
MAX_SPLIT_K = 64

#: Hopper facts (H100/H200, sm_90a).
SMEM_LIMIT = 227 * 1024  # bytes of shared memory one block may use
REGS_PER_SM = 64 * 1024  # 32-bit registers
WGMMA_M = 64  # rows of one wgmma per warpgroup
WGMMA_K_BYTES = 32  # one wgmma consumes 32 bytes of K (k16 for 16-bit inputs)
WGMMA_MAX_N = 256
MIN_PIECE = 16  # columns of a two-piece tile's second piece at least (`column_pieces`)
MAX_PIECE_RATIO = 8  # a two-piece tile's first piece is at most this many boxes of the second's width
MAX_REGS_PER_THREAD = 255
#: fp32 accumulator registers a consumer thread may hold (the rest of MAX_REGS_PER_THREAD: addresses)
MAX_ACC_REGS = 200
BARRIER_BYTES = 8
#: Deepest ring: the fixed shared-memory term below budgets ready/empty barriers for this many.
#: Small tiles stream their operands from HBM (the weight of a skinny product is read once),
#: where the bytes in flight hide the latency, so they take as many stages as fit up to this
#: ("Ring depth" in benchmarks/results/2026-11-28-design-history.md); large tiles fit 3-6
#: stages whatever the cap.
MAX_STAGES = 12
#: Bands taller than this many tile-rows gain no L2 reuse; the bound also keeps the raster's
#: GROUP_M · tiles_n product far inside int32 (pingpong.hopper.device.scheduler.tile_coords).
MAX_GROUP_M = 256
#: Shared memory besides the ring and the epilogue staging: the ring's ready/empty, C and turn
#: mbarriers, plus what the compiler adds (buffer alignment, warp_specialize's captured
#: arguments). Offline sm_90a builds allocate 72-328 B beyond ring + staging (persistent,
#: cooperative, pingpong); 1 KB covers that with room, and tests compare it with the compiler.
_FIXED_BYTES = 1024
assert _FIXED_BYTES >= 3 * MAX_STAGES * BARRIER_BYTES + 4 * BARRIER_BYTES  # + a cluster's pair_empty
#: The derived epilogue stays whole-tile while the ring still gets this many stages: a deeper
#: ring does not pay for the narrower sub-tiles' extra store waits ("Ring depth" in
#: benchmarks/results/2026-11-28-design-history.md).
SUBTILE_BELOW_STAGES = 3


@dataclasses.dataclass(frozen=True)
class Derived:
    """Values that follow from a KernelConfig and the operand/result element sizes."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    schedule: str
    group_m: int
    consumers: int  # consumer warpgroups (1 for "persistent": the whole partition consumes)
    consumer_m: int  # rows of the output tile one consumer warpgroup computes
    consumer_n: int
    instr_shape: tuple  # (16, N, K) per warp, as NVMMADistributedLayout wants it (the first column piece)
    warps_per_cta: tuple  # accumulator layout's warp grid for one consumer partition
    num_warps: int  # warps of the default partition
    worker_warps: tuple  # warps of each worker partition
    worker_regs: tuple  # setmaxnreg budget of each worker partition
    maxnreg: int | None  # register cap at kernel entry (needed for setmaxnreg to take effect)
    acc_regs: int  # fp32 accumulator registers per consumer thread
    a_swizzle: int  # NVMMA swizzle width (bytes) of an A stage, K-major
    b_swizzle: int
    epilogue_n: int  # columns of one epilogue sub-tile (the TMA store box is consumer_m × epilogue_n)
    epilogue_bufs: int  # staging buffers per consumer: 2 when sub-tiled (one store in flight), else 1
    stage_bytes: int
    epilogue_bytes: int
    shared_bytes: int
    releasers: int = 1  # arrivals that free a ring slot (SCHEDULE_FACTS)
    split_k: int = 1
    swap_ab: bool = False
    block_n2: int = 0  # columns of the second column piece (block_n = P1 + P2, `column_pieces`); 0: one piece
    instr_shape2: tuple = ()  # the second piece's wgmma shape (= instr_shape without one)
    cluster_m: int = 1  # CTAs per cluster along M: the kernel's tile is cluster_m·block_m rows
    stream_k: bool = False
    staged_swap: bool = False  # swap-AB through the TMA epilogue, staged transposed (`staged_swap`)

    @property
    def pieces(self) -> tuple:
        """The consumer tile's column pieces, left to right: (block_n,) or (P1, P2)."""
        return (self.block_n - self.block_n2, self.block_n2) if self.block_n2 else (self.block_n,)

    @property
    def workspace(self) -> bool:
        """The split-K / swap-AB / stream-K kernels (pingpong.hopper.device.fixup): pointer epilogue,
        workspace when split. A `staged_swap` product runs the one-kernel path instead."""
        return self.split_k > 1 or (self.swap_ab and not self.staged_swap) or self.stream_k

    @property
    def total_warps(self) -> int:
        return self.num_warps + sum(self.worker_warps)


def staged_swap(cfg: KernelConfig) -> bool:
    """Whether a swap-AB config's result goes out through the one-kernel path's TMA epilogue,
    each sub-tile staged transposed (a transposed stmatrix) and stored as a box of out: one
    split, the cooperative schedule, 16-bit or FP8 operands (bf16 1466×3072×3072 under 128×144:
    0.74 of cuBLAS through pointers, 0.84 staged). Split swap-AB products and ping-pong's store
    through pointers (ping-pong 64×192 at 672×2048×2048 ran 0.86 → 0.73 staged: its staging
    takes ring stages its one tile per program needs)."""
    return cfg.swap_ab and cfg.split_k == 1 and cfg.schedule == "cooperative"


def column_pieces(block_n: int) -> tuple:
    """block_n as power-of-two column pieces: (block_n,) for a power of two, else (P1, P2) with
    P1 the largest power of two below block_n and P2 = block_n - P1, when P2 is a power of two
    of at least MIN_PIECE columns and P1 ≤ MAX_PIECE_RATIO·P2 (80 = 64 + 16, 96 = 64 + 32,
    144 = 128 + 16, 160 = 128 + 32, 192 = 128 + 64); every 3·2^k width keeps its (2q, q)
    pieces, 24 = 16 + 8 included. () for any other width (`piece_refusal` says why).

    TMA boxes, shared-memory buffers and Gluon tensors all have power-of-two shapes, so a
    160-column tile is two accumulators (128 + 32 columns, one wgmma each per k-step) over
    two B buffers, the first loaded as P1/P2 boxes of P2 columns (pingpong.hopper.device.loader)."""
    if not _is_int(block_n) or block_n <= 0:
        return ()
    if block_n & (block_n - 1) == 0:
        return (block_n,)
    p1 = 1 << (block_n.bit_length() - 1)
    p2 = block_n - p1
    if p2 & (p2 - 1) == 0 and p1 <= MAX_PIECE_RATIO * p2 and (p2 >= MIN_PIECE or p1 == 2 * p2):
        return (p1, p2)
    return ()


def piece_refusal(block_n: int) -> str:
    """Why block_n (a positive int) is no column pieces (`column_pieces` is ()); "" when it is."""
    if column_pieces(block_n):
        return ""
    p1 = 1 << (block_n.bit_length() - 1)
    p2 = block_n - p1
    rule = (f"block_n={block_n} must be a power of two or two power-of-two column pieces P1 + P2 (P1 the largest"
            f" power of two below it, P2 ≥ {MIN_PIECE} columns or P1 = 2·P2, P1/P2 ≤ {MAX_PIECE_RATIO}: e.g. 80, 96,"
            f" 144, 160, 192)")
    if p2 & (p2 - 1):
        return f"{rule}; {block_n} = {p1} + {p2} would take more than two pieces"
    why = ([f"its second piece P2 = {p2} < {MIN_PIECE} columns"] if p2 < MIN_PIECE else []) + \
        ([f"P1/P2 = {p1}/{p2} > {MAX_PIECE_RATIO}"] if p1 > MAX_PIECE_RATIO * p2 else [])
    return f"{rule}; {', '.join(why)}"


def swizzle_width(row_bytes: int) -> int:
    """Widest NVMMA swizzle (128/64/32 B, or 0) that divides a shared-memory row of `row_bytes`.

    The swizzle is a function of the tile's contiguous row width: a 64-element bf16 K-tile
    is 128 B wide, so 128 B swizzle makes the 8 rows of a core matrix hit 8 distinct bank
    groups (the Hopper analogue of AMD's LDS swizzle, which is derived from the 16×32 load subtile).
    """
    for width in (128, 64, 32):
        if row_bytes >= width and row_bytes % width == 0:
            return width
    return 0


@dataclasses.dataclass(frozen=True, eq=False)
class KernelConfig:
    """A Hopper GEMM configuration. Only the choices; `derive()` computes the rest.

    Equal (and hashed alike) only when every field has the same value AND type: a plan
    cached for KernelConfig(128, ...) must not answer KernelConfig(128.0, ...) or
    stream_k=0, which validation refuses.

    block_m, block_n, block_k: the CTA's output tile and K-step. For "pingpong" this is the
        tile of ONE consumer warpgroup (the two consumers own alternate tiles). Powers of two,
        except that block_n may also be the sum P1 + P2 of two (`column_pieces`: P1 the
        largest power of two below block_n, P2 ≥ 16, P1/P2 ≤ 8; 80, 96, 144, 160, 192, ...):
        such a tile is two column pieces; 128×192 tiles fill 132 SMs where 128×256 leave a
        quarter idle (512×6144: 128 tiles instead of 96), and a width fitted to the rows of a
        mid-sized product (160 over 800 rows under swap-AB: 5 tiles) wastes little tensor-core work.
    stages: depth of the shared-memory ring; None = as many as fit (≤ MAX_STAGES).
    schedule: "persistent" | "cooperative" | "pingpong" (module docstring).
    group_m: tiles per group of the grouped raster (L2 reuse; pingpong.hopper.device.scheduler).
    epilogue_n: columns of one epilogue sub-tile; None = the whole tile width unless its
        staging would leave the ring fewer than SUBTILE_BELOW_STAGES stages (fp32 output:
        a 128×256 fp32 tile is 128 KB), then halved until it does. Sub-tiles are stored
        through 2 staging buffers per consumer, so the shared memory the full tile would
        take goes to the ring instead (pingpong.hopper.device.epilogue). = block_n: no sub-tiling.
    instr_n: N of one wgmma (m64·N·k16); None = the widest (≤ 256) dividing the consumer's
        tile width. A narrower N issues several wgmmas per k-step, each re-reading A.
    split_k: K splits per output tile (module docstring); 1 = none. Warp-specialized schedules.
    swap_ab: compute Cᵀ = Bᵀ·Aᵀ (block_m tiles N, block_n tiles M): for M ≤ 64 (decode),
        where a 128-row tile over M would be mostly padding. Warp-specialized schedules.
    cluster_m: CTAs per cluster along M (1 or 2). 2: a pair of CTAs takes two vertically
        adjacent tiles (2·block_m rows, the same block_n columns) and loads their common B
        tile once, multicast into both CTAs' shared memory (pingpong.hopper.device.pipeline); the
        persistent grid counts pairs. Warp-specialized schedules (CLUSTER_SCHEDULES), one K
        split, no swap, one column piece; unbatched products.
    stream_k: stream-K work units (module docstring) instead of one per tile: the K splits are
        the scheduler's, so split_k = 1; no swap_ab, no cluster; warp-specialized schedules,
        unbatched products (16-bit and FP8 operands).
    """

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    stages: int | None = None
    schedule: str = "cooperative"
    group_m: int = 8
    epilogue_n: int | None = None
    instr_n: int | None = None
    split_k: int = 1
    swap_ab: bool = False
    cluster_m: int = 1
    stream_k: bool = False

    def _typed(self) -> tuple:
        return tuple((type(v), v) for v in vars(self).values())

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._typed() == other._typed()

    def __hash__(self):
        return hash(self._typed())

    def name(self) -> str:
        """The config in one token: SCHEDULE:BMxBNxBK[/sSTAGES]/gGROUP_M[/eEPILOGUE_N][/nINSTR_N][/kSPLIT_K]
        [/swap][/cCLUSTER_M][/sk], e.g. cooperative:128x256x64/g8 (benchmarks/schedules.py parses it)."""
        return (f"{self.schedule}:{self.block_m}x{self.block_n}x{self.block_k}"
                + (f"/s{self.stages}" if self.stages else "") + f"/g{self.group_m}"
                + (f"/e{self.epilogue_n}" if self.epilogue_n else "")
                + (f"/n{self.instr_n}" if self.instr_n else "") + (f"/k{self.split_k}" if self.split_k > 1 else "")
                + ("/swap" if self.swap_ab else "") + (f"/c{self.cluster_m}" if self.cluster_m > 1 else "")
                + ("/sk" if self.stream_k else ""))

    def derive(self, in_bytes: int = 2, out_bytes: int = 2) -> Derived:
        """Validate and derive everything else; raises ConfigError naming the constraint.

        Cached (it is on the launch path): equal configs have equal fields in value and type
        (__eq__), and the element sizes are keyed by type too, so a validated KernelConfig(128,
        ...) never answers for KernelConfig(128.0, ...) or derive(2.0)."""
        try:
            hash(self)
        except TypeError:  # an unhashable field is never valid: let validate name it
            self.validate(in_bytes, out_bytes)
            raise
        return _validated_derive(self, in_bytes, out_bytes)

    def validate(self, in_bytes: int = 2, out_bytes: int = 2) -> None:
        """Raise ConfigError naming the first violated constraint."""
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        for name, v in (("block_m", bm), ("block_n", bn), ("block_k", bk), ("group_m", self.group_m)):
            if not _is_int(v) or v <= 0:
                raise ConfigError(f"{name} must be a positive int, got {v!r}")
        if self.group_m > MAX_GROUP_M:
            raise ConfigError(f"group_m={self.group_m} exceeds {MAX_GROUP_M} tile-rows per raster band")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not _is_int(self.split_k) or not 1 <= self.split_k <= MAX_SPLIT_K:
            raise ConfigError(f"split_k must be an int in 1..{MAX_SPLIT_K}, got {self.split_k!r}")
        if type(self.swap_ab) is not bool:
            raise ConfigError(f"swap_ab must be a bool, got {self.swap_ab!r}")
        if (self.split_k > 1 or self.swap_ab) and not SCHEDULE_FACTS[self.schedule].warp_specialized:
            raise ConfigError(
                f"split_k={self.split_k}, swap_ab={self.swap_ab}: split-K and swap-AB run on the warp-specialized"
                f" schedules (cooperative, pingpong), not {self.schedule!r}"
            )
        if type(self.stream_k) is not bool:
            raise ConfigError(f"stream_k must be a bool, got {self.stream_k!r}")
        if self.stream_k and (self.split_k > 1 or self.swap_ab
                              or not SCHEDULE_FACTS[self.schedule].warp_specialized):
            raise ConfigError(f"stream_k=True divides K itself and runs on the warp-specialized schedules (cooperative,"
                              f" pingpong): it takes split_k=1, swap_ab=False, not split_k={self.split_k},"
                              f" swap_ab={self.swap_ab}, schedule={self.schedule!r}")
        if not _is_int(self.cluster_m) or self.cluster_m not in CLUSTER_SIZES:
            raise ConfigError(f"cluster_m must be an int in {CLUSTER_SIZES} (CTAs per cluster along M), got"
                              f" {self.cluster_m!r}")
        if self.cluster_m > 1:
            if self.schedule not in CLUSTER_SCHEDULES:
                raise ConfigError(f"cluster_m={self.cluster_m} runs on the {' / '.join(CLUSTER_SCHEDULES)} schedule,"
                                  f" not {self.schedule!r}")
            if self.split_k > 1 or self.swap_ab or self.stream_k:
                raise ConfigError(f"cluster_m={self.cluster_m} cannot pair split_k={self.split_k} /"
                                  f" swap_ab={self.swap_ab} / stream_k={self.stream_k} work units (their epilogue"
                                  " stores through pointers); use cluster_m=1")
            if len(column_pieces(bn)) != 1:
                raise ConfigError(f"cluster_m={self.cluster_m} needs a one-piece tile: block_n={bn} is two column"
                                  " pieces")
        if not _is_int(in_bytes) or in_bytes not in (1, 2):
            raise ConfigError(f"operands must be 16-bit (bf16/fp16) or 8-bit (fp8, pingpong.hopper.kernels.fp8_gemm)"
                              f" for wgmma here, got {in_bytes}-byte elements")
        if not _is_int(out_bytes) or out_bytes not in (2, 4):
            raise ConfigError(f"output elements must be 2 or 4 bytes, got {out_bytes}")
        consumers, cm, cn = _consumer_tile(self)
        if cm % WGMMA_M:
            raise ConfigError(
                f"block_m: each consumer warpgroup computes {cm} rows, not a multiple of the wgmma M={WGMMA_M}"
                f" (schedule {self.schedule!r} splits block_m={bm} over {consumers} consumer warpgroup(s))"
            )
        if cn % 8:
            raise ConfigError(f"block_n={bn} must be a multiple of 8 (the wgmma N granularity)")
        pieces = column_pieces(bn)
        if not pieces:
            raise ConfigError(piece_refusal(bn))
        if pieces[-1] % 8:
            raise ConfigError(f"block_n={bn}: its column pieces {pieces} must be multiples of 8 (the wgmma N granularity)")
        if len(pieces) > 1 and not SCHEDULE_FACTS[self.schedule].warp_specialized:
            raise ConfigError(f"block_n={bn} (two column pieces) runs on the warp-specialized schedules, not"
                              f" {self.schedule!r}")
        n = self.instr_n
        if n is not None and (not _is_int(n) or n <= 0 or n % 8 or n > WGMMA_MAX_N or any(p % n for p in pieces)):
            raise ConfigError(f"instr_n={n!r} must be a multiple of 8, ≤ {WGMMA_MAX_N}, dividing the consumer tile's"
                              f" column pieces {pieces}")
        en = self.epilogue_n
        if en is not None and (not _is_int(en) or en <= 0 or en & (en - 1) or pieces[-1] % en or en * out_bytes < 16):
            raise ConfigError(
                f"epilogue_n={en!r} must be a power of two dividing the consumer tile's column pieces {pieces} and"
                f" span ≥ 16 bytes (a TMA box row), i.e. ≥ {16 // out_bytes} {out_bytes}-byte elements"
            )
        if bk * in_bytes not in (32, 64, 128, 256):
            raise ConfigError(
                f"block_k={bk}: a K-tile row must be 32, 64, 128 or 256 bytes (a whole number of wgmma K steps"
                f" filling a swizzle pattern), i.e. block_k in {[b // in_bytes for b in (32, 64, 128, 256)]}"
            )
        for name, v in (("block_m", bm), ("block_n", bn), ("block_k", bk)):
            if v & (v - 1) and name != "block_n":  # block_n: column_pieces above
                raise ConfigError(f"{name}={v} must be a power of two (TMA block shapes and Gluon tensors are)")
            if v > 256:
                raise ConfigError(f"{name}={v} exceeds the TMA box limit of 256 elements per dimension")
        threads = _consumer_threads(self, cm)
        acc = cm * cn // threads
        if acc > MAX_ACC_REGS:
            raise ConfigError(
                f"accumulator needs {acc} fp32 registers per thread (consumer tile {cm}×{cn} over {threads} threads);"
                f" at most {MAX_ACC_REGS} fit beside addresses within {MAX_REGS_PER_THREAD} registers"
            )
        stage, fixed = _budget(self, in_bytes, out_bytes)
        epi = fixed - _FIXED_BYTES
        if self.stages is not None:
            if not _is_int(self.stages) or self.stages < 2:
                raise ConfigError(f"stages must be an int ≥ 2, got {self.stages!r}")
            if self.stages > MAX_STAGES:
                raise ConfigError(f"stages={self.stages} exceeds {MAX_STAGES}, the ring depth the shared-memory"
                                  " budget reserves barriers for")
            total = self.stages * stage + fixed
            if total > SMEM_LIMIT:
                raise ConfigError(
                    f"shared memory: {self.stages} stages × {stage} B + epilogue {epi} B = {total} B"
                    f" exceeds the {SMEM_LIMIT} B (227 KB) Hopper limit"
                )
        elif 2 * stage + fixed > SMEM_LIMIT:
            raise ConfigError(f"shared memory: even 2 stages ({2 * stage + fixed} B) exceed {SMEM_LIMIT} B (227 KB)")


def _is_int(v) -> bool:
    """An int proper: not a bool, float or other number that merely compares equal to one."""
    return type(v) is int


@functools.lru_cache(maxsize=None, typed=True)  # typed: element sizes 2 and 2.0 are different keys
def _validated_derive(cfg: KernelConfig, in_bytes: int, out_bytes: int) -> Derived:
    """derive() of a hashable `cfg`, validated first."""
    cfg.validate(in_bytes, out_bytes)
    return _derive(cfg, in_bytes, out_bytes)


def _consumer_tile(cfg: KernelConfig) -> tuple[int, int, int]:
    """(consumer warpgroups, rows, cols) of the tile one consumer computes."""
    facts = SCHEDULE_FACTS[cfg.schedule]
    return facts.consumers, cfg.block_m // facts.row_split, cfg.block_n


def _consumer_threads(cfg: KernelConfig, cm: int) -> int:
    """Threads holding one consumer's accumulator: a warpgroup, or two in the persistent schedule."""
    return 128 * (1 if SCHEDULE_FACTS[cfg.schedule].warp_specialized else min(2, max(1, cm // WGMMA_M)))


def _epilogue(cfg: KernelConfig, in_bytes: int, out_bytes: int) -> tuple[int, int, int]:
    """(epilogue_n, staging buffers per consumer, staging bytes): the chosen or derived
    sub-tile width and what its buffers take from shared memory."""
    consumers, cm, cn = _consumer_tile(cfg)
    if cfg.split_k > 1 or (cfg.swap_ab and not staged_swap(cfg)):  # fixup's pointer epilogue: no staging
        return cn, 0, 0
    # one buffer for a whole tile; else 2, or one per sub-tile when their count is odd (a
    # two-piece tile's P1/P2 + 1 sub-tiles of P2 columns: 3, 5 or 9), so that sub-tiles cycle
    # whole rounds of buffers (an odd count stages the whole tile; halving en makes it even)
    bufs = lambda en: 1 if en == cn else (2 if (cn // en) % 2 == 0 else cn // en)  # noqa: E731
    staging = lambda en: consumers * bufs(en) * cm * en * out_bytes  # noqa: E731
    en = cfg.epilogue_n
    if en is None:
        stage = _stage_bytes(cfg, in_bytes)
        en = column_pieces(cn)[-1]  # the widest sub-tile that divides every piece
        while (SMEM_LIMIT - _FIXED_BYTES - staging(en)) // stage < SUBTILE_BELOW_STAGES and en * out_bytes > 16 \
                and en % 2 == 0:
            en //= 2
    return en, bufs(en), staging(en)


def _stage_bytes(cfg: KernelConfig, in_bytes: int) -> int:
    """Shared memory of one ring stage: an A and a B K-tile."""
    return (cfg.block_m + cfg.block_n) * cfg.block_k * in_bytes


def _budget(cfg: KernelConfig, in_bytes: int, out_bytes: int) -> tuple[int, int]:
    """(bytes per ring stage, bytes besides the ring): the kernel takes stages × the first plus
    the second (epilogue staging + the fixed term). validate() and _derive() both use this."""
    return _stage_bytes(cfg, in_bytes), _epilogue(cfg, in_bytes, out_bytes)[2] + _FIXED_BYTES


def _instr_n(cn: int) -> int:
    """Largest wgmma N (multiple of 8, ≤ 256) dividing a column piece of `cn` columns."""
    return next(n for n in range(min(cn, WGMMA_MAX_N), 7, -8) if cn % n == 0)


def _derive(cfg: KernelConfig, in_bytes: int, out_bytes: int) -> Derived:
    facts = SCHEDULE_FACTS[cfg.schedule]
    consumers, cm, cn = _consumer_tile(cfg)
    pieces = column_pieces(cn)
    stage, fixed = _budget(cfg, in_bytes, out_bytes)
    epilogue_n, epilogue_bufs, epi = _epilogue(cfg, in_bytes, out_bytes)
    stages = cfg.stages or min(MAX_STAGES, (SMEM_LIMIT - fixed) // stage)
    if not facts.warp_specialized:
        warpgroups = min(2, cm // WGMMA_M)  # one or two warpgroups stacked along M
        num_warps, worker_warps, worker_regs, maxnreg = 4 * warpgroups, (), (), None
        warps_per_cta = (4 * warpgroups, 1)
    else:
        # default partition = consumer 0 (4 warps); workers = consumer 1 (4) and the producer (1).
        # 12 warps are resident (the producer's warpgroup is padded to 4): the kernel starts
        # with an even split and setmaxnreg moves registers from the producer to the consumers.
        resident_threads = 3 * 128
        maxnreg = (REGS_PER_SM // resident_threads) // 8 * 8
        producer_regs = facts.producer_regs
        consumer_regs = min(248, (REGS_PER_SM - 128 * producer_regs) // 256 // 8 * 8)
        num_warps, worker_warps, worker_regs = 4, facts.worker_warps, (consumer_regs, producer_regs)
        warps_per_cta = (4, 1)
    return Derived(
        block_m=cfg.block_m,
        block_n=cfg.block_n,
        block_k=cfg.block_k,
        stages=stages,
        schedule=cfg.schedule,
        group_m=cfg.group_m,
        consumers=consumers,
        consumer_m=cm,
        consumer_n=cn,
        instr_shape=(16, cfg.instr_n or _instr_n(pieces[0]), WGMMA_K_BYTES // in_bytes),
        warps_per_cta=warps_per_cta,
        num_warps=num_warps,
        worker_warps=worker_warps,
        worker_regs=worker_regs,
        maxnreg=maxnreg,
        acc_regs=cm * cn // _consumer_threads(cfg, cm),
        a_swizzle=swizzle_width(cfg.block_k * in_bytes),
        b_swizzle=swizzle_width(cfg.block_k * in_bytes),
        epilogue_n=epilogue_n,
        epilogue_bufs=epilogue_bufs,
        stage_bytes=stage,
        epilogue_bytes=epi,
        shared_bytes=stages * stage + fixed,
        releasers=facts.releasers,
        split_k=cfg.split_k,
        swap_ab=cfg.swap_ab,
        block_n2=pieces[1] if len(pieces) > 1 else 0,
        instr_shape2=(16, cfg.instr_n or _instr_n(pieces[-1]), WGMMA_K_BYTES // in_bytes) if len(pieces) > 1 else (),
        cluster_m=cfg.cluster_m,
        stream_k=cfg.stream_k,
        staged_swap=staged_swap(cfg),
    )
