"""The CDNA ping-pong's synchronization as a pingpong.schedule model (cdna_pingpong.py).

One representative wave per group (WG0 = waves 0–3, WG1 = waves 4–7). Buffers, as the kernel
allocates them: ``A{s}[h]`` and ``B{s}[h]`` are half h of stage s's A and B tile. Which group
loads and which groups read each half is not assumed but computed from the kernel's layouts
(`sharing`): group g loads half g of both; A's half g is read by group g only (A is
group-private), B's halves by both groups. Load sizes are the derived DMA counts per wave, so a wait of vmcnt(a_loads)
leaves exactly the wave's newest A load in flight, as in the ISA. Every main-loop barrier is
preceded by the vmcnt wait that the kernel's `wait_then_barrier` emits (that barrier's
lgkmcnt(0) is the one in `compute`). `vmcnt_sequence(model, "loop")` gives the waits of one
loop iteration; `vmcnt_sequence(model, "loop", emitted=True)` those of them that can block,
which is what the ISA has (LLVM emits no s_waitcnt for a wait that is already satisfied, such
as the one before S4), and tests compare that with the ISA.
"""

from __future__ import annotations

import functools

from ..schedule import ScheduleBuilder
from .config import CdnaConfig

GROUPS = ("WG0", "WG1")


def _span(bases, dim: int) -> set:
    """Coordinates along `dim` reachable by XOR-ing any subset of linear-layout bases."""
    pts = {0}
    for b in bases:
        pts |= {p ^ b[dim] for p in pts}
    return pts


def _per_wave(ll, dim: int, waves: int) -> list:
    """For each wave: the coordinates along `dim` that its lanes and registers hold."""
    inner = _span(list(ll.reg_bases) + list(ll.lane_bases), dim)
    out = []
    for w in range(waves):
        off = 0
        for bit, base in enumerate(ll.warp_bases):
            if w >> bit & 1:
                off ^= base[dim]
        out.append({p ^ off for p in inner})
    return out


@functools.cache
def sharing(target: str) -> dict:
    """Who touches which half of the A and B tiles, computed from the kernel's layouts:
    ``{"load": {half: groups}, "A": {half: groups}, "B": {half: groups}}``. "load": the
    groups whose direct-to-LDS loads write the half (buffers.load_layout; the same for A and
    B); "A"/"B": the groups whose MFMA operands read it (mma.py's dot-operand layouts, rows
    mapped to halves with buffers.storage_half)."""
    from triton._C.libtriton import gluon_ir, ir
    from triton.experimental.gluon import language as gl

    from .buffers import load_layout, storage_half
    from .mma import mfma_layout

    d = CdnaConfig.for_target(target).derive()
    ctx = ir.context()
    ir.load_dialects(ctx)
    builder = gluon_ir.GluonOpBuilder(ctx)

    def linear(layout, shape):
        return builder.to_linear_layout(layout._to_ir(builder), list(shape))

    def group(w):
        return w // d.waves_per_group

    acc = mfma_layout(d.mfma_version, d.mfma_shape[2], d.groups, d.waves_per_group)
    load = linear(load_layout(d.load_width, d.subtile_rows, d.waves_per_group),
                  [d.block_m // 2 // d.subtile_rows, 2, d.subtiles_k, d.subtile_rows, d.subtile_cols])
    a = linear(gl.DotOperandLayout(0, acc, d.k_width), [d.block_m, d.block_k])
    b = linear(gl.DotOperandLayout(1, acc, d.k_width), [d.block_k, d.block_n])
    out = {"load": {0: set(), 1: set()}, "A": {0: set(), 1: set()}, "B": {0: set(), 1: set()}}
    for w, halves in enumerate(_per_wave(load, 1, d.waves)):
        for h in halves:
            out["load"][h].add(group(w))
    for key, ll, dim in (("A", a, 0), ("B", b, 1)):
        for w, coords in enumerate(_per_wave(ll, dim, d.waves)):
            for x in coords:
                out[key][storage_half(x, d.subtile_rows)].add(group(w))
    return {k: {h: frozenset(g) for h, g in v.items()} for k, v in out.items()}


def cdna_pingpong(target: str = "gfx950", pairs: int = 3, share: dict | None = None):
    """The kernel's schedule for `pairs` K-step pairs (pairs-1 loop iterations). Which group
    loads and reads which half comes from `sharing(target)` (the kernel's layouts) unless
    `share` overrides it (tests)."""
    d = CdnaConfig.for_target(target).derive()
    share = share or sharing(target)
    b = ScheduleBuilder(f"cdna_pingpong_{target}", cdna_pingpong.__doc__)
    for s in (0, 1):
        for h in (0, 1):
            b.buffer(f"A{s}[{h}]", f"B{s}[{h}]")
    for gi, name in enumerate(GROUPS):
        g = b.group(name, d.waves_per_group)

        (mine,) = [h for h, gs in share["load"].items() if gi in gs]  # each group loads one half

        def load(kind, s):
            g.load(f"{kind}{s}[{mine}]", n=d.a_loads if kind == "A" else d.b_loads, label=f"load {kind}{s}")

        def compute(s):
            for kind in ("A", "B"):
                for h, readers in share[kind].items():
                    if gi in readers:
                        g.read(f"{kind}{s}[{h}]")
            g.wait("lgkmcnt", 0)
            g.mma(label=f"mfma stage {s}")

        g.where = "prologue"
        load("B", 0)
        load("A", 0)
        g.wait("vmcnt", d.prologue_vmcnt[0])
        g.barrier()
        if gi == 1:
            g.barrier(label="s_barrier (stagger, WG1 only)")
        g.barrier(label="S1")
        for it in range(pairs - 1):
            g.where = "loop" if it == 0 else f"loop {it}"
            w = iter(d.main_loop_vmcnt)
            load("B", 1)
            load("A", 1)
            g.wait("vmcnt", next(w), label=f"vmcnt({d.main_loop_vmcnt[0]}): B1 landed, A1 in flight")
            g.barrier(label="S2")
            compute(0)
            g.wait("vmcnt", next(w), label="vmcnt(0): A1 landed")
            g.barrier(label="S3")
            load("A", 0)
            compute(1)
            g.wait("vmcnt", next(w), label=f"vmcnt({d.main_loop_vmcnt[2]}): A0 in flight across S4")
            g.barrier(label="S4")
            load("B", 0)
            g.wait("vmcnt", next(w), label="vmcnt(0): A0, B0 landed")
            g.barrier(label="S1")
        g.where = "epilogue"
        load("B", 1)
        load("A", 1)
        g.wait("vmcnt", d.epilogue_vmcnt[0])
        g.barrier(label="E2")
        compute(0)
        g.barrier(label="E3")
        compute(1)
        if gi == 0:
            g.barrier(label="s_barrier (re-sync, WG0 only)")
    return b.build()


def emitted_ops(sched, group: str = "WG0") -> tuple:
    """The group's ops without the vmcnt waits that cannot block: a wait for vmcnt <= N where
    at most N of the group's loads can be in flight (replayed in program order from the
    start). Triton 3.9 lowers `wait_group` to LLVM async marks and LLVM emits no `s_waitcnt`
    for such a wait, so these are the ops the ISA has (config.emitted_waits, same rule)."""
    out, in_flight = [], 0
    for op in sched.group(group).ops:
        if op.kind == "load" and op.counter == "vmcnt":
            in_flight += op.n
        elif op.kind == "wait" and op.counter == "vmcnt":
            if in_flight <= op.value:
                continue  # satisfied already: no instruction
            in_flight = op.value
        out.append(op)
    return tuple(out)


def vmcnt_sequence(sched, where: str, group: str = "WG0", emitted: bool = False) -> tuple:
    """The vmcnt values the group waits for in the ops labelled `where`, in program order;
    with `emitted`, only the waits that can block (`emitted_ops`), i.e. those in the ISA."""
    ops = emitted_ops(sched, group) if emitted else sched.group(group).ops
    return tuple(op.value for op in ops if op.kind == "wait" and op.counter == "vmcnt" and op.where == where)
