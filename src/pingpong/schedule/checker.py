"""The model checker: explore every interleaving the hardware semantics allow, report races,
deadlocks and counter misuse, each with the shortest trace (breadth-first search).

Semantics (AMD s_waitcnt and s_barrier as the CDNA3 ISA defines them; the PTX mbarrier rules):

* In-order per-wave counters. An async op pushes n entries on its group's counter FIFO; its
  access to its buffers lasts until its last entry retires. Entries retire in order, and only
  a ``wait counter<=N`` makes them retire (lazily: as late as the hardware may). Nobody but the
  issuing wave can observe a retirement, so retiring as late as allowed gives exactly the
  widest in-flight windows: lazy completion loses no race and adds none.
* A synchronous access (``write``) lasts until the group's next step (or its arrival at a
  barrier): any synchronization that orders it needs a later step of that group.
* Barrier ``B``: a group standing at its k-th ``B`` has arrived there; it passes when every
  participant has arrived k times or has exited (CDNA3 ``s_barrier``). A barrier in one
  group's program only (a stagger) therefore shifts that group by one phase.
* Atomic counters: ``signal`` adds, ``await`` spins until the value is reached; ``if_last``
  adds and branches on the sum: the group that brings the counter to its total runs the
  block, the others skip it (the fix-up's last arrival; the add is one step, so exactly one
  group reaches the total).
* mbarriers: a phase completes when the pending arrivals reach 0 and the expected
  transaction bytes have landed (tx = 0); then the phase bit flips and arrivals re-arm.
  ``wait(parity)`` passes once the phase with that parity has completed, so a fresh
  barrier's parity-1 wait passes at once. A TMA load lands at any moment after issue: that
  landing is a transition of its own.

Violations: a *race* starts an access to a buffer while a conflicting access (one of them a
write; two in-order writes of one counter and writes of disjoint parts excepted) is in
flight, by any group, itself included; a *stale read* reads a buffer holding other data than
the op expects (``want``); a *deadlock* is a state where nothing can move but some group has
not finished; *counter misuse* is a deadlock on a wait for a count that no execution reaches
(or an arrival beyond the pending count).

Reduction: states are hashed; a step that touches no shared object (a register MMA, a wait
with nothing left to retire) is taken alone (an ample set of one transition: it commutes
with everything and disables nothing). Programs are unrolled, so the state graph is acyclic.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from .errors import ScheduleError
from .model import COUNTED, Schedule, validate


@dataclass(frozen=True)
class Event:
    """One step of a trace: group ``agent`` runs op ``index`` (or its TMA lands)."""

    agent: int
    index: int
    landing: bool
    note: str = ""
    local: bool = False  # touches no shared object (reduction takes it alone)


@dataclass
class Violation:
    kind: str  # "race" | "stale read" | "deadlock" | "counter misuse"
    message: str
    trace: list  # [Event], the last one is the offending step (races) or empty (deadlocks)
    blocked: tuple = ()  # deadlocks: (agent, op index) of every group that cannot move
    ops: tuple = ()  # races: ((agent, index) of the new access, (agent, index) of the one in flight)

    @property
    def fails(self) -> bool:
        return True


@dataclass
class Result:
    schedule: Schedule
    violations: list = field(default_factory=list)
    states: int = 0
    transitions: int = 0
    seconds: float = 0.0
    final_atomics: set = field(default_factory=set)  # tuples of (name, value)
    sample: list = field(default_factory=list)  # a shortest complete execution
    notes: list = field(default_factory=list)
    truncated: bool = False

    @property
    def verdict(self) -> str:
        kinds = {v.kind for v in self.violations}
        for k in ("race", "stale read", "deadlock", "counter misuse"):
            if k in kinds:
                return k.upper()
        return "INCOMPLETE" if self.truncated else "SAFE"

    @property
    def safe(self) -> bool:
        return not self.violations and not self.truncated

    def first(self, kind: str | None = None) -> Violation | None:
        for v in self.violations:
            if kind is None or v.kind == kind:
                return v
        return None

    def counter_trace(self) -> list:
        """(step, group, atomic, value) of every signal along the sample execution."""
        out = []
        for step, ev in enumerate(self.sample, 1):
            op = self.schedule.groups[ev.agent].ops[ev.index]
            if op.kind == "signal" and not ev.landing:
                out.append((step, self.schedule.groups[ev.agent].name, op.sync, int(ev.note.split("=")[1])))
        return out


class _Program:
    """Per-group precomputation: ops, counter slots, barrier arrival prefix counts."""

    def __init__(self, sched: Schedule):
        self.s = sched
        self.ops = [g.ops for g in sched.groups]
        self.counters = [sorted({op.counter for op in g.ops if op.kind in COUNTED and op.counter}) for g in sched.groups]
        self.cslot = [{c: k for k, c in enumerate(cs)} for cs in self.counters]
        self.bar_names = sorted(sched.barriers)
        self.bar_parts = {b: tuple(i for i, g in enumerate(sched.groups) if g.name in sched.barriers[b])
                          for b in self.bar_names}
        # arrivals[a][b][pc]: arrivals of group a at barrier b when standing at pc
        self.arrivals = []
        self.ordinal = []
        for ops in self.ops:
            per, ordn = {}, {}
            for b in self.bar_names:
                seen, arr = 0, []
                for i, op in enumerate(ops):
                    here = op.kind == "barrier" and op.sync == b
                    if here:
                        seen += 1
                        ordn[i] = seen
                    arr.append(seen)
                arr.append(seen)
                per[b] = arr
            self.arrivals.append(per)
            self.ordinal.append(ordn)
        self.atomic_names = list(sched.atomics)
        self.atomic_slot = {n: k for k, n in enumerate(self.atomic_names)}
        self.atomic_max = dict(sched.atomics)
        for ops in self.ops:
            for op in ops:
                if op.kind in ("signal", "if_last"):
                    self.atomic_max[op.sync] += max(op.value, 0)
        # skip[a][pc]: where group a goes on from the if_last at pc when it did not arrive last
        self.skip = []
        for ops in self.ops:
            open_, skip = [], {}
            for i, op in enumerate(ops):
                if op.kind == "if_last":
                    open_.append(i)
                elif op.kind == "end_if":
                    skip[open_.pop()] = i + 1
            self.skip.append(skip)
        self.mbar_names = list(sched.mbarriers)
        self.mbar_slot = {n: k for k, n in enumerate(self.mbar_names)}
        self.tagged = any(op.want is not None or op.data is not None for ops in self.ops for op in ops)
        self.buf_slot = {b: k for k, b in enumerate(sched.buffers)}


def check(sched: Schedule, max_states: int = 300_000, stop_after: int | None = None, reduce: bool = True) -> Result:
    """Explore every interleaving of ``sched``; return its violations and statistics.

    ``max_states`` bounds the search (a schedule with no violation found within it is
    INCOMPLETE, never SAFE); ``stop_after`` stops once that many distinct violations are
    known (breadth-first, so they are the ones with the shortest traces). ``reduce=False``
    turns the reduction off (for testing that it changes no verdict and no trace length).
    """
    if type(max_states) is not int or max_states < 1:
        raise ScheduleError(f"max_states must be an int >= 1, got {max_states!r}")
    if stop_after is not None and (type(stop_after) is not int or stop_after < 1):
        raise ScheduleError(f"stop_after must be None (never) or an int >= 1, got {stop_after!r}")
    validate(sched)
    t0 = time.perf_counter()
    P = _Program(sched)
    res = Result(sched)
    nag = len(P.ops)
    init = (
        (0,) * nag,
        tuple(tuple(() for _ in P.counters[a]) for a in range(nag)),
        ((),) * nag,
        tuple(sched.atomics[n] for n in P.atomic_names),
        tuple((sched.mbarriers[n], 0, 0) for n in P.mbar_names),
        (),
        tuple(sched.initial.get(b) for b in sched.buffers) if P.tagged else (),
    )
    parent = {init: None}
    queue = deque([init])
    seen_v = {}
    final = None
    while queue:
        st = queue.popleft()
        succ = _successors(P, st, reduce)
        res.transitions += len(succ)
        if not succ:
            if all(st[0][a] >= len(P.ops[a]) for a in range(nag)):
                res.final_atomics.add(tuple(zip(P.atomic_names, st[3])))
                if final is None:
                    final = st
            else:
                v = _deadlock(P, st, parent)
                seen_v.setdefault((v.kind, v.blocked), v)
            continue
        for ev, nst, viol in succ:
            if viol is not None:
                kind, key, msg, ops = viol
                if (kind, key) not in seen_v:
                    seen_v[(kind, key)] = Violation(kind, msg, _trim(_path(parent, st) + [ev]), ops=ops)
            if nst is not None and nst not in parent:
                parent[nst] = (st, ev)
                queue.append(nst)
        if len(parent) > max_states:
            res.truncated = True
            res.notes.append(f"stopped after {max_states} states: exploration incomplete")
            break
        if stop_after is not None and len(seen_v) >= stop_after:
            res.truncated = True
            res.notes.append(f"stopped after {len(seen_v)} violations (shortest first); more may exist")
            break
    res.states = len(parent)
    res.violations = sorted(seen_v.values(), key=lambda v: (len(v.trace), v.kind))
    if final is not None:
        res.sample = _path(parent, final)
    res.notes.extend(_vacuous_waits(P))
    res.seconds = time.perf_counter() - t0
    return res


def _trim(trace: list) -> list:
    """Drop local steps that no later step of their group needs: the reduction may have taken
    them early, and they affect nobody, so the trace without them is still a trace (and
    as short as one found without reduction)."""
    later, out = set(), []
    for ev in reversed(trace):
        if ev.local and ev.agent not in later:
            continue
        later.add(ev.agent)
        out.append(ev)
    out.reverse()
    return out


def _path(parent, st) -> list:
    out = []
    while parent[st] is not None:
        st, ev = parent[st]
        out.append(ev)
    out.reverse()
    return out


# ----------------------------------------------------------------------------- semantics


def _inflight(P: _Program, st):
    """Yield (agent, op index) of every access still in flight in state ``st``."""
    _, fifos, syncp, _, _, tma, _ = st
    for a in range(len(P.ops)):
        seen = set()
        for f in fifos[a]:
            seen.update(f)
        seen.update(syncp[a])
        for j in seen:
            yield a, j
    for a, j in tma:
        yield a, j


def _race(P: _Program, st, a: int, i: int, op):
    """A violation tuple when op ``i`` of group ``a`` conflicts with an access in flight."""
    names = P.s.groups
    own_sync = st[2][a]
    for b, j in _inflight(P, st):
        if (b, j) == (a, i) or (b == a and j in own_sync):
            continue  # program order completes a group's synchronous access before its next op
        other = P.ops[b][j]
        common = [x for x in op.bufs if x in other.bufs]
        if not common or (not op.writes and not other.writes):
            continue
        if op.writes and other.writes:
            if a == b and op.counter and op.counter == other.counter:
                continue  # in-order writes of one FIFO
            if op.part is not None and other.part is not None and op.part != other.part:
                continue
        buf = common[0]
        verb = "writes" if op.writes else "reads"
        overb = "writing" if other.writes else "reading"
        how = "TMA not landed" if other.kind == "tma_load" else (
            f"not yet waited past on {other.counter}" if other.counter else "same step")
        msg = (f"{names[a].name} op #{i} `{op.text()}` {verb} {buf} while {names[b].name} op #{j} "
               f"`{other.text()}` may still be {overb} it ({how})")
        key = (buf, (a, i), (b, j))
        return ("race", key, msg, ((a, i), (b, j)))
    return None


def _stale(P: _Program, st, a, i, op):
    if op.want is None or not P.tagged:
        return None
    for buf in op.bufs:
        have = st[6][P.buf_slot[buf]]
        if have != op.want:
            msg = (f"{P.s.groups[a].name} op #{i} `{op.text()}` reads {buf} holding {have!r}, "
                   f"expected {op.want!r}")
            return ("stale read", (buf, (a, i)), msg, ((a, i),))
    return None


def _retire(P, contents, a, fifo_ops, keep):
    """Contents after the retired writes of group ``a`` land (in FIFO order)."""
    if not P.tagged:
        return contents
    c = list(contents)
    for j in fifo_ops:
        if j in keep:
            continue
        op = P.ops[a][j]
        if op.writes and op.data is not None:
            for b in op.bufs:
                c[P.buf_slot[b]] = op.data
    return tuple(c)


def _flip(mb, count):
    """An mbarrier whose pending arrivals and tx bytes are both 0 completes its phase."""
    pending, tx, phases = mb
    if pending == 0 and tx == 0:
        return (count, 0, phases + 1), True
    return mb, False


def _successors(P: _Program, st, reduce: bool = True):
    pcs, fifos, syncp, atomics, mbars, tma, contents = st
    nag = len(P.ops)
    out = []
    for a in range(nag):
        pc = pcs[a]
        if pc >= len(P.ops[a]):
            continue
        op = P.ops[a][pc]
        k = op.kind
        viol = None
        note = ""
        nf, ns, nat, nmb, ntma, ncont = fifos, syncp, atomics, mbars, tma, contents
        local = False
        last = True  # if_last: whether this group's add completes the count
        if k == "barrier":
            o = P.ordinal[a][pc]
            ok = all(pcs[p] >= len(P.ops[p]) or P.arrivals[p][op.sync][pcs[p]] >= o for p in P.bar_parts[op.sync])
            if not ok:
                continue
            note = f"B[{o - 1}]" if op.sync == "s_barrier" else f"{op.sync}[{o - 1}]"
        elif k == "await":
            if atomics[P.atomic_slot[op.sync]] < op.value:
                continue
            note = f"{op.sync}={atomics[P.atomic_slot[op.sync]]}>={op.value}"
        elif k == "mwait":
            pending, tx, phases = mbars[P.mbar_slot[op.sync]]
            if (phases & 1) == op.value:
                continue
            note = f"{op.sync} phase {phases} done"
        if k in COUNTED and (op.bufs or op.counter):
            viol = _race(P, st, a, pc, op) or _stale(P, st, a, pc, op)
            if op.counter:
                slot = P.cslot[a][op.counter]
                f = list(fifos[a])
                f[slot] = f[slot] + (pc,) * op.n
                nf = _set(fifos, a, tuple(f))
                note = f"{op.counter}={len(f[slot])}"
        elif k == "mma":
            local = True
        elif k == "write":
            viol = _race(P, st, a, pc, op)
            if P.tagged and op.data is not None:
                c = list(contents)
                for b in op.bufs:
                    c[P.buf_slot[b]] = op.data
                ncont = tuple(c)
        elif k == "wait":
            slot = P.cslot[a][op.counter]
            f = fifos[a][slot]
            if len(f) > op.value:
                cut = len(f) - op.value
                done, rest = f[:cut], f[cut:]
                ff = list(fifos[a])
                ff[slot] = rest
                nf = _set(fifos, a, tuple(ff))
                ncont = _retire(P, contents, a, dict.fromkeys(done), set(rest))
                note = f"{op.counter} {len(f)}→{len(rest)}"
            else:
                local = True
                note = f"{op.counter}={len(f)}"
        elif k == "signal":
            s = P.atomic_slot[op.sync]
            nat = _set(atomics, s, atomics[s] + op.value)
            note = f"{op.sync}={nat[s]}"
        elif k == "if_last":
            s = P.atomic_slot[op.sync]
            nat = _set(atomics, s, atomics[s] + op.value)
            last = atomics[s] < op.n <= nat[s]
            note = f"{op.sync}={nat[s]}, " + ("last" if last else "not last")
        elif k == "end_if":
            local = True
        elif k in ("arrive", "expect"):
            s = P.mbar_slot[op.sync]
            pending, tx, phases = mbars[s]
            cnt = 1 if k == "expect" else op.value
            if k == "expect":
                tx += op.value
            if cnt > pending:
                msg = (f"{P.s.groups[a].name} op #{pc} `{op.text()}` arrives {cnt}x on {op.sync} with only "
                       f"{pending} arrival(s) pending in phase {phases}")
                viol = ("counter misuse", (op.sync, (a, pc)), msg, ((a, pc),))
                cnt = pending
            mb, flipped = _flip((pending - cnt, tx, phases), P.s.mbarriers[op.sync])
            nmb = _set(mbars, s, mb)
            note = f"{op.sync} phase {phases} complete" if flipped else f"{op.sync} pending={mb[0]} tx={mb[1]}"
        elif k == "tma_load":
            viol = _race(P, st, a, pc, op)
            ntma = tuple(sorted(tma + ((a, pc),)))
        if syncp[a] or k == "write":
            ns = _set(syncp, a, (pc,) if k == "write" else ())
            local = False
        npc = P.skip[a][pc] if k == "if_last" and not last else pc + 1
        if npc < len(P.ops[a]) and P.ops[a][npc].kind == "barrier" and ns[a]:
            ns = _set(ns, a, ())  # arriving at a barrier ends the group's previous step
        ev = Event(a, pc, False, note, local and viol is None)
        nst = (_set(pcs, a, npc), nf, ns, nat, nmb, ntma, ncont)
        if ev.local and reduce:
            return [(ev, nst, None)]
        out.append((ev, nst, viol))
    for a, j in tma:
        op = P.ops[a][j]
        s = P.mbar_slot[op.sync]
        pending, tx, phases = mbars[s]
        mb, flipped = _flip((pending, tx - op.value, phases), P.s.mbarriers[op.sync])
        ncont = contents
        if P.tagged and op.data is not None:
            c = list(contents)
            for b in op.bufs:
                c[P.buf_slot[b]] = op.data
            ncont = tuple(c)
        ntma = tuple(x for x in tma if x != (a, j))
        note = f"{op.sync} phase {phases} complete" if flipped else f"{op.sync} tx={mb[1]}"
        out.append((Event(a, j, True, note), (pcs, fifos, syncp, atomics, _set(mbars, s, mb), ntma, ncont), None))
    return out


def _set(t: tuple, i: int, v) -> tuple:
    return t[:i] + (v,) + t[i + 1:]


def _deadlock(P: _Program, st, parent) -> Violation:
    pcs = st[0]
    blocked, lines, misuse = [], [], False
    for a in range(len(P.ops)):
        if pcs[a] >= len(P.ops[a]):
            continue
        op = P.ops[a][pcs[a]]
        blocked.append((a, pcs[a]))
        pos = P.s.position(a, pcs[a])
        if op.kind == "await" and op.value > P.atomic_max[op.sync]:
            misuse = True
            lines.append(f"{pos} waits for {op.sync} >= {op.value}, but all signals of the schedule add up "
                         f"to {P.atomic_max[op.sync]}")
        elif op.kind == "await":
            lines.append(f"{pos} waits for {op.sync} >= {op.value}, which stays at {st[3][P.atomic_slot[op.sync]]}")
        elif op.kind == "mwait":
            pending, tx, phases = st[4][P.mbar_slot[op.sync]]
            lines.append(f"{pos} waits for parity {op.value} of {op.sync}, stuck in phase {phases} "
                         f"({pending} arrival(s) and {tx} tx bytes pending)")
        elif op.kind == "barrier":
            o = P.ordinal[a][pcs[a]]
            lines.append(f"{pos} waits at its barrier #{o - 1}, other participants blocked elsewhere")
        else:
            lines.append(f"{pos} cannot proceed")
    kind = "counter misuse" if misuse else "deadlock"
    return Violation(kind, "; ".join(lines), _path(parent, st), blocked=tuple(blocked))


def _vacuous_waits(P: _Program) -> list:
    """Waits that never wait (the FIFO already holds <= N): often a wrong count (an epilogue vmcnt(N) written for the loop's queue depth)."""
    notes = []
    for a, ops in enumerate(P.ops):
        depth = {c: 0 for c in P.counters[a]}
        for i, op in enumerate(ops):
            if op.kind in COUNTED and op.counter:
                depth[op.counter] += op.n
            elif op.kind == "wait":
                if depth[op.counter] <= op.value and depth[op.counter] > 0:
                    notes.append(f"{P.s.position(a, i)} never waits: {depth[op.counter]} in flight at most")
                depth[op.counter] = min(depth[op.counter], op.value)
    return notes
