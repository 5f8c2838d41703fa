"""Is the generated code unchanged? Compile every kernel registered for offline compilation
(pingpong.runtime.compile) for one target on the CPU, at a git revision and in this working
tree, and compare their PTX.

    PYTHONPATH=src python benchmarks/ptx_identity.py REV [--target sm_90a] [--kernels a,b] [--keep DIR]

With --keep, the base side's PTX is kept there and reused by the next run against the same
revision.

The PTX of both sides is normalized before comparison, and only for what a refactor of the
kernel's Python signature may move without changing the code:
    - line and debug info: `.loc`, `.file`, `//` comments, the `.section .debug_*` blocks,
      and `$L__tmp` / `$L__func_*` / `$L__info_*` debug labels
    - kernel names: the `.entry` name (and its uses) become KERNEL
    - parameter names: `<name>_param_<i>` become PARAM<i>, numbered in the order the
      parameters are declared (a reordered signature compares equal iff the code reads
      the same parameter in the same place)
Everything else (instructions, registers, shared memory, .reqntid/.maxnreg, ...) must match
line for line. Prints one row per kernel and exits 1 if any differs (a unified diff of the
first differing kernel is printed).

Each side is compiled in a fresh process with PYTHONPATH set to that tree's src/ and its own
TRITON_CACHE_DIR, so neither side can hand the other a cached kernel.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))


def dump(out_dir: str, target: str, names: list[str]) -> None:
    """Worker: compile `names` (all of `target`'s registered kernels if empty) into out_dir/NAME.ptx."""
    from pingpong.runtime import compile as cc

    kernels = [n for n, (targets, _) in cc.kernels().items() if target in targets]
    errors = {}
    for name in names or kernels:
        try:
            ptx = cc.compile_kernel(name, target).asm["ptx"]
        except Exception as e:  # noqa: BLE001  (reported as a row, not a crash)
            errors[name] = f"{type(e).__name__}: {e}"
            continue
        with open(os.path.join(out_dir, name + ".ptx"), "w") as f:
            f.write(ptx)
        print(f"compiled {name}", flush=True)
    with open(os.path.join(out_dir, "errors.json"), "w") as f:
        json.dump(errors, f)


def compile_tree(tree: str, out_dir: str, target: str, names: list[str]) -> None:
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    env = dict(os.environ, PYTHONPATH=os.path.join(tree, "src"), TRITON_CACHE_DIR=os.path.join(out_dir, "cache"))
    subprocess.run([sys.executable, HERE, "--dump", out_dir, "--target", target, "--kernels", ",".join(names)],
                   env=env, check=True)


_DEBUG_SECTION = re.compile(r"^\s*\.section\s+\.debug_\w+\s*\{.*?^\s*\}", re.S | re.M)
_DEBUG_LABEL = re.compile(r"^\$L__(tmp|func_begin|func_end|info_string|debug_\w*)\d*:\s*$")


def normalize(ptx: str) -> list[str]:
    """The PTX lines that must match (module docstring)."""
    ptx = _DEBUG_SECTION.sub("", ptx)
    names = re.findall(r"\.entry\s+(\w+)", ptx)
    params = []  # declaration order
    for m in re.finditer(r"\.param\s+[^;]*?\b(\w+_param_\d+)\b", ptx):
        if m.group(1) not in params:
            params.append(m.group(1))
    lines = []
    for line in ptx.splitlines():
        s = line.strip()
        if not s or s.startswith(("//", ".loc", ".file")) or _DEBUG_LABEL.match(s):
            continue
        s = re.sub(r"\s*//.*$", "", s)
        for p in params:
            s = re.sub(rf"\b{p}\b", f"PARAM{params.index(p)}", s)
        for n in names:
            s = re.sub(rf"\b{n}\b", "KERNEL", s)
        lines.append(s)
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rev", nargs="?", help="git revision to compare this working tree against")
    p.add_argument("--target", default="sm_90a")
    p.add_argument("--kernels", default="", help="comma-separated names (default: every kernel of the target)")
    p.add_argument("--keep", help="directory for both sides' PTX (default: a temporary one)")
    p.add_argument("--dump", help=argparse.SUPPRESS)
    args = p.parse_args()
    names = [n for n in args.kernels.split(",") if n]
    if args.dump:
        dump(args.dump, args.target, names)
        return 0
    if not args.rev:
        p.error("a git revision is required")
    work = args.keep or tempfile.mkdtemp(prefix="ptx_identity_")
    sha = subprocess.run(["git", "-C", REPO, "rev-parse", args.rev], check=True, capture_output=True,
                         text=True).stdout.strip()
    base_out, head_out = os.path.join(work, "base-" + sha[:12]), os.path.join(work, "head")
    kept = os.path.exists(os.path.join(base_out, "errors.json"))
    if not kept or (names and not all(os.path.exists(os.path.join(base_out, n + ".ptx")) for n in names)):
        # a kept base of this revision is reused when it holds every kernel asked for
        base_tree = os.path.join(work, "tree-" + sha[:12])
        subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", base_tree, sha], check=True,
                       capture_output=True)
        try:
            compile_tree(base_tree, base_out, args.target, names)
        finally:
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", base_tree], capture_output=True)
    compile_tree(REPO, head_out, args.target, names)

    errors = {side: json.load(open(os.path.join(d, "errors.json"))) for side, d in (("base", base_out),
                                                                                  ("head", head_out))}
    kernels = sorted({f[:-4] for d in (base_out, head_out) for f in os.listdir(d) if f.endswith(".ptx")}
                     | set(errors["base"]) | set(errors["head"]))
    kernels = [k for k in kernels if not names or k in names]
    bad, first_diff = 0, None
    print(f"\nPTX of {args.target} kernels, {args.rev} ({sha[:12]}) vs this working tree")
    print(f"{'kernel':34} {'lines':>7}  result")
    for k in kernels:
        sides = []
        for side, d in (("base", base_out), ("head", head_out)):
            path = os.path.join(d, k + ".ptx")
            sides.append(normalize(open(path).read()) if os.path.exists(path) else errors[side].get(k, "missing"))
        if isinstance(sides[0], str) or isinstance(sides[1], str):
            bad += 1
            print(f"{k:34} {'':>7}  NOT COMPILED: base {sides[0] if isinstance(sides[0], str) else 'ok'};"
                  f" head {sides[1] if isinstance(sides[1], str) else 'ok'}")
            continue
        same = sides[0] == sides[1]
        print(f"{k:34} {len(sides[1]):>7}  {'identical' if same else 'DIFFERENT'}")
        if not same:
            bad += 1
            first_diff = first_diff or (k, sides)
    if first_diff:
        k, (a, b) = first_diff
        print(f"\nfirst difference, {k}:")
        print("\n".join(list(difflib.unified_diff(a, b, "base", "head", n=2, lineterm=""))[:80]))
    print(f"\n{len(kernels) - bad} of {len(kernels)} kernels identical" + (f", {bad} not" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
