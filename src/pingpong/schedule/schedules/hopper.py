"""The Hopper ping-pong protocol of our own kernel, built from the kernel's own helpers.

The two-counter PingPongSync protocol (two counters -> two mbarriers) and a producer/consumer
ring, as realized in ``pingpong.hopper``: the stage ring (``pipeline.py``: ``ring_index``,
``ring_phase``, ``first_counter``) and the turn barriers (``phase_sync.py``: ``turn_phase``,
``other_consumer``). Those are ``@gluon.jit`` functions; ``.fn`` is their plain Python body,
so the model below computes every slot, parity and counter with the code the kernel runs.

    producer   for c in 0..T·K-1: wait empty[s] parity ring_phase(c)^1; expect ready[s] (A+B
               bytes); TMA A[s], B[s] (land on ready[s])
    consumer c for j: wait turn[c] parity turn_phase(j, c); for k: wait ready[s] parity
               ring_phase; wgmma(A[s], B[s]); wgmma wait(1); arrive empty of k-step k-1;
               arrive turn[other_consumer(c)]; wgmma wait(0); arrive empty of the last k-step;
               epilogue: store_wait(0); write C[c] staging; TMA store C[c]
    turn[c]    fresh, count 1: consumer 0's first wait is on parity 1 and passes at once
               (with the older one-argument turn_phase the kernel pre-armed turn[0] with an
               arrival; the model then adds it as consumer 0's first op)

Every TMA load carries its ring counter as data and every wgmma expects it, so a consumer
reading a slot that holds another k-step's tile is reported (stale read), not only overlaps.
"""

from __future__ import annotations

from ..model import ScheduleBuilder

A_BYTES = 128 * 64 * 2  # BM × BK bf16
B_BYTES = 256 * 64 * 2  # BN × BK bf16


def _helpers():
    """The kernel's helpers as plain functions, and whether turn[0] is pre-armed.

    phase_sync.turn_phase(local_tile, consumer) keeps the initial state in the parity (a
    fresh mbarrier's parity-1 wait passes: consumer 0 goes first, no arrival needed); the
    earlier turn_phase(local_tile) needed the kernel to arrive once on turn[0]. Both are
    modelled, following the signature of the helper the kernel has now.
    """
    import inspect

    from pingpong.hopper.phase_sync import other_consumer, turn_phase
    from pingpong.hopper.pipeline import first_counter, ring_index, ring_phase

    tp = turn_phase.fn
    pre_armed = len(inspect.signature(tp).parameters) == 1
    turn = (lambda j, c: tp(j)) if pre_armed else tp
    return ring_index.fn, ring_phase.fn, first_counter.fn, turn, other_consumer.fn, pre_armed


def hopper_pingpong(k_iters: int = 4, stages: int = 3, tiles_per_consumer: int = 2, variant: str = "correct"):
    """Our Hopper ping-pong kernel's protocol (pingpong.hopper.kernel.pingpong_consumer,
    producer; PingPongSync realized with mbarriers). ``k_iters`` = k-steps per tile.

    variant: "correct"; "early_release" (a consumer arrives on empty[s] right after issuing
    the wgmma that reads slot s, before it completed); "no_turn_wait" (consumers skip the
    turn wait); "no_store_wait" (the epilogue overwrites its C staging buffer without
    tma.store_wait(0)).
    """
    ring_index, ring_phase, first_counter, turn_phase, other_consumer, pre_armed = _helpers()
    name = "hopper_pingpong" if variant == "correct" else f"hopper_{variant}"
    b = ScheduleBuilder(name, hopper_pingpong.__doc__)
    for s in range(stages):
        b.buffer(f"A[{s}]", f"B[{s}]")
        b.mbarrier(f"ready[{s}]", 1).mbarrier(f"empty[{s}]", 1)
    b.buffer("C[0]", "C[1]")
    b.mbarrier("turn[0]", 1).mbarrier("turn[1]", 1)
    tiles = 2 * tiles_per_consumer
    total = tiles * k_iters

    def refilled(c):
        """The producer reuses k-step c's slot later (so releasing it early is a race)."""
        return c + stages < total

    p = b.group("producer", 1)
    for c in range(total):
        s, ph = ring_index(c, stages), ring_phase(c, stages)
        p.where = f"tile {c // k_iters} k={c % k_iters}"
        # the first pass (c < STAGES) waits on a fresh barrier's parity 1: passes at once
        p.mwait(f"empty[{s}]", ph ^ 1, critical="pipeline.py: producer waits empty[s]" if c >= stages else "")
        p.expect(f"ready[{s}]", A_BYTES + B_BYTES)
        p.tma_load(f"A[{s}]", f"ready[{s}]", A_BYTES, data=c, label=f"TMA A(c={c}) → A[{s}]")
        p.tma_load(f"B[{s}]", f"ready[{s}]", B_BYTES, data=c, label=f"TMA B(c={c}) → B[{s}]")

    for cons in (0, 1):
        g = b.group(f"consumer{cons}", 4)
        other = other_consumer(cons)
        if cons == 0 and pre_armed:
            g.where = "kernel"
            g.arrive("turn[0]", label="arrive turn[0] (kernel, once)")
        for j in range(tiles_per_consumer):
            first = first_counter(j, k_iters, 2, cons)
            g.where = f"tile {2 * j + cons}"
            if variant != "no_turn_wait":
                first_turn = cons == 0 and j == 0  # passes at once (pre-armed or fresh parity 1)
                g.mwait(f"turn[{cons}]", turn_phase(j, cons),
                        critical="" if first_turn else "phase_sync.py: wait for my turn")
            for k in range(k_iters):
                c = first + k
                s = ring_index(c, stages)
                g.where = f"tile {2 * j + cons} k={k}"
                g.mwait(f"ready[{s}]", ring_phase(c, stages), critical="pipeline.py: consumer waits ready[s]")
                g.mma((f"A[{s}]", f"B[{s}]"), counter="wgmma", want=c, label=f"wgmma c={c} A[{s}],B[{s}]")
                if variant == "early_release":
                    g.arrive(f"empty[{s}]", label=f"arrive empty[{s}] (too early)")
                g.wait("wgmma", 1, critical="mma.py: wgmma of k-step k-1 done before its release" if k and refilled(c - 1) else "")
                if k > 0 and variant != "early_release":
                    g.arrive(f"empty[{ring_index(c - 1, stages)}]")
            g.where = f"tile {2 * j + cons} end"
            g.arrive(f"turn[{other}]")
            g.wait("wgmma", 0, critical="kernel.py finish_mainloop: drain the last wgmma"
                   if refilled(first + k_iters - 1) else "")
            if variant != "early_release":
                g.arrive(f"empty[{ring_index(first + k_iters - 1, stages)}]")
            g.where = f"tile {2 * j + cons} epilogue"
            if variant != "no_store_wait":
                g.wait("tma_store", 0, critical="epilogue.py: store_wait(0) before reusing staging" if j else "")
            g.write(f"C[{cons}]", label=f"st.shared C[{cons}] (tile {2 * j + cons})")
            g.store(f"C[{cons}]", counter="tma_store", label=f"TMA store C[{cons}]")
        g.where = "drain"
        g.wait("tma_store", 0)
    return b.build()
