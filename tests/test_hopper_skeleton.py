"""Every warp-specialized Hopper kernel runs one skeleton (pingpong.hopper.kernels.gemm.run_partitions):
the partitions are written once, the variants are the aggregates passed in."""

import ast
import inspect
from pathlib import Path

import pingpong.hopper as hopper_pkg
from pingpong.hopper.kernels import fp8_gemm as fp8_kernel, fp8_grouped, gemm as kernel, grouped, grouped_k

HOPPER = Path(hopper_pkg.__file__).parent


def calls(source: str, name: str) -> int:
    """Calls of a function or method called `name` in `source`."""
    return sum(1 for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
               and getattr(node.func, "attr", getattr(node.func, "id", None)) == name)


def test_warp_specialize_is_called_only_by_the_skeleton():
    sites = {p.relative_to(HOPPER).as_posix(): calls(p.read_text(), "warp_specialize")
             for p in sorted(HOPPER.rglob("*.py"))}
    assert {name: n for name, n in sites.items() if n} == {"kernels/gemm.py": 1}  # both schedules
    assert calls(inspect.getsource(kernel.run_partitions.fn), "warp_specialize") == 1


def test_every_warp_specialized_kernel_runs_the_skeleton():
    kernels = [kernel.warp_specialized_gemm, kernel.split_k_gemm, kernel.stream_k_gemm, grouped.grouped_gemm,
               grouped_k.grouped_k_gemm, fp8_kernel.fp8_gemm, fp8_kernel.fp8_split_gemm,
               fp8_grouped.fp8_grouped_gemm]
    for k in kernels:
        source = inspect.getsource(k.fn)
        assert calls(source, "run_partitions") + calls(source, "run_fp8_partitions") == 1, k.fn.__name__
    assert calls(inspect.getsource(fp8_kernel.run_fp8_partitions.fn), "run_partitions") == 1


def test_one_consumer_function_for_both_schedules():
    """A consumer partition: a `consumer` function of the ring (phase_sync.other_consumer is arithmetic)."""
    consumers = sorted(f"{p.stem}.{node.name}" for p in HOPPER.rglob("*.py") for node in ast.parse(p.read_text()).body
                       if isinstance(node, ast.FunctionDef) and node.name.endswith("consumer")
                       and "ring" in [a.arg for a in node.args.args])
    assert consumers == ["gemm.consumer"]


SCHEDULER_INTERFACE = ("local_tiles", "tile_offsets", "locate", "k_begin", "unit_steps", "first_step", "tile_batch",
                       "split")


def test_every_scheduler_is_a_raster_scheduler():
    """The skeleton's schedulers are one family: each a RasterScheduler, its fields after the
    base's (the partitions' arguments keep their order), the whole interface answered."""
    from pingpong.hopper.device import scheduler

    base = list(scheduler.RasterScheduler.__aggregate_fields__)
    for sched in (scheduler.TileScheduler, scheduler.SplitKScheduler, scheduler.StreamKScheduler,
                  grouped.GroupedScheduler, grouped_k.RaggedKScheduler):
        assert list(sched.__aggregate_fields__)[:len(base)] == base, sched.__name__  # (an aggregate's class
        # is built anew: issubclass does not see the base, its fields do)
        missing = [m for m in SCHEDULER_INTERFACE if not callable(getattr(sched, m, None))]
        assert not missing, (sched.__name__, missing)
    assert grouped_k.RaggedKScheduler.__aggregate_defaults__["RAGGED_K"] is True
    assert scheduler.TileScheduler.__aggregate_defaults__["RAGGED_K"] is False
