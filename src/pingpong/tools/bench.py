"""`pingpong bench`: time ``pingpong.matmul`` against cuBLAS, strictly.

The method (docs/design.md "Measuring"; docs/benchmarking.md has the long form):

  * BF16 inputs by default, FP32 accumulation; layout ``nt`` by default ("transpose_b": B is
    stored N×K like a weight, the product is ``pingpong.matmul(a, w.t())``);
  * random normal inputs, never zeros (a GEMM on zeros measures a different power state);
  * each shape is checked before it is timed: ‖out − ref‖ / ‖ref‖ against an fp32 torch
    reference, our output written into a NaN-poisoned buffer; a shape that fails is reported
    FAILED and never timed;
  * ``pingpong.tools.timing.queued_bench`` (do_bench's loop: flushes L2 before every
    repetition, with a spin kernel before the flush, so that a slow host call does not count
    as GPU time),
    median of at least ``--reps`` (≥ 100) repetitions after warm-up; cuBLAS = ``torch.matmul`` on the same
    tensors in the same process, so the ratio ours/cuBLAS is the number that compares;
  * ``--rounds`` (default 3) alternates ours and cuBLAS that many times: the clock and power
    state drift within a run, so each time is the median of the rounds' medians and the table shows the spread of the
    per-round ratios: a difference smaller than that spread is noise;
  * header: device, SM clock (and where it came from), torch/triton versions, date.

Robustness: the --csv/--json/--plot paths are checked writable before anything is timed; a
shape that raises (an input or reference that does not fit in memory, a kernel error) is
reported as an ERROR row and the run goes on; CSV and JSON are rewritten after every row, so a
run that dies keeps the rows before it.

The pure parts (settings, inputs, timing loop, rows, CSV/JSON/PNG writers) are separate
functions so they can be tested on a CPU with synthetic rows; only `run` needs a GPU.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Sequence

from ..errors import PingpongError
from .rows import Row, error_status, rel_error
from .timing import time_callable

DEFAULT_SHAPES = ((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384))
LAYOUTS = ("nn", "nt", "tn", "tt")
DTYPES = ("bf16", "fp16", "fp8")
MIN_REPS = 100
QUICK_REPS = 10
#: ‖out − ref‖/‖ref‖ allowed per input type: a few units of the output's rounding (bf16 2^-8,
#: fp16 2^-11) — a wrong tile or a missed k-step is orders of magnitude above this.
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3}
EXIT_USAGE = 2


# --------------------------------------------------------------------------- settings


@dataclasses.dataclass(frozen=True)
class Settings:
    shapes: tuple[tuple[int, int, int], ...]
    dtype: str = "bf16"
    layout: str = "nt"
    reps: int = MIN_REPS
    quick: bool = False
    op: str = "gemm"
    csv: str | None = None
    json: str | None = None
    plot: str | None = None
    seed: int = 0
    rounds: int = 3
    scaling: str = "row"  # --dtype fp8 (pingpong.tools.bench_fp8)
    fast_accum: bool = False


def parse_shape(text: str) -> tuple[int, int, int]:
    """"M,N,K" (or one number N for N,N,N) -> (M, N, K); errors name --shapes."""
    parts = text.replace("x", ",").split(",")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) == 1:
        dims = dims * 3
    if len(dims) != 3 or any(d <= 0 for d in dims):
        raise PingpongError(f"--shapes: {text!r} is not M,N,K with three positive integers (e.g. 4096,4096,4096)")
    return dims  # type: ignore[return-value]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shapes", nargs="+", metavar="M,N,K", help="problem sizes (default: 2048 4096 8192 16384 square)")
    p.add_argument("--suite", help="a named shape list (pingpong.tools.suites): llm, squares, largek, all, or random (drawn with --seed); adds to --shapes")
    p.add_argument("--dtype", default="bf16", help="input/output type: bf16 (default), fp16, or fp8 (scaled_mm: --scaling, --fast-accum)")
    p.add_argument("--layout", default="nt", help="A,B storage: nt (default: B stored N×K, A·Bᵀ), nn, tn, tt")
    p.add_argument("--reps", type=int, default=None, help=f"timed repetitions per kernel, ≥ {MIN_REPS} (default {MIN_REPS})")
    p.add_argument("--quick", action="store_true", help=f"smoke run: allows --reps < {MIN_REPS} (default {QUICK_REPS}); NOT for reporting")
    p.add_argument("--op", default="gemm", help="gemm (default), vector_add (streaming kernel) or grouped "
                   "(grouped_mm vs torch._grouped_mm over the MoE suites, pingpong.tools.bench_grouped; with "
                   "--dtype fp8: scaled_grouped_mm vs torch._scaled_grouped_mm, the forward, row-wise scales)")
    p.add_argument("--models", nargs="+", help="--op grouped: MoE models (default: all of suites.MOE_MODELS)")
    p.add_argument("--tokens", nargs="+", type=int, help="--op grouped: token counts (default: suites.MOE_TOKENS)")
    p.add_argument("--products", nargs="+", help="--op grouped: forward, dgrad, wgrad (default: all three); with "
                   "--dtype fp8: forward (default) or train (an MoE block's experts forward + backward, FP8 training"
                   " vs bf16)")
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV")
    p.add_argument("--json", metavar="FILE", help="write header, rows and geometric mean as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="plot TFLOP/s ours vs cuBLAS and the ratio (needs matplotlib)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs and of --suite random's shapes (default 0)")
    p.add_argument("--overhead", action="store_true",
                   help="time host cost instead: back-to-back calls at 64³, 1024³, 2048³ or the square --shapes; reads "
                        "--rounds, no other option (pingpong.tools.overhead)")
    p.add_argument("--scaling", default="row", help="--dtype fp8: tensor, row (default) or block (1×128 / 128×128)")
    p.add_argument("--fast-accum", action="store_true", help="--dtype fp8: use_fast_accum=True for ours and torch's")
    p.add_argument("--rounds", type=int, default=3, help="alternate ours and cuBLAS this many times (default 3)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Validate the parsed options; every error is a PingpongError naming its option."""
    shapes = tuple(parse_shape(s) for s in args.shapes or ())
    if getattr(args, "suite", None):
        from .suites import suite

        shapes += suite(args.suite, seed=args.seed)
    shapes = tuple(dict.fromkeys(shapes)) or DEFAULT_SHAPES
    if args.dtype not in DTYPES:
        raise PingpongError(f"--dtype: {args.dtype!r} is not one of {', '.join(DTYPES)}")
    if args.layout not in LAYOUTS:
        raise PingpongError(f"--layout: {args.layout!r} is not one of {', '.join(LAYOUTS)}")
    if args.op not in ("gemm", "vector_add", "grouped"):
        raise PingpongError(f"--op: {args.op!r} is not one of gemm, vector_add, grouped")
    for option in GROUPED_OPTIONS:
        if getattr(args, option, None) and args.op != "grouped":
            raise PingpongError(f"--{option}: applies to --op grouped only (got --op {args.op})")
    for option, ops in OP_OPTIONS.items():  # an option the op would ignore is a mistake, not a no-op
        if getattr(args, option, None) and args.op not in ops:
            raise PingpongError(f"--{option}: applies to --op {' or '.join(ops)} only (got --op {args.op})")
    if args.layout != "nt" and args.op != "gemm":
        raise PingpongError(f"--layout: applies to --op gemm only (got --op {args.op})")
    if args.op == "vector_add" and args.dtype not in VECTOR_ADD_DTYPES:
        raise PingpongError(f"--dtype: --op vector_add adds {', '.join(VECTOR_ADD_DTYPES)} (after fp32), "
                            f"got {args.dtype!r}")
    if (getattr(args, "scaling", "row") != "row" or getattr(args, "fast_accum", False)) and args.dtype != "fp8":
        raise PingpongError(f"--scaling/--fast-accum: FP8 options; add --dtype fp8 (got --dtype {args.dtype})")
    if args.op == "grouped":
        from .suites import MOE_MODELS, MOE_PRODUCTS

        for m in getattr(args, "models", None) or ():
            if m not in MOE_MODELS:
                raise PingpongError(f"--models: unknown model {m!r}; expected one of {', '.join(MOE_MODELS)}")
        for t in getattr(args, "tokens", None) or ():
            if t < 1:
                raise PingpongError(f"--tokens: {t} is not a positive token count")
        for product in getattr(args, "products", None) or ():
            if product not in (*MOE_PRODUCTS, "train"):
                raise PingpongError(f"--products: unknown product {product!r}; expected one of "
                                    f"{', '.join(MOE_PRODUCTS)} (or train, with --dtype fp8)")
        if args.dtype not in ("bf16", "fp8"):
            raise PingpongError(f"--dtype: --op grouped runs bf16 (grouped_mm) or fp8 (scaled_grouped_mm), "
                                f"got {args.dtype!r}")
        if "train" in (getattr(args, "products", None) or ()) and args.dtype != "fp8":
            raise PingpongError("--products: train (FP8 training against bf16) needs --dtype fp8")
        if args.dtype == "fp8":  # scaled_grouped_mm: the MoE forward, row- or block-wise scales
            products = list(getattr(args, "products", None) or ["forward"])
            if products not in (["forward"], ["train"]):
                raise PingpongError(f"--products: --op grouped --dtype fp8 times the forward product (scaled_grouped_mm)"
                                    f" or train (an MoE block's experts forward + backward, FP8 training against"
                                    f" bf16), one of them; got {' '.join(products)}")
            for option, value, default in (("scaling", getattr(args, "scaling", "row"), "row"),
                                           ("fast-accum", getattr(args, "fast_accum", False), False)):
                if products == ["train"] and value != default:
                    raise PingpongError(f"--{option}: --products train runs the row_gw_hp recipe (row-wise scales,"
                                        f" promoted accumulation), got {value!r}")
            if getattr(args, "scaling", "row") not in ("row", "block"):
                raise PingpongError(f"--scaling: --op grouped --dtype fp8 takes row-wise or block-wise scales, "
                                    f"got {args.scaling!r}")
    reps = args.reps if args.reps is not None else (QUICK_REPS if args.quick else MIN_REPS)
    if reps < 1:
        raise PingpongError(f"--reps: {reps} must be ≥ 1")
    if reps < MIN_REPS and not args.quick:
        raise PingpongError(f"--reps: {reps} is below {MIN_REPS}, the minimum for a reportable median (use --quick for a smoke run)")
    if args.plot:
        if not args.plot.lower().endswith(".png"):
            raise PingpongError(f"--plot: {args.plot!r} must name a .png file")
        try:
            import matplotlib  # noqa: F401  (the one optional dependency of the bench)
        except ImportError as e:
            raise PingpongError(f"--plot: needs matplotlib, which is not installed ({e}); "
                                "pip install matplotlib (the plot extra: pip install -e '.[plot]')") from e
    if args.rounds < 1:
        raise PingpongError(f"--rounds: {args.rounds} must be ≥ 1")
    scaling = getattr(args, "scaling", "row")
    from .bench_fp8 import SCALINGS

    if scaling not in SCALINGS:
        raise PingpongError(f"--scaling: {scaling!r} is not one of {', '.join(SCALINGS)}")
    return Settings(shapes=shapes, dtype=args.dtype, layout=args.layout, reps=reps, quick=bool(args.quick), op=args.op,
                    csv=args.csv, json=args.json, plot=args.plot, seed=args.seed, rounds=args.rounds, scaling=scaling,
                    fast_accum=bool(getattr(args, "fast_accum", False)))


GROUPED_OPTIONS = ("models", "tokens", "products")  # options of --op grouped alone
#: the other options only some ops read: the ops that read each
OP_OPTIONS = {"shapes": ("gemm",), "suite": ("gemm",), "plot": ("gemm",), "csv": ("gemm", "vector_add"),
              "seed": ("gemm", "grouped")}
#: the --dtype values --op vector_add times (pingpong.tools.bench_streaming.bench_vector_add)
VECTOR_ADD_DTYPES = ("bf16", "fp16")
OUTPUT_OPTIONS = ("csv", "json", "plot")  # Settings fields that name a file the run writes


def check_outputs_writable(settings: Settings) -> None:
    """Raise a PingpongError naming the option if a --csv/--json/--plot file cannot be written,
    before anything is timed. An existing file is opened for append (contents kept); a file
    this check creates is removed again."""
    for option in OUTPUT_OPTIONS:
        path = getattr(settings, option)
        if not path:
            continue
        if os.path.isdir(path):
            raise PingpongError(f"--{option}: {path!r} is a directory, not a file")
        existed = os.path.exists(path)
        try:
            with open(path, "a"):
                pass
        except OSError as e:
            raise PingpongError(f"--{option}: cannot write {path!r} ({e.strerror or e})") from e
        if not existed:
            os.remove(path)


# --------------------------------------------------------------------------- inputs


def torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def make_inputs(M: int, N: int, K: int, dtype, layout: str, device="cpu", seed: int = 0):
    """(a, b) with a: (M, K), b: (K, N) as the product sees them, stored per `layout`.

    First letter A, second B; ``n``: stored as seen (row-major), ``t``: a transposed view of
    the stored tensor. ``nt``: b is ``w.t()`` for a row-major w of shape (N, K), so
    b.stride() == (1, K). Values are standard normal (never zeros), made in fp32 and cast.
    """
    import torch

    if layout not in LAYOUTS:
        raise PingpongError(f"layout: {layout!r} is not one of {', '.join(LAYOUTS)}")
    gen = torch.Generator(device=device).manual_seed(seed)

    def stored(rows, cols, transposed):
        shape = (cols, rows) if transposed else (rows, cols)
        x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
        return x.t() if transposed else x

    return stored(M, K, layout[0] == "t"), stored(K, N, layout[1] == "t")


def within_tolerance(err: float, dtype: str) -> bool:
    """Whether a relative error `err` passes the check for input type `dtype`; NaN never does."""
    return err <= TOLERANCE[dtype]


# --------------------------------------------------------------------------- rows


FIELDS = ("shape", "M", "N", "K", "path", "status", "ours_tflops", "cublas_tflops", "ratio", "ratio_min", "ratio_max",
          "hbm_fraction", "rel_err", "ours_ms", "cublas_ms", "ours_reps", "cublas_reps")


def geomean_ratio(rows: Sequence[Row]) -> float | None:
    ratios = [r.ratio for r in rows if r.ratio]
    return math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def format_table(rows: Sequence[Row], header: dict[str, Any] | None = None) -> str:
    """The report: header lines, one row per shape, the geometric mean of the ratios."""
    lines = [f"# {k}: {v}" for k, v in (header or {}).items()]
    cols = ("shape", "path", "ours TFLOP/s", "cuBLAS TFLOP/s", "ours/cuBLAS", "rounds", "HBM", "rel.err", "status")
    cells = [
        (r.shape, r.path, _num(r.ours_tflops, ".1f"), _num(r.cublas_tflops, ".1f"), _num(r.ratio, ".3f"),
         f"{r.ratio_min:.3f}-{r.ratio_max:.3f}" if r.ratio_min else "-",
         "-" if r.hbm_fraction is None else f"{100 * r.hbm_fraction:.0f}%", _num(r.rel_err, ".2e"), r.status)
        for r in rows
    ]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(cols)]
    fmt = lambda row: "  ".join(s.ljust(w) if i in (0, 1, 8) else s.rjust(w) for i, (s, w) in enumerate(zip(row, widths)))  # noqa: E731
    lines += [fmt(cols), fmt(tuple("-" * w for w in widths))] + [fmt(c) for c in cells]
    gm = geomean_ratio(rows)
    n_ok = sum(1 for r in rows if r.ratio)
    lines.append(f"geometric mean ours/cuBLAS: {_num(gm, '.3f')} over {n_ok} timed shape(s)")
    return "\n".join(lines)


def write_csv(path: str, rows: Sequence[Row]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.record().items()})


def write_json(path: str, rows: Sequence[Row], header: dict[str, Any]) -> None:
    finite = lambda v: str(v) if isinstance(v, float) and not math.isfinite(v) else v  # noqa: E731  strict JSON
    records = [{k: finite(v) for k, v in r.record().items()} for r in rows]
    doc = {"header": header, "rows": records, "geomean_ratio": geomean_ratio(rows)}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2, allow_nan=False)
        f.write("\n")


def write_plot(path: str, rows: Sequence[Row], title: str = "") -> None:
    """Bars of TFLOP/s (ours, cuBLAS) per shape, and the ratio below. Uses the Agg canvas
    directly (no pyplot, no global backend switch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels = [r.shape for r in rows]
    xs = range(len(rows))
    fig = Figure(figsize=(max(6.0, 1.4 * len(rows) + 2), 7))
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    w = 0.38
    top.bar([x - w / 2 for x in xs], [r.ours_tflops or 0 for r in rows], w, label="pingpong")
    top.bar([x + w / 2 for x in xs], [r.cublas_tflops or 0 for r in rows], w, label="cuBLAS (torch.matmul)")
    for x, r in zip(xs, rows):
        if r.status != "ok":
            top.text(x, 0, r.status.split(":")[0], ha="center", va="bottom", color="red")
    top.set_ylabel("TFLOP/s")
    top.legend()
    top.set_title(title or "pingpong vs cuBLAS")
    bottom.bar(list(xs), [r.ratio or 0 for r in rows], 0.5, color="tab:green")
    bottom.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    bottom.set_ylabel("ours / cuBLAS")
    bottom.set_xticks(list(xs))
    bottom.set_xticklabels(labels, rotation=20)
    gm = geomean_ratio(rows)
    if gm:
        bottom.set_title(f"geometric mean {gm:.3f}", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


# --------------------------------------------------------------------------- environment


def sm_clock(device_index: int = 0) -> str:
    """Current SM clock in MHz and where it came from (torch.cuda.clock_rate, else nvidia-smi)."""
    import torch

    try:
        return f"{int(torch.cuda.clock_rate(device_index))} MHz (torch.cuda.clock_rate)"
    except Exception as e:  # pynvml missing, or a driver without the query
        reason = type(e).__name__
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "-i", str(device_index), "--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout.strip().split(",")
            return f"{out[0].strip()} MHz, max {out[1].strip()} MHz (nvidia-smi)"
        except Exception as e:
            reason += f", nvidia-smi: {type(e).__name__}"
    return f"unknown (torch.cuda.clock_rate: {reason}; no usable nvidia-smi)"


def environment_header(settings: Settings) -> dict[str, Any]:
    import torch
    import triton

    dev = torch.cuda.current_device()
    header = {
        "device": torch.cuda.get_device_name(dev),
        "capability": "sm_%d%d" % torch.cuda.get_device_capability(dev),
        "SM clock": sm_clock(dev),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "method": f"{settings.dtype} {settings.layout}, queued_bench (L2 flushed) median of >= {settings.reps} reps, "
                  "cuBLAS = torch.matmul same tensors same process",
    }
    if settings.dtype == "fp8":
        header["method"] = (f"fp8 e4m3 {settings.scaling}-wise scales, use_fast_accum={settings.fast_accum}, queued_bench (L2"
                            f" flushed) median of >= {settings.reps} reps, baseline (cuBLAS column) = torch._scaled_mm"
                            " on the same quantized tensors, same process")
    if settings.quick:
        header["WARNING"] = "--quick run: fewer repetitions than the method requires; not for reporting"
    return header


def no_gpu_reason() -> str | None:
    """None when a CUDA GPU is usable, else a sentence saying why the benchmark cannot run."""
    import torch

    if not torch.cuda.is_available():
        return ("no CUDA GPU on this machine: the benchmark times kernels on a GPU and prints no "
                "numbers without one (CPU checks: pytest; machine code: pingpong isa)")
    return None


def fp8_gpu_reason() -> str | None:
    """None on a Hopper GPU, else why --dtype fp8 cannot run here: pingpong's FP8 products run
    on Hopper only (docs/fp8.md), so elsewhere every shape would fail after its inputs are made."""
    import torch

    from ..runtime.device import is_hopper

    if is_hopper(torch.cuda.current_device()):
        return None
    return (f"--dtype fp8: pingpong's FP8 products (scaled_mm, scaled_grouped_mm) run on a Hopper (sm_90) GPU"
            f" only, and {torch.cuda.get_device_name()} is not one (docs/fp8.md); --dtype bf16 or fp16 times the"
            " kernels that run here")


def skipped_without_gpu() -> bool:
    """For the benchmark scripts: True, after printing why to stderr, when there is no GPU to
    time on (the script then exits 2)."""
    reason = no_gpu_reason()
    if reason:
        print(f"skipped: {reason}", file=sys.stderr)
    return reason is not None


# --------------------------------------------------------------------------- one shape


def bench_shape(M: int, N: int, K: int, settings: Settings, api, device="cuda", timer=time_callable) -> Row:
    """Check, then time, one shape. Ours runs first (before any reference of this shape exists,
    so a freed correct result cannot stand in for an unwritten one). `api` is `pingpong.api`
    (or a stand-in with matmul, path_for and optionally gemm_); `timer` is `time_callable`."""
    import torch

    if settings.dtype == "fp8":  # against torch._scaled_mm (pingpong.tools.bench_fp8)
        from .bench_fp8 import bench_fp8_shape

        return bench_fp8_shape(M, N, K, settings, device, timer)
    a, b = make_inputs(M, N, K, torch_dtype(settings.dtype), settings.layout, device, settings.seed)
    path = "?"
    try:
        path = api.path_for(a, b)
        ours = api.matmul(a, b)
        poisoned = None
        if hasattr(api, "gemm_"):
            poisoned = torch.full((M, N), float("nan"), dtype=ours.dtype, device=device)
            api.gemm_(poisoned, a, b, alpha=1.0, beta=0.0)
        if a.is_cuda:
            torch.cuda.synchronize()
    except Exception as e:  # a kernel that raises is reported, not timed
        return Row(M, N, K, path, error_status(e))
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = torch.matmul(a.float(), b.float())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    errs = [rel_error(x, ref) for x in (ours, poisoned) if x is not None]
    err = math.nan if any(math.isnan(e) for e in errs) else max(errs)  # max() would drop a NaN
    del ours, poisoned, ref
    if not within_tolerance(err, settings.dtype):
        return Row(M, N, K, path, "FAILED", rel_err=err)
    ours, cublas = [], []
    for _ in range(settings.rounds):  # alternate: drift in clocks/power hits both alike
        ours.append(timer(lambda: api.matmul(a, b), settings.reps))
        cublas.append(timer(lambda: torch.matmul(a, b), settings.reps))
    ratios = [c.median_ms / o.median_ms for o, c in zip(ours, cublas)]
    med = lambda ts: statistics.median(t.median_ms for t in ts)  # noqa: E731
    from ..runtime.device import hbm_bandwidth

    return Row(M, N, K, path, "ok", err, med(ours), med(cublas), sum(t.reps for t in ours),
               sum(t.reps for t in cublas), min(ratios), max(ratios), a.element_size(), a.element_size(),
               hbm_bandwidth(a.device.index or 0) if a.is_cuda else None)


def _progress(i: int, n: int, row: Row, seconds: float) -> str:
    tail = (f"{row.ours_tflops:.1f} TFLOP/s vs cuBLAS {row.cublas_tflops:.1f} ({row.ratio:.3f})"
            if row.ratio else row.status)
    return f"[{i}/{n}] {row.shape} {row.path}: {tail}  ({seconds:.1f} s)"


# --------------------------------------------------------------------------- entry point


def bench_shapes(settings: Settings, api, header: dict[str, Any], device="cuda", timer=time_callable) -> list[Row]:
    """`bench_shape` for every shape of `settings`, in order. A shape that raises anywhere
    (inputs or reference too large for memory, ...) becomes an ERROR row and the run goes on;
    after each row the --csv/--json files are rewritten with every row so far, and a progress
    line goes to stderr."""
    rows: list[Row] = []
    for i, (M, N, K) in enumerate(settings.shapes, 1):
        start = time.perf_counter()
        try:
            row = bench_shape(M, N, K, settings, api, device, timer)
        except Exception as e:
            row = Row(M, N, K, "?", error_status(e))
        rows.append(row)
        if settings.csv:
            write_csv(settings.csv, rows)
        if settings.json:
            write_json(settings.json, rows, header)
        print(_progress(i, len(settings.shapes), row, time.perf_counter() - start), file=sys.stderr, flush=True)
    return rows


#: the options --overhead does not read (given, they would be ignored)
NOT_OVERHEAD = ("suite", "dtype", "layout", "reps", "quick", "op", "models", "tokens", "products", "csv", "json",
                "plot", "seed", "scaling", "fast_accum")


def overhead_argv(args: argparse.Namespace) -> list[str]:
    """pingpong.tools.overhead's arguments for `bench --overhead`: the sizes of square --shapes
    and --rounds; any other option given (not at add_arguments' default) is a PingpongError
    naming it (overhead would ignore it)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for option in NOT_OVERHEAD:
        default = parser.get_default(option)
        if getattr(args, option, default) != default:
            raise PingpongError(f"--{option.replace('_', '-')}: not read by --overhead (bf16 a @ wᵀ calls at "
                                "square --shapes N, --rounds)")
    sizes = []
    for text in args.shapes or ():
        M, N, K = parse_shape(text)
        if not M == N == K:
            raise PingpongError(f"--shapes: --overhead times square sizes (M = N = K), got {text!r}")
        sizes.append(str(M))
    if args.rounds < 1:
        raise PingpongError(f"--rounds: {args.rounds} must be ≥ 1")
    return (["--sizes", *sizes] if sizes else []) + ["--rounds", str(args.rounds)]


def run(args: argparse.Namespace) -> int:
    if getattr(args, "overhead", False):
        try:
            argv = overhead_argv(args)
        except PingpongError as e:
            print(f"pingpong bench: {e}", file=sys.stderr)
            return EXIT_USAGE
        reason = no_gpu_reason()
        if reason:
            print(f"pingpong bench: {reason}", file=sys.stderr)
            return EXIT_USAGE
        from . import overhead

        return overhead.main(argv)
    try:
        settings = settings_from_args(args)
        check_outputs_writable(settings)
    except PingpongError as e:
        print(f"pingpong bench: {e}", file=sys.stderr)
        return EXIT_USAGE
    reason = no_gpu_reason() or (fp8_gpu_reason() if settings.dtype == "fp8" else None)
    if reason:
        print(f"pingpong bench: {reason}", file=sys.stderr)
        return EXIT_USAGE
    if settings.op == "vector_add":
        from .bench_streaming import bench_vector_add

        return int(bench_vector_add(settings) or 0)
    if settings.op == "grouped" and settings.dtype == "fp8":
        from . import bench_grouped_fp8

        if getattr(args, "products", None) == ["train"]:
            return bench_grouped_fp8.run_training(getattr(args, "models", None), getattr(args, "tokens", None),
                                                  settings.reps, settings.rounds, settings.json, settings.seed)
        return bench_grouped_fp8.run(getattr(args, "models", None), getattr(args, "tokens", None), settings.reps,
                                     settings.rounds, settings.json, settings.seed, settings.fast_accum,
                                     settings.scaling)
    if settings.op == "grouped":
        from . import bench_grouped

        return bench_grouped.run(getattr(args, "models", None), getattr(args, "tokens", None), settings.reps,
                                 settings.rounds, settings.json, settings.seed, getattr(args, "products", None))
    from .. import api

    header = environment_header(settings)
    rows = bench_shapes(settings, api, header)
    print(format_table(rows, header))
    if settings.plot:
        write_plot(settings.plot, rows, f"{header['device']} — {settings.dtype} {settings.layout}")
    return 0 if all(r.passed for r in rows) else 1
