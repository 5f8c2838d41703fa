"""Host cost of pingpong.scaled_mm's call path on the CPU, without a GPU: a cache hit down to
Triton's C launcher, which is replaced by a no-op (the rest is the real code: GemmSpec, the plan
cache, Fp8Plan.run, CachedLaunch, BoundLaunch and its argument list).

    PYTHONPATH=src python benchmarks/host_cpu_fp8.py [--calls 5000] [--rounds 7] [--profile]

Prints µs per call (the fastest of `rounds` loops of `calls` calls) per scaling and tile kind,
next to an empty-tensor allocation (the output's `torch.empty`, which every call pays). CPU
tensors stand in for CUDA ones; each call's plan is stored in the cache beforehand, as after a
first (validated) call. Compare two trees by running this under each one's PYTHONPATH; the GPU
host's µs are larger (benchmarks/host_gap.py measures them there), the Python is the same.

    PYTHONPATH=src python benchmarks/host_cpu_fp8.py --layer RECIPE

instead: the FP8 training layer (pingpong.nn.Float8TrainingLinear) after its first calls, no_grad
forward, grad-mode forward, forward + backward, every launch bound to a no-op (`layer_calls`).

    PYTHONPATH=src python benchmarks/host_cpu_fp8.py --jit

instead: quantize_fp8's row kernel (x (64, 4096) bf16) compiled offline for sm_90a, launched
through Triton's JIT (`kernel[grid](...)`: the binder, the cache key, the launch metadata)
against its bound direct launch (quantize.launch's CachedLaunch), both into Triton's launch
wrapper around a no-op C launcher (tests/fake_launcher.py); and quantize_fp8_pair's launch
(quantize.launch_pair: the amax buffer, the amax pass, the cast; three per FP8 linear and
step, X and W in the forward, dY in the backward), x (4096, 4096) bf16 row-wise, both kernels
through Triton's JIT against launch_pair's GPU branch (its bound launches, `bound_pair`).
"""

import argparse
import cProfile
import pstats
import sys

import torch

from pingpong import fp8
from pingpong.hopper.host.config import KernelConfig
from pingpong.hopper.host.fp8_launch import Fp8Plan
from pingpong.runtime import launcher, plan, spec

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from host_cpu import layer_cases, per_call  # noqa: E402


def stub_device() -> None:
    """The CUDA device and stream queries answer 0 (a CPU process has neither)."""
    torch._C._cuda_getDevice = lambda: 0
    torch._C._cuda_getCurrentRawStream = lambda device: 0


def bound_noop(tma: int, ptrs: int) -> launcher.BoundLaunch:
    """A BoundLaunch of `tma` descriptors and `ptrs` pointers onto a no-op C launcher."""
    direct = launcher.DirectLaunch.__new__(launcher.DirectLaunch)
    direct.encodings = tuple((3, 1, 1, [128, 128]) for _ in range(tma))
    direct.function, direct.cooperative, direct.pdl = 1, False, False
    direct.packed, direct.annotations, direct.signature = (4, 1, 1, 1), ("a",), b"s"
    direct.launch = lambda *args: None
    direct.encode = lambda *args: object()
    return direct.bind([("tma", [128, 128], [128, 1])] * tma + ["ptr"] * ptrs, pre=tuple(range(8)),
                       post=tuple(range(4)))


def planned(a, b, sa, sb, scaling: str, config: KernelConfig, split: bool = False):
    """Store the plan of scaled_mm(a, b, sa, sb) in the cache, its launch bound to a no-op."""
    p = Fp8Plan(0, scaling, 128, True, config, "none", workspace=(64, 4096) if split else (0, 0),
                counters=64 if split else 0, sms=132)
    tma, ptrs = (2, 6) if (split or config.swap_ab) else (3, 3)
    p.launch.bound, p.launch.grid, p.launch.key = bound_noop(tma, ptrs), (132, 1, 1), launcher.launch_key()
    key = spec.build(a, b, out_dtype=torch.bfloat16, bias=None, activation=None, config=None, scales=(sa, sb, False))
    plan.store(key, p)


def cases():
    e4m3 = torch.float8_e4m3fn
    one = torch.tensor(1.0)
    for name, M, scaling, config, split in (
            ("tensor 64x4096x4096 (TMA epilogue)", 64, "tensor", KernelConfig(64, 32, 128, schedule="pingpong"), False),
            ("tensor 1x4096x4096 (swap-AB)", 1, "tensor",
             KernelConfig(64, 16, 128, schedule="pingpong", swap_ab=True), False),
            ("row 64x4096x4096", 64, "row", KernelConfig(64, 32, 128, schedule="pingpong"), False),
            ("tensor 64x4096x65536 (split 2)", 64, "tensor",
             KernelConfig(64, 64, 128, schedule="pingpong", split_k=2), True)):
        K = 65536 if split else 4096
        a = torch.empty(M, K, dtype=e4m3)
        b = torch.empty(4096, K, dtype=e4m3).t()
        sa, sb = (one, one) if scaling == "tensor" else (torch.ones(M, 1), torch.ones(1, 4096))
        planned(a, b, sa, sb, scaling, config, split)
        yield name, (lambda a=a, b=b, sa=sa, sb=sb: fp8.scaled_mm(a, b, sa, sb)), M


def jit_against_bound(calls: int, rounds: int) -> None:
    """--jit: µs per launch of the row quantize kernel through Triton's JIT and bound."""
    import os

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import fake_launcher
    from triton.runtime import driver

    from pingpong import quantize
    from pingpong.runtime import compile as cc

    x = torch.empty(64, 4096, dtype=torch.bfloat16)
    q, s = torch.empty(64, 4096, dtype=torch.float8_e4m3fn), quantize.scale_like(x, "row")
    torch.Tensor.is_cuda = property(lambda self: True)  # Triton's JIT takes the CPU tensors as CUDA ones
    with cc.offline("sm_90a"):
        fake_launcher.install(driver.active)
        fn, args, kwargs, grid = quantize.prepare(x, q, s, "row")
        fn[grid](*args, **kwargs)  # compiles (offline), then launches into the no-op launcher
        cached = quantize.CachedLaunch()
        cached.jit(quantize.prepare, (x, q, s, "row"))
        assert cached.bound is not None, "no bound launch: a launch hook is installed?"
        device = driver.active.get_current_device()
        torch._C._cuda_getDevice = lambda: device
        torch._C._cuda_getCurrentRawStream = lambda d: 0
        ptrs = (x.data_ptr(), q.data_ptr(), s.data_ptr())
        jit = per_call(lambda: fn[grid](*args, **kwargs), calls, rounds)
        bound = per_call(lambda: cached(device, ptrs, (), quantize.prepare, x, q, s, "row"), calls, rounds)
        pair_jit, pair_bound = pair_launches(device, calls, rounds)
    print(f"quantize_fp8 row kernel, one launch: through Triton's JIT {jit:6.2f} µs, bound (CachedLaunch) {bound:6.2f} µs")
    print(f"quantize_fp8_pair row, one launch_pair (amax buffer, 2 kernels): through Triton's JIT {pair_jit:6.2f} µs,"
          f" bound {pair_bound:6.2f} µs")


def pair_launches(device: int, calls: int, rounds: int) -> tuple[float, float]:
    """µs per quantize.launch_pair, row-wise, x (4096, 4096): its two kernels through Triton's JIT
    (every call), and the GPU branch of launch_pair (`_launch_steps` of bound_pair's CachedLaunches);
    each with the amax buffer's torch.zeros. Inside jit_against_bound's offline compile."""
    from pingpong import quantize

    M = K = 4096
    x = torch.empty(M, K, dtype=torch.bfloat16)
    q, s, qt, st = quantize.pair_like(x, "row", torch.float8_e4m3fn, 16, True, True)

    def inputs():
        return x, q, s, qt, st, *quantize.amax_slots(x, "row"), "row", True, True

    def jit():
        args = inputs()
        for prepare_step in (quantize.prepare_pair_amax, quantize.prepare_pair_cast):
            fn, a, kw, grid = prepare_step(*args)
            fn[grid](*a, **kw)

    def bound():  # launch_pair after its CPU branch
        args = inputs()
        quantize._launch_steps(quantize.bound_pair(*args), device, args)

    jit()  # compiles both (offline)
    args = inputs()
    for cached, (prepare_step, _, _) in zip(quantize.bound_pair(*args), quantize.pair_steps(*args)):
        cached.jit(prepare_step, args)  # binds both (a CachedLaunch's first call, without its CUDA device guard)
        assert cached.bound is not None, "no bound launch: a launch hook is installed?"
    return per_call(jit, calls, rounds), per_call(bound, calls, rounds)


def layer_calls(recipe: str):
    """--layer: pingpong.fp8_training's layer (Float8TrainingLinear, x (32, 256) → 256 without
    a bias, whose gradient's sum the CPU would compute; fp16: the interpreter's CPU dtype) after its first calls, every launch bound to a
    no-op: quantize_fp8_pair's PairPlans (its launches), quantize_fp8's row launch (its GPU
    branch), every scaled_mm plan an Fp8Plan of 128×128 tiles. The checks run as on a GPU but
    for the device (CPU tensors stand in for CUDA ones). Returns {name: call}."""
    from pingpong import fp8_training, quantize
    from pingpong.nn import Float8TrainingLinear

    stub_device()
    torch._C._cuda_isCurrentStreamCapturing = lambda: False
    quantize.interpreter_enabled = lambda: True  # CPU tensors pass quantize's device check
    quantize._plans_on = lambda x: True
    real_pair_plan = quantize.PairPlan

    class NoopPairPlan(real_pair_plan):
        def __init__(self, x, made, *args):
            super().__init__(x, made, *args)
            self.index = 0
            counts = ((3, 8) if self.granularity in ("row", "tensor") else (8,)) if self.cols else \
                ((2, 4) if self.granularity == "tensor" else (3,))  # launch_pair's kernels; quantize_fp8's
            for cached, ptrs in zip(self.launches, counts, strict=True):
                cached.bound, cached.grid, cached.key = bound_noop(0, ptrs), (132, 1, 1), launcher.launch_key()

    def row_launch(x, q, s, granularity):  # quantize.launch's GPU branch, bound to a no-op
        cached = quantize.bound_launch(x, q, s, granularity)
        if cached.bound is None:
            cached.bound, cached.grid, cached.key = bound_noop(0, 3), (132, 1, 1), launcher.launch_key()
        cached(0, (x.data_ptr(), q.data_ptr(), s.data_ptr()), (), quantize.prepare, x, q, s, granularity)

    def plan_for(key, asked=None):
        p = Fp8Plan(0, "tensor" if recipe == "tensor" else "row", 128, True, KernelConfig(128, 128, 128), "none",
                    sms=132)
        p.launch.bound, p.launch.grid, p.launch.key = bound_noop(3, 3), (132, 1, 1), launcher.launch_key()
        return p

    quantize.PairPlan, quantize.launch, plan.plan_for = NoopPairPlan, row_launch, plan_for
    fp8_training.check_fp8_linear.__globals__["check_scaled_mm"] = lambda *a, **k: None  # the device check
    fp8.check_scaled_mm = lambda *a, **k: None
    ref = torch.nn.Linear(256, 256, bias=False, dtype=torch.float16)
    layer = Float8TrainingLinear.from_linear(ref, recipe)
    x = torch.randn(32, 256, dtype=torch.float16, requires_grad=True)
    return layer_cases(layer, x, torch.randn(32, 256, dtype=torch.float16))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--profile", action="store_true", help="also a cProfile of each case, by own time")
    p.add_argument("--jit", action="store_true", help="a quantize kernel's launch through Triton's JIT against bound")
    p.add_argument("--layer", metavar="RECIPE", help="the FP8 training layer's calls with this recipe instead")
    args = p.parse_args(argv)
    if args.jit:
        jit_against_bound(args.calls, args.rounds)
        return 0
    if args.layer:
        print(f"Float8TrainingLinear({args.layer}) (32, 256) -> 256, no bias, plans made, launches stubbed; µs per call"
              f" (the fastest of {args.rounds} loops)")
        for name, fn in layer_calls(args.layer).items():
            print(f"{name:<20} {per_call(fn, args.calls, args.rounds):7.2f}")
            profiled(fn, args, 16)
        return 0
    stub_device()
    print(f"pingpong.scaled_mm, cache hit, launch stubbed; µs per call (the fastest of {args.rounds} loops)")
    for name, fn, M in cases():
        fn()
        empty = per_call(lambda: torch.empty(M, 4096, dtype=torch.bfloat16), args.calls, args.rounds)
        print(f"{name:<38} {per_call(fn, args.calls, args.rounds):6.2f}   (its torch.empty alone {empty:5.2f})")
        profiled(fn, args, 12)
    return 0


def profiled(fn, args, rows: int) -> None:
    """--profile: a cProfile of `calls` calls of fn, its `rows` first functions by own time."""
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(lambda: [fn() for _ in range(args.calls)])
        pstats.Stats(prof).sort_stats("tottime").print_stats(rows)


if __name__ == "__main__":
    sys.exit(main())
