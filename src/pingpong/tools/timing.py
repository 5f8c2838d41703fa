"""GPU timing shared by the benchmarks (`pingpong.tools.bench`, `pingpong.tools.bench_streaming`).

One rule for every number the project reports: the median of at least `reps` repetitions of
`queued_bench` (triton.testing.do_bench's contract: warm up, flush the L2 cache before every
repetition), each repetition's time taken by CUDA events around the call. Only ratios of times
taken in one process compare.

Why not do_bench itself: it records the start event right after the flush, so the GPU runs it as
soon as the flush ends. If the host has not launched the call's kernel by then (do_bench's loop
plus the call's host work take longer than the flush, on a host that is busy or slow), the
GPU idles and the idle time is counted as the kernel's, so small products read slower in
some processes than in others. queued_bench enqueues a
spin kernel before each flush, so that the host is ahead of the GPU when the call launches: the
time is the GPU's alone, for ours and the peer alike. The spin brings spin and call to QUEUE_US
(`spin_us`): a call that long keeps the host ahead by itself and gets none, as a near-idle GPU
between repetitions would lift a power-limited kernel's clock. The flush stays right
before the start event, as in do_bench (a spin between the two left the GPU idle before the
call and moved small products' times). Host cost is measured apart
(`pingpong.tools.overhead`, benchmarks/host_gap.py).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from typing import Any, Callable


@dataclasses.dataclass
class Timing:
    median_ms: float
    reps: int  # repetitions actually timed (≥ requested)


#: µs of spin and call before each repetition's flush (module docstring, `spin_us`): more than a
#: slow host's loop and call (benchmarks/host_gap.py measures it)
QUEUE_US = 200.0
#: SM clock the spin's cycle count assumes (the H100's and H200's maximum); a lower clock spins longer
SPIN_MHZ = 1980


def spin_us(call_us: float, queue_us: float = QUEUE_US) -> float:
    """µs of spin before each flush for a call of `call_us` GPU µs: what brings spin and call to
    `queue_us`. A call that long keeps the host ahead by itself, and a spin (a near-idle GPU)
    would lower the average power and lift a power-limited peer's clock more than ours."""
    return max(0.0, queue_us - call_us)


def queued_bench(fn: Callable[[], Any], warmup: float = 25.0, rep: float = 100.0, return_mode: str = "all",
                 queue_us: float = QUEUE_US) -> list[float]:
    """triton.testing.do_bench's loop (warm up for `warmup` ms, then repetitions for about `rep`
    ms, L2 flushed before each; return_mode "all": every repetition's ms) with a spin kernel
    before each flush: `spin_us` of the call's GPU time, taken behind a spin of `queue_us`
    (module docstring)."""
    import torch
    from triton import runtime

    assert return_mode == "all", return_mode
    driver = runtime.driver.active
    fn()
    torch.cuda.synchronize()
    cache = driver.get_empty_cache_for_benchmark()
    cycles = int(queue_us * SPIN_MHZ)

    def once(start=None, end=None):
        if cycles:
            torch.cuda._sleep(cycles)
        driver.clear_cache(cache)
        if start is not None:
            start.record()
        fn()
        if end is not None:
            end.record()

    probe = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(5)]
    for start, end in probe:  # the call's GPU time, behind the full spin
        once(start, end)
    torch.cuda.synchronize()
    cycles = int(spin_us(min(s.elapsed_time(e) for s, e in probe) * 1e3, queue_us) * SPIN_MHZ)
    probe = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    probe[0].record()
    for _ in range(5):
        once()
    probe[1].record()
    torch.cuda.synchronize()
    each_ms = probe[0].elapsed_time(probe[1]) / 5  # flush, spin and call
    for _ in range(max(1, int(warmup / each_ms))):
        once()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(max(1, int(rep / each_ms)))]
    for start, end in events:
        once(start, end)
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def call_us(fn: Callable[[], Any], calls: int, spin_ms: float = 0.0) -> tuple[float, float]:
    """(host µs, wall µs) per call of `calls` back-to-back calls, no synchronization between
    them: host = until the loop returns (Python, validation, the launch), wall = until the GPU
    is done (the larger of the host cost and the kernels). spin_ms > 0: a spin kernel of that
    length is enqueued first, so the GPU stays busy while the host enqueues and a full launch
    queue never holds the host back."""
    import torch

    torch.cuda.synchronize()
    if spin_ms:
        torch.cuda._sleep(int(spin_ms * 1e3 * SPIN_MHZ))
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6


def time_callable(fn: Callable[[], Any], reps: int, *, bench: Callable | None = None, warmup_ms: float = 25.0) -> Timing:
    """Median of at least `reps` L2-flushed repetitions of `fn` after warm-up.

    `queued_bench` (as do_bench) takes a time budget in ms, not a count; we ask for every
    repetition's time (``return_mode="all"``) and grow the budget until ≥ `reps` were taken.
    `bench` replaces queued_bench in tests.
    """
    if bench is None:
        bench = queued_bench
    budget_ms = 100.0
    for _ in range(6):
        times = bench(fn, warmup=warmup_ms, rep=budget_ms, return_mode="all")
        if len(times) >= reps:
            return Timing(statistics.median(times), len(times))
        per_rep = max(budget_ms / max(len(times), 1), 1e-3)
        budget_ms = per_rep * reps * 1.25 + 1.0
    raise RuntimeError(f"could not time {reps} repetitions (last run gave {len(times)})")


@dataclasses.dataclass
class Paired:
    """Two workloads timed in alternated rounds (`alternated`): each round's times, and the
    ratio first / second summarized over pairs of rounds (one round of each order)."""

    times: list[tuple[float, float]]  # per round, (first workload, second workload), in its units
    ratio: float  # median over pairs of rounds of the pair's geometric-mean ratio
    lo: float  # the pair ratios' range
    hi: float
    iqr_pct: float  # their interquartile range, % of the median
    position_effect: float  # median over pairs of a workload's time when timed first in its round / second


def alternated(time_a: Callable[[], float], time_b: Callable[[], float], rounds: int) -> Paired:
    """Time two workloads in `rounds` rounds (rounded up to whole pairs), the order flipped every
    round (a b, b a, a b, ...), Python's garbage collector collected before and off during each
    timing (as `timeit` does). `time_a()` / `time_b()` each run and time one measurement.

    Why pairs: a host-bound workload can run slower (or faster) for being timed first in its
    round (seen at up to 30% on a compiled training step); one round of each order cancels
    whatever the position costs, so the pair's ratio is the estimate and the spread of pairs
    its noise."""
    rounds = max(2, rounds + rounds % 2)
    times = []
    for r in range(rounds):
        got = {}
        for name, fn in (("a", time_a), ("b", time_b)) if r % 2 == 0 else (("b", time_b), ("a", time_a)):
            gc.collect()
            gc.disable()
            try:
                got[name] = fn()
            finally:
                gc.enable()
        times.append((got["a"], got["b"]))
    return summarize(times)


def cuda_mark():
    """A CUDA event recorded on the current stream: `interleaved`'s default mark."""
    import torch

    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


def interleaved(step_a: Callable[[], Any], step_b: Callable[[], Any], steps: int, rounds: int, *,
                mark: Callable[[], Any] = cuda_mark,
                elapsed_ms: Callable[[Any, Any], float] = lambda m0, m1: m0.elapsed_time(m1),
                settle: Callable[[], None] = lambda: None) -> Paired:
    """Time two workloads step by step, interleaved: each round runs `steps` steps of each,
    a b a b ... (b a b a ... every other round), with no wait between steps; a step's time is the
    interval between the marks around it (`mark()`: by default a CUDA event on the current stream,
    `cuda_mark`; `elapsed_ms(m0, m1)` read after the round's `settle()`). On a GPU, a step bound by the GPU is timed by its
    kernels (the queue holds the previous step's), one bound by the host by the time to issue it.

    Why interleave: timed in blocks of several steps (`alternated`), a host-bound training step
    ran up to 30% slower when it came first in its round, both models alike. Here every timed
    step follows a step of the other workload, the round's first included (one untimed step of
    the workload timed second leads in, after `settle()`), so nothing depends on the position;
    the pairs of rounds still cancel what a round's order could cost. GC is collected before
    and off during each round."""
    rounds = max(2, rounds + rounds % 2)
    times = []
    for r in range(rounds):
        order = ((0, step_a), (1, step_b)) if r % 2 == 0 else ((1, step_b), (0, step_a))
        gc.collect()
        gc.disable()
        try:
            settle()
            order[1][1]()  # the lead-in: the round's first timed step follows the other workload too
            marks = [mark()]
            for _ in range(steps):
                for _, fn in order:
                    fn()
                    marks.append(mark())
            settle()
        finally:
            gc.enable()
        total = [0.0, 0.0]
        for i in range(len(marks) - 1):
            total[order[i % 2][0]] += elapsed_ms(marks[i], marks[i + 1])
        times.append((total[0] / steps, total[1] / steps))
    return summarize(times)


def summarize(times: list[tuple[float, float]]) -> Paired:
    """`Paired` of per-round times taken in flipped order (round 0: a first), e.g. `alternated`'s
    after a reduction over ranks."""
    per_round = [a / b for a, b in times]
    pairs = sorted(math.sqrt(per_round[i] * per_round[i + 1]) for i in range(0, len(times) - 1, 2))
    q1, med, q3 = statistics.quantiles(pairs, n=4, method="inclusive") if len(pairs) > 1 else (pairs[0],) * 3
    # (a first / b second) / (a second / b first) = the position's factor, squared
    position = statistics.median(math.sqrt(per_round[i] / per_round[i + 1]) for i in range(0, len(times) - 1, 2))
    return Paired([tuple(t) for t in times], med, pairs[0], pairs[-1], 100 * (q3 - q1) / med, position)


def kernel_us(fn: Callable[[], Any], calls: int = 1) -> dict[str, float]:
    """GPU kernel µs per call of fn, by kernel name, from torch.profiler (CUDA activity) over
    `calls` calls after one unprofiled call. Kernels only: a record_function range (pingpong's
    `pingpong::<op>`) also appears on the device as a user annotation spanning its kernels and
    would count them twice."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA and not e.is_user_annotation:
            out[e.name] = out.get(e.name, 0.0) + e.time_range.elapsed_us() / calls
    return out
