"""Mutation test: deleting any single wait or barrier of a safe schedule keeps it safe or is
reported; the waits marked critical (the schedules' and our kernel's named waits) are reported."""

import pytest

from pingpong.schedule import check
from pingpong.schedule.schedules import SHIPPED, build

SAFE = [n for n, e in SHIPPED.items() if e.claim == "SAFE"]
REPORTED = {"RACE", "STALE READ", "DEADLOCK", "COUNTER MISUSE"}
#: K-iterations per schedule (default 2). The cooperative model's two concurrent consumers
#: with the full β·C epilogue make each check ~0.5 s at 2; at 1 its 50 deletions take ~3 s
#: (ring slots are then not refilled: test_schedule covers refills).
K_ITERS = {"hopper_cooperative": 1, "hopper_coop_cluster": 1}  # the cooperative pair: 6 concurrent groups


@pytest.mark.slow
@pytest.mark.parametrize("name", SAFE)
def test_every_single_deletion_is_safe_or_reported(name):
    s = build(name, K_ITERS.get(name, 2))
    assert check(s).verdict == "SAFE"
    critical, reported, total = [], 0, 0
    for gi, i, op in s.sync_ops():
        r = check(s.without(gi, i), stop_after=1)
        total += 1
        assert r.verdict in REPORTED | {"SAFE"}, (s.position(gi, i), r.verdict)
        if r.verdict != "SAFE":
            reported += 1
            v = r.first()
            assert v.trace or v.blocked
        if op.critical:
            critical.append((s.position(gi, i), op.critical, r.verdict))
    missed = [c for c in critical if c[2] == "SAFE"]
    assert not missed, f"critical ops whose deletion went unreported: {missed}"
    assert critical, "each safe schedule names at least one critical op"
    assert reported > 0
