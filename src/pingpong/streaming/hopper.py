"""Hopper (sm_90a) vector add: TMA in, TMA out, loads issued AHEAD steps ahead; persistent
(the gfx942 design's grid-stride loop, `PERSISTENT`) or one tile per program (`DEFAULT`, measured faster).

The gfx942 design (gfx942.py; docs/design.md maps AMD concepts to Hopper) on Hopper:

    gfx942                                  here (sm_90a)
    grid = #CUs, grid-stride loop           grid = #SMs (x programs_per_sm), tile_of / tiles_of_program;
                                            or grid = #tiles (programs_per_sm = 0, the default)
    buffer_load ... lds (no VGPRs)          TMA bulk tensor copy -> shared memory
    2 LDS buffers, refill 2 steps ahead     STAGES-slot ring, refill AHEAD steps ahead (gfx942: 2, 2)
    s_waitcnt vmcnt(2) / vmcnt(3)           ready[slot] mbarrier, expect-tx, parity wait
    buffer_store, OOB dropped               TMA store from shared memory, OOB dropped
    num_records = N*4 (OOB loads -> 0)      descriptor shape [n] (OOB loads -> 0): no masks

Parts: the GEMM's scheduler arithmetic (`tiles_of_program`) and `tile_of` (which tiles), the
GEMM's `Ring` (`pingpong.hopper.device.pipeline`: slots, ready barriers, (index, phase) of a step)
with `fill`/`take` (the TMA loads into it), `StoreRing` (the output buffers and the TMA
store window). The kernel only orchestrates. Host side: `StreamConfig` (tile and pipeline
shape, `DEFAULT`, `PERSISTENT`, the measured `CANDIDATES`), `launch` (a cached direct launch after the
first call of each kernel variant, `pingpong.runtime.launcher`), `build` (offline compilation).
"""


import dataclasses
import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.language.core import _aggregate as aggregate

from ..runtime.addressing import STREAM_TMA_MAX_ELEMENTS
from ..hopper.device.pipeline import Ring, ring_index
from ..runtime.launcher import DirectLaunch, hooks_idle, launch_key, launch_ready
from ..toolchain import KERNEL_OPTIONS
from .grid_stride import tile_of, tiles_of_program

# --------------------------------------------------------------------------- host config

#: Largest element count the sm_90a path takes: TMA coordinates are signed 32-bit (a tile's
#: coordinate tile*BLOCK < n; fills past the end are predicated off, their wrapped coordinates unused),
#: and the tile count gl.cdiv(n, BLOCK) = (n + BLOCK - 1) // BLOCK is int32 too: n + BLOCK - 1 must
#: fit, for the largest BLOCK a valid StreamConfig has (2**15: 64 KB tiles of 2-byte elements).
#: Past it (n within BLOCK of 2**31 wrapped the count negative: nothing stored) the portable kernel runs.
MAX_TMA_ELEMENTS = STREAM_TMA_MAX_ELEMENTS
#: Elements per row of the 2-D view (box="2d"): a TMA box dimension holds at most 256.
ROW = 256
#: Shared memory of one SM (H100/H200) and what the hardware reserves per resident block.
SM_SHARED_BYTES = 228 * 1024
BLOCK_RESERVED_BYTES = 1024


@dataclasses.dataclass(frozen=True)
class StreamConfig:
    """Tile and pipeline shape of the Hopper kernel; everything else is derived from it.

    tile_bytes:      bytes of one operand's tile (one step); BLOCK = tile_bytes // itemsize.
    stages:          input ring slots (each holds an a-tile and a b-tile).
    ahead:           how many grid-stride steps ahead a slot is refilled (gfx942: 2);
                     AHEAD tiles of a and b are in flight per program.
    out_bufs:        output tiles in shared memory, so a TMA store can be in flight while
                     the next result is written (store_wait(out_bufs - 1) bounds the window).
    num_warps:       warps per program.
    programs_per_sm: persistent programs per SM: grid = min(programs_per_sm * #SMs, #tiles);
                     0 = not persistent: one program per tile (grid = #tiles; the hardware
                     block scheduler hands out the tiles in order, as many resident per SM
                     as shared memory and warps allow).
    box:             "1d": descriptor [n], block [BLOCK]; Triton issues BLOCK / 256 boxes of
                     256 elements (the TMA limit per box dimension) per tile and operand.
                     "2d": where n % 256 == 0, the tensors are viewed as [n / 256, 256] and a
                     tile is one [BLOCK / 256, 256] box (one TMA instruction per operand);
                     other n use the 1-D form.

    `spec` is the short form used by tables and `parse`:
    tile/stages/ahead/out_bufs/warps[/programs_per_sm[/box]], e.g. "16k/3/2/2/4", "16k/4/3/2/4/1/2d".
    """

    tile_bytes: int = 16 * 1024
    stages: int = 3
    ahead: int = 2
    out_bufs: int = 2
    num_warps: int = 4
    programs_per_sm: int = 1
    box: str = "1d"

    def block(self, itemsize: int) -> int:
        return self.tile_bytes // itemsize

    @property
    def shared_bytes(self) -> int:
        """Shared memory of the data buffers (the ready mbarriers add 8 bytes per stage)."""
        return (2 * self.stages + self.out_bufs) * self.tile_bytes

    def validate(self) -> "StreamConfig":
        from ..errors import ConfigError

        if self.tile_bytes < 16 or self.tile_bytes & (self.tile_bytes - 1):
            raise ConfigError(f"tile_bytes: must be a power of two >= 16, got {self.tile_bytes}")
        if not 1 <= self.ahead <= self.stages:
            raise ConfigError(f"ahead: must be in 1..stages={self.stages}, got {self.ahead}")
        if self.out_bufs < 1:
            raise ConfigError(f"out_bufs: must be >= 1, got {self.out_bufs}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ConfigError(f"num_warps: must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        if self.box not in ("1d", "2d"):
            raise ConfigError(f"box: must be '1d' or '2d', got {self.box!r}")
        if self.shared_bytes > 227 * 1024:
            raise ConfigError(f"shared memory: {self.shared_bytes} bytes > 227 KB per block")
        per_sm = self.programs_per_sm * (self.shared_bytes + 8 * self.stages + BLOCK_RESERVED_BYTES)
        if not isinstance(self.programs_per_sm, int) or self.programs_per_sm < 0 or per_sm > SM_SHARED_BYTES:
            raise ConfigError(f"programs_per_sm: {self.programs_per_sm} programs of {self.shared_bytes} bytes "
                              f"of shared memory do not fit one SM ({SM_SHARED_BYTES} bytes)")
        return self

    def block_shape(self, n: int, itemsize: int) -> list[int]:
        """The tile as a TMA block: [BLOCK], or [BLOCK / 256, 256] (box="2d" and n % 256 == 0)."""
        block = self.block(itemsize)
        if self.box == "2d" and n % ROW == 0 and block % ROW == 0:
            rows = block // ROW
            if rows <= 256 and rows % _row_warps(16 // itemsize, self.num_warps) == 0:
                return [rows, ROW]
        return [block]

    def grid(self, n: int, itemsize: int, sms: int) -> int:
        """Persistent programs: min(programs_per_sm * #SMs, #tiles); #tiles if programs_per_sm == 0."""
        tiles = -(-n // self.block(itemsize))
        return tiles if self.programs_per_sm == 0 else min(self.programs_per_sm * sms, tiles)

    @functools.cached_property
    def constexprs(self) -> dict:
        """The kernel's compile-time arguments."""
        return dict(STAGES=self.stages, AHEAD=self.ahead, OUT_BUFS=self.out_bufs, num_warps=self.num_warps)

    @functools.cached_property
    def launchers(self) -> dict:
        """Direct launches of this config's compiled kernel variants, filled by `launch`."""
        return {}

    @functools.cached_property
    def plans(self) -> dict:
        """Bound direct launches per (device, dtype, n, #SMs), filled by `launch`."""
        return {}

    @property
    def spec(self) -> str:
        tile = f"{self.tile_bytes // 1024}k" if self.tile_bytes % 1024 == 0 else str(self.tile_bytes)
        text = f"{tile}/{self.stages}/{self.ahead}/{self.out_bufs}/{self.num_warps}"
        if self.programs_per_sm != 1 or self.box != "1d":
            text += f"/{self.programs_per_sm}"
        return text + ("/2d" if self.box != "1d" else "")

    @classmethod
    def parse(cls, text: str) -> "StreamConfig":
        """A validated config from its `spec` (or a name in CANDIDATES); ConfigError otherwise."""
        from ..errors import ConfigError

        text = text.strip()
        if text in CANDIDATES:
            return CANDIDATES[text]
        parts = text.split("/")
        box = parts.pop() if parts and parts[-1] in ("1d", "2d") else "1d"
        try:
            tile = parts[0].lower()
            tile_bytes = int(tile[:-1]) * 1024 if tile.endswith("k") else int(tile)
            ints = [int(p) for p in parts[1:]]
        except (ValueError, IndexError):
            ints = []
        if not 4 <= len(ints) <= 5:
            raise ConfigError(f"stream config: {text!r} is not tile/stages/ahead/out_bufs/warps"
                              f"[/programs_per_sm[/1d|2d]] (e.g. 16k/3/2/2/4) or one of {', '.join(CANDIDATES)}")
        return cls(tile_bytes, *ints, box=box).validate()


@gluon.constexpr_function
def _row_warps(vec: int, num_warps: int) -> int:
    """Warps stacked along the rows of a [rows, 256] tile in `register_layout` (each warp
    covers 32 * vec elements of a row, as many warps as fit side by side along it)."""
    return num_warps // max(1, min(num_warps, ROW // (32 * vec)))


#: The gfx942 design's persistent schedule: one program per SM, 16 KB per operand tile, 3 slots refilled
#: 2 steps ahead, so 2-3 tiles (64-96 KB of loads) are in flight per SM; 128 KB of shared
#: memory. The kernel's docstring schedule is drawn for it (its measurements: benchmarks/RESULTS.md).
PERSISTENT = StreamConfig()
#: What `vector_add` runs: the same kernel with one 2 KB tile per program and a 1-slot ring
#: (grid = #tiles, up to 16 programs resident per SM, handed out in order by the hardware):
#: docs/streaming.md names it.
DEFAULT = StreamConfig(tile_bytes=2 * 1024, stages=1, ahead=1, out_bufs=1, programs_per_sm=0)

#: Configs to compare on a GPU (`python -m pingpong.streaming --sweep candidates`).
#: Bandwidth at 2**28: more bytes in flight per SM (deeper rings, bigger tiles, two programs
#: per SM), more warps for the shared-memory pass, one TMA box per tile instead of BLOCK/256.
#: Latency at 2**20 (256 tiles of 16 KB fp32, so DEFAULT runs 2 tiles one after the other in
#: most programs): several small programs per SM, each with one or two tiles and little
#: shared memory. Comments: loads in flight per SM (ahead x 2 x tile_bytes x programs_per_sm),
#: shared memory per SM. Every one compiles offline for sm_90a (tests/test_streaming_offline.py).
CANDIDATES = {
    "persistent": PERSISTENT,                                                        # 64 KB, 128 KB
    "ahead3": StreamConfig(stages=4, ahead=3),                                       # 96 KB, 160 KB
    "ahead5": StreamConfig(stages=6, ahead=5, out_bufs=1),                           # 160 KB, 208 KB
    "w8": StreamConfig(num_warps=8),                                                 # 64 KB, 128 KB
    "ahead3-w8": StreamConfig(stages=4, ahead=3, num_warps=8),                       # 96 KB, 160 KB
    "32k": StreamConfig(tile_bytes=32 * 1024, out_bufs=1, num_warps=8),              # 128 KB, 224 KB
    "2cta": StreamConfig(stages=2, out_bufs=1, programs_per_sm=2),                   # 128 KB, 160 KB
    "2cta-8k": StreamConfig(tile_bytes=8 * 1024, stages=5, ahead=4, programs_per_sm=2),  # 128 KB, 192 KB
    "8k-4cta": StreamConfig(tile_bytes=8 * 1024, stages=2, out_bufs=1, programs_per_sm=4),  # 128 KB, 160 KB
    "4k-8cta": StreamConfig(tile_bytes=4 * 1024, stages=2, out_bufs=1, programs_per_sm=8),  # 128 KB, 160 KB
    "2d": StreamConfig(box="2d"),                                                    # 64 KB, 128 KB
    "2d-ahead3": StreamConfig(stages=4, ahead=3, box="2d"),                          # 96 KB, 160 KB
    # not persistent: one tile per program in 1 slot, up to 16 programs (64 warps) per SM
    "tile-2k": DEFAULT,
    "tile-4k": StreamConfig(tile_bytes=4 * 1024, stages=1, ahead=1, out_bufs=1, programs_per_sm=0),
    "tile-8k": StreamConfig(tile_bytes=8 * 1024, stages=1, ahead=1, out_bufs=1, programs_per_sm=0),
}


# --------------------------------------------------------------------------- device parts


@gluon.constexpr_function
def register_layout(block_shape, VEC, num_warps):
    """Registers of one tile: 16-byte vectors, consecutive lanes on consecutive vectors.
    [BLOCK]: warps side by side. [rows, 256]: warps side by side along a row as far as it
    reaches (fp32: 2 x 128 elements), the rest stacked over the rows."""
    if len(block_shape) == 1:
        return gl.BlockedLayout([VEC], [32], [num_warps], [0])
    row_warps = _row_warps(VEC, num_warps)
    return gl.BlockedLayout([1, VEC], [1, 32], [row_warps, num_warps // row_warps], [1, 0])


@gluon.jit
def tma_load(desc, tile, bar, buf, pred):
    """TMA-load tile number `tile`: element tile*BLOCK of [n], or row tile*rows of [n/256, 256]."""
    if len(desc.block_type.shape) == 1:
        tma.async_load(desc, [tile * desc.block_type.shape[0]], bar, buf, pred=pred)
    else:
        tma.async_load(desc, [tile * desc.block_type.shape[0], 0], bar, buf, pred=pred)


@gluon.jit
def tma_store(desc, tile, buf):
    """TMA-store `buf` as tile number `tile` (the same coordinates as tma_load)."""
    if len(desc.block_type.shape) == 1:
        tma.async_store(desc, [tile * desc.block_type.shape[0]], buf)
    else:
        tma.async_store(desc, [tile * desc.block_type.shape[0], 0], buf)


@gluon.jit
def fill(ring, a_desc, b_desc, step, tile, pred):
    """TMA-load the a and b tiles of tile number `tile` into the ring slot of `step` (if
    pred); expect-tx on ready[slot] counts both tiles' bytes."""
    s = ring_index(step, ring.STAGES)
    bar = ring.ready.index(s)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    tma_load(a_desc, tile, bar, ring.a_bufs.index(s), pred)
    tma_load(b_desc, tile, bar, ring.b_bufs.index(s), pred)


@gluon.jit
def take(ring, step, layout: gl.constexpr):
    """Wait until the slot of `step` has landed (ready parity ring_phase(step)); read both
    tiles into registers."""
    s = ring.wait_ready(step)
    return ring.a_bufs.index(s).load(layout), ring.b_bufs.index(s).load(layout)


@aggregate
class StoreRing:
    """OUT_BUFS output tiles; at most OUT_BUFS - 1 TMA stores stay in flight while a new
    result is written, so a buffer is never overwritten while its store still reads it."""

    c: gl.shared_memory_descriptor
    OUT_BUFS: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, c, OUT_BUFS):
        self.c = c
        self.OUT_BUFS = gl.constexpr(OUT_BUFS)

    @gluon.jit
    def create(c_desc, OUT_BUFS: gl.constexpr):
        c = gl.allocate_shared_memory(c_desc.dtype, [OUT_BUFS] + c_desc.block_type.shape, c_desc.layout)
        return StoreRing(c, OUT_BUFS)

    @gluon.jit
    def put(self, c_desc, step, tile, value):
        buf = self.c.index(ring_index(step, self.OUT_BUFS))
        tma.store_wait(self.OUT_BUFS - 1)  # the store that last read `buf` is done
        buf.store(value)
        fence_async_shared()  # generic-proxy writes -> visible to the TMA (async proxy)
        tma_store(c_desc, tile, buf)

    @gluon.jit
    def drain(self):
        tma.store_wait(0)


# --------------------------------------------------------------------------- kernel


@gluon.jit
def vector_add_tma_kernel(a_desc, b_desc, c_desc, n, STAGES: gl.constexpr, AHEAD: gl.constexpr,
                          OUT_BUFS: gl.constexpr, num_warps: gl.constexpr):
    """c = a + b over a flat tensor of n elements; grid = (programs,). Schedule of one program
    (step i = its i-th tile, tile = pid + i*nprog, slot = i % STAGES):

        prologue   fill(0) .. fill(AHEAD-1)         the first AHEAD tiles in flight
                   ---------------------------------------------------------------
        step i     [STAGES > AHEAD]  fill(i+AHEAD)  into the slot step i-1 freed
                   take(i): wait ready[slot] parity (i // STAGES) & 1; smem -> regs
                   [STAGES == AHEAD] fence; fill(i+AHEAD) into the slot just read (gfx942's order)
                   c = a + b
                   store_wait(OUT_BUFS-1); c -> out[i % OUT_BUFS]; fence; TMA store
                   ---------------------------------------------------------------
        epilogue   store_wait(0)

    `schedule_text(cfg)` spells out the first steps of any config; for STAGES = 3, AHEAD = 2,
    OUT_BUFS = 2 (fill j>sK: the tiles of step j into slot K):

        step      fill before take    take: wait          fill after take     store
        prologue  0>s0 1>s1
        0         2>s2                ready[0] parity 0                       out[0]
        1         3>s0                ready[1] parity 0                       out[1]
        2         4>s1                ready[2] parity 0                       out[0]
        3         5>s2                ready[0] parity 1                       out[1]
        4         6>s0                ready[1] parity 1                       out[0]
        (each store: store_wait(1) first, so <= 1 TMA store is in flight while a result is written)

    Out-of-range parts of the last tile: TMA loads fill zeros, TMA stores drop them, so
    there is no mask arithmetic. A fill for a step past the end is predicated off. The
    descriptors are 1-D ([n], block [BLOCK]) or a 2-D view ([n/256, 256], block
    [BLOCK/256, 256]); only the coordinates and the register layout differ.
    """
    BLOCK: gl.constexpr = a_desc.block_type.nbytes // (a_desc.dtype.primitive_bitwidth // 8)
    gl.static_assert(len(a_desc.block_type.shape) <= 2, "vector add streams 1-D tiles or [rows, 256] tiles")
    gl.static_assert(AHEAD >= 1 and AHEAD <= STAGES, "refill distance AHEAD must be 1..STAGES")
    VEC: gl.constexpr = 16 // (a_desc.dtype.primitive_bitwidth // 8)  # 16-byte smem accesses
    gl.static_assert(BLOCK % (VEC * 32 * num_warps) == 0, "BLOCK must cover whole 16-byte vectors")
    layout: gl.constexpr = register_layout(a_desc.block_type.shape, VEC, num_warps)

    # The GEMM's ring without `empty` barriers (RELEASERS = 0): the threads that read a slot
    # also refill it, ordered by fence_async_shared and the compiler's bar.sync.
    ring = Ring.allocate(a_desc, b_desc, STAGES, 0)
    out = StoreRing.create(c_desc, OUT_BUFS)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    count = tiles_of_program(gl.cdiv(n, BLOCK), pid, nprog)

    for j in gl.static_range(AHEAD):  # prologue: the first AHEAD slots
        fill(ring, a_desc, b_desc, j, tile_of(pid, nprog, j), j < count)

    for i in range(count):
        ahead = i + AHEAD
        if STAGES > AHEAD:
            fill(ring, a_desc, b_desc, ahead, tile_of(pid, nprog, ahead), ahead < count)
        a, b = take(ring, i, layout)
        if STAGES == AHEAD:
            fence_async_shared()  # our smem reads of this slot happen before the TMA refills it
            fill(ring, a_desc, b_desc, ahead, tile_of(pid, nprog, ahead), ahead < count)
        out.put(c_desc, i, tile_of(pid, nprog, i), a + b)

    out.drain()


# --------------------------------------------------------------------------- host launch


@functools.lru_cache(maxsize=None)
def _smem_layout(rank: int, element_bits: int) -> gl.NVMMASharedLayout:
    """Unswizzled: the threads read whole rows of 16-byte vectors, and a swizzled box row
    could hold at most 128 bytes (it would split the tile into more TMA boxes)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=element_bits, rank=rank)


def _view(shape: list[int], n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) the descriptors give the flat tensors for a block of `shape`."""
    return ((n,), (1,)) if len(shape) == 1 else ((n // ROW, ROW), (ROW, 1))


def descriptors(a, b, out, cfg: StreamConfig, block_shape: list[int] | None = None):
    """TMA descriptors over the flat tensors: shape [n], stride [1], block [BLOCK]; or, for a
    2-D block, shape [n/256, 256], strides [256, 1], block [BLOCK/256, 256]."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    n = a.numel()
    block = block_shape or cfg.block_shape(n, a.element_size())
    layout = _smem_layout(len(block), 8 * a.element_size())
    shape, strides = _view(block, n)
    return [TensorDescriptor(t, list(shape), list(strides), list(block), layout) for t in (a, b, out)]


#: Plans kept per StreamConfig ((device, dtype, n, #SMs) -> (BoundLaunch, grid)); emptied when full.
PLAN_CACHE_SIZE = 256


def launch(a, b, out, sms: int, cfg: StreamConfig = DEFAULT, device: int | None = None) -> None:
    """Run the kernel on contiguous, 16-byte aligned CUDA tensors with 0 < n < 2**31 on the
    current device (`device`: its index, if the caller knows it); grid = cfg.grid(...).

    The first call of each kernel variant (device, dtype, n == 1, n % 16 == 0, 1-D/2-D)
    goes through Triton's JIT (compiling it once) and keeps a `DirectLaunch` of the compiled
    kernel; later calls launch it directly through a plan cached per (device, dtype, n, #SMs):
    a dict lookup, three base addresses, one call into Triton's C launcher. While a launch
    hook is installed, every call goes through the JIT."""
    if device is None:
        device = torch.cuda.current_device()
    n = a.numel()
    ptrs = (a.data_ptr(), b.data_ptr(), out.data_ptr())
    plan = cfg.plans.get((device, a.dtype, n, sms))
    if plan is not None and launch_ready(plan[2]):
        bound, grid, _ = plan
        bound(grid, torch._C._cuda_getCurrentRawStream(device), ptrs)
        return
    itemsize = a.element_size()
    block = cfg.block_shape(n, itemsize)
    nprog = cfg.grid(n, itemsize, sms)
    key = (device, a.dtype, n == 1, n % 16 == 0, len(block), launch_key())  # what Triton specializes on
    direct = cfg.launchers.get(key)
    if not direct or not hooks_idle():
        kernel = vector_add_tma_kernel[(nprog,)](*descriptors(a, b, out, cfg, block), n, **cfg.constexprs,
                                                 **KERNEL_OPTIONS)
        if direct is None:
            cfg.launchers[key] = DirectLaunch.from_kernel(kernel) or False
        return
    shape, strides = _view(block, n)
    bound = direct.bind([("tma", shape, strides)] * 3, (n, *cfg.constexprs.values()))
    if len(cfg.plans) >= PLAN_CACHE_SIZE:
        cfg.plans.clear()
    cfg.plans[(device, a.dtype, n, sms)] = (bound, (nprog, 1, 1), key[-1])
    bound((nprog, 1, 1), torch._C._cuda_getCurrentRawStream(device), ptrs)


def schedule_text(cfg: StreamConfig, steps: int = 5) -> str:
    """The order of one program's first `steps` steps under `cfg`, as the kernel issues them
    (the table in `vector_add_tma_kernel`'s docstring; slots and parities from the GEMM
    ring's `ring_index` / `ring_phase`)."""
    from ..hopper.device.pipeline import ring_phase

    slot = lambda j: f"{j}>s{ring_index.fn(j, cfg.stages)}"  # noqa: E731
    rows = [("step", "fill before take", "take: wait", "fill after take", "store"),
            ("prologue", " ".join(slot(j) for j in range(cfg.ahead)), "", "", "")]
    for i in range(steps):
        fill = slot(i + cfg.ahead)
        wait = f"ready[{ring_index.fn(i, cfg.stages)}] parity {ring_phase.fn(i, cfg.stages)}"
        early = cfg.stages > cfg.ahead
        store = f"out[{ring_index.fn(i, cfg.out_bufs)}]"
        rows.append((str(i), fill if early else "", wait, "" if early else fill, store))
    lines = ["".join(f"{c:<20}" if k else f"{c:<10}" for k, c in enumerate(r)).rstrip() for r in rows]
    window = cfg.out_bufs - 1
    lines.append(f"(each store: store_wait({window}) first, so <= {window} TMA store"
                 f"{'' if window == 1 else 's'} {'is' if window == 1 else 'are'} in flight while a result is written)")
    return "\n".join(lines)


def build(dtype: str = "float32", cfg: StreamConfig = PERSISTENT, n: int = (1 << 20) + 3, nprog: int = 132):
    """Offline build (CPU tensors; only shapes and dtypes matter): by default an odd n, a
    real tail (which also means the 1-D form; pass n % 256 == 0 for box="2d")."""
    from ..runtime.compile import Launch

    x = torch.empty(n, dtype=getattr(torch, dtype))
    return Launch(vector_add_tma_kernel, (*descriptors(x, x, x, cfg.validate()), n),
                  dict(cfg.constexprs, **KERNEL_OPTIONS), (nprog,))
