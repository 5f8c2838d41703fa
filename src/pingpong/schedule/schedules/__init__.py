"""The shipped schedules: name -> how to build it at a given K-iteration count, where it comes
from, and the verdict expected of it (``claim``: "SAFE" for a schedule known to run correctly,
"RACE" for one known to give wrong results, None where nothing our model can check is known). The verdicts themselves always come from
exploring the model (`pingpong.schedule.check`); tests compare them with the claims."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import amd, hopper, streamk


@dataclass(frozen=True)
class Entry:
    name: str
    build: Callable  # build(k_iters) -> Schedule
    source: str
    claim: str | None
    default_k: int = 4
    summary: str = ""


def as_expected(claim: str | None, verdict: str) -> bool | None:
    """Whether a verdict is the one claimed (a stale read is a race: it reads wrong data);
    None where there is no claim."""
    if claim is None:
        return None
    return verdict == claim or (claim == "RACE" and verdict == "STALE READ")


def _e(name, build, source, claim, summary, default_k=4):
    return Entry(name, build, source, claim, default_k, summary)


SHIPPED = {
    e.name: e
    for e in [
        _e("simplified", amd.simplified, "AMD 8-wave GEMM, simplified loop", "SAFE",
           "8-wave ping-pong, stagger barrier, vmcnt(0) after every load batch"),
        _e("optimized", amd.optimized, "AMD 8-wave GEMM, optimized loop", "RACE",
           "optimized 8-step loop, main vmcnt(6), epilogue vmcnt(2)/vmcnt(1)"),
        _e("optimized_vmcnt00", amd.optimized_fixed, "AMD 8-wave GEMM, epilogue fixed", "SAFE",
           "the same with the epilogue fix vmcnt(0)"),
        _e("hipkittens", amd.hipkittens, "HipKittens 256x256x64 reference", None,
           "HipKittens 8-wave reference loop, first half mirrored (prologue vmcnt(4)/(6), step-7 B prefetch)"),
        _e("pingpong_sync", amd.pingpong_sync, "two-counter PingPongSync protocol", None,
           "two-counter PingPongSync as first written (no vmcnt(0) after the prologue loads)", default_k=2),
        _e("pingpong_sync_vmcnt0", lambda k=2: amd.pingpong_sync(k, prologue_wait=True), "PingPongSync + prologue vmcnt(0)",
           "SAFE", "PingPongSync with vmcnt(0) after the prologue loads", default_k=2),
        _e("vector_add", amd.vector_add, "gfx942 persistent vector add", "SAFE",
           "persistent double-buffered vector add, loop vmcnt(3)"),
        _e("vector_add_vmcnt4", lambda k=4: amd.vector_add(k, loop_vmcnt=4), "gfx942 vector add, loose loop wait", "RACE",
           "the same with vmcnt(4) in the loop"),
        _e("hopper_pingpong", hopper.hopper_pingpong, "pingpong.hopper (PingPongSync on mbarriers)", "SAFE",
           "our kernel's producer + 2 consumers, ring + turn mbarriers"),
        _e("hopper_early_release", lambda k=4: hopper.hopper_pingpong(k, variant="early_release"),
           "pingpong.hopper, broken", "RACE", "consumer releases a slot before its wgmma completed"),
        _e("hopper_no_turn_wait", lambda k=4: hopper.hopper_pingpong(k, variant="no_turn_wait"),
           "pingpong.hopper, broken", "RACE", "consumers skip the turn wait"),
        _e("hopper_no_store_wait", lambda k=4: hopper.hopper_pingpong(k, variant="no_store_wait"),
           "pingpong.hopper, broken", "RACE", "epilogue rewrites C staging without store_wait(0)"),
        _e("hopper_pingpong_counted", lambda k=2: hopper.hopper_pingpong_counted(),
           "pingpong.hopper ragged-K grouped kernel, ping-pong", "SAFE",
           "units of 2, 0, 3, 1, 0, 2 k-steps (device data: consumers add them up); empty units load nothing",
           default_k=2),
        _e("hopper_counted_release_empty", lambda k=2: hopper.hopper_pingpong_counted(variant="release_empty"),
           "pingpong.hopper ragged-K, broken", "RACE", "an empty unit releases the previous unit's slot"),
        _e("hopper_counted_own_count", lambda k=2: hopper.hopper_pingpong_counted(variant="own_count"),
           "pingpong.hopper ragged-K, broken", "RACE", "a consumer counts only its own units' k-steps"),
        _e("hopper_fp8_pingpong", lambda k=2: hopper.hopper_fp8_pingpong(),
           "pingpong.hopper FP8 kernels, ping-pong (promoted, paired K loop)", "SAFE",
           "units of 3, 2, 0, 1 k-steps (counted), two wgmmas in flight, each slot's block scales read at"
           " the promotion", default_k=2),
        _e("hopper_fp8_release_unwaited", lambda k=2: hopper.hopper_fp8_pingpong(variant="release_unwaited"),
           "pingpong.hopper FP8, broken", "RACE", "a pair's first slot released before wait(1) retires its wgmma"),
        _e("hopper_cooperative", hopper.hopper_cooperative, "pingpong.hopper (the default schedule)", "SAFE",
           "producer + 2 consumers on every tile (empty count 2), 2 epilogue sub-tiles, store_wait(1), β·C",
           default_k=2),
        _e("hopper_coop_single_releaser", lambda k=2: hopper.hopper_cooperative(k, variant="single_releaser"),
           "pingpong.hopper, broken", "RACE", "cooperative ring with empty count 1: one release frees the slot"),
        _e("hopper_coop_one_consumer_releases",
           lambda k=2: hopper.hopper_cooperative(k, variant="one_consumer_releases"),
           "pingpong.hopper, broken", "DEADLOCK", "empty count 2 but only consumer 0 releases"),
        _e("hopper_coop_store_wait_late", lambda k=2: hopper.hopper_cooperative(k, variant="store_wait_late"),
           "pingpong.hopper, broken", "RACE", "epilogue store_wait(BUFS) instead of BUFS-1"),
        _e("hopper_coop_c_parity_flipped", lambda k=2: hopper.hopper_cooperative(k, variant="c_parity_flipped"),
           "pingpong.hopper, broken", "RACE", "C read on the other c_ready parity"),
        _e("hopper_cluster", hopper.hopper_cluster, "pingpong.hopper, 2-CTA cluster (cluster_m=2)", "SAFE",
           "two CTAs x (producer + 2 ping-pong consumers), B multicast by the leader, pair_empty counts both CTAs",
           default_k=2),
        _e("hopper_cluster_one_cta_release", lambda k=2: hopper.hopper_cluster(k, variant="one_cta_release"),
           "pingpong.hopper, 2-CTA cluster, broken", "RACE",
           "pair_empty counts only the leader's releases: its multicast overwrites the partner's B slot"),
        # the cooperative pair has 6 concurrent groups: one k-step a tile and one slot (a refill
        # every tile) keep it exhaustive in a second, whatever K-iteration count is asked for
        _e("hopper_coop_cluster", lambda k=1: hopper.hopper_cluster(1, stages=1, schedule="cooperative"),
           "pingpong.hopper, 2-CTA cluster, cooperative", "SAFE",
           "two CTAs x (producer + 2 cooperative consumers, one A box each), B multicast, pair_empty count 4"
           " (one k-step a tile, one slot: a refill every tile)", default_k=1),
        _e("hopper_coop_cluster_one_cta_release",
           lambda k=1: hopper.hopper_cluster(1, stages=1, variant="one_cta_release", schedule="cooperative"),
           "pingpong.hopper, 2-CTA cluster, cooperative, broken", "RACE",
           "pair_empty counts only the leader's releases", default_k=1),
        _e("hopper_coop_no_c_wait", lambda k=2: hopper.hopper_cooperative(k, variant="no_c_wait"),
           "pingpong.hopper, broken", "RACE", "C read without waiting for c_ready"),
        # stream-K's fix-up has no K loop to unroll (the ring is the hopper_* models'): a launch
        # of 7 tiles of 12 k-steps on 5 SMs, whatever K-iteration count is asked for
        _e("streamk_cooperative", lambda k=1: streamk.streamk_fixup(),
           "pingpong.hopper stream-K fix-up (fixup.py)", "SAFE",
           "7 tiles on 5 SMs: a data-parallel wave, 2 tiles streamed by 3 programs; the last to arrive sums",
           default_k=1),
        _e("streamk_pingpong", lambda k=1: streamk.streamk_fixup(5, 24, 4, schedule="pingpong"),
           "pingpong.hopper stream-K fix-up, ping-pong", "SAFE",
           "5 tiles on 4 SMs, the fifth shared by 3 programs; consumers alternate units", default_k=1),
        _e("streamk_early_arrival", lambda k=1: streamk.streamk_fixup(variant="early_arrival"),
           "pingpong.hopper stream-K fix-up, broken", "RACE",
           "a unit arrives before its partial's stores completed (no release)", default_k=1),
        _e("streamk_unchecked_sum", lambda k=1: streamk.streamk_fixup(variant="unchecked_sum"),
           "pingpong.hopper stream-K fix-up, broken", "RACE",
           "slot 0 sums the partials without checking that every other unit arrived", default_k=1),
    ]
}


def build(name: str, k_iters: int | None = None):
    """The shipped schedule ``name`` at ``k_iters`` (its default when None)."""
    from ..errors import ScheduleError

    if name not in SHIPPED:
        raise ScheduleError(f"unknown schedule {name!r}; shipped: {', '.join(SHIPPED)}")
    if k_iters is not None and (type(k_iters) is not int or k_iters < 1):
        raise ScheduleError(f"k_iters must be an int >= 1 (K-loop iterations to unroll), got {k_iters!r}")
    e = SHIPPED[name]
    return e.build(e.default_k if k_iters is None else k_iters)
