"""Experiment (GPU): the FP8 kernel on a persistent grid (one program per SM, the library's) or
one program per tile (the hardware's block scheduler hands tiles out in raster order as SMs
free up), against torch._scaled_mm on the same tensors, the rule's config, modes alternated.

Question: at 16384³ our tensor-wise kernel reads ~60% more from DRAM than cuBLASLt (ncu, run
277). A persistent program takes tiles p, p+G, p+2G, ... whatever its pace; if programs drift
apart over ~124 tiles each, the tiles in flight stop sharing A and B panels in L2. One program
per tile cannot drift: the next tile goes to whichever SM frees first.

Mode "rowvec" (tensor-wise only): the library's grid, and its long-product route forced on
every shape (fp8_launch.LONG_WORK = 0: the row-wise kernel with the two scalars
broadcast into (M, 1) and (1, N) vectors per call; run 276: the row-wise kernel is ~23% faster
at 16384³ on any data; stride-0 views did not help, run 278). Every other mode turns the route
off, so tensor-wise scales run the tensor-wise kernel there (as in runs 282–284, before the
route existed).

Mode "bias": the library's launch with a random bf16 bias of N (the epilogue loads it per
column, as the row-wise kernel loads its scales): does a per-column load in the epilogue,
not the row-wise scaling itself, give the row-wise kernel its speed at 16384³?

    python benchmarks/fp8_grid.py tensor block --shapes 16384,16384,16384 8192,8192,8192
    python benchmarks/fp8_grid.py tensor --modes persistent rowvec rowvec persistent --shapes ...
"""
import argparse
import os
import sys

import torch

import pingpong.hopper.fp8_launch as fl
from pingpong.runtime import plan
from pingpong.tools import bench

sys.path.insert(0, os.path.dirname(__file__))
import fp8_configs  # noqa: E402
from fp8_configs import measure  # noqa: E402

MODE = ["persistent"]
_persistent_grid = fl.persistent_grid


def grid(M, N, d, sms, units_per_tile=1):
    """The library's grid, or (MODE "tiles") one program per work unit."""
    if MODE[0] == "tiles":
        sms = 1 << 30
    return _persistent_grid(M, N, d, sms, units_per_tile)


fl.persistent_grid = grid
_direct = fp8_configs.scaled_mm_direct
_BIAS = {}


def direct(a, b, scale_a, scale_b, **kw):
    """scaled_mm_direct; in MODE "bias" with a random bias (one per N, made once)."""
    if MODE[0] == "bias":
        n = b.shape[1]
        if n not in _BIAS:
            _BIAS[n] = torch.randn(n, dtype=torch.bfloat16, device=a.device)
        kw["bias"] = _BIAS[n]
    return _direct(a, b, scale_a, scale_b, **kw)


fp8_configs.scaled_mm_direct = direct


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scalings", nargs="*", default=["tensor"])
    p.add_argument("--shapes", nargs="+", type=bench.parse_shape, default=[(16384, 16384, 16384)])
    p.add_argument("--modes", nargs="+", default=["persistent", "tiles", "tiles", "persistent"])
    args = p.parse_args(argv)
    for scaling in args.scalings:
        for M, N, K in args.shapes:
            for mode in args.modes:
                MODE[0] = mode
                fl.LONG_WORK = 0 if mode == "rowvec" else 1 << 62  # the route forced, or off
                plan.PLANS.clear()  # the grid and the route are bound into a plan
                cfg = fl.rule_fp8(M, N, K, True, torch.cuda.get_device_properties(0).multi_processor_count, scaling)
                print(f"[{mode}]", end=" ", flush=True)
                list(measure(scaling, M, N, K, [("rule", cfg)]))


if __name__ == "__main__":
    main()
