"""Host time of a small pingpong.nn.Linear, forward and forward + backward, against
nn.Linear: where a host-bound layer (small layers, decode) loses time.

    PYTHONPATH=src python benchmarks/layer_host.py [--shape 32 1 2048] [--out 2048] [--no-bias]
        [--calls 200] [--rounds 7] [--profile] [--fp8 RECIPE]

--fp8 RECIPE: pingpong's layer is the FP8 training one (pingpong.nn.Float8TrainingLinear with
that recipe; its forward quantizes x and the weight, its backward the gradient), against the
bf16 nn.Linear: the host cost an FP8 layer adds where the step is host-bound.

Prints µs per call (back-to-back, synchronized at the end of each round; rounds alternate
torch and pingpong on the same tensors, the median round is reported) for the no_grad
forward, the grad-mode forward and forward + backward, the ratio pingpong / torch, and the
number of cached plans and layer plans before and after the timed calls (a plan built per
call shows as growth). `--profile`: torch.profiler's table over 20 forward + backward calls.
"""

import argparse
import statistics
import sys
import time

import torch

import pingpong
from pingpong.integration import direct
from pingpong.tools import bench
from pingpong.runtime import plan


def per_call(fn, calls: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def alternate(ours, ref, calls: int, rounds: int) -> tuple[float, float]:
    for fn in (ours, ref):
        per_call(fn, 5)
    o, r = [], []
    for _ in range(rounds):
        r.append(per_call(ref, calls))
        o.append(per_call(ours, calls))
    return statistics.median(o), statistics.median(r)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", type=int, nargs="+", default=(1024, 256), help="x's shape (…, K)")
    p.add_argument("--out", type=int, default=704)
    p.add_argument("--no-bias", action="store_true")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--fp8", default=None, help="pingpong's layer: Float8TrainingLinear with this recipe")
    args = p.parse_args(argv)
    if bench.skipped_without_gpu():
        return 2
    torch.manual_seed(0)
    k, n = args.shape[-1], args.out
    ref = torch.nn.Linear(k, n, bias=not args.no_bias, device="cuda", dtype=torch.bfloat16)
    ours = (pingpong.nn.Float8TrainingLinear.from_linear(ref, args.fp8) if args.fp8 else
            pingpong.nn.Linear.from_linear(ref))
    x = torch.randn(*args.shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(*args.shape[:-1], n, device="cuda", dtype=torch.bfloat16)

    def fwd(layer):
        def run():
            with torch.no_grad():
                layer(x)
        return run

    def fwd_grad(layer):
        def run():
            layer(x)
        return run

    def fwd_bwd(layer):
        def run():
            layer(x).backward(g)
            x.grad = layer.weight.grad = None
            if layer.bias is not None:
                layer.bias.grad = None
        return run

    print(f"x {tuple(args.shape)} -> {n}, bias {not args.no_bias}, bf16{', pingpong FP8 ' + args.fp8 if args.fp8 else ''};"
          f" {torch.cuda.get_device_name()}")
    before = (len(plan.PLANS), len(direct.LAYERS))
    rows = [("no_grad forward", fwd), ("grad-mode forward", fwd_grad), ("forward + backward", fwd_bwd)]
    for name, make in rows:
        o, r = alternate(make(ours), make(ref), args.calls, args.rounds)
        print(f"{name:<20} pingpong {o:8.1f} µs   nn.Linear {r:8.1f} µs   pingpong/torch {o / r:6.3f}")
    print(f"plans cached: {before[0]} before the timed calls, {len(plan.PLANS)} after; layer plans {before[1]} -> "
          f"{len(direct.LAYERS)}")
    if not args.profile:
        return 0
    from torch.profiler import ProfilerActivity, profile

    for layer, rows_ in ((ours, 22), (ref, 12)):
        run = fwd_bwd(layer)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                run()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows_, max_name_column_width=60))
    return 0


if __name__ == "__main__":
    sys.exit(main())
