"""Where a GEMM's time goes: per-kernel GPU time of pingpong and of cuBLAS, shape by shape.

    PYTHONPATH=src python benchmarks/breakdown.py [--shapes M,N,K ...] [--configs ...] [--calls 20]

For each shape (bf16, a @ wᵀ as in `pingpong bench`): the config `select_config` picks, then
torch.profiler over --calls back-to-back calls of pingpong.matmul and of torch.matmul (L2 not
flushed: the same operands each call). Printed per call: every kernel's mean GPU time, the sum
of kernel times, and the wall time per call (first to last kernel event, so launch gaps count).
--configs adds rows for explicit KernelConfigs (the notation of benchmarks/schedules.py).
--fused profiles a fused linear instead: x (8192, 4096), w (14336, 4096), bias,
gelu_tanh: pingpong fused (and without the activation) vs torch's F.linear and F.gelu kernels;
the fused call can beat eager by at most (linear + gelu) / linear.
The GPU-time ratio cuBLAS/ours tells kernel speed apart from launch and reduction cost.
"""

import argparse
import collections
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import pingpong
from pingpong.tools import bench
from pingpong import matmul
from pingpong.api import _gemm_into
from pingpong.hopper.host.select import choose

sys.path.insert(0, __import__("os").path.dirname(__file__))
from schedules import parse_config  # noqa: E402

DEFAULT_SHAPES = ("3000,3000,3000", "1536,1536,1536", "768,768,32768", "128,4096,4096", "512,4096,4096",
                  "64,6144,4096", "16,8192,8192", "1,4096,4096", "512,512,65536", "8192,8192,8192")


def profile_calls(fn, calls: int):
    """(kernel name -> mean µs per call, total kernel µs per call, wall µs per call)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per = collections.defaultdict(float)
    for e in events:
        per[e.name[:60]] += e.device_time / calls
    start = min(e.time_range.start for e in events)
    end = max(e.time_range.end for e in events)
    return dict(per), sum(per.values()), (end - start) / calls


def show(label, result):
    per, total, wall = result
    kernels = "  ".join(f"{name}={us:.1f}" for name, us in sorted(per.items(), key=lambda kv: -kv[1]))
    print(f"   {label:<28} kernels {total:8.1f} µs  wall {wall:8.1f} µs   {kernels}", flush=True)
    return total, wall


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES))
    p.add_argument("--configs", nargs="*", type=parse_config, default=[])
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--fused", action="store_true")
    args = p.parse_args(argv)
    if bench.skipped_without_gpu():
        return 2
    torch.manual_seed(0)
    if args.fused:
        return fused(args)
    summary = []
    for text in args.shapes:
        M, N, K = (int(v) for v in text.split(","))
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
        config, source = choose(M, N, K, device=a.device)
        print(f"{M}×{N}×{K}: {config.name()} split_k={config.split_k} swap_ab={config.swap_ab} ({source})")
        ours = show("pingpong.matmul", profile_calls(lambda: matmul(a, w.t()), args.calls))
        theirs = show("torch.matmul", profile_calls(lambda: torch.matmul(a, w.t()), args.calls))
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        for cfg in args.configs:
            try:
                show(f"{cfg.name()} s{cfg.split_k}",
                     profile_calls(lambda cfg=cfg: _gemm_into(out, a, w.t(), None, 1.0, 0.0, cfg), args.calls))
            except Exception as exc:  # noqa: BLE001 - a config that does not fit this shape
                print(f"   {cfg.name()}: {type(exc).__name__}: {str(exc)[:100]}")
        summary.append((text, theirs[0] / ours[0], theirs[1] / ours[1]))
    print("\nshape               cuBLAS/ours kernel-time  wall-time")
    for text, kern, wall in summary:
        print(f"{text:<20} {kern:10.3f} {wall:18.3f}")
    return 0


def fused(args) -> int:
    import torch.nn.functional as F

    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(14336, 4096, device="cuda", dtype=torch.bfloat16) / 64
    b = torch.randn(14336, device="cuda", dtype=torch.bfloat16)
    y = F.linear(x, w, b)
    print("linear + bias + gelu_tanh, x (8192, 4096), w (14336, 4096)")
    lin, _ = show("torch F.linear (bias)", profile_calls(lambda: F.linear(x, w, b), args.calls))
    act, _ = show("torch F.gelu", profile_calls(lambda: F.gelu(y, approximate="tanh"), args.calls))
    show("pingpong bias only", profile_calls(lambda: pingpong.gemm(x, w.t(), bias=b), args.calls))
    ours, _ = show("pingpong fused", profile_calls(lambda: pingpong.gemm(x, w.t(), bias=b, activation="gelu_tanh"),
                                                   args.calls))
    out = torch.empty(8192, 14336, device="cuda", dtype=torch.bfloat16)
    for cfg in args.configs:
        show(f"{cfg.name()}", profile_calls(
            lambda cfg=cfg: _gemm_into(out, x, w.t(), None, 1.0, 0.0, cfg, b, "gelu_tanh"), args.calls))
    print(f"eager/fused kernel time {(lin + act) / ours:.3f}; ceiling if fused = torch's linear: "
          f"{(lin + act) / lin:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
