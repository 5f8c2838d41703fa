"""Host cost of pingpong's call path on the CPU, without a GPU: everything down to Triton's C
launcher, which is replaced by a no-op (the rest is the real code: LayerPlan, GemmSpec, the plan
cache, HopperPlan.run / run_ptrs, CachedLaunch, BoundLaunch and its argument list).

    PYTHONPATH=src python benchmarks/host_cpu.py [--calls 5000] [--rounds 7]

Prints µs per call (the fastest of `rounds` loops of `calls` calls: the least disturbed by other
processes) for a pingpong.nn.Linear (32, 64) → 64 with a bias and (32, 1, 64) → 64 without:
no_grad forward, grad-mode forward, forward + backward; a 64³ pingpong.matmul; and a 64³
pingpong.gemm with C, a bias and relu (no grad; forward + backward), and gemm_ in place; the direct
calls of inductor's generated code (a linear, the dX and dW products), also under torch.profiler. CPU tensors
stand in for CUDA ones (every plan is a Hopper plan without copies). Compare two trees by
running this under each one's PYTHONPATH, alternately: the GPU host's µs are larger, but the
work per call is the same Python.
"""

import argparse
import sys
import time
import types

import torch

import pingpong
from pingpong.integration import direct
from pingpong.hopper.host import backend as hopper
from pingpong.hopper.host.config import KernelConfig
from pingpong.runtime import launcher, plan, spec


def stub_launches() -> None:
    """Every plan a HopperPlan whose launch is bound (as after its first JIT launch) to a
    no-op C launcher; the CUDA device and stream queries answer 0."""
    torch._C._cuda_getDevice = lambda: 0
    torch._C._cuda_getCurrentRawStream = lambda device: 0
    direct_launch = launcher.DirectLaunch.__new__(launcher.DirectLaunch)
    direct_launch.encodings = tuple((3, 2, 1, [128, 64]) for _ in range(4))
    direct_launch.function, direct_launch.cooperative, direct_launch.pdl = 1, False, False
    direct_launch.packed, direct_launch.annotations, direct_launch.signature = (4, 1, 1, 1), ("a",), b"s"
    direct_launch.launch = lambda *args: None
    direct_launch.encode = lambda *args: object()

    def plan_of(s):
        p = hopper.HopperPlan(0, KernelConfig(128, 128, 64), False, False, False, False, s.epilogue.reads_c,
                              s.epilogue.activation, sms=132)
        p.launch.bound = direct_launch.bind([("tma", [64, 64], [64, 1])] * 4 + ["ptr"], pre=tuple(range(6)),
                                            post=tuple(range(7)))
        p.launch.grid, p.launch.key = (4, 1, 1), launcher.launch_key()
        return p

    spec.check_gpu = lambda device, names=None: None
    plan.BACKENDS = [types.SimpleNamespace(NAME="stub", can_implement=lambda s: None, plan=plan_of)]
    plan.PLANS.clear()
    direct.LAYERS.clear()


def per_call(fn, calls: int, rounds: int) -> float:
    for _ in range(200):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - t) / calls / 1000)
    return best


def layer_cases(layer, x, g) -> dict:
    """A layer's three host-timed calls on x: {"no_grad forward", "grad-mode forward", "forward +
    backward" (with g, every gradient cleared after)}."""
    def no_grad():
        with torch.no_grad():
            layer(x)

    def backward():
        layer(x).backward(g)
        x.grad = None
        for p in layer.parameters():
            p.grad = None

    return {"no_grad forward": no_grad, "grad-mode forward": lambda: layer(x), "forward + backward": backward}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    stub_launches()
    print(f"pingpong from {pingpong.__file__}; µs per call, launch stubbed")
    for shape, bias in (((32, 64), True), ((32, 1, 64), False)):
        torch.manual_seed(0)
        layer = pingpong.nn.Linear(64, 64, bias=bias, dtype=torch.bfloat16)
        x = torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(*shape[:-1], 64, dtype=torch.bfloat16)

        row = [per_call(f, args.calls, args.rounds) for f in layer_cases(layer, x, g).values()]
        print(f"Linear {tuple(shape)} -> 64, bias {bias!s:<5}  no_grad {row[0]:6.2f}  grad-mode {row[1]:6.2f}"
              f"  forward + backward {row[2]:6.2f}")
    a, w = torch.randn(64, 64, dtype=torch.bfloat16), torch.randn(64, 64, dtype=torch.bfloat16).t()
    print(f"matmul 64³ {per_call(lambda: pingpong.matmul(a, w), 4 * args.calls, args.rounds):6.2f}")
    c, v = torch.randn(64, 64, dtype=torch.bfloat16), torch.randn(64, dtype=torch.bfloat16)
    ag = a.clone().requires_grad_()

    def gemm_fwd_bwd():
        pingpong.gemm(ag, w, c, beta=0.5, bias=v, activation="relu").backward(c)
        ag.grad = None

    row = [per_call(f, args.calls, args.rounds) for f in (
        lambda: pingpong.gemm(a, w, c, beta=0.5, bias=v, activation="relu"),
        lambda: pingpong.gemm_(c, a, w, beta=0.5, bias=v), gemm_fwd_bwd)]
    print(f"gemm 64³ with c, bias, relu {row[0]:6.2f}  gemm_ in place {row[1]:6.2f}"
          f"  forward + backward {row[2]:6.2f}")
    inductor_calls(a, w.t(), c, args)
    return 0


def inductor_calls(x, w, g, args) -> None:
    """The direct calls of inductor's generated code (64³, into a given buffer): a linear's
    forward and the dX (g @ w) product of its backward also as a static graph's call names its
    site, the dW (gᵀ @ x) product; not profiled, and
    under torch.profiler (CPU), where each call is a pingpong::<op> range."""
    from torch.profiler import ProfilerActivity, profile

    from pingpong.integration import inductor

    out, k = torch.empty_like(g), inductor.KERNELS
    gt = g.t()
    calls = {"linear": lambda: k["linear"](x, w, bias=False, activation="none", out=out),
             "linear, a static graph's site": lambda: k["linear"](x, w, bias=False, activation="none", out=out, site=1),
             "mm dX": lambda: k["mm"](g, w, out=out), "mm dW": lambda: k["mm"](gt, x, out=out),
             "mm dX, a site": lambda: k["mm"](g, w, out=out, site=2)}
    plain = {name: per_call(f, args.calls, args.rounds) for name, f in calls.items()}
    with profile(activities=[ProfilerActivity.CPU]):
        profiled = {name: per_call(f, args.calls // 4, args.rounds) for name, f in calls.items()}
    print("inductor direct calls  " + "  ".join(f"{name} {plain[name]:6.2f} (profiled {profiled[name]:6.2f})"
                                                for name in calls))


if __name__ == "__main__":
    sys.exit(main())
