"""Time the fused epilogue and the batched kernel against torch (issue targets), on a GPU.

    PYTHONPATH=src python benchmarks/epilogue.py [--reps 50] [--skip-compile] \
        [--configs cooperative:128x256x64 pingpong:128x128x64 ...]

1. linear + bias + GELU, x (8192, 4096), w (14336, 4096), bf16, for gelu_erf (F.gelu) and
   gelu_tanh: pingpong.gemm(x, w.t(), bias=b, activation=...) vs torch eager
   F.gelu(F.linear(x, w, b)) and vs torch.compile (default mode) of the same function.
2. batched (16, 2048, 2048) @ (16, 2048, 2048) bf16: pingpong.matmul vs torch.bmm.
--configs also times the fused linear with each explicit KernelConfig (the notation of
benchmarks/schedules.py): in the cooperative schedule the epilogue's activation runs while
the tensor cores wait, in ping-pong it overlaps the other consumer's mainloop.

Each pingpong result is first compared with torch's (relative Frobenius error printed); times
are medians of L2-flushed repetitions (pingpong.tools.bench.time_callable, the harness of
`pingpong bench`).
"""

import argparse
import sys

import torch
import torch.nn.functional as F

import pingpong
from pingpong.tools import bench
from pingpong.api import _gemm_into

sys.path.insert(0, __import__("os").path.dirname(__file__))
from schedules import parse_config  # noqa: E402


def rel(out, ref) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def row(name, ours, theirs, reps, err):
    t_ours = bench.time_callable(ours, reps).median_ms
    t_theirs = bench.time_callable(theirs, reps).median_ms
    print(f"{name:<44} pingpong {t_ours:8.3f} ms   torch {t_theirs:8.3f} ms   speedup {t_theirs / t_ours:5.3f}x"
          f"   rel.err {err:.2e}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--skip-compile", action="store_true", help="do not time torch.compile")
    p.add_argument("--configs", nargs="*", type=parse_config, default=[], help="explicit configs for the fused linear")
    args = p.parse_args(argv)
    if bench.skipped_without_gpu():
        return 2
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(8192, 4096, device=dev, dtype=bf)
    w = torch.randn(14336, 4096, device=dev, dtype=bf) / 64
    b = torch.randn(14336, device=dev, dtype=bf)
    for act, approximate in (("gelu_erf", "none"), ("gelu_tanh", "tanh")):
        def eager():
            return F.gelu(F.linear(x, w, b), approximate=approximate)

        def ours():
            return pingpong.gemm(x, w.t(), bias=b, activation=act)

        err = rel(ours(), eager())
        row(f"linear+bias+{act} vs eager", ours, eager, args.reps, err)
        if not args.skip_compile:
            compiled = torch.compile(eager)
            row(f"linear+bias+{act} vs torch.compile", ours, compiled, args.reps, rel(ours(), compiled()))
        out = torch.empty(8192, 14336, device=dev, dtype=bf)
        for config in args.configs:
            def tiled(config=config):
                return _gemm_into(out, x, w.t(), None, 1.0, 0.0, config, b, act)

            row(f"  {config.name()} vs eager", tiled, eager, args.reps, rel(tiled(), eager()))
    a = torch.randn(16, 2048, 2048, device=dev, dtype=bf)
    c = torch.randn(16, 2048, 2048, device=dev, dtype=bf)
    row("batched (16, 2048, 2048)^2 vs torch.bmm", lambda: pingpong.matmul(a, c), lambda: torch.bmm(a, c), args.reps,
        rel(pingpong.matmul(a, c), torch.bmm(a, c)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
