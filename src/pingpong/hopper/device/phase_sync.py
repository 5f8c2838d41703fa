"""PhaseSync: the ordered alternation of the two consumer warpgroups (ping-pong).

The two-counter PingPongSync of the AMD ping-pong (docs/design.md) realized with two
mbarriers, `turn[0]` and `turn[1]`, each initialized with an arrival count of 1 and nothing else:

    | step                          | consumer 0                      | consumer 1                      |
    |-------------------------------|---------------------------------|---------------------------------|
    | before mainloop of its tile j | wait(turn[0], turn_phase(j, 0)) | wait(turn[1], turn_phase(j, 1)) |
    |                               |   = parity (j & 1) ^ 1          |   = parity j & 1                |
    | after issuing its last wgmma  | arrive(turn[1])                 | arrive(turn[0])                 |

The initial state is in the parity, not in an extra arrival: a fresh mbarrier counts its
(non-existent) previous phase, parity 1, as complete, so consumer 0's first wait passes at
once — the same convention as the producer's first wait on an empty ring slot. (An earlier
version pre-armed turn[0] with an arrive right after init; compute-sanitizer's racecheck
flagged that init→arrive→wait chain across partitions, so the state now lives in the phase.)

So consumer 0 runs the mainloop of the CTA's tile 0 while consumer 1 waits; consumer 1 runs
tile 1's mainloop while consumer 0 runs tile 0's epilogue; and so on. A consumer can never
lap the other: to arrive on turn[c] twice it must pass its own turn in between, which needs
the other's arrival. These are plain functions so `pingpong.schedule` checks this protocol.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier
from triton.language.core import _aggregate as aggregate

from .pipeline import allocate_barriers


@gluon.jit
def turn_phase(local_tile, consumer):
    """Parity `consumer` waits for on its own turn barrier before its `local_tile`-th mainloop."""
    return (local_tile & 1) ^ (1 - consumer)


@gluon.jit
def other_consumer(consumer):
    """The consumer whose turn comes next."""
    return 1 - consumer


@aggregate
class PhaseSync:
    """The two turn mbarriers and the protocol in the table above."""

    turns: gl.shared_memory_descriptor

    @gluon.jit
    def allocate():
        turns = allocate_barriers(2)
        mbarrier.init(turns.index(0), count=1)
        mbarrier.init(turns.index(1), count=1)
        return PhaseSync(turns)

    @gluon.jit
    def wait_turn(self, CONSUMER: gl.constexpr, local_tile):
        mbarrier.wait(self.turns.index(CONSUMER), turn_phase(local_tile, CONSUMER))

    @gluon.jit
    def pass_turn(self, CONSUMER: gl.constexpr):
        mbarrier.arrive(self.turns.index(other_consumer(CONSUMER)))
