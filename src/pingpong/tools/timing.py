"""GPU timing shared by the benchmarks (`pingpong.tools.bench`, `pingpong.streaming.bench`).

One rule for every number the project reports: the median of at least `reps` repetitions of
`triton.testing.do_bench`, which warms up first and flushes the L2 cache before every
repetition. Only ratios of times taken in one process compare.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Callable


@dataclasses.dataclass
class Timing:
    median_ms: float
    reps: int  # repetitions actually timed (≥ requested)


def time_callable(fn: Callable[[], Any], reps: int, *, bench: Callable | None = None, warmup_ms: float = 25.0) -> Timing:
    """Median of at least `reps` L2-flushed repetitions of `fn` after warm-up.

    `triton.testing.do_bench` takes a time budget in ms, not a count; we ask for every
    repetition's time (``return_mode="all"``) and grow the budget until ≥ `reps` were taken.
    `bench` replaces do_bench in tests.
    """
    if bench is None:
        from triton.testing import do_bench as bench
    budget_ms = 100.0
    for _ in range(6):
        times = bench(fn, warmup=warmup_ms, rep=budget_ms, return_mode="all")
        if len(times) >= reps:
            return Timing(statistics.median(times), len(times))
        per_rep = max(budget_ms / max(len(times), 1), 1e-3)
        budget_ms = per_rep * reps * 1.25 + 1.0
    raise RuntimeError(f"could not time {reps} repetitions (last run gave {len(times)})")
