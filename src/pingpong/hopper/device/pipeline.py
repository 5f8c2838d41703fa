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
complete: every slot starts empty.

A 2-CTA cluster (CLUSTER = 2, KernelConfig.cluster_m; the kernel is launched with num_ctas=2
and describes the pair's work, each CTA holding its half of every split tensor): the leader
CTA's multicast writes B into BOTH CTAs' slot s, so a slot is refilled only when both CTAs'
consumers released it. Each slot has a second empty barrier, `pair_empty[s]`, that lives in
the leader (a two-CTA mbarrier: both CTAs' releases arrive on it, the partner's remotely at
cluster scope, count 2·RELEASERS); the leader's producer waits on it before the multicast
(the partner's wait on it is no-op in Triton's lowering), and each producer still waits its
own `empty[s]` before loading its own A rows:

    | who               | waits on                          | then                              |
    |-------------------|-----------------------------------|-----------------------------------|
    | producer (leader) | empty[s], pair_empty[s], ph ^ 1   | expect own bytes; A rows; B ⇒ both |
    | producer (other)  | empty[s], ph ^ 1                  | expect own bytes (A half + B); A   |
    | every consumer    | ready[s] (its own CTA's), ph      | wgmma ... arrive empty[s] and      |
    |                   |                                   | arrive pair_empty[s] (leader's)    |

Released by one CTA only, the leader would overwrite the partner's B while its wgmma reads
it (pingpong.schedule's `hopper_cluster_one_cta_release` finds that race). The barriers are
initialized, fenced and the pair synchronized (cluster barrier) before anyone may arrive on a
partner's barrier or multicast into its shared memory. These helpers are `@gluon.jit` functions so kernels call
them, and plain arithmetic so `pingpong.schedule` can call ``ring_index.fn(c, S)`` and check
the very protocol the kernel runs.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier
from triton.language.core import _aggregate as aggregate
from .batched import tile_layout, tile_shape


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


@gluon.constexpr_function
def first_piece_shape(box, BN2, B_KMAJOR, B1_BOXES):
    """Shape of a B buffer of the first column piece: the TMA box, or for a two-piece tile
    (BN2 > 0, config.column_pieces: P1 + P2) B1_BOXES = P1/P2 boxes side by side along N
    (dim 0 when K-major)."""
    if not BN2:
        return list(box)
    return [B1_BOXES * box[0], box[1]] if B_KMAJOR else [box[0], B1_BOXES * box[1]]


@gluon.jit
def allocate_barriers(COUNT: gl.constexpr):
    """COUNT mbarriers local to each CTA of the launch (one per CTA when num_ctas > 1: Triton
    wants a CTA layout on every shared allocation of a cluster kernel; with one CTA this is
    the plain [COUNT, 1] allocation)."""
    return gl.allocate_shared_memory(gl.int64, [COUNT, gl.num_ctas()], mbarrier.MBarrierLayout.multicta(gl.num_ctas()))


@aggregate
class Ring:
    """The stage ring: STAGES A and B buffers and their ready/empty mbarriers.

    A two-piece tile (BN2 > 0) has two B buffers per stage: b_bufs, the first B1_BOXES·BN2
    columns (P1), and b2_bufs, the last BN2 (P2; each a wgmma operand); with one piece
    b2_bufs is b_bufs.

    ready[s]: count 1; the producer's expect-tx arms it, the TMA bytes complete it.
    empty[s]: count = RELEASERS (consumer warpgroups that read each stage). RELEASERS = 0:
              a ring whose readers refill it themselves (the streaming kernel) — the empty
              barriers are then left uninitialized, because an mbarrier that is initialized
              and never used again is dead to Triton 3.6's shared-memory allocator, which
              places a later buffer over it without an `mbarrier.inval`; the TMA store then
              read the barrier's 8 bytes instead of the data (benchmarks/RESULTS.md).
    """

    a_bufs: gl.shared_memory_descriptor
    b_bufs: gl.shared_memory_descriptor
    b2_bufs: gl.shared_memory_descriptor
    ready: gl.shared_memory_descriptor
    empty: gl.shared_memory_descriptor
    pair_empty: gl.shared_memory_descriptor  # CLUSTER = 2: in the leader, both CTAs release; else = empty
    STAGES: gl.constexpr
    CLUSTER: gl.constexpr
    A_BOXES: gl.constexpr = 1  # A boxes per slot: 1, or a cluster's cooperative consumers' one each

    @gluon.jit
    def allocate(a_desc, b_desc, STAGES: gl.constexpr, RELEASERS: gl.constexpr, BN2: gl.constexpr = 0,
                 B_KMAJOR: gl.constexpr = True, CLUSTER: gl.constexpr = 1, B1_BOXES: gl.constexpr = 1):
        # a cluster's cooperative consumers each read their own A box: the consumer's rows of the
        # pair (BM/2 in each CTA), contiguous in A and split over the CTAs like the pair's rows
        # of a ping-pong tile; the consumers that release a slot are the ones that read it
        A_BOXES: gl.constexpr = RELEASERS if CLUSTER > 1 else 1
        a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES * A_BOXES] + tile_shape(a_desc), tile_layout(a_desc))
        gl.static_assert(BN2 == 0 or B1_BOXES > 1, "a two-piece tile's first piece is P1/P2 > 1 boxes")
        b_bufs = gl.allocate_shared_memory(b_desc.dtype,
                                           [STAGES] + first_piece_shape(tile_shape(b_desc), BN2, B_KMAJOR, B1_BOXES),
                                           tile_layout(b_desc))
        b2_bufs = b_bufs
        if BN2:
            b2_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + tile_shape(b_desc), tile_layout(b_desc))
        ready = allocate_barriers(STAGES)
        empty = allocate_barriers(STAGES)
        for s in gl.static_range(STAGES):
            mbarrier.init(ready.index(s), count=1)
            if RELEASERS > 0:
                mbarrier.init(empty.index(s), count=RELEASERS)
        pair_empty = empty
        if CLUSTER > 1:
            gl.static_assert(CLUSTER == 2 and RELEASERS > 0, "clusters are pairs of CTAs with consumer releases")
            pair_empty = mbarrier.allocate_mbarrier(batch=STAGES, two_ctas=True)
            for s in gl.static_range(STAGES):
                mbarrier.init(pair_empty.index(s), count=RELEASERS)  # per CTA: the leader's counts both
            fence_async_shared(cluster=True)
            gl.barrier(cluster=True)  # no CTA arrives on or multicasts into an uninitialized partner
        return Ring(a_bufs, b_bufs, b2_bufs, ready, empty, pair_empty, STAGES, CLUSTER, A_BOXES)

    @gluon.jit
    def a_box(self, s, i):
        """A box `i` (of A_BOXES) of slot `s`."""
        return self.a_bufs.index(s * self.A_BOXES + i)

    @gluon.jit
    def acquire_empty(self, counter):
        """Producer: wait until slot ring_index(counter) is free; returns the slot."""
        s = ring_index(counter, self.STAGES)
        mbarrier.wait(self.empty.index(s), ring_phase(counter, self.STAGES) ^ 1)
        if self.CLUSTER > 1:  # the leader: both CTAs released the slot its multicast refills
            mbarrier.wait(self.pair_empty.index(s), ring_phase(counter, self.STAGES) ^ 1)
        return s

    @gluon.jit
    def wait_ready(self, counter):
        """Consumer: wait until the TMA bytes of k-step `counter` have landed; returns the slot."""
        s = ring_index(counter, self.STAGES)
        mbarrier.wait(self.ready.index(s), ring_phase(counter, self.STAGES))
        return s

    @gluon.jit
    def release(self, counter):
        """Consumer: the wgmma reading k-step `counter` has completed; its slot may be refilled."""
        s = ring_index(counter, self.STAGES)
        mbarrier.arrive(self.empty.index(s))
        if self.CLUSTER > 1:  # and on the leader's pair barrier (remote from the partner)
            mbarrier.arrive(self.pair_empty.index(s))
