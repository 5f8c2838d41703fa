"""Fit (or check) the mid-rows model's constants (pingpong.hopper.host.select: MID_ROWS_TILES'
per-FLOP speeds, MID_ROWS_SPLIT_STEPS) to measured sweeps of explicit configs.

    PYTHONPATH=src python benchmarks/midrows_fit.py [--data benchmarks/data/midrows_sweeps.json]
        [--sms 132] [--top 10]

A sweep row is (M, N, K, config, ours/cuBLAS) for configs of `schedules.py` (SCHEDULE:BMxBNxBK
[/kSPLIT]); the data file holds named sets (run 174's 23 shapes × 12 configs, runs 113-114's
tables). For a setting of the constants, the model (select.mid_rows_cost, the same function the
selection calls) picks, per shape, the least-cost config among those measured there; the score
of a set is the geometric mean of picked / best measured ratio (1.0: the model picks the best
measured config everywhere). Prints the shipped constants' score per set, then the best
settings of a grid. Refit on a new GPU by sweeping its mid-row shapes (schedules.py --json)
and adding them as a set.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

from pingpong.hopper.host import select
from pingpong.hopper.host.config import KernelConfig

DATA = Path(__file__).resolve().parent / "data" / "midrows_sweeps.json"


def parse(text: str) -> KernelConfig:
    """A schedules.py config name without its options but the split: SCHEDULE:BMxBNxBK[/kS]."""
    sched, rest = text.split(":")
    bm, bn, bk = (int(x) for x in rest.split("/")[0].split("x"))
    split = next((int(p[1:]) for p in rest.split("/")[1:] if p.startswith("k")), 1)
    return KernelConfig(bm, bn, bk, schedule=sched, split_k=split)


def load(path=DATA) -> dict[str, dict[tuple[int, int, int], dict[KernelConfig, float]]]:
    """{set name: {(M, N, K): {config: ratio}}}."""
    doc = json.loads(Path(path).read_text())
    sets = {}
    for name, s in doc["sets"].items():
        shapes: dict = {}
        for M, N, K, cfg, ratio in s["rows"]:
            shapes.setdefault((M, N, K), {})[parse(cfg)] = ratio
        sets[name] = shapes
    return sets


def score(shapes, speeds=None, split_steps=None, sms: int = select.DEFAULT_SMS) -> float:
    """Geometric mean over shapes of (the model's pick among the measured configs) / (best)."""
    logs = []
    for (M, N, K), measured in shapes.items():
        k_steps = math.ceil(K / select.SPLIT_STEP_K)
        known = {c: r for c, r in measured.items() if (speeds or select.MID_ROWS_TILES).get(
            KernelConfig(c.block_m, c.block_n, 64, schedule=c.schedule)) is not None}
        pick = min(known, key=lambda c: select.mid_rows_cost(_model_config(c), M, N, k_steps, sms, speeds,
                                                               split_steps))
        logs.append(math.log(known[pick] / max(measured.values())))
    return math.exp(sum(logs) / len(logs))


def _model_config(c: KernelConfig) -> KernelConfig:
    """The MID_ROWS_TILES key of a measured config (block_k as the model's tiles have it)."""
    return KernelConfig(c.block_m, c.block_n, 64, schedule=c.schedule, split_k=c.split_k)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--sms", type=int, default=select.DEFAULT_SMS)
    p.add_argument("--top", type=int, default=10)
    args = p.parse_args(argv)
    sets = load(args.data)
    print("shipped:", ", ".join(f"{n} {score(s, sms=args.sms):.4f}" for n, s in sets.items()))
    tiles = list(select.MID_ROWS_TILES)
    grid = [0.6, 0.7, 0.8, 0.9, 1.0]
    results = []
    for values in itertools.product(*([grid] * (len(tiles) - 1)), (8, 16, 32, 64)):
        speeds = dict(zip(tiles, (1.0, *values[:-1])))  # the first (widest) tile is the unit
        scores = [score(s, speeds, values[-1], args.sms) for s in sets.values()]
        results.append((math.prod(scores) ** (1 / len(scores)), scores, values))
    results.sort(key=lambda r: -r[0])
    names = ", ".join(f"{c.schedule[:4]} {c.block_m}x{c.block_n}" for c in tiles[1:])
    print(f"best of the grid (speeds of {names}; split steps):")
    for mean, scores, values in results[:args.top]:
        print(f"  {mean:.4f} ({', '.join(f'{x:.4f}' for x in scores)})  {values[:-1]}  {values[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
