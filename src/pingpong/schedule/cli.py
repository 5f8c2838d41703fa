"""`pingpong check [SCHEDULE ...] [--k-iters N] [--trace] [--list] [--time]`.

SCHEDULE is a shipped name (``--list``) or a Python file: every module-level Schedule in
it is checked, and a function ``schedules(k_iters)`` returning Schedules is called
(``file.py:NAME`` picks one attribute, a Schedule or a function of k_iters).
Exit code: 0 all safe, 1 any race, stale read, deadlock or counter misuse, 2 incomplete.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from .checker import check
from .errors import ScheduleError
from .model import Schedule
from .schedules import SHIPPED, build
from .timeline import report_violation, summary, timeline

TAIL = 40  # steps of a failing trace shown without --trace


def add_arguments(p) -> None:
    p.add_argument("schedules", nargs="*", metavar="SCHEDULE",
                   help="shipped schedule names or Python files (default: every shipped schedule)")
    p.add_argument("--k-iters", type=int, default=None, metavar="N",
                   help="K-loop iterations to unroll (default: each schedule's own)")
    p.add_argument("--trace", action="store_true",
                   help="print whole traces, and a complete execution of safe schedules")
    p.add_argument("--list", action="store_true", help="name the shipped schedules and exit")
    p.add_argument("--time", action="store_true", help="print a timing table (states, seconds)")
    p.add_argument("--max-states", type=int, default=300_000, help="search bound (default 300000)")
    p.add_argument("--stop-after", type=int, default=10, metavar="V",
                   help="stop a schedule's search after V distinct violations (default 10; 0 = never)")


def load_file(spec: str, k_iters: int | None) -> list[Schedule]:
    """Schedules defined in a user's Python file (``path.py`` or ``path.py:NAME``)."""
    path, _, attr = spec.partition(":") if spec.count(":") == 1 and not Path(spec).exists() else (spec, "", "")
    file = Path(path)
    if not file.is_file():
        raise ScheduleError(f"{spec!r} is neither a shipped schedule ({', '.join(SHIPPED)}) nor a Python file")
    mod_spec = importlib.util.spec_from_file_location(f"_pingpong_user_{file.stem}", file)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    k = 4 if k_iters is None else k_iters

    def realize(obj):
        if isinstance(obj, Schedule):
            return [obj]
        if callable(obj):
            got = obj(k)
            return [got] if isinstance(got, Schedule) else list(got)
        raise ScheduleError(f"{spec}: {attr!r} is not a Schedule or a function of k_iters")

    if attr:
        if not hasattr(mod, attr):
            raise ScheduleError(f"{file} defines no {attr!r}")
        return realize(getattr(mod, attr))
    found = [v for v in vars(mod).values() if isinstance(v, Schedule)]
    if callable(getattr(mod, "schedules", None)):
        found += realize(mod.schedules)
    if not found:
        raise ScheduleError(f"{file} defines no Schedule (module-level Schedule objects or schedules(k_iters))")
    return found


def run(args) -> int:
    if args.list:
        for e in SHIPPED.values():
            claim = e.claim or "-"
            print(f"{e.name:<24} {e.source:<36} expected {claim:<5} {e.summary}")
        return 0
    try:
        scheds = []
        for spec in args.schedules or list(SHIPPED):
            if spec in SHIPPED:
                scheds.append(build(spec, args.k_iters))
            else:
                scheds.extend(load_file(spec, args.k_iters))
    except ScheduleError as e:
        print(f"error: {e}")
        return 2
    worst = 0
    rows = []
    t0 = time.perf_counter()
    for s in scheds:
        r = check(s, max_states=args.max_states, stop_after=args.stop_after or None)
        rows.append(r)
        print(summary(r))
        if r.violations:
            worst = 1
            print()
            print(report_violation(s, r.violations[0], tail=None if args.trace else TAIL))
            for v in r.violations[1:6]:
                print(f"  also {v.kind}: {v.message} ({len(v.trace)} steps)")
            if len(r.violations) > 6:
                print(f"  ... and {len(r.violations) - 6} more")
            print()
        elif r.truncated:
            worst = max(worst, 2)
        if r.final_atomics:
            finals = "; ".join(", ".join(f"{n}={v}" for n, v in f) for f in sorted(r.final_atomics) if f)
            if finals:
                print(f"  final counters: {finals}")
        if args.trace:
            for n in r.notes:
                print(f"  note: {n}")
            ct = r.counter_trace()
            if ct:
                print("  counter trace: " + ", ".join(f"{g}:{a}={v}" for _, g, a, v in ct))
            if not r.violations and r.sample:
                print(f"  a complete execution ({len(r.sample)} steps):")
                print(timeline(s, r.sample))
                print()
    total = time.perf_counter() - t0
    if args.time:
        print()
        print(f"{'schedule':<34} {'states':>9} {'transitions':>12} {'seconds':>8}")
        for r in rows:
            print(f"{r.schedule.name:<34} {r.states:>9} {r.transitions:>12} {r.seconds:>8.3f}")
        print(f"{'total':<34} {sum(r.states for r in rows):>9} {sum(r.transitions for r in rows):>12} "
              f"{total:>8.3f}  (one core; target < 10 s at 4 K-iterations)")
    return worst
