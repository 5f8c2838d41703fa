"""`pingpong isa`: compile one of the package's kernels offline and print its facts."""

from __future__ import annotations

import argparse
import sys

from . import compile as cc
from .errors import TargetError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="sm_90a", help=f"one of: {', '.join(cc.TARGETS)} (default sm_90a)")
    p.add_argument("--kernel", default=None, help="kernel name (see --list)")
    p.add_argument("--list", action="store_true", help="list the kernels and the targets each compiles for")
    p.add_argument("--dump", metavar="FILE", help="write the ISA (SASS or AMDGCN) to FILE")
    p.add_argument("--dump-ir", metavar="DIR", help="write every stage (ttgir, llir, ptx/amdgcn) into DIR")


def run(args: argparse.Namespace) -> int:
    registry = cc.kernels()
    if args.list or args.kernel is None:
        for name, (targets, doc) in registry.items():
            print(f"{name:<16} {','.join(targets):<32} {doc}")
        return 0
    try:
        compiled = cc.compile_kernel(args.kernel, args.target)
    except TargetError as e:
        print(f"pingpong isa: {e}", file=sys.stderr)
        return 2
    print(compiled.facts().table())
    if args.dump:
        with open(args.dump, "w") as f:
            f.write(compiled.isa)
        print(f"ISA written to {args.dump}")
    if args.dump_ir:
        import os

        os.makedirs(args.dump_ir, exist_ok=True)
        for stage, text in compiled.asm.items():
            mode = "wb" if isinstance(text, bytes) else "w"
            with open(os.path.join(args.dump_ir, f"{args.kernel}.{stage}"), mode) as f:
                f.write(text)
        print(f"IR stages written to {args.dump_ir}/")
    return 0
