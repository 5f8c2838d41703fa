"""Fit (or check) the mid-rows model's constants (pingpong.hopper.host.select: MID_ROWS_TILES'
per-FLOP speeds, MID_ROWS_SPLIT_STEPS) to measured sweeps of explicit configs.

    PYTHONPATH=src python benchmarks/midrows_fit.py [--data benchmarks/data/midrows_sweeps.json]
        [--sms 132] [--top 10]

A sweep row is (M, N, K, config, ours/cuBLAS) for a config named as `schedules.py` names it;
the data file holds named sets, each with its GPU, date and command. For a setting of the
constants, the model (select.mid_rows_cost, the same function the selection calls) picks, per
shape, the least-cost config among those measured there that it can choose (a MID_ROWS_TILES
tile, split or not: no stream-K, swap-AB or cluster configs); the score of a set is the
geometric mean of picked / best measured ratio (1.0: the model picks the best measured config
everywhere), over the set's shapes whose tile the model chooses (select.mid_rows_decides;
other shapes' rows are kept as data). Prints the shipped constants' score per set, then the
best settings of a grid fitted on every set but those named by --hold-out, with their score on
the held-out sets apart. Refit on a new GPU by sweeping its mid-row shapes
(schedules.py --json) and adding them as a set.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from schedules import parse_config  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "midrows_sweeps.json"


def load(path=DATA) -> dict[str, dict[tuple[int, int, int], dict[KernelConfig, float]]]:
    """{set name: {(M, N, K): {config: ratio}}}."""
    doc = json.loads(Path(path).read_text())
    sets = {}
    for name, s in doc["sets"].items():
        shapes: dict = {}
        for M, N, K, cfg, ratio in s["rows"]:
            shapes.setdefault((M, N, K), {})[parse_config(cfg)] = ratio
        sets[name] = shapes
    return sets


def score(shapes, speeds=None, split_steps=None, sms: int = select.DEFAULT_SMS) -> float:
    """Geometric mean over shapes of (the model's pick among the measured configs) / (best)."""
    logs = []
    for (M, N, K), measured in shapes.items():
        if not select.mid_rows_decides(M, N, K, sms):
            continue
        k_steps = math.ceil(K / select.SPLIT_STEP_K)
        known = {c: r for c, r in measured.items() if _model_config(c) is not None
                 and _model_config(c, 1) in (speeds or select.MID_ROWS_TILES)}
        pick = min(known, key=lambda c: select.mid_rows_cost(_model_config(c), M, N, k_steps, sms, speeds,
                                                               split_steps))
        logs.append(math.log(known[pick] / max(measured.values())))
    return math.exp(sum(logs) / len(logs))


def _model_config(c: KernelConfig, split_k: int | None = None) -> KernelConfig | None:
    """The config of the model's kind that a measured one is (its tile and split, block_k as
    the model's tiles have it; with `split_k`, that split), or None: one the model cannot
    choose (stream-K, swap-AB, a cluster)."""
    if c.stream_k or c.swap_ab or c.cluster_m > 1:
        return None
    return KernelConfig(c.block_m, c.block_n, 64, schedule=c.schedule, split_k=split_k or c.split_k)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--sms", type=int, default=select.DEFAULT_SMS)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--hold-out", nargs="*", default=[], metavar="SET",
                   help="fit the grid without these sets and report their scores apart")
    args = p.parse_args(argv)
    sets = load(args.data)
    unknown = set(args.hold_out) - set(sets)
    if unknown or len(args.hold_out) == len(sets):
        p.error(f"--hold-out: {sorted(unknown) or 'every set'}; the sets are {', '.join(sets)}")
    print("shipped:", ", ".join(f"{n} {score(s, sms=args.sms):.4f}" for n, s in sets.items()))
    tiles = list(select.MID_ROWS_TILES)
    grid = [0.6, 0.7, 0.8, 0.9, 1.0]
    fitted = [n for n in sets if n not in args.hold_out]
    results = []
    for values in itertools.product(*([grid] * (len(tiles) - 1)), (8, 16, 32, 64)):
        speeds = dict(zip(tiles, (1.0, *values[:-1])))  # the first (widest) tile is the unit
        scores = {n: score(s, speeds, values[-1], args.sms) for n, s in sets.items()}
        fit = math.prod(scores[n] for n in fitted) ** (1 / len(fitted))
        results.append((fit, scores, values))
    results.sort(key=lambda r: -r[0])
    names = ", ".join(f"{c.schedule[:4]} {c.block_m}x{c.block_n}" for c in tiles[1:])
    held = f"; held out: {', '.join(args.hold_out)}" if args.hold_out else ""
    print(f"best of the grid fitted on {', '.join(fitted)} (speeds of {names}; split steps{held}):")
    for fit, scores, values in results[:args.top]:
        shown = ", ".join(f"{scores[n]:.4f}" for n in fitted)
        apart = " | " + ", ".join(f"{scores[n]:.4f}" for n in args.hold_out) if args.hold_out else ""
        print(f"  {fit:.4f} ({shown}{apart})  {values[:-1]}  {values[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
