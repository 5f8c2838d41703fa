"""ASCII timelines of traces: one column per group, one row per
step, barrier instances numbered per group (B[n]), buffer writes as ``X →LDS`` and reads as
``LDS→ X``, counter values after each async op, the offending step marked ✗."""

from __future__ import annotations

from .checker import Event, Result, Violation
from .model import Schedule

WIDTH = 40


def cell(s: Schedule, ev: Event) -> str:
    op = s.groups[ev.agent].ops[ev.index]
    if ev.landing:
        text = f"⇣ {','.join(op.bufs)} landed"
    elif op.kind == "barrier":
        text = f"──{ev.note}──●" if ev.note else op.text()
        return text
    else:
        text = op.text()
    return f"{text}  {ev.note}" if ev.note else text


def timeline(s: Schedule, trace: list, mark_last: bool = False, tail: int | None = None, width: int = WIDTH) -> str:
    """Render ``trace`` (a list of Event) as a table; ``tail`` keeps only the last steps."""
    names = [g.name for g in s.groups]
    head = "step | " + " | ".join(n.ljust(width) for n in names)
    lines = [head, "-----+-" + "-+-".join("-" * width for _ in names)]
    start = 0
    if tail is not None and len(trace) > tail:
        start = len(trace) - tail
        lines.append(f" ... | ({start} earlier steps; --trace shows them all)")
    for step in range(start, len(trace)):
        ev = trace[step]
        row = [""] * len(names)
        text = cell(s, ev)
        if mark_last and step == len(trace) - 1:
            text = "✗ " + text
        row[ev.agent] = text[:width]
        where = s.groups[ev.agent].ops[ev.index].where
        lines.append(f"{step + 1:4d} | " + " | ".join(c.ljust(width) for c in row) + (f" | {where}" if where else ""))
    return "\n".join(line.rstrip() for line in lines)


def report_violation(s: Schedule, v: Violation, tail: int | None = None) -> str:
    """The violation's message and its shortest trace."""
    out = [f"{v.kind.upper()}: {v.message}", f"shortest trace: {len(v.trace)} steps"]
    out.append(timeline(s, v.trace, mark_last=v.kind in ("race", "stale read") or bool(v.ops), tail=tail))
    if v.blocked:
        for a, i in v.blocked:
            out.append(f"   ⏸ {s.groups[a].name} blocked at op #{i} `{s.groups[a].ops[i].text()}`")
    return "\n".join(out)


def summary(r: Result) -> str:
    """One line: verdict, violation counts, states explored, time."""
    kinds = {}
    for v in r.violations:
        kinds[v.kind] = kinds.get(v.kind, 0) + 1
    detail = ", ".join(f"{n} {k}{'s' if n > 1 else ''}" for k, n in kinds.items())
    more = f" ({detail})" if detail else ""
    return (f"{r.schedule.name:<34} {r.verdict:<15}{more}  "
            f"[{r.states} states, {r.transitions} transitions, {r.seconds * 1000:.0f} ms]")
