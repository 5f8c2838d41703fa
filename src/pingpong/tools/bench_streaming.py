"""Vector-add benchmark: GB/s of pingpong.vector_add, torch.add and a device-to-device copy
of the same bytes, all measured in one process on one device (only ratios of one run compare).

Bytes counted: the add reads a and b and writes out, 3 * n * itemsize. The copy moves a
buffer of half that size, so it too reads + writes 3 * n * itemsize bytes. Times are the
median of `pingpong.tools.timing.time_callable` (flushes L2 before every repetition).

    rows = run_vector_add_bench([2**20, 2**28], torch.float32, reps=100)
    print(format_table(rows))

Config sweep (`run_stream_sweep`, `python -m pingpong.streaming --sweep candidates`):
each StreamConfig through `hopper.launch` next to torch.add, the copy and `vector_add` itself,
in one process, with the host time per call (enqueue without waiting), so the lead can pick
DEFAULT from one GPU run.
"""

import statistics

import torch
import triton

from .timing import call_us, time_callable
from ..runtime.device import is_hopper, sm_count
from ..streaming.api import kernel_path, vector_add
from ..toolchain import KERNEL_OPTIONS


def _median_ms(fn, reps: int) -> float:
    """Median ms of at least `reps` L2-flushed repetitions: the GEMM bench's timer."""
    return time_callable(fn, reps).median_ms


def run_vector_add_bench(sizes, dtype=torch.float32, reps: int = 100, device: str = "cuda",
                         rounds: int = 3) -> list[dict]:
    """One row per size: times (ms), GB/s and ratios of ours vs torch.add and vs the copy.

    Ours, torch.add and the copy are timed `rounds` times in alternation (the GPU's clock
    drifts within a run); each time is the median of the rounds' medians, and
    `vs_torch_min`/`vs_torch_max` give the spread of the per-round ratios.

    Each row also records `correct` (ours bitwise equal to torch.add, output poisoned with
    NaN first), `path` (which kernel ran), the device name and the torch/triton versions.
    A size whose result is wrong is not timed: its row has `correct=False` and None for
    every time, rate and ratio (a wrong result has no speed).
    """
    dev = torch.device(device)
    rows = []
    for n in sizes:
        n = int(n)
        itemsize = torch.empty((), dtype=dtype).element_size()
        a = torch.randn(n, device=dev, dtype=torch.float32).to(dtype)
        b = torch.randn(n, device=dev, dtype=torch.float32).to(dtype)
        out = torch.full_like(a, float("nan"))
        vector_add(a, b, out)
        correct = bool(torch.equal(out, torch.add(a, b)))

        nbytes = 3 * n * itemsize
        common = dict(n=n, dtype=str(dtype).replace("torch.", ""), bytes=nbytes, path=kernel_path(a, b, out),
                      correct=correct, device=torch.cuda.get_device_name(dev), torch=torch.__version__,
                      triton=triton.__version__)
        if not correct:
            rows.append(dict(common, **dict.fromkeys(_TIMED)))
            del a, b, out
            continue
        src = torch.empty((nbytes + 1) // 2, device=dev, dtype=torch.uint8)
        dst = torch.empty_like(src)
        times = [[_median_ms(fn, reps) for fn in (lambda: vector_add(a, b, out), lambda: torch.add(a, b, out=out),
                                                 lambda: dst.copy_(src))] for _ in range(rounds)]
        ms_ours, ms_torch, ms_copy = (statistics.median(col) for col in zip(*times))
        per_round = [t / o for o, t, _ in times]
        gbps = lambda ms, bytes_=nbytes: bytes_ / ms * 1e-6  # noqa: E731  (bytes/ms -> GB/s)
        copy_bytes = 2 * src.numel()
        rows.append(dict(
            common,
            ms_ours=ms_ours, ms_torch=ms_torch, ms_copy=ms_copy,
            gbps_ours=gbps(ms_ours), gbps_torch=gbps(ms_torch), gbps_copy=gbps(ms_copy, copy_bytes),
            vs_torch=ms_torch / ms_ours, vs_torch_min=min(per_round), vs_torch_max=max(per_round),
            vs_copy=gbps(ms_ours) / gbps(ms_copy, copy_bytes),
        ))
        del a, b, out, src, dst
    return rows


#: The fields of a `run_vector_add_bench` row that come from timing (None in a wrong row).
_TIMED = ("ms_ours", "ms_torch", "ms_copy", "gbps_ours", "gbps_torch", "gbps_copy", "vs_torch", "vs_torch_min",
          "vs_torch_max", "vs_copy")


def _cell(fmt: str, value) -> str:
    """A formatted table cell; "-" for a value that was not measured (a wrong result)."""
    return "-" if value is None else fmt.format(value)


COLUMNS = (
    ("n", "{:>11}", "n"), ("dtype", "{:>8}", "dtype"), ("path", "{:>10}", "path"), ("ok", "{!s:>5}", "correct"),
    ("ours GB/s", "{:>9.0f}", "gbps_ours"), ("torch GB/s", "{:>10.0f}", "gbps_torch"),
    ("copy GB/s", "{:>9.0f}", "gbps_copy"), ("ours/torch", "{:>10.3f}", "vs_torch"),
    ("rounds min", "{:>10.3f}", "vs_torch_min"), ("rounds max", "{:>10.3f}", "vs_torch_max"), ("ours/copy", "{:>9.3f}", "vs_copy"),
)


def format_table(rows: list[dict]) -> str:
    """A fixed-width table of `run_vector_add_bench` rows, with the device and versions above."""
    if not rows:
        return "(no rows)"
    head = f"vector_add on {rows[0]['device']}  (torch {rows[0]['torch']}, triton {rows[0]['triton']}; " \
           "GB/s counts 2 reads + 1 write; copy moves the same bytes)"
    widths = [max(len(_cell(fmt, r[key])) for r in rows) for _, fmt, key in COLUMNS]
    titles = "  ".join(f"{t:>{max(w, len(t))}}" for (t, _, _), w in zip(COLUMNS, widths))
    lines = [head, titles]
    for r in rows:
        cells = [_cell(fmt, r[key]) for _, fmt, key in COLUMNS]
        lines.append("  ".join(f"{c:>{max(w, len(t))}}" for c, (t, _, _), w in zip(cells, COLUMNS, widths)))
    return "\n".join(lines)


#: `pingpong bench --op vector_add` sizes: 2**20 (launch-bound), 2**28 (bandwidth-bound) and one
#: in between.
DEFAULT_SIZES = (2**20, 2**24, 2**28)
_DTYPE_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def bench_vector_add(settings) -> int:
    """Adapter for `pingpong bench --op vector_add` (pingpong.tools.bench.Settings): fp32 at
    DEFAULT_SIZES (the targets), then `--dtype` at the same sizes; `--csv`/`--json` write the
    rows. Returns 0 when every row is bitwise correct, else 1."""
    import csv
    import json

    rows = []
    for name in dict.fromkeys(("fp32", settings.dtype)):
        rows += run_vector_add_bench(DEFAULT_SIZES, _DTYPE_NAMES[name], settings.reps, rounds=settings.rounds)
    print(format_table(rows))
    if settings.csv:
        with open(settings.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if settings.json:
        with open(settings.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0 if all(r["correct"] for r in rows) else 1


# --------------------------------------------------------------------------- config sweep


def _host_us(fn, calls: int = 100) -> float:
    """Host time per call (us): `calls` back-to-back launches timed without waiting for the
    GPU (the launch queue absorbs them), after one call."""
    fn()
    return call_us(fn, calls)[0]


def _graph(fn):
    """fn captured in a CUDA graph (after one eager call), or None where capture fails."""
    try:
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g
    except RuntimeError as e:
        print(f"(cuda-graph row skipped: {e})")
        return None


def run_stream_sweep(configs: dict, sizes, dtypes, reps: int = 100, device: str = "cuda",
                     diagnostics: bool = True) -> list[dict]:
    """Rows per (size, dtype): torch.add, the copy, the portable Triton kernel (plain
    vectorized loads/stores: what the same bytes cost without TMA), `vector_add` (API, DEFAULT dispatch),
    with `diagnostics` DEFAULT through Triton's JIT each call ("jit-path": the launch path
    before the direct launch) and replayed from a CUDA graph ("cuda-graph": GPU time with
    the least launch overhead), then each config of `configs` ({name: StreamConfig}) through
    `hopper.launch` (no API checks), and torch.add again (drift). Each row: kernel, name,
    correct (bitwise equal to torch.add), ms (time_callable median, L2 flushed), gbps, vs_torch
    (the first torch.add's time / this time), vs_copy, host_us (host time per call)."""
    from ..streaming import hopper, portable

    dev = torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if not is_hopper(index):
        raise RuntimeError(f"the config sweep runs the Hopper kernel; {torch.cuda.get_device_name(dev)} is not sm_90")
    sms = sm_count(index)
    rows = []
    for dtype in dtypes:
        for n in sizes:
            n = int(n)
            itemsize = torch.empty((), dtype=dtype).element_size()
            nbytes = 3 * n * itemsize
            a = torch.randn(n, device=dev, dtype=torch.float32).to(dtype)
            b = torch.randn(n, device=dev, dtype=torch.float32).to(dtype)
            out = torch.empty_like(a)
            expect = torch.add(a, b)
            src = torch.empty((nbytes + 1) // 2, device=dev, dtype=torch.uint8)
            dst = torch.empty_like(src)
            base = dict(n=n, dtype=str(dtype).replace("torch.", ""), bytes=nbytes,
                        device=torch.cuda.get_device_name(dev),
                        torch=torch.__version__, triton=triton.__version__)
            ref = {}

            def row(kernel, name, fn, correct, moved=nbytes):
                """Time `fn` only if its result was bitwise correct; a wrong row has no times."""
                if not correct:
                    r = dict(base, kernel=kernel, name=name, correct=False, ms=None, gbps=None, host_us=None)
                    rows.append(r)
                    return r
                ms = _median_ms(fn, reps)
                ref.setdefault(kernel, ms)
                r = dict(base, kernel=kernel, name=name, correct=correct, ms=ms, gbps=moved / ms * 1e-6,
                         host_us=_host_us(fn))
                rows.append(r)
                return r

            def checked(fn):
                """Bitwise equal to torch.add on the first call (JIT) and the second (direct launch)."""
                ok = True
                for _ in range(2):
                    out.fill_(float("nan"))
                    fn()
                    ok = ok and bool(torch.equal(out, expect))
                return ok

            row("torch.add", "", lambda: torch.add(a, b, out=out), True)
            row("copy", "", lambda: dst.copy_(src), True, moved=2 * src.numel())
            plain = lambda: portable.launch(a, b, out)  # noqa: E731  (no TMA, no shared memory)
            row("portable", "plain-triton", plain, checked(plain))
            row("vector_add", kernel_path(a, b, out), lambda: vector_add(a, b, out),
                checked(lambda: vector_add(a, b, out)))
            if diagnostics:  # DEFAULT through Triton's JIT each call (the pre-direct path), and replayed as a graph
                cfg = hopper.DEFAULT
                descs = lambda: hopper.descriptors(a, b, out, cfg)  # noqa: E731
                jit = lambda: hopper.vector_add_tma_kernel[(cfg.grid(n, itemsize, sms),)](  # noqa: E731
                    *descs(), n, **cfg.constexprs, **KERNEL_OPTIONS)
                row(cfg.spec, "jit-path", jit, checked(jit))
                graph = _graph(lambda: hopper.launch(a, b, out, sms, cfg, index))
                if graph is not None:
                    row(cfg.spec, "cuda-graph", graph.replay, checked(graph.replay))
            for name, cfg in configs.items():
                cfg.validate()
                fn = lambda cfg=cfg: hopper.launch(a, b, out, sms, cfg, index)  # noqa: E731
                as_1d = cfg.box == "2d" and len(cfg.block_shape(n, itemsize)) == 1
                row(cfg.spec + (" (as 1d)" if as_1d else ""), name, fn, checked(fn))
            row("torch.add", "again", lambda: torch.add(a, b, out=out), True)
            for r in rows:
                if r["n"] == n and r["dtype"] == base["dtype"]:
                    timed = r["ms"] is not None
                    r["vs_torch"] = ref["torch.add"] / r["ms"] if timed else None
                    r["vs_copy"] = r["gbps"] / (2 * src.numel() / ref["copy"] * 1e-6) if timed else None
            del a, b, out, expect, src, dst
            torch.cuda.empty_cache()
    return rows


SWEEP_COLUMNS = (
    ("n", "{}", "n"), ("dtype", "{}", "dtype"), ("kernel", "{}", "kernel"), ("name", "{}", "name"),
    ("ok", "{!s}", "correct"), ("GB/s", "{:.0f}", "gbps"), ("vs torch", "{:.3f}", "vs_torch"),
    ("vs copy", "{:.3f}", "vs_copy"), ("us/call", "{:.2f}", "us"), ("host us", "{:.2f}", "host_us"),
)


def format_sweep(rows: list[dict]) -> str:
    """A fixed-width table of `run_stream_sweep` rows (us/call: the time_callable median; host us:
    host time per call; a call costs about max(us/call, host us) back to back)."""
    if not rows:
        return "(no rows)"
    head = (f"stream config sweep on {rows[0]['device']}  (torch {rows[0]['torch']}, triton {rows[0]['triton']}; "
            "kernel = tile/stages/ahead/out_bufs/warps[/programs_per_sm[/2d]]; vs torch: the first torch.add row)")
    cells = [[_cell(fmt, (r["ms"] and r["ms"] * 1000) if key == "us" else r[key]) for _, fmt, key in SWEEP_COLUMNS]
             for r in rows]
    widths = [max([len(t)] + [len(c[i]) for c in cells]) for i, (t, _, _) in enumerate(SWEEP_COLUMNS)]
    left = {"kernel", "name"}

    def line(values):
        return "  ".join(v.ljust(w) if key in left else v.rjust(w)
                         for v, w, (_, _, key) in zip(values, widths, SWEEP_COLUMNS)).rstrip()

    return "\n".join([head, line([t for t, _, _ in SWEEP_COLUMNS])] + [line(c) for c in cells])


def _parse_size(text: str) -> int:
    text = text.strip().replace("^", "**")
    if "**" in text:
        base, exp = text.split("**")
        return int(base) ** int(exp)
    return int(text)


def main(argv=None) -> int:
    """`python -m pingpong.streaming --sweep candidates|SPEC,SPEC,... [--sizes ...]` (__main__.py)."""
    import argparse
    import json

    from ..errors import PingpongError
    from ..streaming.hopper import CANDIDATES, StreamConfig

    p = argparse.ArgumentParser(prog="python -m pingpong.streaming",
                                description="Compare Hopper vector_add StreamConfigs with torch.add in one process.")
    p.add_argument("--sweep", default="candidates",
                   help="'candidates' (hopper.CANDIDATES) or comma-separated names/specs, "
                        "spec = tile/stages/ahead/out_bufs/warps[/programs_per_sm[/1d|2d]], e.g. 16k/4/3/2/4,2cta")
    p.add_argument("--sizes", default="2**20,2**28", help="element counts, e.g. 2**20,2**28 (default)")
    p.add_argument("--dtypes", default="fp32,bf16", help="fp32, bf16, fp16 (default fp32,bf16)")
    p.add_argument("--reps", type=int, default=100, help="timed repetitions per row (default 100)")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    args = p.parse_args(argv)
    try:
        if args.sweep == "candidates":
            configs = dict(CANDIDATES)
        else:
            configs = {}
            for item in args.sweep.split(","):
                cfg = StreamConfig.parse(item)
                configs[item.strip() if item.strip() in CANDIDATES else cfg.spec] = cfg
        sizes = [_parse_size(t) for t in args.sizes.split(",")]
        dtypes = [_DTYPE_NAMES[t.strip()] for t in args.dtypes.split(",")]
    except (PingpongError, ValueError, KeyError) as e:
        p.error(str(e))
    if not torch.cuda.is_available():
        print("no CUDA GPU: the sweep runs on Hopper", flush=True)
        return 2
    rows = run_stream_sweep(configs, sizes, dtypes, args.reps)
    print(format_sweep(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0 if all(r["correct"] for r in rows) else 1
