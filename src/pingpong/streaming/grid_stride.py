"""The grid-stride order of the streaming kernels (the gfx942 design's persistent loop).

A persistent launch runs one program per SM (Hopper) or CU (gfx942). The flat tensor is cut
into ``num_tiles = cdiv(n, BLOCK)`` tiles; program ``pid`` of ``nprog`` takes tiles
``pid, pid + nprog, pid + 2*nprog, ...``, the GEMM's persistent order without its raster:

    tile:     0  1  2  3  4  5  6  7  8  9       (nprog = 4, num_tiles = 10)
    program:  0  1  2  3  0  1  2  3  0  1
    step i:   0  0  0  0  1  1  1  1  2  2       tile = tile_of(pid, nprog, i)

How many steps a program runs is the GEMM scheduler's `tiles_of_program(num_tiles, pid,
nprog)` (re-exported here). Both are ``@gluon.jit`` so kernels call them, and plain integer
arithmetic so the schedule checker and the tests can call ``tile_of.fn(...)`` on the host.
"""

from triton.experimental import gluon

from ..hopper.device.scheduler import tiles_of_program

__all__ = ["tile_of", "tiles_of_program"]


@gluon.jit
def tile_of(pid, nprog, step):
    """The tile that program `pid` of `nprog` processes at grid-stride step `step`."""
    return pid + step * nprog
