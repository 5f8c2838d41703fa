"""The stream-K fix-up of our Hopper kernel (pingpong.hopper.device.fixup, StreamKEpilogue over
StreamKScheduler's units), built from the kernel's own code.

Which units each consumer warpgroup runs, and each unit's tile and (slot, parts), come from
StreamKScheduler's own `create`, `local_tiles`, `unit` and `split`, run in plain Python
(`in_python`: a gluon function's body, the gluon functions it calls likewise) on the host's
decomposition (scheduler.stream_k_split, as the launcher calls it). The arrival count is
StreamKEpilogue.finish's (and SplitEpilogue.fix_up's) `arrive(counter, parts)`: after a barrier, the
warpgroup's first thread adds 1 (the consumer warps of config.SCHEDULE_FACTS). One group per consumer warpgroup:

    unit of a tile with parts = 1 (data-parallel, or a share that holds the whole tile)
        st.global out t                                         (the TMA epilogue's store)
    unit of slot s of a tile with parts > 1
        st.global ws[s] t                                       (store_partial: the partial)
        wait st.global 0          barrier, then an acq_rel add: the partial's stores are released before it
        if arrivals t += 1 reaches parts:                       (arrive: this warpgroup is last)
            arrivals t -= parts                                 (release_counter: back to 0)
            ld.global ws[0] t, ws[1] t, ..., ws[parts-1] t     (sum_and_store: slot order, fixed)
            st.global out t                                     (finish: through a staging buffer, TMA)
        end

Not modelled: fix_up's first step, `published` (an acquire read of the counter; a unit that
sees every other part arrived is last, skips its own partial's store and arrival, and sums
with its partial in registers). It needs a branch with an else, which the model has not; the
path modelled is the one every unit takes when that read comes too early.

No unit waits for another (fixup.py): the last to arrive finishes the tile. Every partial
carries its (tile, slot) as data and the sum expects it, so a sum that reads a slot before
its partial was stored is a stale read, and one that reads it while the store may still be in
flight a race. The sum reads the slots in one order whoever finishes, so its bits do not
depend on the arrival order; the model fixes that order, the checker cannot compare sums. The
counters must be 0 again at the end (the plan reuses them launch after launch):
`check(...).final_atomics` holds the counters' final values.

Ping-pong: consumer c runs the program's units c, c + 2, ... (kernel.consumer), one
counter per tile. Cooperative: both consumers run every unit, each its half of the rows, one
counter and one workspace block per (tile, half): the halves share nothing, so `halves`
picks which are modelled (half 0 by default: the other is the same protocol on other names,
and both together multiply the states; tests check both on a small launch).
The mainloop's ring is the business of the hopper_* models; it is left out here, which only
adds interleavings (the producer can delay a unit, never order two consumers' fix-ups).

Broken variants (`variant`):
    early_arrival   the arrival does not wait for the partial's stores (a relaxed atomic, or
                    the store issued after it): the last unit may sum a partial still in flight
    unchecked_sum   the tile's slot-0 unit sums right after its own arrival, without checking
                    the count (a reader that does not wait for the others' partials); the
                    other units only arrive
"""

from __future__ import annotations

import types

from ..errors import ScheduleError
from ..model import ScheduleBuilder

VARIANTS = ("correct", "early_arrival", "unchecked_sum")


def in_python(jit_fn, memo=None, **names):
    """The plain Python body of a gluon (or triton) jit function, every jit function it calls
    replaced by its own plain body, so that it runs on ints; `names` replace further globals
    (e.g. `gl`). The bodies are taken as they are at the call (a test may patch a `.fn`)."""
    from triton.runtime.jit import JITFunction

    memo = {} if memo is None else memo
    if jit_fn in memo and not names:
        return memo[jit_fn]
    fn = jit_fn.fn
    scope = dict(fn.__globals__)
    py = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    if not names:
        memo[jit_fn] = py
    for k, v in list(scope.items()):
        if isinstance(v, JITFunction):
            scope[k] = in_python(v, memo)
    scope.update(names)
    return py


def schedulers(tiles: int, k_steps: int, sms: int):
    """[(program, its StreamKScheduler)] of a stream-K launch of `tiles` output tiles of
    `k_steps` k-steps on `sms` SMs: the scheduler's own `create` and methods run in plain
    Python (a column of `tiles` tiles of 1 × 1, k-steps of 1: the launch's arithmetic only sees
    tile and k-step counts), on the host's decomposition (stream_k_split, as the launcher's)."""
    from pingpong.hopper.device.scheduler import StreamKScheduler
    from pingpong.hopper.host.splits import stream_k_split

    programs, dp_tiles, streamers = stream_k_split(tiles, k_steps, sms)
    memo = {}
    fields = list(StreamKScheduler.__annotations__)
    methods = {m: in_python(getattr(StreamKScheduler, m), memo)
               for m in ("local_tiles", "unit", "split", "first_step", "whole_before")}
    plain = type("StreamKSchedulerInPython", (), dict(methods, __init__=lambda self, *a, **kw: self.__dict__.update(
        zip(fields, a), **kw)))
    out = []
    for pid in range(programs):
        gl = types.SimpleNamespace(program_id=lambda axis, pid=pid: pid, num_programs=lambda axis: programs,
                                   cdiv=lambda a, b: -(-a // b))
        create = in_python(StreamKScheduler.create, memo, gl=gl, StreamKScheduler=plain)
        out.append((pid, create(tiles, 1, k_steps, dp_tiles, streamers, 1, 1, 1, 1)))
    return out


def program_units(tiles: int, k_steps: int, sms: int):
    """[(program, [(tile, slot, parts) of each of its units, in order])] of a stream-K launch
    (`schedulers`: StreamKScheduler's own methods)."""
    out = []
    for pid, sched in schedulers(tiles, k_steps, sms):
        units = []
        for t in range(sched.local_tiles()):
            tile, _, _, _ = sched.unit(t)
            slot, parts = sched.split(t)
            units.append((tile, slot, parts))
        out.append((pid, units))
    return out


def streamk_fixup(tiles: int = 7, k_steps: int = 12, sms: int = 5, schedule: str = "cooperative",
                  variant: str = "correct", halves=None):
    """The fix-up protocol of a stream-K launch of `tiles` tiles of `k_steps` k-steps on `sms`
    SMs (module docstring; `program_units` says who runs what). The default, 7 tiles of 12
    k-steps on 5 SMs, is a hybrid: one data-parallel wave of 5 tiles, then the 24 k-steps of
    tiles 5 and 6 shared by 3 programs, 8 each: program 1 arrives on tile 6 (slot 0 of 2) and
    then on tile 5 (slot 1 of 2, perhaps the last). `halves`: the cooperative row halves modelled (default:
    half 0). `variant`: one of VARIANTS."""
    from pingpong.hopper.host.config import SCHEDULE_FACTS

    for arg, v in (("tiles", tiles), ("k_steps", k_steps), ("sms", sms)):
        if type(v) is not int or v < 1:
            raise ScheduleError(f"{arg} must be an int >= 1, got {v!r}")
    if variant not in VARIANTS:
        raise ScheduleError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if schedule not in ("pingpong", "cooperative"):
        raise ScheduleError(f"schedule must be 'pingpong' or 'cooperative' (stream-K's warp-specialized schedules),"
                            f" got {schedule!r}")
    facts = SCHEDULE_FACTS[schedule]
    threads = 32 * facts.worker_warps[0]  # a consumer warpgroup; its first thread arrives, once
    halves = (0,) if halves is None else tuple(halves)
    if not halves or any(h not in range(facts.row_split) for h in halves):
        raise ScheduleError(f"halves must name row halves of the {schedule} schedule's tile (0 .. "
                            f"{facts.row_split - 1}), got {halves!r}")
    name = f"streamk_{schedule}" if variant == "correct" else f"streamk_{variant}" + (
        "" if schedule == "cooperative" else f"_{schedule}")
    b = ScheduleBuilder(name, streamk_fixup.__doc__)
    plan = program_units(tiles, k_steps, sms)

    def at(tile, half):
        return f"t{tile}" + (f".h{half}" if facts.row_split > 1 else "")

    for pid, units in plan:
        for cons in range(facts.consumers):
            if facts.row_split == 1:  # ping-pong: consumer c runs units c, c + 2, ..., whole tiles
                mine = [(u, 0) for u in units[cons::2]]
            else:  # cooperative: every unit, the rows of half c
                mine = [(u, cons) for u in units] if cons in halves else []
            if not mine:
                continue
            g = b.group(f"p{pid}.c{cons}", threads)
            for (tile, slot, parts), half in mine:
                here = at(tile, half)
                out = f"out {here}"
                b.buffer(out)
                g.where = f"tile {tile}" + (f" slot {slot} of {parts}" if parts > 1 else "")
                if parts == 1:
                    g.gstore(out, label=f"st.global result → {out}")
                    continue
                ws = [f"ws[{s}] {here}" for s in range(parts)]
                b.buffer(*ws, initial="never stored")
                counter = f"arrivals[{here}]"
                b.atomic(counter, 0)
                g.gstore(ws[slot], data=f"{here} slot {slot}", label=f"st.global partial → {ws[slot]}")
                if variant != "early_arrival":
                    g.wait("st.global", 0, label="wait st.global 0 (release)",
                           critical="fixup.py arrive: a barrier, then acq_rel: the partial's stores before the arrival")
                if variant == "unchecked_sum":
                    g.signal(counter, 1, label=f"arrive on {counter}")
                    if slot != 0:
                        continue
                else:
                    g.if_last(counter, parts, amount=1, label=f"arrive on {counter}; last of {parts}?")
                g.signal(counter, -parts, label=f"release_counter {counter}")
                for s in range(parts):  # SplitEpilogue.sum_into: slot order
                    g.read(ws[s], counter="ld.global", want=f"{here} slot {s}", label=f"sum += ld.global {ws[s]}")
                g.gstore(out, label=f"st.global sum → {out}")
                if variant != "unchecked_sum":
                    g.end_if()
    return b.build()
