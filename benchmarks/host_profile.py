"""Where a call's host time goes: cProfile over back-to-back `pingpong.matmul` calls.

    PYTHONPATH=src python benchmarks/host_profile.py [--size 64] [--calls 2000]
"""

import argparse
import cProfile
import pstats
import time

import torch

import pingpong
from pingpong.runtime import plan
from pingpong.runtime.launcher import hooks_idle, launch_key

p = argparse.ArgumentParser()
p.add_argument("--size", type=int, default=64)
p.add_argument("--calls", type=int, default=2000)
args = p.parse_args()
n = args.size
a = torch.randn(n, n, device="cuda").bfloat16()
w = torch.randn(n, n, device="cuda").bfloat16()
for _ in range(10):
    pingpong.matmul(a, w.t())
torch.cuda.synchronize()
print("hooks idle:", hooks_idle(), "launch key:", launch_key())
for key, pl in plan.PLANS.items():
    print(type(pl).__name__, pl.path, getattr(pl, "config", None), "bound:", getattr(pl.launch, "bound", None) is not None)
t = time.perf_counter()
for _ in range(args.calls):
    pingpong.matmul(a, w.t())
print(f"{(time.perf_counter() - t) / args.calls * 1e6:.1f} us per call")
prof = cProfile.Profile()
prof.enable()
for _ in range(args.calls):
    pingpong.matmul(a, w.t())
prof.disable()
torch.cuda.synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(14)
