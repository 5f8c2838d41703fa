"""Fit (or check) the mid-rows model's constants (pingpong.hopper.host.select: MID_ROWS_TILES'
per-FLOP speeds, MID_ROWS_SPLIT_STEPS) to measured sweeps of explicit configs.

    PYTHONPATH=src python benchmarks/midrows_fit.py [--data benchmarks/data/midrows_sweeps.json]
        [--sms 132] [--hold-out SET ...]

A sweep row is (M, N, K, config, ours/cuBLAS) for a config named as `schedules.py` names it;
the data file holds named sets, each with its GPU, date and command. For a setting of the
constants, the model (select.mid_rows_cost, the same function the selection calls) picks, per
shape, the least-cost config among those measured there that it can choose (one of
select.mid_rows_candidates: a MID_ROWS_TILES tile split or not, a MID_ROWS_WHOLE_TILES one;
never stream-K or a cluster); the score of a set is the geometric mean of picked / best
measured ratio (1.0: the model picks the best measured config everywhere), over the set's
shapes whose tile the model chooses (select.mid_rows_decides; other shapes' rows are kept as
data). Prints the shipped constants' score per set, then the best settings found by coordinate
descent (each speed over a grid of 0.30-1.30, the split cost over 8-64 k-steps, from the
shipped constants, until no move improves) fitted on every set but those named by --hold-out,
with their score on the held-out sets apart. Refit on a new GPU by sweeping its mid-row shapes
(schedules.py --json) and adding them as a set.
"""

from __future__ import annotations

import argparse
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
        choosable = set(select.mid_rows_candidates(k_steps, speeds))
        known = {c: r for c, r in measured.items() if _model_config(c) in choosable}
        pick = min(known, key=lambda c: select.mid_rows_cost(_model_config(c), M, N, k_steps, sms, speeds,
                                                               split_steps))
        logs.append(math.log(known[pick] / max(measured.values())))
    return math.exp(sum(logs) / len(logs))


def _model_config(c: KernelConfig) -> KernelConfig | None:
    """The config of the model's kind that a measured one is: its tile, schedule, split,
    swap-AB and stream-K, with block_k as the model's tiles have it (64); None for a cluster."""
    if c.cluster_m > 1:
        return None
    return KernelConfig(c.block_m, c.block_n, 64, schedule=c.schedule, split_k=c.split_k, swap_ab=c.swap_ab,
                        stream_k=c.stream_k)


GRID = tuple(round(0.3 + 0.05 * i, 2) for i in range(21))
SPLIT_GRID = (8, 16, 24, 32, 48, 64)


def fit(sets: dict, names: list[str], sms: int) -> tuple[float, dict, int]:
    """(score, speeds, split steps): coordinate descent from the shipped constants, maximizing
    the geometric mean of the named sets' scores; the first (widest) tile is the unit."""
    def total(speeds, steps):
        return math.prod(score(sets[n], speeds, steps, sms) for n in names) ** (1 / len(names))

    speeds, steps = dict(select.MID_ROWS_SPEEDS), select.MID_ROWS_SPLIT_STEPS
    best = total(speeds, steps)
    improved = True
    while improved:
        improved = False
        for tile in list(speeds)[1:]:
            for v in GRID:
                trial = {**speeds, tile: v}
                if (t := total(trial, steps)) > best + 1e-9:
                    best, speeds, improved = t, trial, True
        for v in SPLIT_GRID:
            if (t := total(speeds, v)) > best + 1e-9:
                best, steps, improved = t, v, True
    return best, speeds, steps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--sms", type=int, default=select.DEFAULT_SMS)
    p.add_argument("--hold-out", nargs="*", default=[], metavar="SET",
                   help="fit the grid without these sets and report their scores apart")
    args = p.parse_args(argv)
    sets = load(args.data)
    unknown = set(args.hold_out) - set(sets)
    if unknown or len(args.hold_out) == len(sets):
        p.error(f"--hold-out: {sorted(unknown) or 'every set'}; the sets are {', '.join(sets)}")
    print("shipped:", ", ".join(f"{n} {score(s, sms=args.sms):.4f}" for n, s in sets.items()))
    fitted = [n for n in sets if n not in args.hold_out]
    total, speeds, steps = fit(sets, fitted, args.sms)
    held = ", ".join(f"{n} {score(sets[n], speeds, steps, args.sms):.4f}" for n in args.hold_out)
    print(f"fitted on {', '.join(fitted)}: {total:.4f}" + (f"; held out: {held}" if held else ""))
    print(f"  split steps {steps}")
    for c, v in speeds.items():
        print(f"  {c.name():32s} {v:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
