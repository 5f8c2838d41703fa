"""Is a small FP8 product's benchmark time the GPU's, or the host's? (GPU)

triton's do_bench flushes the L2 (zeroes a 256 MB buffer), records a start event, calls fn and
records an end event. The start event runs on the GPU as soon as the flush ends; if the host
has not launched fn's kernel by then, the GPU idles and the idle time is counted as the
kernel's. Per shape, ours (pingpong.scaled_mm) and torch._scaled_mm on the same tensors, in
alternated rounds:

  flushed  do_bench's own loop
  queued   pingpong's timer (pingpong.tools.timing: a spin kernel before each flush keeps the
           host ahead): the kernel's GPU time
  graph    20 calls captured in one CUDA graph, replayed: GPU time per call, no flush (the
           operands stay in L2 from call to call)
  host     µs per call on the host, the calls enqueued behind a long spin kernel

    python benchmarks/host_gap.py --shapes 64,4096,4096 1024,1024,1024 8192,8192,8192
"""
import argparse
import statistics

import torch
from triton.testing import do_bench

import pingpong
from pingpong.tools import bench
from pingpong.tools.bench_fp8 import make_fp8_inputs
from pingpong.tools.timing import call_us, time_callable

from model_bench import graphed  # benchmarks/ is the script's directory, first on sys.path


def graph_ms(fn, calls: int = 20, replays: int = 20) -> float:
    """GPU ms per call of `calls` calls captured in one CUDA graph (model_bench.graphed)."""
    fn()
    replay = graphed(lambda: [fn() for _ in range(calls)])
    replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (calls * replays)


def host_us(fn, calls: int = 200) -> float:
    """Host µs per call, the calls enqueued behind a 30 ms spin kernel (timing.call_us)."""
    fn()
    return call_us(fn, calls, spin_ms=30)[0]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", type=bench.parse_shape, default=[(64, 4096, 4096), (8192, 8192, 8192)])
    p.add_argument("--scaling", default="tensor")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    timers = {"flushed": lambda fn: time_callable(fn, 100, bench=do_bench), "queued": lambda fn: time_callable(fn, 100)}
    for M, N, K in args.shapes:
        qa, qb, sa, sb = make_fp8_inputs(M, N, K, args.scaling)
        fns = {"ours": lambda: pingpong.scaled_mm(qa, qb, sa, sb),
               "torch": lambda: torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16)}
        t = {(k, m): [] for k in fns for m in timers}
        for r in range(args.rounds):
            for k, fn in (fns.items() if r % 2 == 0 else reversed(fns.items())):
                for m, timer in timers.items():
                    t[k, m].append(timer(fn).median_ms * 1e3)
        g = {k: graph_ms(fn) * 1e3 for k, fn in fns.items()}
        h = {k: host_us(fn) for k, fn in fns.items()}
        line = lambda m: " ".join(f"{x:.1f}" for x in t["ours", m]) + " / " + " ".join(  # noqa: E731
            f"{x:.1f}" for x in t["torch", m])
        ratio = lambda m: statistics.median(t["torch", m]) / statistics.median(t["ours", m])  # noqa: E731
        print(f"{args.scaling} {M}x{N}x{K}: flushed µs ours / torch {line('flushed')} ({ratio('flushed'):.3f});"
              f" queued {line('queued')} ({ratio('queued'):.3f}); graph {g['ours']:.1f} / {g['torch']:.1f}"
              f" ({g['torch'] / g['ours']:.3f}); host µs/call {h['ours']:.1f} / {h['torch']:.1f}", flush=True)


if __name__ == "__main__":
    main()
