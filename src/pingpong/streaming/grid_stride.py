"""GridStride: the persistent tile scheduler of the streaming kernels (the seed's grid-stride loop).

A persistent launch runs one program per SM (Hopper) or CU (gfx942). The flat tensor is cut
into ``num_tiles = cdiv(n, BLOCK)`` tiles; program ``pid`` of ``nprog`` takes tiles
``pid, pid + nprog, pid + 2*nprog, ...``:

    tile:     0  1  2  3  4  5  6  7  8  9       (nprog = 4, num_tiles = 10)
    program:  0  1  2  3  0  1  2  3  0  1
    step i:   0  0  0  0  1  1  1  1  2  2       tile = pid + i * nprog

The functions are ``@gluon.jit`` so kernels call them, and plain integer arithmetic so the
schedule checker (and the tests) can call ``steps.fn(pid, nprog, num_tiles)`` on the host.
Gluon and plain-Triton kernels both call them (a Gluon jit function is callable from Gluon
only, so the portable kernel keeps its own one-line copy of `tile_of`).
"""

from triton.experimental import gluon


@gluon.jit
def steps(pid, nprog, num_tiles):
    """How many tiles program `pid` of `nprog` processes: cdiv(num_tiles - pid, nprog), >= 0."""
    return (num_tiles - pid + nprog - 1) // nprog


@gluon.jit
def tile_of(pid, nprog, step):
    """The tile that program `pid` processes at grid-stride step `step`."""
    return pid + step * nprog
