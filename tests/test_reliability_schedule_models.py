"""The schedule checker checks what runs by default: the cooperative schedule (empty count 2)
and the real epilogue (store_wait(BUFS-1), C read through TMA on c_ready's parity), built from
the kernel's own helpers, with broken variants the checker must flag."""

import inspect

import pytest

from pingpong.hopper.config import SCHEDULE_FACTS
from pingpong.hopper import epilogue, kernel, loader, pipeline, scheduler
from pingpong.schedule import check
from pingpong.schedule.schedules import hopper

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
    coop = inspect.getsource(kernel.cooperative_consumer.fn)
    assert "first = sched.first_step(t)" in coop  # the data-parallel schedulers' first_step is the model's helper
    for sched in (scheduler.TileScheduler, scheduler.SplitKScheduler):
        assert "first_counter(local_tile, self.k_steps, 1, 0)" in inspect.getsource(sched.first_step.fn)
    ws = inspect.getsource(kernel.warp_specialized_gemm.fn)
    assert "Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS, CFG.BN2, CFG.B_KMAJOR, CFG.CLUSTER)" in ws
    # the cluster model's premises (hopper_cluster): both CTAs' releases reach the leader's
    # pair barrier, the producer waits on it, and only the shared operand goes out multicast
    ring = inspect.getsource(pipeline.Ring.release.fn) + inspect.getsource(pipeline.Ring.acquire_empty.fn)
    assert "mbarrier.arrive(self.pair_empty.index(s))" in ring and "mbarrier.wait(self.pair_empty.index(s)" in ring
    assert "allocate_mbarrier(batch=STAGES, two_ctas=True)" in inspect.getsource(pipeline.Ring.allocate.fn)
    load = inspect.getsource(loader.TileLoader.load_b.fn)
    assert load.count("self.MULTICAST") == 2 and "MULTICAST" not in inspect.getsource(loader.TileLoader.load.fn)
    assert "gl.static_assert(CFG.RELEASERS == (1 if CFG.PINGPONG else 2)" in ws  # the launcher's value is checked
    assert SCHEDULE_FACTS["cooperative"].releasers == 2 and SCHEDULE_FACTS["pingpong"].releasers == 1
