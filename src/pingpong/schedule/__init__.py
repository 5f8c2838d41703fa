"""pingpong.schedule: a model checker for synchronization races in kernel schedules.

    model      Schedule / Group / Op, the builder, validation (ScheduleError names the op)
    checker    hardware semantics + breadth-first exploration -> Result (races, deadlocks, misuse)
    timeline   ASCII timelines of traces (one column per group, one row per step)
    schedules  the shipped schedules (AMD GEMM and vector-add loops, our Hopper kernel's protocol,
               its stream-K fix-up)
    cli        `pingpong check`

See docs/schedule.md.
"""

from .checker import Result, Violation, check
from .errors import ScheduleError
from .model import Group, Op, Schedule, ScheduleBuilder, validate

__all__ = ["Group", "Op", "Result", "Schedule", "ScheduleBuilder", "ScheduleError", "Violation", "check", "validate"]
