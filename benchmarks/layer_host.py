"""Host time of a small pingpong.nn.Linear, forward and forward + backward, against
nn.Linear: where a host-bound training step (small layers) loses time.

    PYTHONPATH=src python benchmarks/layer_host.py [--tokens 1024] [--features 256 704] [--calls 200]

Prints µs per call (back-to-back, synchronized at the end), the number of cached plans
before and after the timed calls (a plan built per call shows as growth), and torch.profiler's
table (CPU ops of every thread, the autograd engine's included, and GPU kernels) over 20
forward + backward calls of each layer.
"""

import argparse
import sys
import time

import torch

import pingpong
from pingpong.tools import bench
from pingpong.runtime import plan


def per_call(fn, calls: int) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--features", type=int, nargs=2, default=(256, 704))
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args(argv)
    if bench.skipped_without_gpu():
        return 2
    torch.manual_seed(0)
    k, n = args.features
    ref = torch.nn.Linear(k, n, device="cuda", dtype=torch.bfloat16)
    ours = pingpong.nn.Linear.from_linear(ref)
    x = torch.randn(args.tokens, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(args.tokens, n, device="cuda", dtype=torch.bfloat16)

    def fwd(layer):
        def run():
            with torch.no_grad():
                layer(x)
        return run

    def fwd_bwd(layer):
        def run():
            layer(x).backward(g)
            x.grad = layer.weight.grad = layer.bias.grad = None
        return run

    before = len(plan.PLANS)
    rows = [("forward", fwd(ours), fwd(ref)), ("forward + backward", fwd_bwd(ours), fwd_bwd(ref))]
    for name, o, r in rows:
        print(f"{name:<20} pingpong {per_call(o, args.calls):8.1f} µs   nn.Linear {per_call(r, args.calls):8.1f} µs")
    print(f"plans cached: {before} before the timed calls, {len(plan.PLANS)} after")
    from torch.profiler import ProfilerActivity, profile

    run = fwd_bwd(ours)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            run()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=60))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fwd_bwd(ref)()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))
    return 0


if __name__ == "__main__":
    sys.exit(main())
