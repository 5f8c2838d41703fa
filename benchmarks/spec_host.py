"""Host cost of a plan-cache hit on the CPU, without a GPU: building each kind of GemmSpec and
finding its plan (spec.build / build_grouped + plan.get), scaled_grouped_mm's whole `_plan`
hit (build, get, the requires-grad check) and its public call with the launch stubbed.

    PYTHONPATH=src python benchmarks/spec_host.py [--calls 20000] [--rounds 9]

Prints µs per call, the fastest of `rounds` loops of `calls` calls (the least disturbed by
other processes). CPU tensors stand in for CUDA ones: a stored plan is found the same way.
Under a tree from before the FP8 grouped spec (its front end keyed plans by
`fp8_grouped._key`), the FP8 rows time that key instead: compare two trees by running this
under each one's PYTHONPATH, alternately.
"""

import argparse
import time

import torch

from pingpong import fp8_grouped as fg
from pingpong.runtime import plan as plan_mod
from pingpong.runtime import spec as spec_mod

T, K, N, G = 300, 256, 512, 8
E4M3 = torch.float8_e4m3fn


def row_wise():
    return (torch.zeros(T, K).to(E4M3), torch.zeros(G, N, K).to(E4M3).transpose(1, 2), torch.ones(T),
            torch.ones(G, N), torch.arange(1, G + 1, dtype=torch.int32))


def block_wise():
    a, b, _, _, offs = row_wise()
    return a, b, torch.ones(K // 128, T).t(), torch.ones(G, N // 128, K // 128), offs


if hasattr(fg, "_key"):  # before the FP8 grouped spec
    def fp8_key(a, b, sa, sb, offs):
        return fg._key(a, b, sa, sb, offs, torch.bfloat16, False)
else:
    def fp8_key(a, b, sa, sb, offs):
        return spec_mod.build_grouped(a, b, offs, torch.bfloat16, (sa, sb, False))


class Stub:
    """A stored plan whose launch does nothing."""

    used = False

    def run(self, *args):
        pass


def best(fn, calls: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    timed = lambda fn, calls=args.calls: best(fn, calls, args.rounds)  # noqa: E731
    torch.set_grad_enabled(False)
    bf16 = dict(dtype=torch.bfloat16)
    a, b = torch.zeros(64, 64, **bf16), torch.zeros(64, 64, **bf16)
    plan_mod.store(spec_mod.build(a, b), Stub())
    print(f"dense bf16 build + get          {timed(lambda: plan_mod.get(spec_mod.build(a, b))):.2f} us")
    x, w, offs = torch.zeros(T, K, **bf16), torch.zeros(G, K, N, **bf16), torch.arange(1, G + 1, dtype=torch.int32)
    plan_mod.store(spec_mod.build_grouped(x, w, offs, None), Stub())
    grouped = timed(lambda: plan_mod.get(spec_mod.build_grouped(x, w, offs, None)))
    print(f"grouped bf16 build + get        {grouped:.2f} us")
    for name, make in (("row", row_wise), ("block", block_wise)):
        a, b, sa, sb, offs = make()
        plan_mod.store(fp8_key(a, b, sa, sb, offs), Stub())
        key = timed(lambda: plan_mod.get(fp8_key(a, b, sa, sb, offs)))
        hit = timed(lambda: fg._plan(a, b, sa, sb, offs, torch.bfloat16, False))
        print(f"FP8 grouped {name:5} build + get     {key:.2f} us   _plan hit {hit:.2f} us")
    a, b, sa, sb, offs = row_wise()
    call = timed(lambda: fg.scaled_grouped_mm(a, b, sa, sb, offs), args.calls // 2)
    print(f"scaled_grouped_mm hit, launch stubbed (CPU torch.empty)   {call:.2f} us")


if __name__ == "__main__":
    main()
