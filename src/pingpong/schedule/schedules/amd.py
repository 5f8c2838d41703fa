"""AMD schedules as data: the 8-wave ping-pong GEMM (256×256×64 tile, two groups of 4 waves)
and the persistent double-buffered gfx942 vector add.

Buffers: ``As[stage][half]`` (A rows), ``Bs[stage][half]`` (B columns), two stages.
Both groups load every buffer cooperatively (8-wave loading, each group its own ``part``),
and both read them, so a write by one group conflicts with a read by the other.
Counts per op: a half-tile global→LDS load is 2 vmcnt ops (16 KiB / (16 B × 512 threads)),
an A fragment read 8 lgkmcnt ops, a B fragment read 4.
"""

from __future__ import annotations

from ..model import ScheduleBuilder

GROUPS = ("WG0", "WG1")
WAVES = 4  # waves per group
VM_PER_LOAD = 2  # 16 KiB half tile / (16 B × 512 threads)
LGKM_A, LGKM_B = 8, 4  # ds_read instructions per A / B fragment


def As(s, h):
    return f"As[{s}][{h}]"


def Bs(s, h):
    return f"Bs[{s}][{h}]"


def _gemm_builder(name: str, doc: str) -> ScheduleBuilder:
    b = ScheduleBuilder(name, doc)
    for s in (0, 1):
        for h in (0, 1):
            b.buffer(As(s, h), Bs(s, h))
    return b


def _load(g, buf, critical=""):
    """One cooperative half-tile load: this group's part of ``buf`` (8-wave loading)."""
    g.load(buf, n=VM_PER_LOAD, part=g.name, critical=critical)


def _load_stage(g, s):
    """buffers.load_b[s,0], load_a[s,0], load_b[s,1], load_a[s,1]."""
    for buf in (Bs(s, 0), As(s, 0), Bs(s, 1), As(s, 1)):
        _load(g, buf)


def _compute_stage(g, s, critical=""):
    """mma_op.load_b/load_a of stage s, then the 4 MFMAs; the compiler's lgkmcnt(0)
    before the first MFMA that uses the registers (the compiler inserts it)."""
    g.read(Bs(s, 0), n=LGKM_B)
    g.read(As(s, 0), n=LGKM_A)
    g.read(Bs(s, 1), n=LGKM_B)
    g.read(As(s, 1), n=LGKM_A)
    g.wait("lgkmcnt", 0, critical=critical)
    for _ in range(4):
        g.mma()


def simplified(k_iters: int = 4):
    """The barrier-based ping-pong loop with a barrier per step and ``vmcnt(0)`` after every
    batch of loads: the simplified, ~1000 GFLOPS schedule that works.

    The conditional barrier (WG1 only) staggers WG1 one phase behind; WG0 re-aligns at the
    end. Each K iteration covers 2×BK (stages 0 and 1).
    """
    b = _gemm_builder("simplified", simplified.__doc__)
    for gi, name in enumerate(GROUPS):
        g = b.group(name, WAVES)
        g.where = "prologue"
        _load_stage(g, 0)
        g.wait("vmcnt", 0)
        if gi == 1:
            g.barrier(label="s_barrier (stagger, WG1 only)")
        g.barrier()
        for it in range(k_iters):
            g.where = f"k={it} step1"
            g.barrier()
            _load_stage(g, 1)
            g.wait("vmcnt", 0, critical="ALL loads complete before proceeding")
            g.where = f"k={it} step2"
            g.barrier()
            _compute_stage(g, 0)
            g.where = f"k={it} step4"
            g.barrier()
            _compute_stage(g, 1)
            if it < k_iters - 1:
                g.where = f"k={it} step5"
                g.barrier()
                _load_stage(g, 0)
                g.wait("vmcnt", 0)
        if gi == 0:
            g.where = "epilogue"
            g.barrier(label="s_barrier (re-align, WG0 only)")
    return b.build()


def pingpong_sync(k_iters: int = 2, prologue_wait: bool = False):
    """The two-counter PingPongSync protocol (signal_a/wait_a/signal_b/wait_b on two atomic
    counters, combined in sync_point) replacing every s_barrier.

    k_iters = K / (2·BK): K = 256, BK = 64 gives 2 (counter_a and counter_b end at 32). As
    first written the prologue issues stage 0 without a ``vmcnt(0)`` (the barrier version has
    one); ``prologue_wait=True`` adds it.
    """
    name = "pingpong_sync_vmcnt0" if prologue_wait else "pingpong_sync"
    b = _gemm_builder(name, pingpong_sync.__doc__)
    b.atomic("counter_a").atomic("counter_b")
    for gi, gname in enumerate(GROUPS):
        g = b.group(gname, WAVES)
        phase = 1

        def sync_point(p):
            """G0 signals then waits for G1's previous phase; G1 waits for G0's phase."""
            if gi == 0:
                g.signal("counter_a")
                g.await_("counter_b", WAVES * (p - 1))
            else:
                g.await_("counter_a", WAVES * p)
                g.signal("counter_b")

        g.where = "prologue"
        _load_stage(g, 0)
        if prologue_wait:
            g.wait("vmcnt", 0)
        if gi == 0:
            g.signal("counter_a", label="signal_a (stagger)")
        else:
            g.await_("counter_a", WAVES, label="wait_a(1) (stagger)")
            g.signal("counter_b")
        for it in range(k_iters):
            g.where = f"k={it} SP1"
            phase += 1
            sync_point(phase)
            _load_stage(g, 1)
            g.wait("vmcnt", 0, critical="ALL loads complete before proceeding")
            g.where = f"k={it} SP2"
            phase += 1
            sync_point(phase)
            _compute_stage(g, 0)
            g.where = f"k={it} SP3"
            phase += 1
            sync_point(phase)
            _compute_stage(g, 1)
            if it < k_iters - 1:
                g.where = f"k={it} SP4"
                phase += 1
                sync_point(phase)
                _load_stage(g, 0)
                g.wait("vmcnt", 0)
        if gi == 0:
            g.where = "epilogue"
            g.await_("counter_b", WAVES * phase, label=f"wait_b({phase}) (re-align)")
    return b.build()


def _half(g, s, *, loads: bool, prefetch_b: bool, vm_main: int, a_other=True):
    """One half of the 8-step main loop (steps 1-8) reading stage ``s``.

    With ``loads`` it refills: As[1-s][1] (completes the other stage), then Bs[s][0],
    As[s][0], Bs[s][1] right after their last read (prefetch into the buffer just read,
    two K tiles ahead). ``prefetch_b`` reads next half's B_tile_0 at step 7.
    """
    o = 1 - s
    g.where = f"{g.where.split(' ')[0]} s{s} step1"
    g.read(Bs(s, 0), n=LGKM_B)
    g.read(As(s, 0), n=LGKM_A)
    if loads and a_other:
        _load(g, As(o, 1))
    g.wait("lgkmcnt", LGKM_A)
    g.barrier()
    g.where = g.where.replace("step1", "step2")
    g.wait("lgkmcnt", 0)
    g.mma()
    g.barrier()
    g.where = g.where.replace("step2", "step3")
    g.read(Bs(s, 1), n=LGKM_B)
    if loads:
        _load(g, Bs(s, 0))
    g.barrier()
    g.where = g.where.replace("step3", "step4")
    g.wait("lgkmcnt", 0)
    g.mma()
    g.barrier()
    g.where = g.where.replace("step4", "step5")
    g.read(As(s, 1), n=LGKM_A)
    if loads:
        _load(g, As(s, 0))
    g.barrier()
    g.where = g.where.replace("step5", "step6")
    g.wait("lgkmcnt", 0)
    g.mma()
    g.barrier()
    g.where = g.where.replace("step6", "step7")
    if prefetch_b:
        g.read(Bs(o, 0), n=LGKM_B)
    if loads:
        _load(g, Bs(s, 1))
    if vm_main is not None:
        g.wait("vmcnt", vm_main, critical="step 7: wait for prior writes")
    g.barrier()
    g.where = g.where.replace("step7", "step8")
    g.mma()
    g.barrier()


def _eight_wave(name, doc, k_iters, *, prologue_vm, main_vm, epilogue_vm, prefetch_b):
    b = _gemm_builder(name, doc)
    for gi, gname in enumerate(GROUPS):
        g = b.group(gname, WAVES)
        g.where = "prologue"
        _load_stage(g, 0)
        if gi == 1:
            g.barrier(label="s_barrier (stagger, WG1 only)")
        g.wait("vmcnt", prologue_vm[0])
        g.barrier()
        _load(g, Bs(1, 0))
        _load(g, As(1, 0))
        _load(g, Bs(1, 1))
        g.wait("vmcnt", prologue_vm[1])
        g.barrier()
        for it in range(k_iters):
            for s in (0, 1):
                g.where = f"k={it}"
                _half(g, s, loads=True, prefetch_b=prefetch_b, vm_main=main_vm)
        # epilogue: block 1 reads stage 0 and issues the last A load of stage 1;
        # block 2 reads stage 1.
        g.where = "epi1"
        _epilogue_block(g, 0, load_a11=True, vm=epilogue_vm[0], prefetch_b=prefetch_b, block=1)
        g.where = "epi2"
        g.wait("vmcnt", epilogue_vm[1])
        _epilogue_block(g, 1, load_a11=False, vm=None, prefetch_b=False, block=2)
        if gi == 0:
            g.where = "epilogue"
            g.barrier(label="s_barrier (re-align, WG0 only)")
    return b.build()


def _epilogue_block(g, s, *, load_a11, vm, prefetch_b, block):
    g.where = f"epi{block} step1"
    g.read(Bs(s, 0), n=LGKM_B)
    g.read(As(s, 0), n=LGKM_A)
    if load_a11:
        _load(g, As(1, 1))
    g.wait("lgkmcnt", LGKM_A)
    g.barrier()
    for step, buf in ((3, Bs(s, 1)), (5, As(s, 1))):
        g.where = f"epi{block} step{step - 1}"
        g.wait("lgkmcnt", 0)
        g.mma()
        g.barrier()
        g.where = f"epi{block} step{step}"
        g.read(buf, n=LGKM_A if buf.startswith("A") else LGKM_B)
        g.barrier()
    g.where = f"epi{block} step6"
    g.wait("lgkmcnt", 0)
    g.mma()
    g.barrier()
    g.where = f"epi{block} step7"
    if prefetch_b:
        g.read(Bs(1 - s, 0), n=LGKM_B)
    if vm is not None:
        g.wait("vmcnt", vm)
    g.barrier()
    g.where = f"epi{block} step8"
    g.mma()
    g.barrier()


def optimized(k_iters: int = 4, epilogue=(2, 1)):
    """The optimized 8-step schedule (the HipKittens main loop, loads interleaved with LDS reads
    and MFMAs), a conservative prologue (vmcnt(0) twice), main loop vmcnt(6), and an
    epilogue in which block 1 issues load_a[1,1] and waits vmcnt(2), block 2 waits vmcnt(1):
    the bug that gave slightly wrong results in 10-20% of runs. With ``epilogue=(0, 0)`` it
    is the working configuration.
    """
    name = "optimized" if tuple(epilogue) == (2, 1) else "optimized_vmcnt" + "".join(map(str, epilogue))
    return _eight_wave(name, optimized.__doc__, k_iters, prologue_vm=(0, 0), main_vm=6, epilogue_vm=tuple(epilogue),
                       prefetch_b=False)


def optimized_fixed(k_iters: int = 4):
    """The optimized schedule with the epilogue fix, vmcnt(0)."""
    s = optimized(k_iters, epilogue=(0, 0))
    return s


def hipkittens(k_iters: int = 4):
    """The HipKittens 256_256_64_32_with16x32 reference schedule as published in outline:
    prologue vmcnt(4)/vmcnt(6), 8 steps per half with a barrier after each, step 7 reading
    next half's B_tile_0 and waiting vmcnt(6). The outline gives the first half; the second
    half mirrors it on the other stage. The epilogue (not in the outline) is the
    conservative one, vmcnt(0).
    """
    return _eight_wave("hipkittens", hipkittens.__doc__, k_iters, prologue_vm=(4, 6), main_vm=6, epilogue_vm=(0, 0),
                       prefetch_b=True)


def vector_add(k_iters: int = 4, loop_vmcnt: int = 3):
    """The persistent gfx942 vector add with double LDS buffering and a deep prologue. Each
    wave reads only its own LDS region, so one wave is the whole story (no barrier). Prologue: A,B of iterations 0 and 1 into buf0 and buf1, vmcnt(2).
    Each half-iteration: ds_read A,B from its buffer, lgkmcnt(0), prefetch 2 iterations
    ahead into the same buffer, add, store C, exit check, vmcnt(3) (drains the other
    buffer's 2 loads). ``loop_vmcnt=4`` is the too-loose value that must be flagged.
    ``k_iters`` counts half-iterations (grid-stride steps).
    """
    name = "vector_add" if loop_vmcnt == 3 else f"vector_add_vmcnt{loop_vmcnt}"
    b = ScheduleBuilder(name, vector_add.__doc__)
    b.buffer("buf0.A", "buf0.B", "buf1.A", "buf1.B")
    g = b.group("wave", 4)
    g.where = "prologue"
    for buf in ("buf0", "buf1"):
        g.load(f"{buf}.A")
        g.load(f"{buf}.B")
    g.wait("vmcnt", 2, critical="drain the oldest 2 (buf0 ready)")
    for h in range(k_iters):
        buf = f"buf{h % 2}"
        g.where = f"iter {h}"
        g.read((f"{buf}.A", f"{buf}.B"), n=2, label=f"LDS→ {buf}.A,{buf}.B")
        g.wait("lgkmcnt", 0, critical="read the buffer before prefetching into it")
        g.load(f"{buf}.A", label=f"prefetch A[{h + 2}] →LDS {buf}.A")
        g.load(f"{buf}.B", label=f"prefetch B[{h + 2}] →LDS {buf}.B")
        g.mma(label="v_add_f32")
        g.store(label=f"buffer_store C[{h}]")
        if h < k_iters - 1:
            g.wait("vmcnt", loop_vmcnt, critical="vmcnt(3) drains the other buffer's loads")
    g.where = "L_done"
    g.wait("vmcnt", 0)
    return b.build()
