"""Hopper (sm_90a) vector add: persistent, TMA in, TMA out, loads issued two steps ahead.

The seed's gfx942 design (DESIGN.md table) mapped to Hopper:

    seed (gfx942)                           here (sm_90a)
    grid = #CUs, grid-stride loop           grid = #SMs, grid-stride tile_of / tiles_of_program
    buffer_load ... lds (no VGPRs)          TMA bulk tensor copy -> shared memory
    2 LDS buffers, refill 2 steps ahead     STAGES-slot ring (2 or 3), refill AHEAD = 2 steps ahead
    s_waitcnt vmcnt(2) / vmcnt(3)           ready[slot] mbarrier, expect-tx, parity wait
    buffer_store, OOB dropped               TMA store from shared memory, OOB dropped
    num_records = N*4 (OOB loads -> 0)      descriptor shape [n] (OOB loads -> 0): no masks

Parts: the GEMM's scheduler arithmetic (`tiles_of_program`) and `tile_of` (which tiles), the
GEMM's `Ring` (`pingpong.hopper.pipeline`: slots, ready barriers, (index, phase) of a step)
with `fill`/`take` (the 1-D TMA loads into it), `StoreRing` (the output buffers and the TMA
store window). The kernel only orchestrates.
"""


import dataclasses

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.language.core import _aggregate as aggregate

from ..hopper.pipeline import Ring, ring_index
from .grid_stride import tile_of, tiles_of_program

# --------------------------------------------------------------------------- host config

#: Largest element count the sm_90a path takes: TMA coordinates are signed 32-bit.
MAX_TMA_ELEMENTS = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class StreamConfig:
    """Tile and pipeline shape of the Hopper kernel; everything else is derived from it.

    tile_bytes: bytes of one operand's tile (one TMA load); BLOCK = tile_bytes // itemsize.
    stages:     input ring slots, 2 or 3 (each holds an a-tile and a b-tile).
    ahead:      how many grid-stride steps ahead a slot is refilled (the seed: 2).
    out_bufs:   output tiles in shared memory, so a TMA store can be in flight while
                the next result is written (store_wait(out_bufs - 1) bounds the window).
    """

    tile_bytes: int = 16 * 1024
    stages: int = 3
    ahead: int = 2
    out_bufs: int = 2
    num_warps: int = 4

    def block(self, itemsize: int) -> int:
        return self.tile_bytes // itemsize

    @property
    def shared_bytes(self) -> int:
        """Shared memory of the data buffers (the mbarriers add 8 bytes per stage)."""
        return (2 * self.stages + self.out_bufs) * self.tile_bytes

    def validate(self) -> "StreamConfig":
        from ..errors import ConfigError

        if self.tile_bytes < 16 or self.tile_bytes & (self.tile_bytes - 1):
            raise ConfigError(f"tile_bytes: must be a power of two >= 16, got {self.tile_bytes}")
        if not 1 <= self.ahead <= self.stages:
            raise ConfigError(f"ahead: must be in 1..stages={self.stages}, got {self.ahead}")
        if self.out_bufs < 1:
            raise ConfigError(f"out_bufs: must be >= 1, got {self.out_bufs}")
        if self.shared_bytes > 227 * 1024:
            raise ConfigError(f"shared memory: {self.shared_bytes} bytes > 227 KB per block")
        return self


#: Streaming defaults: 16 KB per operand tile, 3 slots refilled 2 steps ahead, so 2-3 tiles
#: (64-96 KB of loads) are in flight per SM; 128 KB of shared memory.
DEFAULT = StreamConfig()
#: For tiny sizes (fewer DEFAULT tiles than SMs): 4 KB tiles spread them over more SMs.
SMALL = StreamConfig(tile_bytes=4 * 1024)


# --------------------------------------------------------------------------- device parts


@gluon.jit
def fill(ring, a_desc, b_desc, step, offset, pred):
    """TMA-load the a and b tiles at element `offset` into the ring slot of `step` (if pred);
    expect-tx on ready[slot] counts both tiles' bytes."""
    s = ring_index(step, ring.STAGES)
    bar = ring.ready.index(s)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(a_desc, [offset], bar, ring.a_bufs.index(s), pred=pred)
    tma.async_copy_global_to_shared(b_desc, [offset], bar, ring.b_bufs.index(s), pred=pred)


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
    def put(self, c_desc, step, offset, value):
        buf = self.c.index(ring_index(step, self.OUT_BUFS))
        tma.store_wait(self.OUT_BUFS - 1)  # the store that last read `buf` is done
        buf.store(value)
        fence_async_shared()  # generic-proxy writes -> visible to the TMA (async proxy)
        tma.async_copy_shared_to_global(c_desc, [offset], buf)

    @gluon.jit
    def drain(self):
        tma.store_wait(0)


# --------------------------------------------------------------------------- kernel


@gluon.jit
def vector_add_tma_kernel(a_desc, b_desc, c_desc, n, STAGES: gl.constexpr, AHEAD: gl.constexpr,
                          OUT_BUFS: gl.constexpr, num_warps: gl.constexpr):
    """c = a + b over a flat tensor of n elements; grid = (#SMs,). Schedule of one program
    (step i = its i-th tile, tile = pid + i*nprog, slot = i % STAGES; AHEAD = 2):

        prologue   fill(0) fill(1)                  both first tiles in flight
                   ---------------------------------------------------------------
        step i     [STAGES > AHEAD]  fill(i+2)      into the slot step i-1 freed
                   take(i): wait ready[slot] parity (i // STAGES) & 1; smem -> regs
                   [STAGES == AHEAD] fence; fill(i+2) into the slot just read (seed)
                   c = a + b
                   store_wait(OUT_BUFS-1); c -> out[i % OUT_BUFS]; fence; TMA store
                   ---------------------------------------------------------------
        epilogue   store_wait(0)

        time ->   step 0        step 1        step 2        step 3
        TMA ld    L0 L1 L2 ...  L3 .......... L4 .......... L5        (STAGES = 3)
        wait        [ready 0]     [ready 1]     [ready 2]     [ready 0 ^ 1]
        regs           add 0         add 1         add 2
        TMA st          S0            S1            S2        (<= 1 in flight at put)

    Out-of-range parts of the last tile: TMA loads fill zeros, TMA stores drop them, so
    there is no mask arithmetic. A fill for a step past the end is predicated off.
    """
    BLOCK: gl.constexpr = a_desc.block_type.shape[0]
    gl.static_assert(len(a_desc.block_type.shape) == 1, "vector add streams 1-D tiles")
    gl.static_assert(AHEAD >= 1 and AHEAD <= STAGES, "refill distance AHEAD must be 1..STAGES")
    VEC: gl.constexpr = 16 // (a_desc.dtype.primitive_bitwidth // 8)  # 16-byte smem accesses
    gl.static_assert(BLOCK % (VEC * 32 * num_warps) == 0, "BLOCK must cover whole 16-byte vectors")
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [num_warps], [0])

    # The GEMM's ring (its `empty` barriers stay unused: the threads that read a slot also
    # refill it, ordered by fence_async_shared and the compiler's bar.sync).
    ring = Ring.allocate(a_desc, b_desc, STAGES, 1)
    out = StoreRing.create(c_desc, OUT_BUFS)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    count = tiles_of_program(gl.cdiv(n, BLOCK), pid, nprog)

    for j in gl.static_range(AHEAD):  # prologue: the first AHEAD slots
        fill(ring, a_desc, b_desc, j, tile_of(pid, nprog, j) * BLOCK, j < count)

    for i in range(count):
        ahead = i + AHEAD
        if STAGES > AHEAD:
            fill(ring, a_desc, b_desc, ahead, tile_of(pid, nprog, ahead) * BLOCK, ahead < count)
        a, b = take(ring, i, layout)
        if STAGES == AHEAD:
            fence_async_shared()  # our smem reads of this slot happen before the TMA refills it
            fill(ring, a_desc, b_desc, ahead, tile_of(pid, nprog, ahead) * BLOCK, ahead < count)
        out.put(c_desc, i, tile_of(pid, nprog, i) * BLOCK, a + b)

    out.drain()


# --------------------------------------------------------------------------- host launch


def _gl_dtype(torch_dtype):
    import torch

    return {torch.float32: gl.float32, torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}[torch_dtype]


def descriptors(a, b, out, cfg: StreamConfig):
    """1-D TMA descriptors over the flat tensors: shape [n], stride [1], block [BLOCK]."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    block = [cfg.block(a.element_size())]
    layout = gl.NVMMASharedLayout.get_default_for(block, _gl_dtype(a.dtype))
    n = a.numel()
    return [TensorDescriptor(t, [n], [1], block, layout) for t in (a, b, out)]


def launch(a, b, out, sms: int, cfg: StreamConfig = DEFAULT) -> None:
    """Run the kernel on flat, contiguous, 16-byte aligned CUDA tensors with 0 < n < 2**31;
    grid = min(#SMs, #tiles) persistent programs."""
    a_desc, b_desc, c_desc = descriptors(a, b, out, cfg)
    nprog = min(sms, -(-a.numel() // cfg.block(a.element_size())))
    vector_add_tma_kernel[(nprog,)](
        a_desc, b_desc, c_desc, a.numel(),
        STAGES=cfg.stages, AHEAD=cfg.ahead, OUT_BUFS=cfg.out_bufs, num_warps=cfg.num_warps,
    )


def choose_config(n: int, itemsize: int, sms: int) -> StreamConfig:
    """DEFAULT, or SMALL when DEFAULT's tiles would not reach every SM (tiny sizes).

    At launch-bound sizes such as 2**20 fp32 (256 tiles of 16 KB on 132 SMs) DEFAULT is the
    right one: each program's prologue requests both of its tiles at once, so the whole
    input is in flight immediately; smaller tiles would only add round trips.
    """
    return DEFAULT if -(-n // DEFAULT.block(itemsize)) >= sms else SMALL



def build(dtype: str = "float32", cfg: StreamConfig = DEFAULT, n: int = (1 << 20) + 3, nprog: int = 132):
    """Offline build (CPU tensors; only shapes and dtypes matter): an odd n, a real tail."""
    import torch

    from ..compile import Launch

    x = torch.empty(n, dtype=getattr(torch, dtype))
    kwargs = dict(STAGES=cfg.stages, AHEAD=cfg.ahead, OUT_BUFS=cfg.out_bufs, num_warps=cfg.num_warps)
    return Launch(vector_add_tma_kernel, (*descriptors(x, x, x, cfg.validate()), n), kwargs, (nprog,))
