"""The schedule model: one straight-line program per group of threads, as plain data.

A *group* is a set of waves/warps (``count`` of them) that run the same instruction stream:
AMD's ping-pong wave groups WG0/WG1, a Hopper producer warp, a consumer warpgroup. The checker
runs one representative per group: its per-wave counters (vmcnt, lgkmcnt, wgmma groups,
TMA-store groups) stand for those of every wave of the group, and an atomic ``signal`` adds
``count`` (every wave of the group adds 1). Loops over K are unrolled by the builder (plain
Python ``for``), each op keeping the ``where`` label of its loop iteration.

Operations (``Op.kind``):

    load      async write of ``bufs`` (global -> LDS/smem), +n on an in-order counter (vmcnt)
    read      async read of ``bufs`` (LDS -> registers), +n on a counter (lgkmcnt)
    store     async global store, +n on a counter; reads ``bufs`` if given (TMA store of staging)
    gstore    async global store that writes ``bufs`` (a workspace or output tile in global
              memory), +n on a counter (st.global)
    mma       matrix multiply; from registers (no bufs) or async from ``bufs`` on a counter (wgmma)
    write     synchronous write of ``bufs`` (st.shared of the epilogue staging tile)
    wait      wait until ``counter`` <= value (s_waitcnt, warpgroup_mma_wait, tma.store_wait)
    barrier   workgroup barrier ``sync`` (all participants; appears in some programs only = stagger)
    signal    atomic add to counter ``sync`` (PingPongSync signal_a/signal_b); may be negative
    await     spin until atomic ``sync`` >= value (PingPongSync wait_a/wait_b)
    arrive    mbarrier arrive (count ``value``)
    expect    mbarrier arrive + expect-tx of ``value`` bytes (Gluon ``mbarrier.expect``)
    tma_load  async write of ``bufs`` whose ``value`` bytes complete-tx on mbarrier ``sync``
    mwait     wait on mbarrier ``sync`` for parity ``value``
    if_last   atomic add of ``value`` to counter ``sync``; the group runs the ops up to the
              matching ``end_if`` only when its add brought the counter to ``n`` (it arrived
              last: the split-K / stream-K fix-up), else it goes on after the ``end_if``
    end_if    the end of an ``if_last`` block (no effect)

Every op has a ``label`` for timelines; ``where`` says which loop iteration/step it is in;
``critical`` says why the op is needed (mutation tests: deleting it must be reported).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .errors import ScheduleError

#: op kinds that issue an asynchronous access tracked by an in-order per-wave counter
COUNTED = ("load", "read", "store", "gstore", "mma")
#: the ops a mutation test may delete: waits and barriers of every sort
SYNC_KINDS = ("wait", "barrier", "await", "mwait")

#: hardware limits of the in-order counters (CDNA3 ISA: vmcnt 6 bits, lgkmcnt 4 bits)
COUNTER_MAX = {"vmcnt": 63, "lgkmcnt": 15}


@dataclass(frozen=True)
class Op:
    kind: str
    bufs: tuple[str, ...] = ()
    counter: str | None = None
    n: int = 1
    sync: str | None = None
    value: int = 0
    part: str | None = None  # cooperative writes: disjoint parts of one buffer do not conflict
    data: object = None  # what a write puts in its buffer (generation tag)
    want: object = None  # what a read expects to find there (stale-read check)
    label: str = ""
    where: str = ""
    critical: str = ""

    @property
    def writes(self) -> bool:
        return self.kind in ("load", "write", "tma_load", "gstore")

    @property
    def accesses(self) -> bool:
        return bool(self.bufs)

    def text(self) -> str:
        return self.label or describe(self)


def describe(op: Op) -> str:
    """A default one-line rendering (→LDS writes, LDS→ reads)."""
    b = ",".join(op.bufs)
    k = op.kind
    if k == "load":
        return f"{b} →LDS (+{op.n} {op.counter})"
    if k == "read":
        return f"LDS→ {b} (+{op.n} {op.counter})"
    if k == "store":
        return f"store {b or 'C'} (+{op.n} {op.counter})"
    if k == "gstore":
        return f"st.global {b} (+{op.n} {op.counter})"
    if k == "mma":
        return f"mma {b} (+{op.n} {op.counter})" if op.counter else "mma"
    if k == "write":
        return f"write {b}"
    if k == "wait":
        return f"wait {op.counter}<={op.value}"
    if k == "barrier":
        return f"barrier {op.sync}"
    if k == "signal":
        return f"signal {op.sync} += {op.value or 'count'}"
    if k == "await":
        return f"await {op.sync} >= {op.value}"
    if k == "arrive":
        return f"arrive {op.sync}" + (f" x{op.value}" if op.value != 1 else "")
    if k == "expect":
        return f"expect {op.sync} {op.value} B"
    if k == "tma_load":
        return f"TMA {b} → {op.sync} ({op.value} B)"
    if k == "mwait":
        return f"wait {op.sync} parity {op.value}"
    if k == "if_last":
        return f"{op.sync} += {op.value}; if it reached {op.n}:"
    return k


@dataclass(frozen=True)
class Group:
    name: str
    count: int
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class Schedule:
    """A kernel schedule: groups' programs plus the shared objects they name.

    barriers: name -> participating group names (default: the workgroup barrier
    ``s_barrier`` with every group). atomics: name -> initial value. mbarriers: name ->
    arrival count (initialized before the groups start, as kernels do before forking).
    A group that has exited no longer counts at a workgroup barrier (CDNA3 ISA S_BARRIER:
    "waits on only the surviving waves").
    """

    name: str
    doc: str
    groups: tuple[Group, ...]
    buffers: tuple[str, ...]
    barriers: dict = field(default_factory=dict)
    atomics: dict = field(default_factory=dict)
    mbarriers: dict = field(default_factory=dict)
    initial: dict = field(default_factory=dict)  # buffer -> initial data tag

    def group(self, name: str) -> Group:
        for g in self.groups:
            if g.name == name:
                return g
        raise ScheduleError(f"schedule {self.name!r} has no group {name!r}")

    def sync_ops(self):
        """(group index, op index, op) of every wait and barrier: the mutation candidates."""
        for gi, g in enumerate(self.groups):
            for i, op in enumerate(g.ops):
                if op.kind in SYNC_KINDS:
                    yield gi, i, op

    def without(self, gi: int, i: int) -> "Schedule":
        """This schedule with op ``i`` of group ``gi`` deleted (a mutant)."""
        g = self.groups[gi]
        ng = replace(g, ops=g.ops[:i] + g.ops[i + 1:])
        op = g.ops[i]
        return replace(self, name=f"{self.name}-without-{g.name}#{i}", groups=self.groups[:gi] + (ng,) + self.groups[gi + 1:],
                       doc=f"{self.name} without {g.name} op #{i} `{op.text()}`")

    def position(self, gi: int, i: int) -> str:
        g = self.groups[gi]
        op = g.ops[i]
        where = f" [{op.where}]" if op.where else ""
        return f"group {g.name!r} op #{i} `{op.text()}`{where}"


def validate(s: Schedule) -> Schedule:
    """Raise ScheduleError naming the first malformed operation; return ``s`` when well formed."""
    names = [g.name for g in s.groups]
    if not s.groups:
        raise ScheduleError(f"schedule {s.name!r} has no groups")
    if len(set(names)) != len(names):
        raise ScheduleError(f"schedule {s.name!r}: duplicate group names {names}")
    for bar, parts in s.barriers.items():
        for p in parts:
            if p not in names:
                raise ScheduleError(f"schedule {s.name!r}: barrier {bar!r} names unknown group {p!r}")
    for mb, cnt in s.mbarriers.items():
        if cnt < 1:
            raise ScheduleError(f"schedule {s.name!r}: mbarrier {mb!r} initialized with count {cnt} (must be >= 1)")
    buffers = set(s.buffers)
    for gi, g in enumerate(s.groups):
        if g.count < 1:
            raise ScheduleError(f"schedule {s.name!r}: group {g.name!r} has count {g.count} (must be >= 1)")
        issued = {op.counter for op in g.ops if op.kind in COUNTED and op.counter}

        def bad(i, why):
            return ScheduleError(f"schedule {s.name!r}, {s.position(gi, i)}: {why}")

        depth = 0  # if_last blocks open
        for i, op in enumerate(g.ops):
            for b in op.bufs:
                if b not in buffers:
                    raise bad(i, f"unknown buffer {b!r} (declared: {', '.join(sorted(buffers)) or 'none'})")
            if op.kind in COUNTED:
                if op.n < 1:
                    raise bad(i, f"count n={op.n} must be >= 1")
                if op.kind == "mma" and op.bufs and not op.counter:
                    raise bad(i, "an mma reading buffers needs a counter (e.g. 'wgmma')")
                if op.kind != "mma" and not op.counter:
                    raise bad(i, "asynchronous op without a counter")
            elif op.kind == "wait":
                if op.value < 0:
                    raise bad(i, f"negative count {op.value}")
                if op.counter not in issued:
                    raise bad(i, f"waits on counter {op.counter!r} that no op of group {g.name!r} increments "
                                 "(counters are per wave)")
                cap = COUNTER_MAX.get(op.counter)
                if cap is not None and op.value > cap:
                    raise bad(i, f"{op.counter} is at most {cap} in hardware, cannot wait for {op.value}")
            elif op.kind == "barrier":
                if depth:
                    raise bad(i, "a barrier inside an if_last block (its arrivals would depend on the branch)")
                if op.sync not in s.barriers:
                    raise bad(i, f"unknown barrier {op.sync!r}")
                if g.name not in s.barriers[op.sync]:
                    raise bad(i, f"group {g.name!r} is not a participant of barrier {op.sync!r}")
            elif op.kind in ("signal", "await", "if_last"):
                if op.sync not in s.atomics:
                    raise bad(i, f"unknown atomic counter {op.sync!r}")
                if op.kind == "await" and op.value < 0:
                    raise bad(i, f"negative count {op.value}")
                if op.kind == "if_last":
                    depth += 1
            elif op.kind in ("arrive", "expect", "tma_load", "mwait"):
                if op.sync not in s.mbarriers:
                    raise bad(i, f"unknown mbarrier {op.sync!r}")
                if op.kind == "mwait" and op.value not in (0, 1):
                    raise bad(i, f"parity must be 0 or 1, got {op.value}")
                if op.kind in ("arrive",) and op.value < 1:
                    raise bad(i, f"arrival count {op.value} must be >= 1")
                if op.kind in ("expect", "tma_load") and op.value < 1:
                    raise bad(i, f"byte count {op.value} must be >= 1")
            elif op.kind == "end_if":
                if not depth:
                    raise bad(i, "end_if without an if_last")
                depth -= 1
            elif op.kind == "write":
                pass
            else:
                raise bad(i, f"unknown operation kind {op.kind!r}")
        if depth:
            raise ScheduleError(f"schedule {s.name!r}: group {g.name!r} has {depth} if_last without its end_if")
    return s


# ----------------------------------------------------------------------------- builder


class GroupBuilder:
    """Appends ops to one group's program; ``where`` labels the current loop iteration/step."""

    def __init__(self, name: str, count: int):
        self.name = name
        self.count = count
        self.ops: list[Op] = []
        self.where = ""

    def _add(self, **kw) -> "GroupBuilder":
        kw.setdefault("where", self.where)
        self.ops.append(Op(**kw))
        return self

    # asynchronous accesses on in-order counters (AMD vmcnt/lgkmcnt, Hopper wgmma/TMA store)
    def load(self, buf, n=1, counter="vmcnt", part=None, data=None, label="", critical=""):
        return self._add(kind="load", bufs=_t(buf), n=n, counter=counter, part=part, data=data, label=label,
                         critical=critical)

    def read(self, buf, n=1, counter="lgkmcnt", want=None, label=""):
        return self._add(kind="read", bufs=_t(buf), n=n, counter=counter, want=want, label=label)

    def store(self, buf=(), n=1, counter="vmcnt", want=None, label=""):
        return self._add(kind="store", bufs=_t(buf), n=n, counter=counter, want=want, label=label)

    def gstore(self, buf, n=1, counter="st.global", data=None, label="", critical=""):
        return self._add(kind="gstore", bufs=_t(buf), n=n, counter=counter, data=data, label=label,
                         critical=critical)

    def mma(self, bufs=(), counter=None, n=1, want=None, label=""):
        return self._add(kind="mma", bufs=_t(bufs), counter=counter, n=n, want=want, label=label)

    def write(self, buf, data=None, label=""):
        return self._add(kind="write", bufs=_t(buf), data=data, label=label)

    def wait(self, counter, value, label="", critical=""):
        return self._add(kind="wait", counter=counter, value=value, label=label, critical=critical)

    # workgroup barriers and atomic counters (AMD)
    def barrier(self, name="s_barrier", label="", critical=""):
        return self._add(kind="barrier", sync=name, label=label, critical=critical)

    def signal(self, atomic, amount=None, label=""):
        return self._add(kind="signal", sync=atomic, value=self.count if amount is None else amount, label=label)

    def await_(self, atomic, threshold, label="", critical=""):
        return self._add(kind="await", sync=atomic, value=threshold, label=label, critical=critical)

    def if_last(self, atomic, total, amount=None, label=""):
        """Add ``amount`` (default: ``count``, every thread of the group 1) to ``atomic``; the
        ops up to the matching end_if run only if that brought it to ``total``."""
        return self._add(kind="if_last", sync=atomic, value=self.count if amount is None else amount, n=total,
                         label=label)

    def end_if(self):
        return self._add(kind="end_if")

    # mbarriers and TMA (Hopper)
    def arrive(self, mbar, count=1, label="", critical=""):
        return self._add(kind="arrive", sync=mbar, value=count, label=label, critical=critical)

    def expect(self, mbar, nbytes, label=""):
        return self._add(kind="expect", sync=mbar, value=nbytes, label=label)

    def tma_load(self, buf, mbar, nbytes, data=None, label=""):
        return self._add(kind="tma_load", bufs=_t(buf), sync=mbar, value=nbytes, data=data, label=label)

    def mwait(self, mbar, parity, label="", critical=""):
        return self._add(kind="mwait", sync=mbar, value=parity, label=label, critical=critical)


class ScheduleBuilder:
    """Build a Schedule: declare buffers and sync objects, add groups, append their ops."""

    def __init__(self, name: str, doc: str = ""):
        self.name = name
        self.doc = doc
        self._groups: list[GroupBuilder] = []
        self.buffers: list[str] = []
        self.barriers: dict = {}
        self.atomics: dict = {}
        self.mbarriers: dict = {}
        self.initial: dict = {}

    def group(self, name: str, count: int = 1) -> GroupBuilder:
        g = GroupBuilder(name, count)
        self._groups.append(g)
        return g

    def buffer(self, *names: str, initial=None) -> "ScheduleBuilder":
        for n in names:
            if n not in self.buffers:
                self.buffers.append(n)
            if initial is not None:
                self.initial[n] = initial
        return self

    def barrier(self, name: str, participants) -> "ScheduleBuilder":
        self.barriers[name] = tuple(participants)
        return self

    def atomic(self, name: str, initial: int = 0) -> "ScheduleBuilder":
        self.atomics[name] = initial
        return self

    def mbarrier(self, name: str, count: int = 1) -> "ScheduleBuilder":
        self.mbarriers[name] = count
        return self

    def build(self) -> Schedule:
        barriers = dict(self.barriers)
        barriers.setdefault("s_barrier", tuple(g.name for g in self._groups))
        groups = tuple(Group(g.name, g.count, tuple(g.ops)) for g in self._groups)
        return validate(Schedule(self.name, self.doc, groups, tuple(self.buffers), barriers, dict(self.atomics),
                                 dict(self.mbarriers), dict(self.initial)))


def _t(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, str):
        return (x,)
    return tuple(x)
