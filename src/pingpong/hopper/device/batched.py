"""Batched TMA: one descriptor per operand, rank 2 (one matrix) or rank 3 (a batch of them).

A batched operand is described as [batch, rows, cols] with a box of one matrix's tile,
[1, rows, cols]; TMA clips every dimension on its own, so a tile on a matrix's edge reads
zeros (and stores nothing) past that matrix's last row instead of touching the next matrix
(which folding the batch into the rows would do whenever rows % tile != 0). An operand
shared by every batch (a weight; batch stride 0) keeps a rank-2 descriptor and ignores the
batch index — TMA strides must be non-zero multiples of 16 bytes.

    rank-2 desc, box [R, C]        copy at (row, col)          into a [R, C] buffer
    rank-3 desc, box [1, R, C]     copy at (batch, row, col)   into the same buffer, viewed [1, R, C]

Shared-memory buffers stay 2-D whatever the rank (`tile_shape`, `tile_layout`), so the
ring, the wgmma operands and the epilogue staging are the same code for both.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma


@gluon.constexpr_function
def tile_shape(desc):
    """[rows, cols] of a descriptor's box without its batch dimension."""
    return list(desc.block_type.shape[-2:])


@gluon.constexpr_function
def tile_layout(desc):
    """The rank-2 NVMMA shared layout of one box (the descriptor's own layout, minus the batch)."""
    layout = desc.layout
    if len(desc.block_type.shape) < 3:
        return layout
    return gl.NVMMASharedLayout(swizzle_byte_width=layout.swizzle_byte_width, element_bitwidth=layout.element_bitwidth,
                                rank=2, transposed=layout.transposed, fp4_padded=layout.fp4_padded)


@gluon.jit
def load_tile(desc, batch, row, col, bar, dst, MULTICAST: gl.constexpr = False):
    """TMA load of the box at (row, col) of matrix `batch` (rank 3) or of the matrix (rank 2);
    MULTICAST (a 2-CTA cluster's shared operand, rank 2): into both CTAs of the pair."""
    if len(desc.block_type.shape) == 3:
        gl.static_assert(not MULTICAST, "clusters run unbatched products")
        tma.async_load(desc, [batch, row, col], bar, dst.reshape([1] + tile_shape(desc)))
    elif MULTICAST:
        tma.async_load(desc, [row, col], bar, dst, multicast=True)
    else:
        tma.async_load(desc, [row, col], bar, dst)


@gluon.jit
def store_tile(desc, batch, row, col, src):
    """TMA store of `src` to the box at (row, col) of matrix `batch` (rank 3) or of the matrix."""
    if len(desc.block_type.shape) == 3:
        tma.async_store(desc, [batch, row, col], src.reshape([1] + tile_shape(desc)))
    else:
        tma.async_store(desc, [row, col], src)
