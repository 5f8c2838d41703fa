"""pingpong.schedule: verdicts of the shipped schedules, their traces, the semantics."""

import inspect

import pytest

from pingpong.hopper.device import epilogue, loader, pipeline, scheduler
from pingpong.hopper.kernels import fp8_gemm as fp8_kernel, gemm as kernel
from pingpong.hopper.host.config import SCHEDULE_FACTS
from pingpong.schedule import ScheduleBuilder, check
from pingpong.schedule.schedules import SHIPPED, amd, as_expected, build, hopper
from pingpong.schedule.timeline import report_violation, timeline


@pytest.mark.parametrize("name", [n for n, e in SHIPPED.items() if e.claim])
def test_shipped_verdict_matches_the_expected_one(name):
    e = SHIPPED[name]
    r = check(build(name, 4), stop_after=5)
    assert as_expected(e.claim, r.verdict), r.violations[:1]
    if e.claim == "SAFE":
        assert not r.truncated and r.sample  # complete exploration, a complete execution exists


def test_optimized_epilogue_race_is_the_vmcnt1_read_of_As11():
    r = check(amd.optimized(4))
    v = r.first("race")
    assert "As[1][1]" in v.message
    s = r.schedule
    (a, i), (b, j) = v.ops
    assert s.groups[a].ops[i].where.startswith("epi2")  # read in epilogue block 2 ...
    assert s.groups[b].ops[j].where.startswith("epi1")  # ... of the load_a[1,1] of block 1
    # the trace passes the vmcnt(1) of block 2 just before the read
    waits = [s.groups[ev.agent].ops[ev.index] for ev in v.trace if s.groups[ev.agent].ops[ev.index].kind == "wait"]
    assert any(w.counter == "vmcnt" and w.value == 1 for w in waits)
    assert check(amd.optimized(4, epilogue=(0, 0))).verdict == "SAFE"


def test_epilogue_vmcnt0_fix_checked_for_every_k():
    for k in (1, 2, 3):
        assert check(amd.optimized(k, epilogue=(2, 1))).verdict == "RACE"
        assert check(amd.optimized(k, epilogue=(0, 0))).verdict == "SAFE"


def test_pingpong_sync_counter_trace_k256_bk64():
    r = check(amd.pingpong_sync(2, prologue_wait=True))  # K=256, BK=64: 2 iterations
    assert r.final_atomics == {(("counter_a", 32), ("counter_b", 32))}
    trace = r.counter_trace()
    assert [v for _, g, a, v in trace if a == "counter_a"] == [4, 8, 12, 16, 20, 24, 28, 32]
    assert [v for _, g, a, v in trace if a == "counter_b"] == [4, 8, 12, 16, 20, 24, 28, 32]
    epi = r.schedule.groups[0].ops[-1]
    assert (epi.kind, epi.sync, epi.value) == ("await", "counter_b", 32)


def test_pingpong_sync_as_written_races_in_the_prologue():
    r = check(amd.pingpong_sync(2))
    v = r.first("race")
    (a, i), (b, j) = v.ops
    assert r.schedule.groups[b].ops[j].where == "prologue" and r.schedule.groups[b].ops[j].kind == "load"
    assert r.schedule.groups[a].ops[i].kind == "read"


def test_vector_add_vmcnt4_race_and_minimal_trace():
    assert check(amd.vector_add(4)).verdict == "SAFE"
    r = check(amd.vector_add(4, loop_vmcnt=4))
    v = r.first("race")
    assert "buf1.B" in v.message
    # 4 prologue loads, vmcnt(2), read, lgkmcnt(0), 2 prefetches, add, store, vmcnt(4), read
    assert len(v.trace) == 13 and v.trace[-1].index == 12


def test_hipkittens_transcription_reads_the_step7_prefetch_in_flight():
    r = check(amd.hipkittens(2))
    v = r.first("race")
    (a, i), (b, j) = v.ops
    assert "Bs[1][0]" in v.message and a == b  # within one wave: the FIFO still holds the load
    assert r.schedule.groups[a].ops[i].where.endswith("step7")


def test_hopper_protocol_safe_and_broken_variants():
    assert check(hopper.hopper_pingpong(4)).verdict == "SAFE"
    r = check(hopper.hopper_pingpong(4, variant="early_release"), stop_after=3)
    v = r.first("race")
    (a, _), (b, _) = v.ops
    assert {r.schedule.groups[a].name, r.schedule.groups[b].name} == {"producer", "consumer0"}
    r = check(hopper.hopper_pingpong(2, variant="no_turn_wait"), stop_after=3)
    assert r.first("stale read") is not None  # parity aliasing: a fresh ready[s] passes parity 1
    r = check(hopper.hopper_pingpong(4, variant="no_store_wait"), stop_after=3)
    assert "C[" in r.first("race").message


def test_hopper_model_uses_the_kernel_helpers(monkeypatch):
    from pingpong.hopper.device import pipeline

    monkeypatch.setattr(pipeline.ring_phase, "fn", lambda c, S: 0)  # a wrong parity helper
    r = check(hopper.hopper_pingpong(2), stop_after=1)
    assert r.violations, "the model must follow the kernel's ring_phase"


def test_hopper_model_uses_the_turn_helper(monkeypatch):
    from pingpong.hopper.device import phase_sync

    monkeypatch.setattr(phase_sync.turn_phase, "fn", lambda j, c: 0)  # both wait for phase 0
    r = check(hopper.hopper_pingpong(2), stop_after=1)
    assert r.verdict == "DEADLOCK"


@pytest.mark.parametrize("name", ["optimized", "pingpong_sync", "vector_add_vmcnt4", "hopper_early_release"])
def test_reduction_keeps_verdicts_and_trace_lengths(name):
    s = build(name, 2)
    a, b = check(s, stop_after=3), check(s, reduce=False, stop_after=3)
    assert a.verdict == b.verdict
    assert len(a.violations[0].trace) == len(b.violations[0].trace)


# ----------------------------------------------------------------------------- semantics


def two_groups():
    b = ScheduleBuilder("t")
    b.buffer("X")
    return b, b.group("G0"), b.group("G1")


def test_conditional_barrier_shifts_one_group_by_a_phase():
    def sched(stagger):
        b, g0, g1 = two_groups()
        if stagger:
            g0.barrier(label="stagger (G0 only)")
        g0.barrier().load("X").wait("vmcnt", 0).barrier()
        g1.barrier().barrier().read("X").wait("lgkmcnt", 0)
        return b.build()

    assert check(sched(False)).verdict == "SAFE"
    r = check(sched(True))  # G1's 2nd barrier now meets G0's 2nd: before G0's load, not after
    assert r.verdict == "RACE" and "X" in r.first().message
    assert "──B[1]──●" in report_violation(r.schedule, r.first())


def test_async_write_completes_only_when_waited_past():
    b, g0, g1 = two_groups()
    g0.load("X", n=2).load("X").wait("vmcnt", 1).barrier()  # leaves the 2nd load in flight
    g1.barrier().read("X").wait("lgkmcnt", 0)
    assert check(b.build()).verdict == "RACE"
    b, g0, g1 = two_groups()
    g0.load("X", n=2).load("X").wait("vmcnt", 0).barrier()
    g1.barrier().read("X").wait("lgkmcnt", 0)
    assert check(b.build()).verdict == "SAFE"


def test_write_while_other_group_still_reads():
    b, g0, g1 = two_groups()
    g1.read("X").barrier().wait("lgkmcnt", 0)
    g0.barrier().load("X").wait("vmcnt", 0)
    assert check(b.build()).verdict == "RACE"


def test_deadlock_and_counter_misuse():
    b, g0, g1 = two_groups()
    b.atomic("a").atomic("c")
    g0.await_("a", 1).signal("c")
    g1.await_("c", 1).signal("a")
    r = check(b.build())
    assert r.verdict == "DEADLOCK" and len(r.first().blocked) == 2
    b, g0, g1 = two_groups()
    b.atomic("a")
    g0.signal("a")
    g1.await_("a", 5)  # G0 has 1 wave: the counter never exceeds 1
    r = check(b.build())
    assert r.verdict == "COUNTER MISUSE" and "add up to 1" in r.first().message


def test_mbarrier_phases_and_tx():
    b = ScheduleBuilder("mb")
    b.buffer("S").mbarrier("full", 1).mbarrier("empty", 1)
    p, c = b.group("P"), b.group("C")
    p.mwait("empty", 1).expect("full", 64).tma_load("S", "full", 64, data=0)
    p.mwait("empty", 0).expect("full", 64).tma_load("S", "full", 64, data=1)
    c.mwait("full", 0).mma("S", counter="wgmma", want=0).wait("wgmma", 0).arrive("empty")
    c.mwait("full", 1).mma("S", counter="wgmma", want=1).wait("wgmma", 0).arrive("empty")
    assert check(b.build()).verdict == "SAFE"
    # half the bytes never land: the phase cannot complete
    b2 = ScheduleBuilder("mb2")
    b2.buffer("S").mbarrier("full", 1)
    b2.group("P").expect("full", 128).tma_load("S", "full", 64)
    b2.group("C").mwait("full", 0)
    assert check(b2.build()).verdict == "DEADLOCK"


def test_timeline_shows_barrier_numbers_and_the_race():
    r = check(amd.vector_add(4, loop_vmcnt=4))
    text = report_violation(r.schedule, r.first())
    assert "✗ LDS→ buf1.A,buf1.B" in text and "buf1.B →LDS" in text
    r = check(amd.simplified(1))
    t = timeline(r.schedule, r.sample)
    assert "──B[0]──●" in t and "──B[1]──●" in t and "WG0" in t.splitlines()[0]


# ----------------------------------------------------------------------------- schedule models
# The schedule checker checks what runs by default: the cooperative schedule (empty count 2)
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("steps", [(0,), (0, 0, 1, 0), (1, 0, 0, 2, 0), (3, 3), (2, 0, 2, 0, 2, 0), (0, 3, 0, 0, 1)])
def test_counted_pingpong_is_safe_with_empty_units(steps, stages):
    """The ragged-K kernel's ping-pong (device-data k-steps, consumers counting every unit's):
    safe with empty units anywhere, first, last, in a row, and a consumer with none."""
    assert check(hopper.hopper_pingpong_counted(steps, stages)).verdict == "SAFE"


@pytest.mark.parametrize("variant, verdicts, needle", [("release_empty", {"RACE"}, "A["),
                                                       ("own_count", {"STALE READ", "DEADLOCK"}, "")])
def test_counted_mutants_are_flagged(variant, verdicts, needle):
    r = check(hopper.hopper_pingpong_counted(variant=variant), stop_after=1)
    assert r.verdict in verdicts, (r.verdict, r.violations[:1])
    assert needle in r.first().message


def test_the_counted_model_follows_the_kernel_source():
    """The counted model's premises, read off the kernel: each consumer adds up every unit's
    k-steps (its own and the other's) and a possibly empty unit releases its last slot only when
    it has one."""
    consumer = inspect.getsource(kernel.consumer.fn)
    count = consumer[consumer.index("first = 0"):consumer.index("else:", consumer.index("first = 0"))]
    indent = {line.strip(): len(line) - len(line.lstrip()) for line in count.splitlines() if line.strip()}
    # every unit's k-steps counted, after the unit and outside the test of whose it is
    assert indent["steps = sched.unit_steps(t)"] == indent["if t % EVERY == FIRST:"] == indent["first += steps"]
    assert count.index("first += steps") > count.index("if t % EVERY == FIRST:")
    accumulate = inspect.getsource(kernel.PlainKLoop.accumulate.fn)
    assert "if steps > 0:" in accumulate and "sync.pass_turn(CONSUMER)" in accumulate


@pytest.mark.parametrize("steps", [(1,), (2,), (3, 0, 2), (0, 0, 1), (2, 1, 0, 3), (4, 4)])
def test_fp8_pingpong_is_safe(steps):
    """The FP8 kernels' ping-pong (promoted, paired K loop; block scales read from each slot;
    counted units, some empty): safe with pairs, odd last k-steps and empty units."""
    assert check(hopper.hopper_fp8_pingpong(steps, 2)).verdict == "SAFE"


def test_fp8_release_unwaited_is_flagged():
    r = check(hopper.hopper_fp8_pingpong(variant="release_unwaited"), stop_after=1)
    assert r.verdict == "RACE" and "A[" in r.first().message, (r.verdict, r.violations[:1])


def test_the_fp8_model_follows_the_kernel_source():
    """The FP8 model's premises, read off the kernel: the paired loop issues k and k+1, retires
    k after wait(1) and k+1 after wait(0); a retire promotes (reading the slot's scales) before
    it releases the slot; an odd last k-step waits(0) first; the turn passes after the promoted
    loop; and a counted unit's k-steps are the consumer's."""
    loop = inspect.getsource(fp8_kernel.promoted_mainloop.fn)
    order = ["p0 = issue(ring, first + k, p0", "p1 = issue(ring, first + k + 1, p1",
             "p0, p1 = warpgroup_mma_wait(1, (p0, p1))", "acc = retire(ring, scales, acc, p0, first + k,",
             "p1 = warpgroup_mma_wait(0, (p1,))", "acc = retire(ring, scales, acc, p1, first + k + 1,"]
    at = [loop.index(line) for line in order]
    assert at == sorted(at), order
    retire = inspect.getsource(fp8_kernel.retire.fn)
    assert retire.index("scales.promote(") < retire.index("ring.release(counter)")
    step = inspect.getsource(fp8_kernel.step.fn)
    assert step.index("warpgroup_mma_wait(0, (part,))") < step.index("retire(")
    run = inspect.getsource(fp8_kernel.Fp8KLoop.run.fn)
    assert run.index("promoted_mainloop(") < run.index("sync.pass_turn(CONSUMER)")
    assert "return batch, off_m, off_n, first, steps" in inspect.getsource(fp8_kernel.Fp8KLoop.counted.fn)


# and the real epilogue (store_wait(BUFS-1), C read through TMA on c_ready's parity), built from
# the kernel's own helpers, with broken variants the checker must flag.

REPORTED = {"RACE", "STALE READ", "DEADLOCK", "COUNTER MISUSE"}


@pytest.mark.parametrize("kw", [dict(), dict(subtiles=1), dict(has_c=False, stages=3)])
def test_cooperative_is_safe(kw):
    assert check(hopper.hopper_cooperative(**kw)).verdict == "SAFE"


def test_cooperative_ring_has_two_releasers():
    s = hopper.hopper_cooperative()
    assert {n: c for n, c in s.mbarriers.items() if n.startswith("empty")} == {"empty[0]": 2, "empty[1]": 2}
    arrivals = [op.sync for g in s.groups if g.name.startswith("consumer") for op in g.ops if op.kind == "arrive"]
    assert arrivals.count("empty[0]") == 2 * 2  # both consumers, both passes over slot 0 (4 k-steps, 2 slots)


@pytest.mark.parametrize("kw", [dict(has_c=True, k_iters=2, stages=2), dict(has_c=True, subtiles=2, k_iters=1, stages=2)])
def test_pingpong_with_the_real_epilogue_is_safe(kw):
    assert check(hopper.hopper_pingpong(**kw)).verdict == "SAFE"


@pytest.mark.parametrize("variant, verdicts, needle", [
    ("single_releaser", {"RACE", "STALE READ"}, "A["),
    ("one_consumer_releases", {"DEADLOCK"}, "empty["),
    ("early_release", {"RACE", "STALE READ"}, "A["),
    ("store_wait_late", {"RACE"}, "TMA store C["),
    ("c_parity_flipped", {"RACE", "STALE READ"}, "ld.shared C"),
    ("no_c_wait", {"RACE"}, "ld.shared C"),
])
def test_cooperative_mutants_are_flagged(variant, verdicts, needle):
    r = check(hopper.hopper_cooperative(variant=variant), stop_after=1)
    assert r.verdict in verdicts, (r.verdict, r.violations[:1])
    assert needle in r.first().message


@pytest.mark.parametrize("variant", ["store_wait_late", "c_parity_flipped", "no_c_wait"])
def test_pingpong_epilogue_mutants_are_flagged(variant):
    r = check(hopper.hopper_pingpong(1, stages=2, variant=variant, subtiles=2, has_c=True), stop_after=1)
    assert r.verdict in REPORTED, r.verdict


def test_store_wait_late_needs_buffer_reuse():
    """With one whole-tile buffer, store_wait(1) leaves the previous tile's store in flight while
    the next tile rewrites the same buffer: flagged too."""
    r = check(hopper.hopper_cooperative(variant="store_wait_late", subtiles=1), stop_after=1)
    assert r.verdict == "RACE"


@pytest.mark.parametrize("helper, fake", [
    (epilogue.c_parity, lambda seq: 0),                 # every C load waited on parity 0
    (epilogue.staging_slot, lambda seq, bufs: 0),       # both sub-tiles in one buffer
    (epilogue.first_subtile, lambda tile, n: tile),     # tiles' sub-tile numbers overlap
    (epilogue.stores_left_in_flight, lambda bufs: bufs),
    (pipeline.first_counter, lambda j, k, n, c: 0),     # every tile re-reads k-step 0's slots
])
def test_models_follow_the_kernel_helpers(monkeypatch, helper, fake):
    monkeypatch.setattr(helper, "fn", fake)
    r = check(hopper.hopper_cooperative(), stop_after=1)
    assert r.verdict in REPORTED, f"the model ignored {helper}"


def test_kernel_calls_the_helpers_the_model_calls():
    """The model's premises, read off the kernel source: the helpers are called where the
    model calls them, and the cooperative ring has 2 releasers."""
    store = inspect.getsource(epilogue.Epilogue.store.fn) + inspect.getsource(epilogue.Epilogue.store_subtile.fn)
    for call in ("first_subtile(tile_count, SUBTILES)", "staging_slot(seq, self.BUFS)", "c_parity(seq)",
                 "tma.store_wait(stores_left_in_flight(self.BUFS))"):
        assert call in store, call
    consumer = inspect.getsource(kernel.consumer.fn)
    assert "kloop.locate(sched, t)" in consumer  # the unit's first ring counter: the K loop's locate, which asks
    assert "sched.first_step(t)" in inspect.getsource(kernel.PlainKLoop.locate.fn)  # the data-parallel schedulers'
    # first_step, the model's helper
    for sched in (scheduler.TileScheduler, scheduler.SplitKScheduler):
        assert "first_counter(local_tile, self.k_steps, 1, 0)" in inspect.getsource(sched.first_step.fn)
    ws = inspect.getsource(kernel.warp_specialized_gemm.fn)
    assert "Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS, CFG.BN2, CFG.B_KMAJOR, CFG.CLUSTER," in ws
    # the cluster model's premises (hopper_cluster): both CTAs' releases reach the leader's
    # pair barrier, the producer waits on it, and only the shared operand goes out multicast
    ring = inspect.getsource(pipeline.Ring.release.fn) + inspect.getsource(pipeline.Ring.acquire_empty.fn)
    assert "mbarrier.arrive(self.pair_empty.index(s))" in ring and "mbarrier.wait(self.pair_empty.index(s)" in ring
    assert "allocate_mbarrier(batch=STAGES, two_ctas=True)" in inspect.getsource(pipeline.Ring.allocate.fn)
    load = inspect.getsource(loader.TileLoader.load_b.fn)
    assert load.count("self.MULTICAST") == 2 and "MULTICAST" not in inspect.getsource(loader.TileLoader.load.fn)
    assert "gl.static_assert(CFG.RELEASERS == (1 if CFG.PINGPONG else 2)" in inspect.getsource(
        kernel.run_partitions.fn)  # the launcher's value is checked
    assert SCHEDULE_FACTS["cooperative"].releasers == 2 and SCHEDULE_FACTS["pingpong"].releasers == 1
