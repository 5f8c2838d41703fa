"""Vector-add benchmark: GB/s of pingpong.vector_add, torch.add and a device-to-device copy
of the same bytes, all measured in one process on one device (only ratios of one run compare).

Bytes counted: the add reads a and b and writes out, 3 * n * itemsize. The copy moves a
buffer of half that size, so it too reads + writes 3 * n * itemsize bytes. Times are the
median of `triton.testing.do_bench` (which flushes L2 before every repetition).

    rows = run_vector_add_bench([2**20, 2**28], torch.float32, reps=100)
    print(format_table(rows))
"""

import torch
import triton

from .api import kernel_path, vector_add


#: Upper bound (ms) of do_bench's L2 flush (zeroing 256 MB), which its time budget includes.
FLUSH_MS = 0.2


def _median_ms(fn, reps: int) -> float:
    """Median time of fn in ms over at least about `reps` repetitions.

    do_bench takes a time budget, not a count, and spends it on flush + fn per repetition;
    the budget is sized from a first estimate of fn alone plus FLUSH_MS.
    """
    estimate = triton.testing.do_bench(fn, warmup=5, rep=5, return_mode="median")
    budget = reps * (estimate + FLUSH_MS)
    return triton.testing.do_bench(fn, warmup=max(25.0, 5 * estimate), rep=budget, return_mode="median")


def run_vector_add_bench(sizes, dtype=torch.float32, reps: int = 100, device: str = "cuda") -> list[dict]:
    """One row per size: times (ms), GB/s and ratios of ours vs torch.add and vs the copy.

    Each row also records `correct` (ours bitwise equal to torch.add, output poisoned with
    NaN first), `path` (which kernel ran), the device name and the torch/triton versions.
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
        src = torch.empty((nbytes + 1) // 2, device=dev, dtype=torch.uint8)
        dst = torch.empty_like(src)
        ms_ours = _median_ms(lambda: vector_add(a, b, out), reps)
        ms_torch = _median_ms(lambda: torch.add(a, b, out=out), reps)
        ms_copy = _median_ms(lambda: dst.copy_(src), reps)
        gbps = lambda ms, bytes_=nbytes: bytes_ / ms * 1e-6  # noqa: E731  (bytes/ms -> GB/s)
        copy_bytes = 2 * src.numel()
        rows.append(dict(
            n=n, dtype=str(dtype).replace("torch.", ""), bytes=nbytes, path=kernel_path(a, b, out), correct=correct,
            ms_ours=ms_ours, ms_torch=ms_torch, ms_copy=ms_copy,
            gbps_ours=gbps(ms_ours), gbps_torch=gbps(ms_torch), gbps_copy=gbps(ms_copy, copy_bytes),
            vs_torch=ms_torch / ms_ours, vs_copy=gbps(ms_ours) / gbps(ms_copy, copy_bytes),
            device=torch.cuda.get_device_name(dev), torch=torch.__version__, triton=triton.__version__,
        ))
        del a, b, out, src, dst
    return rows


COLUMNS = (
    ("n", "{:>11}", "n"), ("dtype", "{:>8}", "dtype"), ("path", "{:>10}", "path"), ("ok", "{!s:>5}", "correct"),
    ("ours GB/s", "{:>9.0f}", "gbps_ours"), ("torch GB/s", "{:>10.0f}", "gbps_torch"),
    ("copy GB/s", "{:>9.0f}", "gbps_copy"), ("ours/torch", "{:>10.3f}", "vs_torch"), ("ours/copy", "{:>9.3f}", "vs_copy"),
)


def format_table(rows: list[dict]) -> str:
    """A fixed-width table of `run_vector_add_bench` rows, with the device and versions above."""
    if not rows:
        return "(no rows)"
    head = f"vector_add on {rows[0]['device']}  (torch {rows[0]['torch']}, triton {rows[0]['triton']}; " \
           "GB/s counts 2 reads + 1 write; copy moves the same bytes)"
    widths = [len(fmt.format(r[key])) for _, fmt, key in COLUMNS for r in rows[:1]]
    titles = "  ".join(f"{t:>{max(w, len(t))}}" for (t, _, _), w in zip(COLUMNS, widths))
    lines = [head, titles]
    for r in rows:
        cells = [fmt.format(r[key]) for _, fmt, key in COLUMNS]
        lines.append("  ".join(f"{c:>{max(w, len(t))}}" for c, (t, _, _), w in zip(cells, COLUMNS, widths)))
    return "\n".join(lines)


#: `pingpong bench --op vector_add` sizes: the issue's targets (2**20 launch-bound, 2**28
#: bandwidth-bound) and one in between.
DEFAULT_SIZES = (2**20, 2**24, 2**28)
_DTYPE_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def bench_vector_add(settings) -> int:
    """Adapter for `pingpong bench --op vector_add` (pingpong.bench.Settings): fp32 at
    DEFAULT_SIZES (the targets), then `--dtype` at the same sizes; `--csv`/`--json` write the
    rows. Returns 0 when every row is bitwise correct, else 1."""
    import csv
    import json

    rows = []
    for name in dict.fromkeys(("fp32", settings.dtype)):
        rows += run_vector_add_bench(DEFAULT_SIZES, _DTYPE_NAMES[name], settings.reps)
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
