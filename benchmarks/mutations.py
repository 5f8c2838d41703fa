"""Mutation pass over the CPU suite: apply one break at a time, run the tests meant to catch it,
expect them to fail, restore the file. Results go to benchmarks/MUTATIONS.md (by hand).

    PYTHONPATH=src python benchmarks/mutations.py            # every mutation
    PYTHONPATH=src python benchmarks/mutations.py NAME ...   # some of them

Each mutation is (name, file, the exact text to replace, its replacement, the test
selection). The text must occur in the file exactly once, so a refactor that moves it makes
this script fail loudly instead of testing nothing. Exit 1 if any mutation survives.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MUTATIONS = [
    # -- 64-bit indexing of the portable GEMM
    ("int64 switch forced off", "src/pingpong/portable.py",
     "INDEX_64=needs_int64(a, b, c, out)", "INDEX_64=False",
     "tests/test_reliability_indexing.py"),
    ("int64 threshold moved to 2**32", "src/pingpong/addressing.py",
     "span(t) > INT32_MAX for t in tensors", "span(t) > 2**32 for t in tensors",
     "tests/test_reliability_indexing.py"),
    ("int64 threshold off by one", "src/pingpong/addressing.py",
     "span(t) > INT32_MAX for t in tensors", "span(t) > INT32_MAX + 1 for t in tensors",
     "tests/test_reliability_indexing.py"),
    ("K-step advance in 32 bits", "src/pingpong/portable.py",
     "a_step = tl.cast(stride_ak, tl.int64) * BK", "a_step = stride_ak * BK",
     "tests/test_reliability_indexing.py"),
    # -- KernelConfig's shared-memory budget and bounds
    ("smem limit check loosened by 4 KB", "src/pingpong/config.py",
     "if total > SMEM_LIMIT:", "if total > SMEM_LIMIT + 4096:",
     "tests/test_reliability_config.py"),
    ("fixed-bytes term zeroed", "src/pingpong/config.py",
     "_epilogue(cfg, in_bytes, out_bytes)[2] + _FIXED_BYTES", "_epilogue(cfg, in_bytes, out_bytes)[2] + 0",
     "tests/test_reliability_config.py"),
    ("staging term zeroed", "src/pingpong/config.py",
     "_epilogue(cfg, in_bytes, out_bytes)[2] + _FIXED_BYTES", "_FIXED_BYTES",
     "tests/test_reliability_config.py"),
    ("SMEM_LIMIT raised to 228 KB", "src/pingpong/config.py",
     "SMEM_LIMIT = 227 * 1024", "SMEM_LIMIT = 228 * 1024",
     "tests/test_reliability_config.py tests/test_config.py"),
    ("stages upper bound dropped", "src/pingpong/config.py",
     "if self.stages > MAX_STAGES:", "if False:",
     "tests/test_reliability_config.py"),
    ("group_m upper bound dropped", "src/pingpong/config.py",
     "if self.group_m > MAX_GROUP_M:", "if False:",
     "tests/test_reliability_config.py"),
    ("derive cached by equality (untyped)", "src/pingpong/config.py",
     "@functools.lru_cache(maxsize=None, typed=True)", "@functools.lru_cache(maxsize=None)",
     "tests/test_reliability_config.py"),
]


def run(name, file, old, new, tests):
    """(killed, by which test): killed when the tests fail."""
    path = ROOT / file
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{name}: expected exactly one {old!r} in {file}, found {text.count(old)}")
    path.write_text(text.replace(old, new))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-rfE", "-p", "no:cacheprovider", *tests.split()],
                           cwd=ROOT, capture_output=True, text=True, env=None)
    finally:
        path.write_text(text)
    failed = [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return r.returncode != 0, (failed[0] if failed else f"exit {r.returncode}")


def main(argv) -> int:
    chosen = [m for m in MUTATIONS if not argv or m[0] in argv]
    survived = 0
    for m in chosen:
        killed, by = run(*m)
        survived += not killed
        print(f"| {m[0]} | {m[1]} | {'killed by ' + by if killed else 'SURVIVED'} |", flush=True)
    print(f"{len(chosen) - survived}/{len(chosen)} killed")
    return 1 if survived else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
