"""`pingpong tune`: measure KernelConfigs per shape on this GPU and keep the best in the tuning
table that `select_config` reads (pingpong.hopper.host.table).

    shapes (--shapes / --suite) ──> for each shape:
        candidates: the heuristic's config first, then
            --quick            a small fixed grid around it (quick_grid), stream-K twins included
            --clusters         also every pairable candidate as a 2-CTA cluster (cluster_m=2;
                               off by default: slower on the shapes measured)
            space ≤ --trials   every valid config of the space (brute force)
            otherwise          Optuna's TPE sampler over the space's factors (pip install
                               the tune extra); without Optuna, --trials configs of the space
                               in a seeded random order
        each candidate: validate() (invalid: skipped, never run) ─ de-duplicated (configs
        that run the same kernel the same way are measured once) ─ checked against a torch
        reference on NaN-poisoned output (wrong: never timed) ─ timed (L2-flushed median)
    ──> best per shape ──> <cache dir>/tuning/<gpu>-<sms>sm.json (file-locked merge)

--dtype fp8 tunes pingpong.scaled_mm instead (--scaling tensor|row|block, --fast-accum):
the same loop over the configs the FP8 kernel runs (fp8_space: block_m 64/128 × block_n
64/128/144/160/192/256, cooperative / ping-pong, group_m, stages, each passing check_fp8_config for that
scaling and accumulation; the heuristic is select_fp8's rule, --quick a grid around its pick),
on bench_fp8's quantized inputs (e4m3, bf16 output), checked against their float64 product
and timed against torch._scaled_mm on the same tensors. Entries go under the table dtype
`table.fp8_key` makes ("fp8e4m3-row", "fp8e4m3-row-fast", "fp8e4m3-block", ...; their
cublas_us field is torch._scaled_mm's time), so bf16 and FP8 entries never answer each other;
select_fp8 reads them.

Bad arguments (a shape that does not parse, a size ≤ 0, an unknown suite, a cache directory
that cannot be written) print a message naming the option and exit 2 before anything is
measured or written; so does a machine without a CUDA GPU. Optuna and tqdm are optional
(the `tune` extra); nothing on the `matmul` call path imports them.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import random
import sys
from typing import Callable, Iterable

from ..hopper.host.config import KernelConfig
from ..errors import ConfigError, PingpongError
from ..hopper.host import table as tables
from ..hopper.host.splits import effective_splits
from ..runtime.spec import SCALE_BLOCK
from ..hopper.host.fp8_select import (FP8_MID_ROWS, FP8_MID_ROWS_MIN_M, NARROW_STAGED_SWAPS, STAGED_SWAP_MAX_M,
                                      STAGED_SWAPS)
from ..hopper.host.select import (DECODE_M, DEFAULT_SMS, FEW_WIDTHS, MID_M, MID_ROWS, MID_ROWS_MAX_M,
                                  MID_ROWS_NARROW, MID_ROWS_NARROW_SWAP, MID_ROWS_WHOLE_TILES, MID_WIDTHS,
                                  SMALL_TILE_K_BYTES, WAVE_SWAP_MAX_M, choose, heuristic_config, mid_rows_decides)
from .suites import SUITES, suite

EXIT_USAGE = 2
QUICK_REPS = 20
REPS = 50
TRIALS = 40
DTYPES = {"bf16": 2, "fp16": 2}
#: --dtype of the FP8 product (pingpong.scaled_mm)
FP8 = "fp8"
SCALINGS = ("tensor", "row", "block")
LAYOUTS = ("nn", "nt", "tn", "tt")

#: the factors of the searched space
TILES = ((128, 256), (128, 192), (128, 160), (128, 144), (128, 128), (128, 96), (128, 80), (128, 64), (128, 48),
         (128, 32), (128, 16), (64, 256), (64, 192), (64, 160), (64, 144), (64, 128), (64, 96), (64, 64), (64, 48),
         (64, 32), (64, 16))
SCHEDULES = ("cooperative", "pingpong")
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
#: bytes of K per ring slot (block_k = this / element size): one or two 64-element k-steps
K_BYTES = (128, SMALL_TILE_K_BYTES)
#: data-parallel / split-K, and stream-K (KernelConfig.stream_k: K divided over the persistent grid)
STREAM_K = (False, True)
#: CTAs per cluster along M searched with --clusters (KernelConfig.cluster_m)
CLUSTERS = (1, 2)
#: swap-AB is searched for M up to this: the wave rule's last swapped row (select.WAVE_SWAP_MAX_M;
#: the selection gives swap-AB tiles 144-192 wide up to there)
SWAP_MAX_M = WAVE_SWAP_MAX_M
#: the FP8 space's factors (block_k is the FP8 kernel's one 128-deep K block; check_fp8_config
#: keeps what it runs: 192, 160, 144 and 96 columns as two pieces on the unsplit cooperative
#: schedule with tensor- and row-wise scales only, and two accumulators when promoted)
FP8_TILES = tuple((bm, bn) for bm in (128, 64) for bn in (256, 192, 160, 144, 128, 96, 64))
FP8_GROUP_M = (1, 4, 8, 16)
FP8_STAGES = (None, 3, 4, 6)  # None: as many as fit
#: FP8 split counts (fp8_split_gemm: fp32 partials, the last split sums them)
FP8_SPLITS = (1, 2, 4, 8)
#: FP8 swap-AB tiles (N on the wgmma's 64 or 128 rows, M in 16, 32 or 64 columns, or two pieces
#: of 128 + 16 or 128 + 32), each with the fewest and the most rows it is searched for, with
#: tensor- or row-wise scales (block-wise scales cannot swap): decode's up to select.DECODE_M,
#: ping-pong 64×64 as far as the FP8 mid-rows model takes it (None: the model's row limit of
#: that swap-AB tile, fp8_select.FP8_MID_ROWS.max_m), the two-piece ones where one 128-row tile
#: would leave a second tile-row almost empty (from MID_M + 1 rows up to the model's limit, their
#: width), and FP8_STAGED_SWAPS (as far as the rule takes them, fp8_select.STAGED_SWAP_MAX_M rows)
FP8_STAGED_SWAPS = tuple((c.block_m, c.block_n) for c in STAGED_SWAPS.values())  # cooperative only
#: ... and the narrow staged ones (fp8_select.NARROW_STAGED_SWAPS) from the FP8 mid-rows model's
#: first row up to its row limit for them, as the model takes them
FP8_NARROW_SWAPS = {(c.block_m, c.block_n): FP8_MID_ROWS.max_m[c] for c in NARROW_STAGED_SWAPS.values()}  # cooperative
FP8_SWAP_TILES = {(64, 16): (1, DECODE_M), (64, 32): (1, DECODE_M), (128, 16): (1, DECODE_M),
                  (128, 32): (1, DECODE_M), (64, 64): (1, None), (64, 144): (MID_M + 1, None),
                  (64, 160): (MID_M + 1, None), **{tile: (MID_M + 1, STAGED_SWAP_MAX_M) for tile in FP8_STAGED_SWAPS},
                  **{tile: (FP8_MID_ROWS_MIN_M + 1, rows) for tile, rows in FP8_NARROW_SWAPS.items()}}
#: what the tuned FP8 inputs are (bench_fp8.make_fp8_inputs): W's scales in 128×128 blocks, bf16 out
FP8_SB_COLS = SCALE_BLOCK
FP8_OUT_BYTES = 2


# --------------------------------------------------------------------------- arguments


@dataclasses.dataclass(frozen=True)
class Settings:
    shapes: tuple[tuple[int, int, int], ...]
    quick: bool = False
    trials: int = TRIALS
    dtype: str = "bf16"
    layout: str = "nt"
    reps: int = REPS
    seed: int = 0
    show: bool = False
    clusters: bool = False  # also measure the 2-CTA cluster twins of the candidates
    scaling: str = "row"  # --dtype fp8: tensor | row | block
    fast_accum: bool = False  # --dtype fp8: use_fast_accum (tensor/row)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shapes", nargs="+", metavar="M,N,K", help="problem sizes to tune")
    p.add_argument("--suite", help=f"a named shape list: {', '.join(SUITES)} (pingpong.tools.suites)")
    p.add_argument("--quick", action="store_true", help="a small fixed grid around the heuristic's choice per shape")
    p.add_argument("--clusters", action="store_true",
                   help="also measure every pairable candidate as a 2-CTA cluster (cluster_m=2, B multicast)")
    p.add_argument("--trials", type=int, default=None,
                   help=f"configs measured per shape (default {TRIALS}; not with --quick, a fixed grid)")
    p.add_argument("--dtype", default="bf16", help="bf16 (default), fp16, or fp8 (pingpong.scaled_mm, e4m3)")
    p.add_argument("--scaling", default=None, help="--dtype fp8: tensor, row (default) or block")
    p.add_argument("--fast-accum", action="store_true", help="--dtype fp8: use_fast_accum=True (tensor/row)")
    p.add_argument("--layout", default="nt", help="A,B storage: nt (default, a @ wᵀ), nn, tn, tt")
    p.add_argument("--reps", type=int, default=None,
                   help=f"timed repetitions per config (default {REPS}, --quick {QUICK_REPS})")
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs and the sampler (default 0)")
    p.add_argument("--show", action="store_true", help="print the tuning table in use on this machine and exit")


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = text.replace("x", ",").split(",")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise PingpongError(f"--shapes: {text!r} is not M,N,K with three integers (e.g. 16,4096,4096)") from None
    if len(dims) != 3:
        raise PingpongError(f"--shapes: {text!r} is not M,N,K with three integers (e.g. 16,4096,4096)")
    if any(d <= 0 for d in dims):
        raise PingpongError(f"--shapes: {text!r} has a size ≤ 0; M, N and K must be positive")
    return dims  # type: ignore[return-value]


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Validate every option (PingpongError naming it) before anything runs."""
    shapes: list[tuple[int, int, int]] = [parse_shape(s) for s in args.shapes or ()]
    if args.suite is not None:
        shapes += suite(args.suite, seed=args.seed)
    if not shapes and not args.show:
        raise PingpongError("--shapes/--suite: nothing to tune; give --shapes M,N,K ... or --suite NAME")
    if args.trials is not None and args.quick:
        raise PingpongError("--trials: --quick measures its fixed grid, not a number of trials; give one of them")
    trials = TRIALS if args.trials is None else args.trials
    if trials < 1:
        raise PingpongError(f"--trials: {trials} must be ≥ 1")
    if args.dtype not in (*DTYPES, FP8):
        raise PingpongError(f"--dtype: {args.dtype!r} is not one of {', '.join((*DTYPES, FP8))}")
    if args.layout not in LAYOUTS:
        raise PingpongError(f"--layout: {args.layout!r} is not one of {', '.join(LAYOUTS)}")
    scaling, fast = getattr(args, "scaling", None), bool(getattr(args, "fast_accum", False))
    clusters = bool(getattr(args, "clusters", False))
    if args.dtype != FP8:
        if scaling is not None or fast:
            raise PingpongError(f"--scaling/--fast-accum: FP8 options; add --dtype {FP8} (got --dtype {args.dtype})")
    else:
        scaling = "row" if scaling is None else scaling
        if scaling not in SCALINGS:
            raise PingpongError(f"--scaling: {scaling!r} is not one of {', '.join(SCALINGS)}")
        if fast and scaling == "block":
            raise PingpongError("--fast-accum: block-wise scales always promote (scaled_mm ignores the flag there);"
                                " drop --fast-accum or use --scaling tensor|row")
        if args.layout != "nt":
            raise PingpongError(f"--layout: {args.layout!r}; FP8 operands are K-major, the layout is nt")
        if clusters:
            raise PingpongError("--clusters: the FP8 kernel runs no clusters")
    reps = args.reps if args.reps is not None else (QUICK_REPS if args.quick else REPS)
    if reps < 1:
        raise PingpongError(f"--reps: {reps} must be ≥ 1")
    return Settings(tuple(dict.fromkeys(shapes)), bool(args.quick), trials, args.dtype, args.layout, reps,
                    args.seed, bool(args.show), clusters, scaling or "row", fast)


def check_cache_dir() -> str:
    """The directory the table will go to, checked writable without writing anything: it, or
    the nearest ancestor that exists (the table's write creates the rest), is a writable
    directory."""
    where = tables.cache_dir() / "tuning"
    probe = where
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise PingpongError(f"cache directory ({tables.CACHE_ENV} or the user cache dir): {where} cannot be written"
                            f" ({probe} is {'not a directory' if not probe.is_dir() else 'not writable'})")
    return str(where)


def no_gpu_reason() -> str | None:
    """None on a Hopper GPU (the kernel the table configures), else why tuning cannot run."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine: tuning measures the kernels on the GPU the table is for"
    from ..runtime.device import is_hopper

    if not is_hopper(torch.cuda.current_device()):
        return f"{torch.cuda.get_device_name()} is not a Hopper (sm_90) GPU: the tuned kernel is the Hopper one"
    return None


# --------------------------------------------------------------------------- the space


def normalize(config: KernelConfig, M: int, N: int, K: int) -> KernelConfig:
    """The config's canonical form for this shape: split_k as the kernel runs it (configs
    that split K the same way are one candidate)."""
    return dataclasses.replace(config, split_k=effective_splits(K, config.block_k, config.split_k))


def valid(config: KernelConfig, in_bytes: int, out_bytes: int) -> bool:
    try:
        config.validate(in_bytes, out_bytes)
    except ConfigError:
        return False
    return True


def space(M: int, N: int, K: int, in_bytes: int = 2, out_bytes: int = 2, clusters: bool = False) -> list[KernelConfig]:
    """Every valid, distinct config of the searched factors for this shape (`clusters`: with
    cluster_m 1 and 2)."""
    seen: dict[KernelConfig, None] = {}
    for (bm, bn), kb, schedule, split, swap, pair, streamed in itertools.product(
            TILES, K_BYTES, SCHEDULES, SPLITS, (False, True), CLUSTERS if clusters else (1,), STREAM_K):
        if (swap and M > SWAP_MAX_M) or (streamed and split > 1):
            continue
        c = KernelConfig(bm, bn, kb // in_bytes, schedule=schedule, split_k=split, swap_ab=swap, cluster_m=pair,
                         stream_k=streamed)
        if valid(c, in_bytes, out_bytes):
            seen.setdefault(normalize(c, M, N, K))
    return list(seen)


def quick_grid(M: int, N: int, K: int, in_bytes: int = 2, out_bytes: int = 2, clusters: bool = False) -> list[KernelConfig]:
    """The heuristic's config and its neighbours: split ×½ ×2 (where it splits), the other
    schedule, the other orientation, the big / two-piece (both sub-tile widths) / medium tile
    (both schedules) unsplit, the few-tile 64-row ping-pong tiles (FEW_WIDTHS), stream-K on
    the heuristic's tile and on 128×128, for M ≤ 2·MID_M the mid-size 64-row ping-pong tiles
    of every width in MID_WIDTHS, and where the mid-rows model decides (select.mid_rows_decides)
    its whole tiles (MID_ROWS_WHOLE_TILES: 128×160, 128×144, swap-AB 64×144/160/192 and
    cooperative swap-AB 128×128/144/160/192) and the narrow tiles whose row limit holds M
    (MID_ROWS_NARROW_SWAP: swap-AB 128×80, 128×96; MID_ROWS_NARROW: 128×96)."""
    h = heuristic_config(M, N, K, in_bytes=in_bytes)
    other = "pingpong" if h.schedule == "cooperative" else "cooperative"
    if h.swap_ab:
        flipped = KernelConfig(128, 128, 64, split_k=h.split_k)
    else:
        flipped = KernelConfig(128, max(16, min(256, 1 << math.ceil(math.log2(M)))), 64, split_k=h.split_k,
                               swap_ab=M <= SWAP_MAX_M)
    splits = [h.split_k // 2, 2 * h.split_k] if h.split_k > 1 else []  # unsplit: the tiles fill the GPU
    grid = [h, *(dataclasses.replace(h, split_k=s) for s in splits),
            dataclasses.replace(h, schedule=other, block_m=64 if other == "pingpong" else 128), flipped,
            KernelConfig(128, 256, 64), KernelConfig(128, 192, 64), KernelConfig(128, 192, 64, epilogue_n=32),
            KernelConfig(128, 128, 64), KernelConfig(128, 128, 64, schedule="pingpong"),
            *(KernelConfig(64, bn, 64, schedule="pingpong") for bn in FEW_WIDTHS)]
    grid += [dataclasses.replace(c, split_k=1, stream_k=True) for c in (h, KernelConfig(128, 128, 64))]
    if M <= 2 * MID_M:  # the mid-size tiles (select's heuristic picks one of them for 17..128 rows)
        grid += [KernelConfig(64, bn, 64, schedule="pingpong") for bn in MID_WIDTHS]
    if mid_rows_decides(M, N, K, in_bytes=in_bytes):
        narrow = (*MID_ROWS_NARROW_SWAP, *MID_ROWS_NARROW)
        grid += list(MID_ROWS_WHOLE_TILES) + [c for c in narrow if MID_ROWS.admits(c, M)]
    # small tiles with one and with two 64-element k-steps per ring slot (K_BYTES)
    grid += [dataclasses.replace(c, block_k=kb // in_bytes) for c in grid if c.block_m * c.block_n <= 64 * 128
             for kb in K_BYTES]
    if clusters:  # each as a 2-CTA cluster too (the invalid twins drop out in dedupe)
        grid += [dataclasses.replace(c, cluster_m=2) for c in grid]
    return dedupe(grid, M, N, K, in_bytes, out_bytes)


def dedupe(configs: Iterable[KernelConfig], M, N, K, in_bytes=2, out_bytes=2) -> list[KernelConfig]:
    """Valid configs only, in order, each canonical form once."""
    out: dict[KernelConfig, None] = {}
    for c in configs:
        if valid(c, in_bytes, out_bytes):
            out.setdefault(normalize(c, M, N, K))
    return list(out)


# --------------------------------------------------------------------------- the FP8 space


def promoted(settings: Settings) -> bool:
    """Whether the tuned FP8 product promotes (pingpong.fp8: block-wise always, else unless fast)."""
    return settings.scaling == "block" or not settings.fast_accum


def table_dtype(settings: Settings) -> str:
    """The tuning table's dtype key of what this run measures (pingpong.hopper.host.table)."""
    if settings.dtype != FP8:
        return settings.dtype
    return tables.fp8_key("e4m3", settings.scaling, promoted(settings))


def fp8_check(config: KernelConfig, scaling: str, promote: bool):
    """check_fp8_config for the tuned inputs (FP8_SB_COLS, FP8_OUT_BYTES): Derived or ConfigError."""
    from ..hopper.host.fp8_launch import check_fp8_config, scale_boxes

    return check_fp8_config(config, promote, FP8_OUT_BYTES, scale_boxes(scaling, FP8_SB_COLS, config))


def fp8_valid(config: KernelConfig, scaling: str, promote: bool) -> bool:
    """Whether the FP8 kernel runs `config` (fp8_check) and the search takes it: the staged
    swap-AB widths (FP8_STAGED_SWAPS, FP8_NARROW_SWAPS) on the cooperative schedule only, as the
    selection runs them (TMA-stored, config.staged_swap); on ping-pong one consumer would hold
    the whole tile."""
    staged = (*FP8_STAGED_SWAPS, *FP8_NARROW_SWAPS)
    if config.swap_ab and (config.block_m, config.block_n) in staged and config.schedule != "cooperative":
        return False
    try:
        fp8_check(config, scaling, promote)
    except ConfigError:
        return False
    return True


def fp8_normalize(config: KernelConfig, M: int, N: int, K: int, scaling: str, promote: bool) -> KernelConfig:
    """The FP8 config's canonical form for this shape: explicit stages equal to the derived
    count are None, and group_m above the shape's tile rows is the tile rows (one raster band
    either way: scheduler.tile_coords)."""
    try:
        derived = fp8_check(dataclasses.replace(config, stages=None), scaling, promote).stages
    except ConfigError:
        return config
    rows = N if config.swap_ab else M  # the kernel's tile rows: N's under swap-AB
    return dataclasses.replace(config, stages=None if config.stages == derived else config.stages,
                               group_m=max(1, min(config.group_m, -(-rows // config.block_m))))


def fp8_dedupe(configs: Iterable[KernelConfig], M, N, K, scaling: str, promote: bool) -> list[KernelConfig]:
    """Valid FP8 configs only, in order, each canonical form once."""
    out: dict[KernelConfig, None] = {}
    for c in configs:
        if fp8_valid(c, scaling, promote):
            out.setdefault(fp8_normalize(c, M, N, K, scaling, promote))
    return list(out)


def fp8_tiles(M: int, scaling: str) -> tuple[str, ...]:
    """The tiles the FP8 search tries, named "BMxBN" (or "BMxBN/swap": `fp8_tile`): FP8_TILES,
    and with tensor- or row-wise scales the swap-AB tiles of FP8_SWAP_TILES that take M rows."""
    from ..hopper.host.fp8_select import FP8_MID_ROWS

    def most(bm, bn, rows):  # a tile the model puts no row limit on: as far as the model goes
        return rows or FP8_MID_ROWS.max_m.get(KernelConfig(bm, bn, SCALE_BLOCK, schedule="pingpong", swap_ab=True),
                                              MID_ROWS_MAX_M)

    swap = tuple(f"{bm}x{bn}/swap" for (bm, bn), (least, rows) in FP8_SWAP_TILES.items()
                 if scaling != "block" and least <= M <= most(bm, bn, rows))
    return tuple(f"{bm}x{bn}" for bm, bn in FP8_TILES) + swap


def fp8_tile(name: str) -> tuple[int, int, bool]:
    """(block_m, block_n, swap_ab) of a tile `fp8_tiles` names."""
    tile, swap = name.split("/swap")[0], name.endswith("/swap")
    bm, bn = (int(x) for x in tile.split("x"))
    return bm, bn, swap


def fp8_space(M: int, N: int, K: int, scaling: str, promote: bool) -> list[KernelConfig]:
    """Every FP8 config of the factors (fp8_tiles × SCHEDULES × FP8_GROUP_M × FP8_STAGES ×
    FP8_SPLITS) that check_fp8_config accepts for this scaling and accumulation, each canonical
    form once."""
    
    factors = itertools.product(map(fp8_tile, fp8_tiles(M, scaling)), SCHEDULES, FP8_GROUP_M, FP8_STAGES, FP8_SPLITS)
    return fp8_dedupe((KernelConfig(bm, bn, SCALE_BLOCK, stages=st, schedule=sc, group_m=g, split_k=k, swap_ab=swap)
                       for (bm, bn, swap), sc, g, st, k in factors), M, N, K, scaling, promote)


def fp8_quick_grid(M: int, N: int, K: int, scaling: str, promote: bool, sms: int = DEFAULT_SMS) -> list[KernelConfig]:
    """select_fp8's rule pick first, then its group_m ×⅛ and ×2, then every FP8 tile on both
    schedules with the derived stages (the invalid ones drop out)."""
    from ..hopper.host.fp8_select import rule_fp8

    pick = rule_fp8(M, N, K, promote, sms, scaling)
    grid = [pick, dataclasses.replace(pick, group_m=1), dataclasses.replace(pick, group_m=2 * pick.group_m),
            *(KernelConfig(bm, bn, SCALE_BLOCK, schedule=sc) for sc in SCHEDULES for bm, bn in FP8_TILES)]
    return fp8_dedupe(grid, M, N, K, scaling, promote)


# --------------------------------------------------------------------------- search


@dataclasses.dataclass
class Result:
    config: KernelConfig
    ms: float | None  # None: failed its correctness check (never timed) or raised
    note: str = ""


Measure = Callable[[KernelConfig], Result]


@dataclasses.dataclass(frozen=True)
class Space:
    """One shape's searched space, as `search` walks it (`shape_space`: the 16-bit GEMM's or FP8's)."""

    first: KernelConfig  # the untuned choice (select's heuristic, select_fp8's rule): measured first
    normalize: Callable[[KernelConfig], KernelConfig]  # canonical form: one candidate per distinct run
    valid: Callable[[KernelConfig], bool]
    quick: Callable[[], list[KernelConfig]]  # --quick's grid, valid and canonical
    full: Callable[[], list[KernelConfig]]  # every valid canonical config
    factors: dict  # name -> choices, Optuna's categorical factors ...
    build: Callable[[dict], KernelConfig]  # ... and the config a trial's values name


def shape_space(M: int, N: int, K: int, settings: Settings, sms: int = DEFAULT_SMS) -> Space:
    """The Space of this run's product (settings.dtype) for one shape on a GPU of `sms` SMs."""
    if settings.dtype == FP8:
        from ..hopper.host.fp8_select import rule_fp8

        sc, pr = settings.scaling, promoted(settings)

        def build(p: dict) -> KernelConfig:
            bm, bn, swap = fp8_tile(p["tile"])
            return KernelConfig(bm, bn, SCALE_BLOCK, stages=p["stages"], schedule=p["schedule"], group_m=p["group_m"],
                                split_k=p["split_k"], swap_ab=swap)

        return Space(rule_fp8(M, N, K, pr, sms, sc), lambda c: fp8_normalize(c, M, N, K, sc, pr),
                     lambda c: fp8_valid(c, sc, pr), lambda: fp8_quick_grid(M, N, K, sc, pr, sms),
                     lambda: fp8_space(M, N, K, sc, pr),
                     {"tile": list(fp8_tiles(M, sc)), "schedule": list(SCHEDULES),
                      "group_m": list(FP8_GROUP_M), "stages": list(FP8_STAGES), "split_k": list(FP8_SPLITS)}, build)
    in_b = out_b = DTYPES[settings.dtype]
    factors = {"tile": [f"{bm}x{bn}" for bm, bn in TILES], **({"swap_ab": [False, True]} if M <= SWAP_MAX_M else {}),
               "k_bytes": list(K_BYTES), "schedule": list(SCHEDULES), "split_k": list(SPLITS),
               "stream_k": list(STREAM_K), **({"cluster_m": list(CLUSTERS)} if settings.clusters else {})}
    return Space(heuristic_config(M, N, K, sms, in_b), lambda c: normalize(c, M, N, K), lambda c: valid(c, in_b, out_b),
                 lambda: quick_grid(M, N, K, in_b, out_b, settings.clusters),
                 lambda: space(M, N, K, in_b, out_b, settings.clusters), factors,
                 lambda p: KernelConfig(**_trial_config(p, in_b)))


def search(M: int, N: int, K: int, settings: Settings, measure: Measure, progress=None,
           current: KernelConfig | None = None, sms: int = DEFAULT_SMS) -> list[Result]:
    """Measure the candidates of one shape (module docstring); returns every result, in order.
    `measure(config)` checks then times one config; `progress` (a tqdm-like bar) is updated
    once per measured config. `current`: the config the active table gives this shape, measured
    right after the heuristic's, so a search never ends worse than the table it started from."""
    sp = shape_space(M, N, K, settings, sms)
    results: dict[KernelConfig, Result] = {}

    def run(config: KernelConfig) -> Result:
        config = sp.normalize(config)
        if config not in results:
            results[config] = measure(config)
            if progress is not None:
                progress.update(1)
        return results[config]

    run(sp.first)
    if current is not None:
        run(current)
    if settings.quick:
        for c in sp.quick():
            run(c)
        return list(results.values())
    candidates = [c for c in sp.full() if c not in results]
    budget = settings.trials - len(results)
    if len(candidates) <= budget:
        for c in candidates:
            run(c)
        return list(results.values())
    try:
        import optuna
    except ImportError:  # no Optuna: a seeded random subset of the space
        for c in random.Random(settings.seed).sample(candidates, budget):
            run(c)
        return list(results.values())
    optuna_search(optuna, sp, settings.seed, run, budget)
    return list(results.values())


def planned(M: int, N: int, K: int, settings: Settings, sms: int = DEFAULT_SMS) -> int:
    """How many configs `search` measures for this shape (the progress bar's share)."""
    sp = shape_space(M, N, K, settings, sms)
    first = sp.normalize(sp.first)
    if settings.quick:
        return len(set(sp.quick()) | {first})
    return min(settings.trials, len(set(sp.full()) | {first}))


def optuna_search(optuna, sp: Space, seed: int, run: Callable[[KernelConfig], Result], budget: int) -> None:
    """TPE over the space's factors; an invalid combination is pruned without running, a
    duplicate returns its first measurement."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))

    def objective(trial):
        for name, choices in sp.factors.items():
            trial.suggest_categorical(name, choices)
        config = sp.build(trial.params)
        if not sp.valid(config):
            raise optuna.TrialPruned()
        result = run(config)
        return result.ms if result.ms is not None else float("inf")

    measured = lambda: len({sp.normalize(sp.build(t.params))  # noqa: E731
                            for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE})
    for _ in range(20 * budget):  # pruned and duplicate trials cost no measurement
        if measured() >= budget:
            break
        study.optimize(objective, n_trials=1)


def _trial_config(params: dict, in_bytes: int) -> dict:
    bm, bn = (int(x) for x in params["tile"].split("x"))
    return dict(block_m=bm, block_n=bn, block_k=params["k_bytes"] // in_bytes, schedule=params["schedule"],
                split_k=1 if params.get("stream_k") else params["split_k"], swap_ab=params.get("swap_ab", False),
                cluster_m=params.get("cluster_m", 1), stream_k=params.get("stream_k", False))


def best(results: list[Result]) -> Result | None:
    timed = [r for r in results if r.ms is not None]
    return min(timed, key=lambda r: r.ms) if timed else None


# --------------------------------------------------------------------------- GPU measurement


def gpu_measure(M: int, N: int, K: int, settings: Settings) -> Measure:
    """A Measure on the current CUDA device: check on NaN-poisoned output, then time the call
    as `matmul` makes it (its cached plan, direct launches), with the config forced.
    --dtype fp8: `fp8_gpu_measure`."""
    if settings.dtype == FP8:
        return fp8_gpu_measure(M, N, K, settings)
    import torch

    from ..api import _gemm_into
    from .bench import TOLERANCE, make_inputs, rel_error, torch_dtype
    from .timing import time_callable

    dtype = torch_dtype(settings.dtype)
    a, b = make_inputs(M, N, K, dtype, settings.layout, "cuda", settings.seed)
    ref = torch.matmul(a.float(), b.float())
    out = torch.empty(M, N, dtype=dtype, device="cuda")

    def measure(config: KernelConfig) -> Result:
        try:
            out.fill_(float("nan"))
            _gemm_into(out, a, b, None, 1.0, 0.0, config)
            torch.cuda.synchronize()
        except Exception as e:  # a config that does not run is a result, not a crash
            return Result(config, None, f"{type(e).__name__}: {e}".splitlines()[0][:100])
        err = rel_error(out, ref)
        if not err <= TOLERANCE[settings.dtype]:
            return Result(config, None, f"wrong result (rel. error {err:.2e})")
        timing = time_callable(lambda: _gemm_into(out, a, b, None, 1.0, 0.0, config), settings.reps)
        return Result(config, timing.median_ms)

    return measure


def fp8_gpu_measure(M: int, N: int, K: int, settings: Settings) -> Measure:
    """A Measure of pingpong.scaled_mm (its direct path, the config forced) on bench_fp8's
    quantized inputs: checked against their float64 product on NaN-poisoned output (bench_fp8's
    FP8_TOLERANCE), then timed."""
    import torch

    from .. import fp8
    from .bench_fp8 import FP8_TOLERANCE, make_fp8_inputs, reference
    from .rows import rel_error
    from .timing import time_callable

    qa, qb, sa, sb = make_fp8_inputs(M, N, K, settings.scaling, "cuda", settings.seed)
    ref = reference(qa, qb, sa, sb, settings.scaling)
    call = lambda config: fp8.scaled_mm_direct(qa, qb, sa, sb, use_fast_accum=settings.fast_accum,  # noqa: E731
                                               config=config)

    def measure(config: KernelConfig) -> Result:
        try:
            torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")  # freed: the output's block
            out = call(config)
            torch.cuda.synchronize()
        except Exception as e:  # a config that does not run is a result, not a crash
            return Result(config, None, f"{type(e).__name__}: {e}".splitlines()[0][:100])
        err = rel_error(out, ref)
        del out
        if not err <= FP8_TOLERANCE:
            return Result(config, None, f"wrong result (rel. error {err:.2e})")
        return Result(config, time_callable(lambda: call(config), settings.reps).median_ms)

    return measure


def cublas_ms(M: int, N: int, K: int, settings: Settings) -> float:
    """The peer's time on the same inputs: torch.matmul (cuBLAS), or for --dtype fp8
    torch._scaled_mm on the very tensors fp8_gpu_measure makes."""
    import torch

    if settings.dtype == FP8:
        from .bench_fp8 import make_fp8_inputs
        from .timing import time_callable

        qa, qb, sa, sb = make_fp8_inputs(M, N, K, settings.scaling, "cuda", settings.seed)
        return time_callable(lambda: torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16,
                                                      use_fast_accum=settings.fast_accum), settings.reps).median_ms

    from .bench import make_inputs, torch_dtype
    from .timing import time_callable

    a, b = make_inputs(M, N, K, torch_dtype(settings.dtype), settings.layout, "cuda", settings.seed)
    return time_callable(lambda: torch.matmul(a, b), settings.reps).median_ms


# --------------------------------------------------------------------------- entry point


def current_device():
    """The select.Device (name, SM count) of the current CUDA device."""
    import torch

    from ..hopper.host.select import Device

    return Device.of(torch.cuda.current_device())


def _bar(total: int):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="pingpong tune", unit="config", file=sys.stderr)


def show(out=None) -> int:
    """Print the table `select_config` and `select_fp8` use on this GPU, 16-bit entries first,
    then FP8 ones (or, without a GPU, every table found)."""
    out = out or sys.stdout
    if no_gpu_reason() is None:
        dev = current_device()
        key = tables.TableKey.current(dev.name, dev.sms)
        table, where = tables.active(key)
        if table is None:
            print(f"no tuning table for {dev.name} ({dev.sms} SMs, pingpong {key.pingpong}, triton {key.triton}):"
                  " the heuristic chooses every config", file=out)
            return 0
        print(f"# {where}\n# {key}", file=out)
        for e in sorted(table.entries, key=lambda e: (e["dtype"].startswith(FP8), e["M"], e["N"], e["K"])):
            c = KernelConfig(**e["config"])
            fp8 = e["dtype"].startswith(FP8)  # its own factors, its own peer
            how = (f"group_m={c.group_m} stages={c.stages or 'auto'}" if fp8 else
                   f"split_k={c.split_k} swap_ab={c.swap_ab}" + (" stream_k" if c.stream_k else ""))
            print(f"{e['M']}x{e['N']}x{e['K']} {e['dtype']} {e['layout']}: {c.block_m}x{c.block_n}x{c.block_k}"
                  f" {c.schedule} {how}  {e.get('us', float('nan')):.1f} us"
                  f" ({'torch._scaled_mm' if fp8 else 'cuBLAS'} {e.get('cublas_us', float('nan')):.1f} us)", file=out)
        return 0
    places = []
    try:
        places.append(tables.cache_dir() / "tuning")
    except PingpongError:
        pass
    places.append(tables.shipped_table_path(tables.TableKey("x", 0, "", "")).parent)
    found = [path for place in places for path in (sorted(place.glob("*.json")) if place.is_dir() else ())]
    if not found:
        print(f"no CUDA GPU here: no table is active; no tuning table found (in {', '.join(map(str, places))})",
              file=out)
        return 0
    print("no CUDA GPU here: no table is active; tables found:", file=out)
    for path in found:
        print(f"  {path}  ({_what_table(path)})", file=out)
    return 0


def _what_table(path) -> str:
    """What the table at `path` was measured on, or why selection would ignore it on any GPU
    (unreadable; another pingpong or Triton; a file name its key does not give)."""
    import json

    try:
        table = tables.Table.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        return f"unreadable, ignored: {e}"
    k, here = table.key, tables.TableKey.current(table.key.gpu, table.key.sms)
    what = f"{k.gpu}, {k.sms} SMs, pingpong {k.pingpong}, triton {k.triton}: {len(table.entries)} entries"
    why = [f"{f} {getattr(k, f)} (this install: {getattr(here, f)})" for f in ("pingpong", "triton")
           if getattr(k, f) != getattr(here, f)]
    if path.name != k.filename:
        why.append(f"its key's file is {k.filename}")
    return what + (f"; ignored: {', '.join(why)}" if why else "")


def tabled_config(M: int, N: int, K: int, settings: Settings, dev) -> KernelConfig | None:
    """The config the active table gives this shape for this run's product, or None (the
    heuristic / the FP8 rule answers): what `search` measures second."""
    if settings.dtype == FP8:
        from ..hopper.host.fp8_launch import choose_fp8

        config, source = choose_fp8(M, N, K, promoted(settings), dev.sms, dev.name, settings.scaling, FP8_SB_COLS,
                                    FP8_OUT_BYTES, "e4m3")
        return config if source != "rule" else None
    config, source = choose(M, N, K, (settings.dtype, settings.dtype), settings.layout, dev)
    return config if source != "heuristic" else None


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
        if settings.show:
            return show()
        where = check_cache_dir()
    except PingpongError as e:
        print(f"pingpong tune: {e}", file=sys.stderr)
        return EXIT_USAGE
    reason = no_gpu_reason()
    if reason:
        print(f"pingpong tune: {reason}", file=sys.stderr)
        return EXIT_USAGE
    dev = current_device()
    table = tables.Table(tables.TableKey.current(dev.name, dev.sms))
    dtype, out_dtype = table_dtype(settings), "bf16" if settings.dtype == FP8 else settings.dtype
    untuned, peer = ("rule", "torch._scaled_mm") if settings.dtype == FP8 else ("heuristic", "cuBLAS")
    bar = _bar(sum(planned(M, N, K, settings, dev.sms) for M, N, K in settings.shapes))
    for M, N, K in settings.shapes:
        results = search(M, N, K, settings, gpu_measure(M, N, K, settings), bar, tabled_config(M, N, K, settings, dev),
                         dev.sms)
        top = best(results)
        if top is None:
            print(f"pingpong tune: {M}x{N}x{K}: no config passed its check ({results[0].note})", file=sys.stderr)
            continue
        base = results[0]
        cub = cublas_ms(M, N, K, settings)
        table.add(M, N, K, dtype, out_dtype, settings.layout, top.config, us=1e3 * top.ms,
                  heuristic_us=1e3 * base.ms if base.ms else None, cublas_us=1e3 * cub, measured=len(results))
        print(f"{M}x{N}x{K} {dtype}: {top.config} {1e3 * top.ms:.1f} us ({untuned} "
              f"{1e3 * base.ms if base.ms else float('nan'):.1f} us, {peer} {1e3 * cub:.1f} us)", file=sys.stderr)
    if bar is not None:
        bar.close()
    if table.entries:
        path = tables.write(table, tables.user_table_path(table.key))
        print(f"tuning table: {path} ({len(table.entries)} shape(s) written; cache dir {where})")
    return 0 if len(table.entries) == len(settings.shapes) else 1

