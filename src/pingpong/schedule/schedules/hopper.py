"""The Hopper GEMM protocols of our own kernel, built from the kernel's own helpers.

The two-counter PingPongSync protocol (two counters -> two mbarriers) and a producer/consumer
ring, as realized in ``pingpong.hopper``: the stage ring (``pipeline.py``: ``ring_index``,
``ring_phase``, ``first_counter``), the turn barriers (``phase_sync.py``: ``turn_phase``,
``other_consumer``) and the epilogue's sub-tile stores (``epilogue.py``: ``first_subtile``,
``staging_slot``, ``c_parity``, ``stores_left_in_flight``). Those are Gluon functions;
``.fn`` is their plain Python body, so the models below compute every slot, parity, counter
and wait count with the code the kernel runs.

    producer   for c in 0..T·K-1: wait empty[s] parity ring_phase(c)^1; expect ready[s] (A+B
               bytes); TMA A[s], B[s] (land on ready[s])
    ping-pong  consumer c, its tile j: wait turn[c] parity turn_phase(j, c); for k: wait
               ready[s] parity ring_phase; wgmma(A[s], B[s]); wgmma wait(1); arrive empty of
               k-step k-1; arrive turn[other_consumer(c)]; wgmma wait(0); arrive empty of the
               last k-step; epilogue
    cooperative  both consumers, every tile t (rows split): the same k loop from
               first_counter(t, K, 1, 0); empty[s] has count 2: a slot is free once BOTH
               consumers released it; epilogue
    epilogue   (per consumer, its staging buffers C[c][0..BUFS-1] and barrier c_ready[c]) for
               each sub-tile seq = first_subtile(tile, SUBTILES) + i, buffer
               staging_slot(seq): store_wait(stores_left_in_flight(BUFS)); [with C: expect
               c_ready[c]; TMA C -> buffer; wait c_ready[c] parity c_parity(seq); ld.shared]
               st.shared; TMA store of the buffer. At exit: store_wait(0)
    turn[c]    fresh, count 1: consumer 0's first wait is on parity 1 and passes at once
               (with the older one-argument turn_phase the kernel pre-armed turn[0] with an
               arrival; the model then adds it as consumer 0's first op)

Every TMA load of A and B carries its ring counter as data and every wgmma expects it, so a
consumer reading a slot that holds another k-step's tile is reported (stale read), not only
overlaps. The staging buffers carry no tags: every misuse of them in this protocol is an
overlap (a C load or st.shared while a TMA store reads, an ld.shared before C landed), and
untagged buffers keep the state space small.
"""

from __future__ import annotations

from ..errors import ScheduleError
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

    from pingpong.hopper.device.phase_sync import other_consumer, turn_phase
    from pingpong.hopper.device.pipeline import first_counter, ring_index, ring_phase

    tp = turn_phase.fn
    pre_armed = len(inspect.signature(tp).parameters) == 1
    turn = (lambda j, c: tp(j)) if pre_armed else tp
    return ring_index.fn, ring_phase.fn, first_counter.fn, turn, other_consumer.fn, pre_armed


C_BYTES = 64 * 128 * 2  # one bf16 C sub-tile (any nonzero byte count models the same protocol)
EPILOGUE_VARIANTS = ("store_wait_late", "c_parity_flipped", "no_c_wait")
#: each builder's broken variants (besides "correct"), which its docstring describes
PINGPONG_VARIANTS = ("early_release", "no_turn_wait", "no_store_wait") + EPILOGUE_VARIANTS
COOPERATIVE_VARIANTS = ("single_releaser", "one_consumer_releases", "early_release") + EPILOGUE_VARIANTS
CLUSTER_VARIANTS = ("one_cta_release",)


def _check_variant(variant, broken: tuple) -> None:
    """A ScheduleError naming `variant` unless it is "correct" or one of `broken` (an unknown
    one would build the correct protocol under another name)."""
    if variant != "correct" and variant not in broken:
        raise ScheduleError(f"variant must be one of {('correct',) + broken}, got {variant!r}")


def _epilogue(g, cons: int, tile_count: int, tile_name, subtiles: int, has_c: bool, variant: str):
    """Consumer `cons`'s epilogue of its `tile_count`-th tile (Epilogue.store_subtile per
    sub-tile), with the epilogue helpers of the kernel. Broken variants: "store_wait_late"
    (one store more left in flight: the buffer's last reader may still run), "c_parity_flipped"
    (waits c_ready on the other parity), "no_c_wait" (reads C without waiting c_ready)."""
    from pingpong.hopper.device.epilogue import c_parity, first_subtile, staging_slot, stores_left_in_flight

    bufs = 1 if subtiles == 1 else 2  # KernelConfig: one whole-tile buffer, else two
    window = stores_left_in_flight(bufs) + (variant == "store_wait_late")
    first = first_subtile.fn(tile_count, subtiles)
    for i in range(subtiles):
        seq = first + i
        buf = f"C[{cons}][{staging_slot.fn(seq, bufs)}]"
        g.where = f"tile {tile_name} epilogue" + (f" sub-tile {i}" if subtiles > 1 else "")
        g.wait("tma_store", window, critical="epilogue.py: store_wait(BUFS-1) before reusing staging"
               if seq >= bufs else "")
        if has_c:
            g.expect(f"c_ready[{cons}]", C_BYTES)
            g.tma_load(buf, f"c_ready[{cons}]", C_BYTES, label=f"TMA C → {buf}")
            if variant != "no_c_wait":
                parity = c_parity.fn(seq) ^ (variant == "c_parity_flipped")
                g.mwait(f"c_ready[{cons}]", parity, critical="epilogue.py: wait for C to land")
            g.read(buf, counter="ld.shared", label=f"ld.shared C from {buf}")
            g.wait("ld.shared", 0)
        g.write(buf, label=f"st.shared {buf}")
        g.store(buf, counter="tma_store", label=f"TMA store {buf}")


def _declare_epilogue(b, subtiles: int, has_c: bool):
    for cons in (0, 1):
        b.buffer(*(f"C[{cons}][{i}]" for i in range(1 if subtiles == 1 else 2)))
        if has_c:
            b.mbarrier(f"c_ready[{cons}]", 1)


def _declare_pingpong(b, stages: int, subtiles: int, has_c: bool):
    """The ping-pong kernel's shared state: the ring's A and B slots with their ready and empty
    barriers (one releaser), the epilogue's staging, the two turn barriers."""
    for s in range(stages):
        b.buffer(f"A[{s}]", f"B[{s}]")
        b.mbarrier(f"ready[{s}]", 1).mbarrier(f"empty[{s}]", 1)
    _declare_epilogue(b, subtiles, has_c)
    b.mbarrier("turn[0]", 1).mbarrier("turn[1]", 1)
    return b


def hopper_pingpong(k_iters: int = 4, stages: int = 3, tiles_per_consumer: int = 2, variant: str = "correct",
                    subtiles: int = 1, has_c: bool = False):
    """Our Hopper ping-pong kernel's protocol (pingpong.hopper.kernels.gemm.consumer,
    producer; PingPongSync realized with mbarriers). ``k_iters`` = k-steps per tile.

    variant: "correct"; "early_release" (a consumer arrives on empty[s] right after issuing
    the wgmma that reads slot s, before it completed); "no_turn_wait" (consumers skip the
    turn wait); "no_store_wait" (the epilogue overwrites its C staging buffer without
    tma.store_wait(0)); or one of EPILOGUE_VARIANTS. ``subtiles``: epilogue sub-tiles per
    tile (1: one whole-tile staging buffer per consumer); ``has_c``: β·C read through TMA.
    """
    _check_variant(variant, PINGPONG_VARIANTS)
    ring_index, ring_phase, first_counter, turn_phase, other_consumer, pre_armed = _helpers()
    name = "hopper_pingpong" if variant == "correct" else f"hopper_{variant}"
    b = _declare_pingpong(ScheduleBuilder(name, hopper_pingpong.__doc__), stages, subtiles, has_c)
    tiles = 2 * tiles_per_consumer
    total = tiles * k_iters

    def refilled(c):
        """The producer reuses k-step c's slot later (so releasing it early is a race)."""
        return c + stages < total

    _producer(b, ring_index, ring_phase, stages, [k_iters] * tiles)

    for cons in (0, 1):
        g, other = _consumer_group(b, cons, other_consumer, pre_armed)
        for j in range(tiles_per_consumer):
            first = first_counter(j, k_iters, 2, cons)
            g.where = f"tile {2 * j + cons}"
            if variant != "no_turn_wait":
                first_turn = cons == 0 and j == 0  # passes at once (pre-armed or fresh parity 1)
                g.mwait(f"turn[{cons}]", turn_phase(j, cons),
                        critical="" if first_turn else "phase_sync.py: wait for my turn")
            _k_loop(g, ring_index, ring_phase, stages, first, k_iters, f"tile {2 * j + cons}", refilled,
                    variant == "early_release")
            g.where = f"tile {2 * j + cons} end"
            g.arrive(f"turn[{other}]")
            g.wait("wgmma", 0, critical="kernels/gemm.py finish_mainloop: drain the last wgmma"
                   if refilled(first + k_iters - 1) else "")
            if variant != "early_release":
                g.arrive(f"empty[{ring_index(first + k_iters - 1, stages)}]")
            if variant == "no_store_wait":  # drop the epilogue's store waits altogether
                g.where = f"tile {2 * j + cons} epilogue"
                g.write(f"C[{cons}][0]", label=f"st.shared C[{cons}][0] (tile {2 * j + cons})")
                g.store(f"C[{cons}][0]", counter="tma_store", label=f"TMA store C[{cons}][0]")
            else:
                _epilogue(g, cons, j, 2 * j + cons, subtiles, has_c, variant)
        g.where = "drain"
        g.wait("tma_store", 0)
    return b.build()


COUNTED_VARIANTS = ("release_empty", "own_count")


def hopper_pingpong_counted(steps=(2, 0, 3, 1, 0, 2), stages: int = 2, variant: str = "correct"):
    """Our Hopper ping-pong kernel's protocol when the units' k-steps are device data (the
    ragged-K grouped kernel, pingpong.hopper.kernels.grouped_k: the consumer's counted loop,
    pingpong.hopper.kernels.gemm.consumer): unit t has steps[t] k-steps, 0 for an expert with no
    token. The producer loads every unit's k-steps in order; each consumer walks every unit,
    adding up all their k-steps to find its own units' first ring counter; on an empty unit it
    waits its turn, issues nothing, passes the turn and releases no slot (PlainKLoop.accumulate's
    MAY_BE_EMPTY); then the epilogue (one whole-tile buffer, zeros for an empty unit).

    variant: "correct"; "release_empty" (an empty unit still releases slot first-1, the previous
    unit's: a slot freed under the other consumer's wgmma); "own_count" (a consumer adds up only
    its own units' k-steps: its ring position is wrong).
    """
    _check_variant(variant, COUNTED_VARIANTS)
    ring_index, ring_phase, _, turn_phase, other_consumer, pre_armed = _helpers()
    name = "hopper_pingpong_counted" if variant == "correct" else f"hopper_counted_{variant}"
    b = _declare_pingpong(ScheduleBuilder(name, hopper_pingpong_counted.__doc__), stages, 1, False)
    total = sum(steps)
    _producer(b, ring_index, ring_phase, stages, steps, "unit")

    def refilled(c):
        """The producer reuses k-step c's slot later (a wait before its release is critical)."""
        return c + stages < total

    for cons in (0, 1):
        g, other = _consumer_group(b, cons, other_consumer, pre_armed)
        first = 0
        for t, n in enumerate(steps):
            mine = t % 2 == cons
            if mine:
                j = t // 2
                g.where = f"unit {t}"
                g.mwait(f"turn[{cons}]", turn_phase(j, cons),
                        critical="" if cons == 0 and j == 0 else "phase_sync.py: wait for my turn")
                _k_loop(g, ring_index, ring_phase, stages, first, n, f"unit {t}", refilled)
                g.where = f"unit {t} end"
                g.arrive(f"turn[{other}]")
                if n > 0 or (variant == "release_empty" and first > 0):
                    g.wait("wgmma", 0, critical="kernels/gemm.py finish_mainloop: drain the last wgmma"
                           if refilled(first + n - 1) else "")
                    g.arrive(f"empty[{ring_index(first + n - 1, stages)}]")
                _epilogue(g, cons, j, t, 1, False, "correct")
            if mine or variant != "own_count":
                first += n
        if len(steps) > cons:  # (a consumer with no unit stores nothing to drain)
            g.where = "drain"
            g.wait("tma_store", 0)
    return b.build()


FP8_VARIANTS = ("release_unwaited",)
S_BYTES = 4 * (64 + 128)  # a slot's block scales (sa box, sb box): fp32


def hopper_fp8_pingpong(steps=(3, 2, 0, 1), stages: int = 2, variant: str = "correct"):
    """Our Hopper FP8 kernels' ping-pong protocol (pingpong.hopper.kernels.fp8_gemm: Fp8KLoop's
    promoted, paired K loop, promoted_mainloop with PAIRED; the dense FP8 kernel's units have
    the same k-steps each, the K-grouped weight gradient's (fp8_grouped_k) are device data, 0
    for an expert with no token, counted by the consumers as in hopper_pingpong_counted). Each
    slot also holds its K block's scales (block-wise: the producer's TMA into S[s] on the same
    ready barrier), which the promotion reads from shared memory:

        per pair of k-steps c, c+1: wait ready[s]; wgmma(c) → part0; wait ready[s']; wgmma(c+1)
        → part1; wgmma wait(1); promote part0 (reads S[s]); release c; wait(0); promote part1
        (reads S[s']); release c+1;  an odd last k-step: issue, wait(0), promote, release
        the turn passes once the unit's K loop is done (promoted: after its last wait(0)); then
        the epilogue (one whole-tile buffer)

    variant: "correct"; "release_unwaited" (each pair's first slot released before the wait(1)
    that retires its wgmma: the producer's refill lands under it).
    """
    _check_variant(variant, FP8_VARIANTS)
    ring_index, ring_phase, _, turn_phase, other_consumer, pre_armed = _helpers()
    name = "hopper_fp8_pingpong" if variant == "correct" else f"hopper_fp8_{variant}"
    b = _declare_pingpong(ScheduleBuilder(name, hopper_fp8_pingpong.__doc__), stages, 1, False)
    for s in range(stages):
        b.buffer(f"S[{s}]")
    total = sum(steps)
    _producer(b, ring_index, ring_phase, stages, steps, "unit", scales=True)

    def refilled(c):
        return c + stages < total

    def issue(g, c):
        s = ring_index(c, stages)
        g.mwait(f"ready[{s}]", ring_phase(c, stages), critical="pipeline.py: consumer waits ready[s]")
        g.mma((f"A[{s}]", f"B[{s}]"), counter="wgmma", want=c, label=f"wgmma c={c} A[{s}],B[{s}]")

    def retire(g, c):
        s = ring_index(c, stages)
        g.read(f"S[{s}]", counter="ld.shared", want=c, label=f"promote c={c}: scales from S[{s}]")
        g.wait("ld.shared", 0)
        if variant != "release_unwaited":
            g.arrive(f"empty[{s}]")

    for cons in (0, 1):
        g, other = _consumer_group(b, cons, other_consumer, pre_armed)
        first = 0
        for t, n in enumerate(steps):
            if t % 2 == cons:
                j = t // 2
                g.where = f"unit {t}"
                g.mwait(f"turn[{cons}]", turn_phase(j, cons),
                        critical="" if cons == 0 and j == 0 else "phase_sync.py: wait for my turn")
                for k in range(0, n - 1, 2):
                    c0 = first + k
                    g.where = f"unit {t} k={k},{k + 1}"
                    issue(g, c0)
                    issue(g, c0 + 1)
                    if variant == "release_unwaited":
                        g.arrive(f"empty[{ring_index(c0, stages)}]", label=f"arrive empty (c={c0}, unwaited)")
                    g.wait("wgmma", 1, critical="fp8_gemm.py promoted_mainloop: wait(1) retires k's wgmma"
                           if refilled(c0) else "")
                    retire(g, c0)
                    g.wait("wgmma", 0, critical="fp8_gemm.py promoted_mainloop: wait(0) retires k+1's"
                           if refilled(c0 + 1) else "")
                    if variant == "release_unwaited":
                        g.arrive(f"empty[{ring_index(c0 + 1, stages)}]")
                    retire(g, c0 + 1)
                if n % 2:
                    c = first + n - 1
                    g.where = f"unit {t} k={n - 1}"
                    issue(g, c)
                    g.wait("wgmma", 0, critical="fp8_gemm.py step: wait(0) before the promotion" if refilled(c) else "")
                    if variant == "release_unwaited":
                        g.arrive(f"empty[{ring_index(c, stages)}]")
                    retire(g, c)
                g.where = f"unit {t} end"
                g.arrive(f"turn[{other}]")
                _epilogue(g, cons, j, t, 1, False, "correct")
            first += n
        if len(steps) > cons:
            g.where = "drain"
            g.wait("tma_store", 0)
    return b.build()


def _consumer_group(b, cons: int, other_consumer, pre_armed: bool):
    """Ping-pong consumer warpgroup `cons` and the other one's index; with the older turn_phase
    consumer 0 first arrives once on turn[0] (the kernel's pre-arming, `_helpers`)."""
    g = b.group(f"consumer{cons}", 4)
    if cons == 0 and pre_armed:
        g.where = "kernel"
        g.arrive("turn[0]", label="arrive turn[0] (kernel, once)")
    return g, other_consumer(cons)


def _k_loop(g, ring_index, ring_phase, stages: int, first: int, n: int, where: str, refilled, early_release=False,
            releases=True, cta: str = "", release=None):
    """A consumer's K loop (kernels/gemm.py mainloop) over k-steps first .. first+n-1: wait
    ready[s], wgmma, wait(1), release the previous k-step's slot ("early_release": each slot
    right after issuing its wgmma, before it completed; releases=False: never). A cluster's CTA
    `cta` has its own ring (ready{cta}[s], A{cta}[s], B{cta}[s]) and `release(c)` of its own."""
    for k in range(n):
        c = first + k
        s = ring_index(c, stages)
        g.where = f"{where} k={k}"
        g.mwait(f"ready{cta}[{s}]", ring_phase(c, stages), critical="pipeline.py: consumer waits ready[s]")
        g.mma((f"A{cta}[{s}]", f"B{cta}[{s}]"), counter="wgmma", want=c,
              label=f"wgmma c={c}" if cta else f"wgmma c={c} A[{s}],B[{s}]")
        if early_release:
            g.arrive(f"empty[{s}]", label=f"arrive empty[{s}] (too early)")
        g.wait("wgmma", 1, critical="mma.py: wgmma of k-step k-1 done before its release" if k and refilled(c - 1) else "")
        if k > 0 and not early_release and releases:
            if release is None:
                g.arrive(f"empty[{ring_index(c - 1, stages)}]")
            else:
                release(c - 1)


def _producer(b, ring_index, ring_phase, stages: int, steps, unit: str = "tile", scales: bool = False):
    """The TMA warp (kernel.producer): every k-step of every unit (steps[t] k-steps for unit t),
    in order, into the ring; `scales`: each slot's block scales too, into S[s] on the same ready
    barrier (the FP8 kernels' Fp8Loader)."""
    p = b.group("producer", 1)
    c = 0
    for t, n in enumerate(steps):
        for k in range(n):
            s, ph = ring_index(c, stages), ring_phase(c, stages)
            p.where = f"{unit} {t} k={k}"
            # the first pass (c < STAGES) waits on a fresh barrier's parity 1: passes at once
            p.mwait(f"empty[{s}]", ph ^ 1, critical="pipeline.py: producer waits empty[s]" if c >= stages else "")
            p.expect(f"ready[{s}]", A_BYTES + B_BYTES + (S_BYTES if scales else 0))
            p.tma_load(f"A[{s}]", f"ready[{s}]", A_BYTES, data=c, label=f"TMA A(c={c}) → A[{s}]")
            p.tma_load(f"B[{s}]", f"ready[{s}]", B_BYTES, data=c, label=f"TMA B(c={c}) → B[{s}]")
            if scales:
                p.tma_load(f"S[{s}]", f"ready[{s}]", S_BYTES, data=c, label=f"TMA scales(c={c}) → S[{s}]")
            c += 1


def hopper_cooperative(k_iters: int = 2, stages: int = 2, tiles: int = 2, variant: str = "correct",
                       subtiles: int = 2, has_c: bool = True):
    """Our Hopper cooperative kernel's protocol (pingpong.hopper.kernels.gemm.consumer,
    the default schedule): the producer of the ping-pong model; both consumer warpgroups
    consume every k-step (each its half of the rows) and BOTH release each slot, so empty[s]
    is initialized with count 2; then each runs the epilogue of its half-tile.

    variant: "correct"; "single_releaser" (empty[s] with count 1, as if one consumer read
    the slot: the first release frees it while the other consumer's wgmma still reads);
    "one_consumer_releases" (count 2, but consumer 1 never arrives); "early_release"; or one
    of EPILOGUE_VARIANTS. ``subtiles`` per half-tile (2: two staging buffers per consumer,
    store_wait(1)); ``has_c``: β·C read through TMA on c_ready's parity.
    """
    _check_variant(variant, COOPERATIVE_VARIANTS)
    ring_index, ring_phase, first_counter, _, _, _ = _helpers()
    name = "hopper_cooperative" if variant == "correct" else f"hopper_coop_{variant}"
    b = ScheduleBuilder(name, hopper_cooperative.__doc__)
    releasers = 1 if variant == "single_releaser" else 2  # kernels/gemm.py: Ring.allocate(..., 2) when cooperative
    for s in range(stages):
        b.buffer(f"A[{s}]", f"B[{s}]")
        b.mbarrier(f"ready[{s}]", 1).mbarrier(f"empty[{s}]", releasers)
    _declare_epilogue(b, subtiles, has_c)
    total = tiles * k_iters
    _producer(b, ring_index, ring_phase, stages, [k_iters] * tiles)

    def refilled(c):
        return c + stages < total

    for cons in (0, 1):
        g = b.group(f"consumer{cons}", 4)
        releases = not (variant == "one_consumer_releases" and cons == 1)
        for t in range(tiles):
            first = first_counter(t, k_iters, 1, 0)
            _k_loop(g, ring_index, ring_phase, stages, first, k_iters, f"tile {t}", refilled,
                    variant == "early_release", releases)
            g.where = f"tile {t} end"
            g.wait("wgmma", 0, critical="kernels/gemm.py finish_mainloop: drain the last wgmma"
                   if refilled(first + k_iters - 1) else "")
            if variant != "early_release" and releases:
                g.arrive(f"empty[{ring_index(first + k_iters - 1, stages)}]")
            _epilogue(g, cons, t, t, subtiles, has_c, variant)
        g.where = "drain"
        g.wait("tma_store", 0)
    return b.build()


def hopper_cluster(k_iters: int = 2, stages: int = 2, tiles_per_consumer: int = 1, variant: str = "correct",
                   schedule: str = "pingpong"):
    """Our Hopper ping-pong kernel run by a 2-CTA cluster with B multicast (KernelConfig
    cluster_m=2; pingpong.hopper.device.pipeline.Ring with CLUSTER=2, TileLoader multicast).

    The pair takes vertically adjacent tiles (same columns): each CTA r loads its own A rows
    into A{r}[s]; the leader CTA 0 loads B once and the multicast writes it into B0[s] AND
    B1[s], completing tx bytes on ready0[s] and ready1[s]. Each CTA's producer expects its own
    bytes (its A + the whole B) on its own ready[s]. A slot is released on two barriers:
    empty{r}[s] (local, guards the CTA's own A) and pair_empty[s] (lives in CTA 0, count 2 per
    releaser: both CTAs' consumers arrive on it, CTA 1's remotely at cluster scope); only the
    leader waits on pair_empty before the multicast, since only it writes into the partner.
    The epilogue is the single-CTA one (no shared state across the pair) and left out here.

    variant: "correct"; "one_cta_release" (pair_empty counts only the leader's own
    consumers: its multicast overwrites B1[s] while CTA 1's wgmma still reads it).
    schedule "cooperative": both consumers of each CTA read every k-step (consumer c its own
    A box A{r}.{c}[s]) and both release it: empty{r}[s] count 2, pair_empty[s] count 4; the
    CTA's tiles are 2·tiles_per_consumer, taken by both consumers.
    """
    _check_variant(variant, CLUSTER_VARIANTS)
    if schedule not in ("pingpong", "cooperative"):
        raise ScheduleError(f"schedule must be 'pingpong' or 'cooperative', got {schedule!r}")
    ring_index, ring_phase, first_counter, turn_phase, other_consumer, _ = _helpers()
    coop = schedule == "cooperative"
    name = ("hopper_cluster" if not coop else "hopper_coop_cluster") + ("" if variant == "correct" else f"_{variant}")
    b = ScheduleBuilder(name, hopper_cluster.__doc__)
    ctas = 2
    releasers = 2 if coop else 1  # config.SCHEDULE_FACTS
    a_boxes = releasers  # pipeline.Ring.allocate: a cooperative pair's consumers read one A box each
    pair_count = releasers * (1 if variant == "one_cta_release" else ctas)  # init(pair_empty, RELEASERS) per CTA
    a_names = lambda r, s: [f"A{r}[{s}]"] if a_boxes == 1 else [f"A{r}.{c}[{s}]" for c in range(a_boxes)]  # noqa: E731
    for s in range(stages):
        b.mbarrier(f"pair_empty[{s}]", pair_count)
        for r in range(ctas):
            b.buffer(*a_names(r, s), f"B{r}[{s}]")
            b.mbarrier(f"ready{r}[{s}]", 1).mbarrier(f"empty{r}[{s}]", releasers)
    for r in range(ctas * (not coop)):
        b.mbarrier(f"turn{r}[0]", 1).mbarrier(f"turn{r}[1]", 1)
    total = 2 * tiles_per_consumer * k_iters

    def refilled(c):
        return c + stages < total

    for r in range(ctas):  # the producers (TileLoader.load): the leader multicasts B
        p = b.group(f"producer{r}", 1)
        for c in range(total):
            s, ph = ring_index(c, stages), ring_phase(c, stages)
            p.where = f"cta {r} tile {c // k_iters} k={c % k_iters}"
            first_pass = c < stages
            # the leader's own empty wait is implied by pair_empty (which counts its consumers
            # too); the kernel runs the same code in both CTAs, so the leader waits both
            p.mwait(f"empty{r}[{s}]", ph ^ 1,
                    critical="" if first_pass or r == 0 else "pipeline.py: producer waits empty[s]")
            if r == 0:
                p.mwait(f"pair_empty[{s}]", ph ^ 1,
                        critical="" if first_pass else "pipeline.py: the leader waits pair_empty[s] before the multicast")
            p.expect(f"ready{r}[{s}]", A_BYTES // 2 + B_BYTES)
            for a in a_names(r, s):
                p.tma_load(a, f"ready{r}[{s}]", A_BYTES // 2 // a_boxes, data=c, label=f"TMA A(c={c}) → {a}")
            if r == 0:
                for dst in range(ctas):
                    p.tma_load(f"B{dst}[{s}]", f"ready{dst}[{s}]", B_BYTES, data=c,
                               label=f"TMA B(c={c}) multicast → B{dst}[{s}]")
    for r in range(ctas):
        for cons in (0, 1):
            g = b.group(f"cta{r}.consumer{cons}", 4)
            if coop:
                _cluster_coop_consumer(g, r, cons, variant, ring_index, ring_phase, first_counter, stages, total,
                                       2 * tiles_per_consumer, k_iters, a_names(r, 0)[cons][:-3])
                continue
            other = other_consumer(cons)
            for j in range(tiles_per_consumer):
                first = first_counter(j, k_iters, 2, cons)
                g.where = f"cta {r} tile {2 * j + cons}"
                g.mwait(f"turn{r}[{cons}]", turn_phase(j, cons),
                        critical="" if cons == 0 and j == 0 else "phase_sync.py: wait for my turn")

                def release(c):
                    s = ring_index(c, stages)
                    g.arrive(f"empty{r}[{s}]")
                    if r == 0 or variant != "one_cta_release":
                        g.arrive(f"pair_empty[{s}]", label=f"arrive pair_empty[{s}]" + (" (remote)" if r else ""))

                _k_loop(g, ring_index, ring_phase, stages, first, k_iters, f"cta {r} tile {2 * j + cons}", refilled,
                        cta=str(r), release=release)
                g.where = f"cta {r} tile {2 * j + cons} end"
                g.arrive(f"turn{r}[{other}]")
                g.wait("wgmma", 0, critical="kernels/gemm.py finish_mainloop: drain the last wgmma"
                       if refilled(first + k_iters - 1) else "")
                release(first + k_iters - 1)
    return b.build()


def _cluster_coop_consumer(g, r, cons, variant, ring_index, ring_phase, first_counter, stages, total, tiles, k_iters,
                           a_name):
    """A cooperative consumer of CTA r in the cluster model: every k-step of every tile, on its
    own A box `a_name`[s] and the CTA's B, released on empty{r} and the leader's pair_empty."""
    for t in range(tiles):
        first = first_counter(t, k_iters, 1, 0)
        for k in range(k_iters + 1):
            if k < k_iters:
                c = first + k
                s = ring_index(c, stages)
                g.where = f"cta {r} tile {t} k={k}"
                g.mwait(f"ready{r}[{s}]", ring_phase(c, stages), critical="pipeline.py: consumer waits ready[s]")
                g.mma((f"{a_name}[{s}]", f"B{r}[{s}]"), counter="wgmma", want=c, label=f"wgmma c={c}")
                g.wait("wgmma", 1, critical="mma.py: wgmma of k-step k-1 done before its release"
                       if k and c - 1 + stages < total else "")
            else:
                g.where = f"cta {r} tile {t} end"
                g.wait("wgmma", 0, critical="kernels/gemm.py finish_mainloop: drain the last wgmma"
                       if first + k_iters - 1 + stages < total else "")
            if k > 0:
                s = ring_index(first + k - 1, stages)
                g.arrive(f"empty{r}[{s}]")
                if r == 0 or variant != "one_cta_release":
                    g.arrive(f"pair_empty[{s}]", label=f"arrive pair_empty[{s}]" + (" (remote)" if r else ""))
