"""`pingpong check [SCHEDULE ...] [--k-iters N] [--trace] [--list] [--time]`.

SCHEDULE is a shipped name (``--list``) or a Python file: every module-level Schedule in
it is checked, and a function ``schedules(k_iters)`` returning Schedules is called
(``file.py:NAME`` picks one attribute, a Schedule or a function of k_iters). A schedule
file is executed as Python (imported, with your privileges): run only files you trust.

With no SCHEDULE, every shipped schedule is checked against the verdict expected of it
(``--list``: some are kept broken on purpose, to show that the checker finds the bug): each
gets "as expected" or "UNEXPECTED", a trace is printed only for an unexpected violation, and
the exit code is 0 when every verdict is as expected, 1 when some is not (3 when the one that
is not was cut short: INCOMPLETE). Schedules without an expected verdict are reported only.

Exit code of named schedules (the worst over all schedules checked):
    0  every schedule SAFE: its whole state space explored, no violation
    1  some race, stale read, deadlock or counter misuse found
    2  usage or input error (bad option value, unknown schedule, a file that fails to import
       or yields no valid Schedule); nothing is checked
    3  INCOMPLETE: no violation found, but some search was cut short (--max-states,
       --stop-after) — not a proof of safety
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

from .checker import check
from .errors import ScheduleError
from .model import Schedule, validate
from .schedules import SHIPPED, as_expected, build
from .timeline import report_violation, summary, timeline

TAIL = 40  # steps of a failing trace shown without --trace

EXIT_SAFE, EXIT_VIOLATION, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3


def add_arguments(p) -> None:
    p.add_argument("schedules", nargs="*", metavar="SCHEDULE",
                   help="shipped schedule names or Python files (default: every shipped schedule)")
    p.add_argument("--k-iters", type=int, default=None, metavar="N",
                   help="K-loop iterations to unroll (default: each schedule's own)")
    p.add_argument("--trace", action="store_true",
                   help="print whole traces, and a complete execution of safe schedules")
    p.add_argument("--list", action="store_true", help="name the shipped schedules and exit")
    p.add_argument("--time", action="store_true", help="print a timing table (states, seconds)")
    p.add_argument("--max-states", type=int, default=300_000,
                   help="search bound (default 300000); a search that reaches it is INCOMPLETE (exit 3)")
    p.add_argument("--stop-after", type=int, default=10, metavar="V",
                   help="stop a schedule's search after V distinct violations (default 10; 0 = never)")
    p.epilog = ("exit codes: 0 all SAFE, 1 race/stale read/deadlock/counter misuse, 2 usage or input error, "
                "3 INCOMPLETE (search cut short, no violation found). Without SCHEDULE: every shipped schedule "
                "against its expected verdict, 0 when all are as expected, 1 (3: INCOMPLETE) when one is not. "
                "A schedule file is executed as Python.")


def check_options(args) -> None:
    """Raise ScheduleError naming the first option whose value makes no sense."""
    if args.k_iters is not None and args.k_iters < 1:
        raise ScheduleError(f"--k-iters must be >= 1 (K-loop iterations to unroll), got {args.k_iters}")
    if args.max_states < 1:
        raise ScheduleError(f"--max-states must be >= 1, got {args.max_states}")
    if args.stop_after < 0:
        raise ScheduleError(f"--stop-after must be >= 0 (0 = never stop early), got {args.stop_after}")


def load_file(spec: str, k_iters: int | None) -> list[Schedule]:
    """Schedules defined in a user's Python file (``path.py`` or ``path.py:NAME``)."""
    path, _, attr = spec.partition(":") if spec.count(":") == 1 and not Path(spec).exists() else (spec, "", "")
    file = Path(path)
    if not file.is_file():
        raise ScheduleError(f"{spec!r} is neither a shipped schedule ({', '.join(SHIPPED)}) nor a Python file")
    mod_spec = importlib.util.spec_from_file_location(f"_pingpong_user_{file.stem}", file)
    if mod_spec is None or mod_spec.loader is None:
        raise ScheduleError(f"{file}: not importable as a Python file")
    mod = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(mod)
    except (Exception, SystemExit) as e:  # the user's code: report it as bad input, not a race
        raise ScheduleError(f"{file}: failed to import: {_describe(e)}") from e
    k = 4 if k_iters is None else k_iters

    def realize(name, obj):
        if isinstance(obj, Schedule):
            return [obj]
        if not callable(obj):
            raise ScheduleError(f"{file}: {name!r} is not a Schedule or a function of k_iters")
        try:
            got = obj(k)
        except (Exception, SystemExit) as e:
            raise ScheduleError(f"{file}: {name}({k}) raised {_describe(e)}") from e
        items = [got] if isinstance(got, Schedule) else list(got) if isinstance(got, (list, tuple)) else None
        if items is None or not items or not all(isinstance(x, Schedule) for x in items):
            raise ScheduleError(f"{file}: {name}({k}) must return a Schedule or a non-empty list of Schedules, "
                                f"got {_shape(got)}")
        return items

    if attr:
        if not hasattr(mod, attr):
            raise ScheduleError(f"{file} defines no {attr!r}")
        found = realize(attr, getattr(mod, attr))
    else:
        found = [v for v in vars(mod).values() if isinstance(v, Schedule)]
        if callable(getattr(mod, "schedules", None)):
            found += realize("schedules", mod.schedules)
        if not found:
            raise ScheduleError(f"{file} defines no Schedule (module-level Schedule objects or schedules(k_iters))")
    for sched in found:
        validate(sched)  # malformed schedules are input errors (exit 2), found before any search
    return found


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _shape(x) -> str:
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of {', '.join(sorted({type(v).__name__ for v in x})) or 'nothing'}"
    return type(x).__name__


def run(args) -> int:
    if args.list:
        name_w, source_w, claim_w = (max(len(getattr(e, f) or "-") for e in SHIPPED.values())
                                     for f in ("name", "source", "claim"))
        for e in SHIPPED.values():
            print(f"{e.name:<{name_w}}  {e.source:<{source_w}}  expected {e.claim or '-':<{claim_w}}  {e.summary}")
        return 0
    try:
        check_options(args)
        scheds = []
        for spec in args.schedules or list(SHIPPED):
            if spec in SHIPPED:
                scheds.append(build(spec, args.k_iters))
            else:
                scheds.extend(load_file(spec, args.k_iters))
    except ScheduleError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    # no SCHEDULE named: each shipped one against its expected verdict (None: no expectation)
    claims = [SHIPPED[name].claim for name in SHIPPED] if not args.schedules else [None] * len(scheds)
    expecting = not args.schedules
    incomplete = violated = False
    rows = []
    t0 = time.perf_counter()
    for s, claim in zip(scheds, claims):
        r = check(s, max_states=args.max_states, stop_after=args.stop_after or None)
        rows.append(r)
        print(summary(r))
        ok = as_expected(claim, r.verdict) if expecting else False  # False: judged by the verdict alone
        if expecting:
            print("  no expected verdict (reported only)" if ok is None else f"  expected {claim}: as expected" if ok
                  else f"  expected {claim}, found {r.verdict}: UNEXPECTED")
        if expecting and ok is False and not r.violations and not r.truncated:
            violated = True  # SAFE where a bug was expected: the verdict differs (exit 1)
        if r.violations and ok is not False:
            print(f"  (kept broken on purpose; `pingpong check {s.name}` prints the trace)" if ok else
                  f"  (`pingpong check {s.name}` prints the trace)")
        elif r.violations:
            violated = True
            print()
            print(report_violation(s, r.violations[0], tail=None if args.trace else TAIL))
            for v in r.violations[1:6]:
                print(f"  also {v.kind}: {v.message} ({len(v.trace)} steps)")
            if len(r.violations) > 6:
                print(f"  ... and {len(r.violations) - 6} more")
            print()
        elif r.truncated and ok is False:
            incomplete = True
            print(f"  INCOMPLETE: {'; '.join(r.notes[:1])}; no violation found in the part explored, "
                  "which proves nothing about the rest")
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
    if violated:
        return EXIT_VIOLATION
    return EXIT_INCOMPLETE if incomplete else EXIT_SAFE


def main(argv: list[str] | None = None) -> int:
    """`python -m pingpong.schedule` (the same program as `pingpong check`)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m pingpong.schedule",
                                description="model-check synchronization schedules for races and deadlocks")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
