"""The CDNA ping-pong's synchronization as a pingpong.schedule model (cdna_pingpong.py).

One representative wave per group (WG0 = waves 0–3, WG1 = waves 4–7). Buffers, as the kernel
allocates them: ``A{s}[g]`` is group g's private half of stage s's A tile (self-loaded, read
only by group g); ``B{s}[h]`` is half h of stage s's B tile, loaded by group h and read by
both groups. Load sizes are the derived DMA counts per wave, so a wait of vmcnt(a_loads)
leaves exactly the wave's newest A load in flight, as in the ISA. Every main-loop barrier is
preceded by the vmcnt wait that the kernel's `wait_then_barrier` emits (that barrier's
lgkmcnt(0) is the one in `compute`). `vmcnt_sequence(model, "loop")` gives the waits of one
loop iteration, which tests compare with the ISA.
"""

from __future__ import annotations

from ..schedule import ScheduleBuilder
from .config import KernelConfig

GROUPS = ("WG0", "WG1")


def cdna_pingpong(target: str = "gfx950", pairs: int = 3):
    """The kernel's schedule for `pairs` main-loop... K-step pairs (pairs-1 loop iterations)."""
    d = KernelConfig.for_target(target).derive()
    b = ScheduleBuilder(f"cdna_pingpong_{target}", cdna_pingpong.__doc__)
    for s in (0, 1):
        for h in (0, 1):
            b.buffer(f"A{s}[{h}]", f"B{s}[{h}]")
    for gi, name in enumerate(GROUPS):
        g = b.group(name, d.waves_per_group)

        def load(kind, s):
            g.load(f"{kind}{s}[{gi}]", n=d.a_loads if kind == "A" else d.b_loads, label=f"load {kind}{s}")

        def compute(s):
            g.read(f"A{s}[{gi}]")
            g.read(f"B{s}[0]")
            g.read(f"B{s}[1]")
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


def vmcnt_sequence(sched, where: str, group: str = "WG0") -> tuple:
    """The vmcnt values the group waits for in the ops labelled `where`, in program order."""
    ops = sched.group(group).ops
    return tuple(op.value for op in ops if op.kind == "wait" and op.counter == "vmcnt" and op.where == where)
