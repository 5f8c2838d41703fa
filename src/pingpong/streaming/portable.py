"""The portable vector add: plain Triton, any CUDA or ROCm GPU (and Triton's CPU interpreter).

Used where the Hopper TMA kernel does not apply: non-Hopper GPUs, ROCm, base pointers that
are not 16-byte aligned (TMA needs that), more than 2**31 - 1 elements, and CPU tensors under
the interpreter opt-in (see `pingpong.streaming.api`). One program per BLOCK elements, a mask
for the tail; the offsets are 64-bit so any length works.
"""

import triton
import triton.language as tl

from ..toolchain import KERNEL_OPTIONS

#: Elements per program: 4 warps x 32 threads x 8 elements (two 16-byte accesses for fp32).
BLOCK = 1024
NUM_WARPS = 4


@triton.jit
def vector_add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(c_ptr + offsets, a + b, mask=mask)


_interpreted = None


def launch(a, b, out, interpret: bool = False) -> None:
    """c = a + b on flat contiguous tensors of n > 0 elements; `interpret` runs on the CPU."""
    global _interpreted
    kernel = vector_add_kernel
    if interpret:
        if _interpreted is None:
            from triton.runtime.interpreter import InterpretedFunction

            _interpreted = InterpretedFunction(vector_add_kernel.fn)
        kernel = _interpreted
    n = a.numel()
    kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS, **KERNEL_OPTIONS)
