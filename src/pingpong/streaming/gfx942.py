"""gfx942 (MI300, CDNA3) vector add: a hand-written GCN design, written in Gluon instead of assembly.

Compiled offline only (no AMD GPU here): `pingpong isa --target gfx942 --kernel vector_add`
prints its facts and CI checks them (tests/test_streaming_offline.py). Same design as the assembly kernel:

    hand-written GCN                          here (Gluon, amd.cdna4.async_copy)
    grid = #CUs, 256 threads, 1 dword/lane    grid = #CUs, 4 waves x 64 lanes x 1 fp32
    buffer_load_dword ... offen lds           buffer_load_to_shared  -> buffer_load_dword ... lds
    2 LDS buffers, both filled in prologue    2 slots [a-tile | b-tile], prologue fills both
    refill the slot just read, 2 ahead        same (tile of step i + 2 into slot i % 2)
    s_waitcnt vmcnt(2) after the prologue     wait_group(1): oldest group (slot 0) landed
    s_waitcnt vmcnt(3) in the loop            s_waitcnt vmcnt(3), written by hand (_step_done)
    ds_read_b32 (each wave its own region)    load_shared_relaxed (no extra vmcnt(0))
    buffer_store_dword, OOB dropped           buffer_store, OOB lanes dropped

Out-of-bounds: Triton (3.9) builds each buffer descriptor with the maximum num_records, not
N * itemsize as the assembly kernel does, so the tail's lanes are made out-of-range by the mask
operand (one v_cndmask on the offset, no exec-mask branches): the buffer hardware then
returns 0 for those loads and drops those stores, exactly the assembly kernel's mechanism.

Types: fp32, the assembly kernel's. The lowering to `buffer_load ... lds` on gfx942 needs 32 bits per
lane; for fp16/bf16 that is 2 elements per lane, and Triton (3.9, as 3.6 before it) cannot
lower the per-element tail mask of such a lane (the LLVM lowering fails), so 16-bit types are
not built here. On a ROCm GPU `pingpong.vector_add` runs the portable Triton kernel for every
dtype.

One step per loop iteration, as in the assembly kernel: the LLVM of Triton 3.9 would
runtime-unroll the step loop by 2 (two steps per iteration and a one-step remainder), so the
step counter goes through an empty asm (`_next_step`) that hides the trip count from it.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.amd.cdna4 import async_copy, buffer_store

from ..toolchain import KERNEL_OPTIONS
from .grid_stride import tile_of, tiles_of_program

#: The assembly kernel's shape: 256 threads = 4 waves of 64 lanes, one fp32 per lane per tile.
WAVES = 4


@gluon.jit
def _fill(a_ptr, b_ptr, a_slot, b_slot, offsets, n):
    """Both tiles of one step straight into LDS (one buffer_load ... lds per wave each)."""
    in_range = offsets < n
    async_copy.buffer_load_to_shared(a_slot, a_ptr, offsets, mask=in_range)
    async_copy.buffer_load_to_shared(b_slot, b_ptr, offsets, mask=in_range)
    async_copy.commit_group()


#: Vector-memory operations one step issues, per wave: one `buffer_load ... lds` per operand
#: (32 bits per lane) and one `buffer_store`. Both kinds count in gfx942's in-order vmcnt.
LOADS_PER_STEP = 2
STORES_PER_STEP = 1
#: The assembly kernel's counts. After the prologue's 2 fills (4 loads, no store) the oldest fill is
#: ready once at most one fill (2 loads) is outstanding. At the end of step i the FIFO's
#: newest entries are fill(i+2)'s loads and store(i); slot (i+1) % 2 is ready once at most
#: those remain: drain fill(i+1) and store(i-1), keep the current step's work in flight.
PROLOGUE_VMCNT = LOADS_PER_STEP
LOOP_VMCNT = LOADS_PER_STEP + STORES_PER_STEP
_LOOP_WAIT = gl.constexpr(f"s_waitcnt vmcnt({LOOP_VMCNT})")


@gluon.jit
def _reads_done(a, b):
    """The assembly kernel's `s_waitcnt lgkmcnt(0)` between the ds_reads of a slot and its refill.

    The reads use `load_shared_relaxed` (no compiler-added vmcnt(0) for pending LDS DMA),
    which also tells LLVM they never alias an LDS DMA; this side-effecting asm, fed by the
    read values, keeps the refill of the same slot from being scheduled above the reads.
    """
    return gl.inline_asm_elementwise("s_waitcnt lgkmcnt(0)", "=v,=v,0,1", [a, b], dtype=(a.dtype, b.dtype),
                                     is_pure=False, pack=1)


@gluon.jit
def _step_done(token):
    """The assembly kernel's loop-bottom `s_waitcnt vmcnt(LOOP_VMCNT)`, written by hand.

    Older Triton (3.6) counted only the async loads of newer groups for `wait_group(1)`
    (vmcnt(2), which also drains the fill just issued: the hardware FIFO holds the store too).
    In Triton 3.9 `wait_group` becomes an LLVM async-mark wait and LLVM does count the store
    (vmcnt(3)), but an async wait with no barrier after it gets one from Triton's Membar: a
    second `s_barrier` per step, which the assembly kernel does not have. This asm is not an
    async wait, so the step keeps its one barrier (the one before the refill)."""
    return gl.inline_asm_elementwise(_LOOP_WAIT, "=v,0", [token], dtype=token.dtype, is_pure=False, pack=1)


@gluon.jit
def _next_step(i):
    """i + 1, through an empty asm: the loop runs one step per iteration, as the assembly kernel's.

    Newer LLVM (the one in Triton 3.9) runtime-unrolls a loop whose trip count it can compute
    and that is uniform across lanes, s_barrier or not, so `for i in range(count)` became two
    steps per iteration plus a one-step remainder (10 `buffer_load ... lds` instead of 6). An
    opaque step counter leaves the trip count unknown to LLVM, which then keeps the loop as
    written; the asm emits nothing (its text is a comment)."""
    return gl.inline_asm_elementwise("; next step", "=s,0", [i + 1], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def vector_add_lds_kernel(a_ptr, b_ptr, c_ptr, n, num_warps: gl.constexpr):
    """c = a + b; grid = (#CUs,). One program's schedule (slot = step % 2, 2 slots):

        prologue  fill(0) -> slot 0, fill(1) -> slot 1      4 loads in flight
                  s_waitcnt vmcnt(2)                         slot 0 landed (wait_group(1))
        step i    a, b <- LDS slot i%2 (ds_read); s_waitcnt lgkmcnt(0)
                  fill(i+2) -> slot i%2                      prefetch into the slot just read
                  buffer_store a + b                         OOB lanes dropped
                  s_waitcnt vmcnt(3)                         slot (i+1)%2 landed
        epilogue  s_waitcnt vmcnt(0)                         (wait_group(0))
    """
    gl.static_assert(num_warps == 4, "the assembly kernel's shape: 4 waves of 64 lanes")
    gl.static_assert(a_ptr.dtype.element_ty.primitive_bitwidth == 32,
                     "gfx942 direct-to-LDS lowers for one 32-bit element per lane (fp32)")
    BLOCK: gl.constexpr = 64 * num_warps
    layout: gl.constexpr = gl.BlockedLayout([1], [64], [num_warps], [0])
    lds_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    a_lds = gl.allocate_shared_memory(a_ptr.dtype.element_ty, [2, BLOCK], lds_layout)
    b_lds = gl.allocate_shared_memory(a_ptr.dtype.element_ty, [2, BLOCK], lds_layout)

    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    count = tiles_of_program(gl.cdiv(n, BLOCK), pid, nprog)
    lanes = gl.arange(0, BLOCK, layout)

    for j in gl.static_range(2):  # prologue: both slots
        _fill(a_ptr, b_ptr, a_lds.index(j), b_lds.index(j), tile_of(pid, nprog, j) * BLOCK + lanes, n)
    async_copy.wait_group(1)

    i = 0
    while i < count:  # one step per iteration (_next_step)
        s = i % 2
        a = async_copy.load_shared_relaxed(a_lds.index(s), layout)
        b = async_copy.load_shared_relaxed(b_lds.index(s), layout)
        a, b = _reads_done(a, b)
        _fill(a_ptr, b_ptr, a_lds.index(s), b_lds.index(s), tile_of(pid, nprog, i + 2) * BLOCK + lanes, n)
        offsets = tile_of(pid, nprog, i) * BLOCK + lanes
        buffer_store(a + b, c_ptr, offsets, mask=offsets < n)
        lanes = _step_done(lanes)
        i = _next_step(i)

    async_copy.wait_group(0)


def build(dtype: str = "float32", n: int = (1 << 20) + 3, nprog: int = 304):
    """Offline build (CPU tensors): an odd n (a real tail), grid = 304 CUs (an MI300X)."""
    import torch

    from ..runtime.compile import Launch
    from ..errors import TargetError

    if dtype != "float32":
        raise TargetError(f"dtype: the gfx942 direct-to-LDS kernel is built for float32 (one 32-bit element per lane), not {dtype}")

    x = torch.empty(n, dtype=getattr(torch, dtype))
    return Launch(vector_add_lds_kernel, (x, x, x, n), dict(num_warps=WAVES, **KERNEL_OPTIONS), (nprog,))
