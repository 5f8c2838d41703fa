"""`pingpong isa`: compile one of the package's kernels offline and print its facts."""

from __future__ import annotations

import argparse
import os
import sys

from ..runtime import compile as cc
from ..errors import PingpongError


def _target(name: str) -> str:
    """A compilation target of pingpong.runtime.compile (argparse reports anything else as a usage error)."""
    if name not in cc.TARGETS:
        raise argparse.ArgumentTypeError(f"unknown target {name!r}; valid targets: {', '.join(cc.TARGETS)}")
    return name


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="sm_90a", type=_target, metavar="TARGET",
                   help=f"one of: {', '.join(cc.TARGETS)} (default sm_90a)")
    p.add_argument("--kernel", default=None, help="kernel name (see --list)")
    p.add_argument("--list", action="store_true", help="list the kernels and the targets each compiles for")
    p.add_argument("--dump", metavar="FILE", help="write the ISA (SASS or AMDGCN) to FILE")
    p.add_argument("--dump-ir", metavar="DIR", help="write every stage (ttgir, llir, ptx/amdgcn) into DIR")


def run(args: argparse.Namespace) -> int:
    if args.kernel is None and (args.dump or args.dump_ir):  # not the list with the option dropped
        print(f"pingpong isa: {'--dump' if args.dump else '--dump-ir'}: needs --kernel NAME (see --list)",
              file=sys.stderr)
        return 2
    registry = cc.kernels()
    if args.list or args.kernel is None:
        rows = [(name, ",".join(targets), doc) for name, (targets, doc) in registry.items()]
        name_w, target_w = (max(len(row[i]) for row in rows) for i in (0, 1))
        for name, targets, doc in rows:
            print(f"{name:<{name_w}}  {targets:<{target_w}}  {doc}".rstrip())
        return 0
    problem = (args.dump and _unwritable_file(args.dump)) or (args.dump_ir and _unwritable_dir(args.dump_ir))
    if problem:  # found before compiling, not after
        print(f"pingpong isa: {problem}", file=sys.stderr)
        return 2
    try:  # an unknown kernel or target; a CUDA binary tool the facts read that is missing (ToolMissing)
        compiled = cc.compile_kernel(args.kernel, args.target)
        facts = compiled.facts().table()
    except PingpongError as e:
        print(f"pingpong isa: {e}", file=sys.stderr)
        return 2
    print(facts)
    if args.dump:
        with open(args.dump, "w") as f:
            f.write(compiled.isa)
        print(f"ISA written to {args.dump}")
    if args.dump_ir:
        os.makedirs(args.dump_ir, exist_ok=True)
        for stage, text in compiled.asm.items():
            mode = "wb" if isinstance(text, bytes) else "w"
            with open(os.path.join(args.dump_ir, f"{args.kernel}.{stage}"), mode) as f:
                f.write(text)
        print(f"IR stages written to {args.dump_ir}/")
    return 0


def _unwritable_file(path: str) -> str | None:
    """Why `--dump` cannot write `path` (None if it can): checked before compiling."""
    if os.path.isdir(path):
        return f"--dump: {path!r} is a directory, expected a file path"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"--dump: cannot write {path!r}: directory {parent!r} does not exist"
    if not os.access(parent if not os.path.exists(path) else path, os.W_OK):
        return f"--dump: cannot write {path!r}: permission denied"
    return None


def _unwritable_dir(path: str) -> str | None:
    """Why `--dump-ir` cannot write into `path` (None if it can): it, or the nearest ancestor
    that exists (the write after the compile creates the rest), is a writable directory.
    Nothing is created here, so a compile that fails leaves no directory behind."""
    if os.path.exists(path) and not os.path.isdir(path):
        return f"--dump-ir: {path!r} exists and is not a directory"
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"--dump-ir: cannot create {path!r}: {probe!r} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"--dump-ir: cannot write into {probe!r}: permission denied"
    return None
