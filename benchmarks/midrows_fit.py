"""Fit (or check) the mid-rows models' constants (pingpong.hopper.host.select.MidRowsModel: the
16-bit kernels' select.MID_ROWS and the FP8 kernel's fp8_select.FP8_MID_ROWS: per-FLOP speeds
and a split's cost in k-steps) to measured sweeps of explicit configs.

    PYTHONPATH=src python benchmarks/midrows_fit.py [--data benchmarks/data/midrows_sweeps.json]
        [--sms 132] [--model bf16|fp8] [--hold-out SET ...]

A sweep row is (M, N, K, config, ours/peer) for a config named as `schedules.py` names it;
the data file holds named sets, each with its GPU, date and command, and its model ("model":
"fp8" for FP8 sweeps against torch._scaled_mm; bf16 against cuBLAS otherwise); a set's
"superseded" configs measured a kernel since replaced, and are skipped. For a setting
of the constants, the model (MidRowsModel.cost, the same function the selection calls) picks,
per shape, the least-cost config among those measured there that it can choose (one of its
candidates: a tile split or not, a whole one unsplit; never stream-K or a cluster; where it can
choose none of them, the worst measured counts); the score
of a set is the geometric mean of picked / best measured ratio (1.0: the model picks the best
measured config everywhere), over the set's shapes whose tile the model chooses
(select.mid_rows_decides, fp8_select.fp8_mid_rows_decides; other shapes' rows are kept as
data). Prints the shipped constants' score per set, then the best settings of --model's
constants found by coordinate descent (each speed over a grid of 0.30-1.30, each tile's row
limit over 192-768 rows or none, the split cost over 8-64 k-steps, from the shipped constants, until no move improves) fitted on its sets but
those named by --hold-out, with their score on the held-out sets apart. Refit on a new GPU by
sweeping its mid-row shapes (schedules.py --json) and adding them as a set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

from pingpong.hopper.host import fp8_select, select
from pingpong.hopper.host.config import KernelConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from schedules import parse_config  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "midrows_sweeps.json"
#: model kind -> (its shipped constants, where the selection asks it)
MODELS = {"bf16": (select.MID_ROWS, select.mid_rows_decides),
          "fp8": (fp8_select.FP8_MID_ROWS, fp8_select.fp8_mid_rows_decides)}


def load(path=DATA) -> dict[str, dict[tuple[int, int, int], dict[KernelConfig, float]]]:
    """{set name: {(M, N, K): {config: ratio}}}."""
    doc = json.loads(Path(path).read_text())
    sets = {}
    for name, s in doc["sets"].items():
        shapes: dict = {}
        stale = set(s.get("superseded", ()))  # a kernel since replaced (the file's "superseded")
        for M, N, K, cfg, ratio in s["rows"]:
            if cfg not in stale:
                shapes.setdefault((M, N, K), {})[parse_config(cfg)] = ratio
        sets[name] = shapes
    return sets


def kinds(path=DATA) -> dict[str, str]:
    """{set name: the model its sweeps are for (MODELS' key)}."""
    return {name: s.get("model", "bf16") for name, s in json.loads(Path(path).read_text())["sets"].items()}


def score(shapes, model: select.MidRowsModel | None = None, kind: str = "bf16", sms: int = select.DEFAULT_SMS) -> float:
    """Geometric mean over shapes of (the model's pick among the measured configs) / (best);
    `model` defaults to the shipped constants of `kind`."""
    shipped, decides = MODELS[kind]
    model = model or shipped
    logs = []
    for (M, N, K), measured in shapes.items():
        if not decides(M, N, K, sms):
            continue
        k_steps = model.k_steps(K)
        choosable = set(model.candidates(k_steps, M))
        known = {c: r for c, r in measured.items() if _model_config(c, model) in choosable}
        if not known:  # the model can choose none of what was measured: the worst measured counts
            logs.append(math.log(min(measured.values()) / max(measured.values())))
            continue
        pick = min(known, key=lambda c: model.cost(_model_config(c, model), M, N, k_steps, sms))
        logs.append(math.log(known[pick] / max(measured.values())))
    return math.exp(sum(logs) / len(logs))


def _model_config(c: KernelConfig, model: select.MidRowsModel) -> KernelConfig | None:
    """The config of the model's kind that a measured one is: its tile, schedule, split,
    swap-AB and stream-K, with block_k as the model's tiles have it; None for a cluster."""
    if c.cluster_m > 1:
        return None
    return KernelConfig(c.block_m, c.block_n, model.step_k, schedule=c.schedule, split_k=c.split_k,
                        swap_ab=c.swap_ab, stream_k=c.stream_k)


GRID = tuple(round(0.3 + 0.05 * i, 2) for i in range(21))
SPLIT_GRID = (8, 16, 24, 32, 48, 64)
#: the row limits tried for each tile (MidRowsModel.max_m; None: any number of rows)
ROWS_GRID = (None, 192, 256, 320, 384, 448, 512, 640, 768)


def fit(sets: dict, names: list[str], sms: int, kind: str = "bf16") -> tuple[float, select.MidRowsModel]:
    """(score, model): coordinate descent from `kind`'s shipped constants, maximizing the
    geometric mean of the named sets' scores; the first tile is the unit."""
    def total(m):
        return math.prod(score(sets[n], m, kind, sms) for n in names) ** (1 / len(names))

    def moves():  # each a function of the current model, so that every trial starts from the last accepted move
        for tile in list(MODELS[kind][0].speeds)[1:]:
            for v in GRID:
                yield lambda m, tile=tile, v=v: dataclasses.replace(m, speeds={**m.speeds, tile: v})
            if MODELS[kind][0].max_m.get(tile, ROWS_GRID[1]) < ROWS_GRID[1]:
                continue  # a limit under the grid's is the tile's width (a swap-AB tile's M): fixed
            for rows in ROWS_GRID:
                yield lambda m, tile=tile, rows=rows: dataclasses.replace(
                    m, max_m={**{t: r for t, r in m.max_m.items() if t != tile}, **({tile: rows} if rows else {})})
        for v in SPLIT_GRID:
            yield lambda m, v=v: dataclasses.replace(m, split_steps=v)

    model = MODELS[kind][0]
    best = total(model)
    improved = True
    while improved:
        improved = False
        for move in moves():
            if (t := total(trial := move(model))) > best + 1e-9:
                best, model, improved = t, trial, True
    return best, model


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--sms", type=int, default=select.DEFAULT_SMS)
    p.add_argument("--model", default="bf16", choices=tuple(MODELS), help="the model to fit (default bf16)")
    p.add_argument("--hold-out", nargs="*", default=[], metavar="SET",
                   help="fit the grid without these sets and report their scores apart")
    args = p.parse_args(argv)
    sets, kind = load(args.data), kinds(args.data)
    mine = [n for n in sets if kind[n] == args.model]
    unknown = set(args.hold_out) - set(mine)
    if unknown or len(args.hold_out) == len(mine):
        p.error(f"--hold-out: {sorted(unknown) or 'every set'}; the {args.model} sets are {', '.join(mine)}")
    print("shipped:", ", ".join(f"{n} {score(sets[n], None, kind[n], args.sms):.4f}" for n in sets))
    fitted = [n for n in mine if n not in args.hold_out]
    total, model = fit(sets, fitted, args.sms, args.model)
    held = ", ".join(f"{n} {score(sets[n], model, args.model, args.sms):.4f}" for n in args.hold_out)
    print(f"fitted on {', '.join(fitted)}: {total:.4f}" + (f"; held out: {held}" if held else ""))
    print(f"  split steps {model.split_steps}")
    for c, v in model.speeds.items():
        print(f"  {c.name():32s} {v:.2f}" + (f"  up to {model.max_m[c]} rows" if c in model.max_m else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
