"""Pipeline: the shared-memory stage ring, its ready/empty mbarriers and the (index, phase)
arithmetic that every producer and consumer uses.

The ring has STAGES slots. A monotonically increasing *counter* numbers the k-steps a CTA
loads (the producer) or consumes (a consumer), across all of its tiles:

    counter:   0  1  2  3  4  5  6  7 ...        (STAGES = 3)
    slot:      0  1  2  0  1  2  0  1            ring_index(counter)
    phase:     0  0  0  1  1  1  0  0            ring_phase(counter)

Protocol per slot s (mbarrier parity waits):

    | who      | waits on                 | then                                  |
    |----------|--------------------------|---------------------------------------|
    | producer | empty[s], phase ^ 1      | expect(ready[s], bytes); TMA A,B -> s |
    | consumer | ready[s], phase          | wgmma on slot s ... arrive(empty[s])  |

The producer's first pass waits on parity 1 of a fresh barrier, which counts as already
complete: every slot starts empty. These helpers are `@gluon.jit` functions so kernels call
them, and plain arithmetic so `pingpong.schedule` can call ``ring_index.fn(c, S)`` and check
the very protocol the kernel runs.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def ring_index(counter, STAGES: gl.constexpr):
    """Slot of the ring that k-step number `counter` uses."""
    return counter % STAGES


@gluon.jit
def ring_phase(counter, STAGES: gl.constexpr):
    """mbarrier parity of k-step `counter`: flips each time the ring wraps."""
    return (counter // STAGES) & 1


@gluon.jit
def first_counter(local_tile, k_steps, CONSUMERS: gl.constexpr, consumer):
    """Ring counter of the first k-step of a consumer's `local_tile`-th tile.

    The producer loads the CTA's tiles in order t0, t1, t2, ...; with CONSUMERS consumer
    warpgroups taking turns (ping-pong), consumer c's j-th tile is the CTA's tile
    CONSUMERS*j + c. With one consumer (or a cooperative pair) CONSUMERS is 1, consumer 0.
    """
    return (local_tile * CONSUMERS + consumer) * k_steps
