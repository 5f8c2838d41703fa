"""A selection change measured in one process: `pingpong bench` rows for the same shapes
under the near-entry rule with and without `select.tile_fill` (the padding check), alternated
round by round so their ratios to cuBLAS compare.

    PYTHONPATH=src python benchmarks/near_rule.py M,N,K ... [--rounds 2]
"""

import argparse
import sys

from pingpong.tools import bench
from pingpong.runtime import plan
from pingpong.hopper import select

p = argparse.ArgumentParser()
p.add_argument("shapes", nargs="+")
p.add_argument("--rounds", type=int, default=2)
args = p.parse_args()
fill = select.tile_fill
for r in range(args.rounds):
    for name, f in (("without tile_fill", lambda config, M, N: 1.0), ("with tile_fill", fill)):
        select.tile_fill = f
        plan.PLANS.clear()  # plans cache the selection
        print(f"== round {r + 1}: {name}", flush=True)
        a = argparse.ArgumentParser()
        bench.add_arguments(a)
        bench.run(a.parse_args(["--shapes", *args.shapes, "--rounds", "1"]))
sys.exit(0)
