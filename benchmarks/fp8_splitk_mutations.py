"""Break the FP8 split-K and watch its GPU tests fail: each mutation is a copy of src/ with one
edit, put first on PYTHONPATH for a run of tests/test_fp8_splitk_gpu.py's chosen cases.

    python benchmarks/fp8_splitk_mutations.py [-k PYTEST_EXPRESSION] [-n WORKERS]

Prints one line per mutation: the tests' outcome (a mutation whose tests pass was not caught)."""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXUP, KERNEL = "pingpong/hopper/fixup.py", "pingpong/hopper/fp8_kernel.py"

#: name -> [(file, old text, new text)]
MUTATIONS = {
    "drop split 1 from the sum": [
        (FIXUP, "p1 = gl.load(part + self.split_stride, mask=inside & (s + 1 < self.splits), other=0.0)",
         "p1 = gl.zeros_like(p0)")],
    "sum before every split arrived": [
        (FIXUP, "if arrive(counter, self.splits * 32 * gl.num_warps()):",
         "if arrive(counter, (self.splits - 1) * 32 * gl.num_warps()):")],
    "sum order follows the last split to arrive": [
        (FIXUP, "self.sum_and_store(off_r, off_c, ROWS, COLS)\n", "self.sum_and_store(off_r, off_c, ROWS, COLS, split)\n"),
        (FIXUP, "def sum_and_store(self, off_r, off_c, ROWS: gl.constexpr, COLS: gl.constexpr):",
         "def sum_and_store(self, off_r, off_c, ROWS: gl.constexpr, COLS: gl.constexpr, split=0):"),
        (FIXUP, "chunk = (((chunk + p0) + p1) + p2) + p3",
         "chunk = gl.where(split % 2 == 0, (((chunk + p0) + p1) + p2) + p3, (((chunk + p3) + p2) + p1) + p0)")],
    "block scales of the unit's first K block ignored (kb0)": [
        (KERNEL, "scales.sb_phase(off_n, batch) + kb0 - first", "scales.sb_phase(off_n, batch) - first")],
    "outer scales on every partial and again on the sum": [
        (KERNEL, "    if not SPLIT:\n        acc = scales.apply_outer", "    if True:\n        acc = scales.apply_outer")],
}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("-k", default="split_matches and (tensor-200x528x1552-4 or block-77x144x1408-4)")  # kb0 = 3, 6, 9
    p.add_argument("-n", default="0", help="pytest-xdist workers per mutation (0: none)")
    args = p.parse_args()
    runs = {}
    for name, edits in MUTATIONS.items():  # every mutation's tests at once (each in its own src copy)
        copy = pathlib.Path(tempfile.mkdtemp()) / "src"
        shutil.copytree(ROOT / "src", copy)
        for file, old, new in edits:
            text = (copy / file).read_text()
            assert old in text, f"{name}: {old!r} not in {file}"
            (copy / file).write_text(text.replace(old, new))
        env = dict(os.environ, PYTHONPATH=f"{copy}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-x", "-k", args.k,
               "tests/test_fp8_splitk_gpu.py"] + (["-n", args.n] if args.n != "0" else [])
        runs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    caught = 0
    for name, r in runs.items():
        out = r.communicate()[0]
        tail = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "E  ")) or " passed" in ln or " failed" in ln]
        caught += r.returncode != 0
        print(f"{'CAUGHT' if r.returncode else 'MISSED'}: {name}: " + " | ".join(tail[-3:])[:600], flush=True)
    print(f"{caught} of {len(MUTATIONS)} mutations caught")
    return 0 if caught == len(MUTATIONS) else 1


if __name__ == "__main__":
    sys.exit(main())
