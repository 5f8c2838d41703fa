"""The tuning table: measured best KernelConfigs per problem-size bucket, for one GPU.

    pingpong tune ──writes──> <cache dir>/tuning/<gpu>-<sms>sm-triton<X.Y>.json  (user's, first choice)
    package data:             pingpong/tables/<gpu>-<sms>sm-triton<X.Y>.json    (shipped, second)
    select_config ──reads──> the first one whose key matches this GPU and these versions

A table is keyed by the GPU's name, its SM count, the pingpong version and the Triton minor
version (3.9: patch releases do not change the code a kernel compiles to) that measured it.
Each Triton minor has its own file, so a user on another supported Triton finds no table
and gets the heuristic, silently. A file that does not parse or whose key does not match
what its name says is ignored with a warning: its timings say nothing about this build.

Lookup is by bucket, not exact shape: a size x falls in bucket round(log2 x), so a table
tuned at M = 16 also answers M = 12..22, and 4096×14336 answers 4000×16000. Entries in the
same bucket are ranked by their log-distance to the asked shape; an entry for the asked
operand layout beats one for another layout. (Selection may still set a near entry aside when
tuning found it no better than the heuristic at its own shape, or its tiles would quantize
badly on the asked shape: pingpong.hopper.host.select.)

An entry's "dtype" names the problem it was measured for: "bf16" / "fp16" for the 16-bit GEMM
(select_config), and for pingpong.scaled_mm a key that `fp8_key` makes of the FP8 kind, the
scaling and the accumulation: "fp8e4m3-row" (promoted every 128 of K), "fp8e4m3-row-fast"
(use_fast_accum), "fp8e4m3-tensor[-fast]", "fp8e4m3-block" (block-wise scales always promote;
1×128 and 128×128 b scales share the key). Lookups match the key exactly, so a bf16 entry never
answers an FP8 call, nor a promoted FP8 entry a fast one.

The cache directory is $PINGPONG_CACHE_DIR if set, else platformdirs' user cache dir for
"pingpong". Writers hold a file lock, re-read the table and merge their entries, and replace
the file atomically, so concurrent `pingpong tune` runs do not lose each other's results.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import tempfile
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

from .config import KernelConfig
from ...errors import ConfigError, PingpongError
from ...toolchain import minor

FORMAT = 1
CACHE_ENV = "PINGPONG_CACHE_DIR"
#: the fields of an entry that name its problem (the rest: the config and what was measured)
PROBLEM = ("M", "N", "K", "dtype", "out_dtype", "layout")


@dataclasses.dataclass(frozen=True)
class TableKey:
    """What a table's timings are valid for."""

    gpu: str
    sms: int
    pingpong: str
    triton: str

    @classmethod
    def current(cls, gpu: str, sms: int) -> "TableKey":
        import triton

        from ...toolchain import __version__

        return cls(gpu, int(sms), __version__, minor(triton.__version__))

    @property
    def filename(self) -> str:
        return f"{re.sub(r'[^a-z0-9]+', '-', self.gpu.lower()).strip('-')}-{self.sms}sm-triton{self.triton}.json"


def fp8_key(kind: str, scaling: str, promote: bool) -> str:
    """The table dtype of an FP8 product (module docstring): kind "e4m3" / "e5m2", scaling
    "tensor" / "row" / "block", promote False for use_fast_accum (tensor/row only)."""
    return f"fp8{kind}-{scaling}" + ("" if promote else "-fast")


def element_bytes(dtype: str) -> int:
    """Bytes of one input element of an entry's dtype: 1 for an FP8 key, else 2."""
    return 1 if str(dtype).startswith("fp8") else 2


def bucket(x: int) -> int:
    """The bucket of a problem size: round(log2 x)."""
    return round(math.log2(max(1, x)))


def cache_dir() -> Path:
    """$PINGPONG_CACHE_DIR, else the user cache dir (platformdirs); PingpongError if neither."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    try:
        import platformdirs
    except ImportError as e:
        raise PingpongError(f"cache directory: set {CACHE_ENV} or pip install platformdirs ({e})") from e
    return Path(platformdirs.user_cache_dir("pingpong"))


def user_table_path(key: TableKey) -> Path:
    return cache_dir() / "tuning" / key.filename


def shipped_table_path(key: TableKey) -> Path:
    return Path(str(resources.files("pingpong") / "tables" / key.filename))


@dataclasses.dataclass
class Table:
    key: TableKey
    entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def add(self, M: int, N: int, K: int, dtype: str, out_dtype: str, layout: str, config: KernelConfig,
            **measured: float) -> None:
        """Record the best config of a shape (replacing an earlier entry for the same problem)."""
        entry = dict(M=M, N=N, K=K, dtype=dtype, out_dtype=out_dtype, layout=layout,
                     config=dataclasses.asdict(config), **measured)
        same = lambda e: all(e[f] == entry[f] for f in PROBLEM)  # noqa: E731
        self.entries = [e for e in self.entries if not same(e)] + [entry]

    def lookup(self, M: int, N: int, K: int, dtype: str, layout: str) -> KernelConfig | None:
        """The config of the nearest entry in (M, N, K)'s bucket for this input dtype, or None."""
        e = self.nearest(M, N, K, dtype, layout)
        return KernelConfig(**e["config"]) if e is not None else None

    def nearest(self, M: int, N: int, K: int, dtype: str, layout: str) -> dict[str, Any] | None:
        """The nearest entry in (M, N, K)'s bucket for this input dtype (module docstring), or None."""
        asked = (M, N, K)
        near = [e for e in self.entries
                if e["dtype"] == dtype and all(bucket(e[d]) == bucket(x) for d, x in zip("MNK", asked))]
        if not near:
            return None
        distance = lambda e: sum(abs(math.log2(e[d] / x)) for d, x in zip("MNK", asked))  # noqa: E731
        return min(near, key=lambda e: (e["layout"] != layout, distance(e)))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "key": dataclasses.asdict(self.key), "entries": self.entries}

    @classmethod
    def from_json(cls, doc: Any) -> "Table":
        """Parse a table; ValueError says what is wrong with it."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a format-{FORMAT} pingpong tuning table")
        try:
            key = TableKey(**doc["key"])
            entries = list(doc["entries"])
            for e in entries:
                check_entry(e)
        except (KeyError, TypeError, ConfigError) as e:
            raise ValueError(f"malformed table ({type(e).__name__}: {e})") from e
        return cls(key, entries)


#: an entry's timings (µs, the tuner's: the best config's, the heuristic's, the peer's) and count
TIMINGS = ("us", "heuristic_us", "cublas_us")


def check_entry(e: dict) -> None:
    """TypeError naming what of a table entry selection could not use: M, N, K positive ints,
    the names strings, the timings positive finite numbers or null, the config valid."""
    for d in "MNK":
        if type(e[d]) is not int or e[d] < 1:
            raise TypeError(f"entry {d}={e[d]!r}: expected a positive int")
    for f in ("dtype", "layout", "out_dtype"):
        if not isinstance(e[f], str):
            raise TypeError(f"entry {f}={e[f]!r}: expected a string")
    for f in TIMINGS:
        v = e.get(f)
        if v is not None and (type(v) not in (int, float) or not 0 < v < math.inf):
            raise TypeError(f"entry {f}={v!r}: expected a positive finite number of µs, or null")
    KernelConfig(**e["config"]).validate(element_bytes(e["dtype"]))


def read(path: Path, key: TableKey) -> Table | None:
    """The table at `path` if it is valid for `key`; None if there is none; a warning and None
    if it does not parse or was measured for another GPU or version."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        warnings.warn(f"pingpong: ignoring tuning table {path}: {e}", stacklevel=2)
        return None
    try:
        table = Table.from_json(json.loads(text))
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        warnings.warn(f"pingpong: ignoring tuning table {path}: {e}", stacklevel=2)
        return None
    if table.key != key:
        diff = ", ".join(f"{f} {getattr(table.key, f)!r} (this machine: {getattr(key, f)!r})"
                         for f in ("gpu", "sms", "pingpong", "triton") if getattr(table.key, f) != getattr(key, f))
        warnings.warn(f"pingpong: ignoring tuning table {path}: measured for another setup: {diff}", stacklevel=2)
        return None
    return table


def write(table: Table, path: Path) -> Path:
    """Merge `table` into the file at `path` (its own entries win) under a file lock and replace
    the file atomically. Entries of an unreadable or foreign file there are dropped."""
    from filelock import FileLock

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            merged = read(path, table.key) or Table(table.key)
        for e in table.entries:
            problem = [e[f] for f in PROBLEM]
            measured = {k: v for k, v in e.items() if k not in PROBLEM and k != "config"}
            merged.add(*problem, KernelConfig(**e["config"]), **measured)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(merged.to_json(), f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    clear_cache()
    return path


@functools.lru_cache(maxsize=None)
def active(key: TableKey) -> tuple[Table | None, str | None]:
    """(table, where it came from) for this GPU: the user's table, else the shipped one, else
    (None, None). Read once per process (write() clears the cache)."""
    try:
        user = user_table_path(key)
    except PingpongError:  # no cache dir configured: only the shipped tables
        user = None
    for path in (user, shipped_table_path(key)):
        table = read(path, key) if path is not None else None
        if table is not None:
            return table, str(path)
    return None, None


def clear_cache() -> None:
    active.cache_clear()
