"""Epilogue: out = α·acc + β·C, cast, store through TMA — fused, no second pass over C.

    tma.store_wait(0)                     the previous tile's store from `staging` has drained
    C tile ──TMA load──> staging ──┐      (only when HAS_C: β ≠ 0 and a C was given)
    acc (registers, fp32) ──×α────(+ β·C)── cast ──> staging ──TMA store──> out

The store of tile t overlaps the mainloop of tile t+1; it is waited for only when the
staging buffer is needed again. C is read through TMA too, into the same staging buffer, so
it costs no extra shared memory and no per-element address registers; C must therefore be
TMA-legal with out's dtype (the API copies it otherwise). C may alias out (`gemm_`): each
tile is read before its own store and tiles are disjoint.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.language.core import _aggregate as aggregate


@aggregate
class Epilogue:
    c_desc: tma.tensor_descriptor
    cin_desc: tma.tensor_descriptor
    alpha: gl.tensor
    beta: gl.tensor
    staging: gl.shared_memory_descriptor  # [COPIES, rows, cols]: one per consumer partition
    c_ready: gl.shared_memory_descriptor  # [COPIES, 1] mbarriers for the C loads
    HAS_C: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, c_desc, cin_desc, alpha, beta, staging, c_ready, HAS_C):
        self.c_desc = c_desc
        self.cin_desc = cin_desc
        self.alpha = alpha
        self.beta = beta
        self.staging = staging
        self.c_ready = c_ready
        self.HAS_C = gl.constexpr(HAS_C)

    @gluon.jit
    def allocate(c_desc, cin_desc, alpha, beta, HAS_C: gl.constexpr, COPIES: gl.constexpr):
        staging = gl.allocate_shared_memory(c_desc.dtype, [COPIES] + c_desc.block_type.shape, c_desc.layout)
        c_ready = gl.allocate_shared_memory(gl.int64, [COPIES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(COPIES):
            mbarrier.init(c_ready.index(i), count=1)
        return Epilogue(c_desc, cin_desc, alpha, beta, staging, c_ready, HAS_C)

    @gluon.jit
    def store(self, acc, COPY: gl.constexpr, tile_count, off_m, off_n):
        """Write α·acc + β·C of the tile at (off_m, off_n) through staging copy COPY.

        `tile_count` (tiles this partition has stored before) gives the C barrier's phase.
        """
        staging = self.staging.index(COPY)
        c_ready = self.c_ready.index(COPY)
        out = acc * self.alpha
        tma.store_wait(0)
        if self.HAS_C:
            mbarrier.expect(c_ready, self.cin_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(self.cin_desc, [off_m, off_n], c_ready, staging)
            mbarrier.wait(c_ready, tile_count & 1)
            out = out + self.beta * staging.load(acc.type.layout).to(gl.float32)
        staging.store(out.to(self.c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(self.c_desc, [off_m, off_n], staging)

    @gluon.jit
    def drain(self):
        """Wait for every TMA store of this partition before the program exits."""
        tma.store_wait(0)
