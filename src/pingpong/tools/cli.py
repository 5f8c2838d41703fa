"""The `pingpong` command line (also `python -m pingpong`).

Each subcommand lives in the module that owns its subject; this file only wires them up:

    demo   pingpong.tools.demo              multiply, check against torch, compare with cuBLAS
    bench  pingpong.tools.bench             the benchmark harness (docs/benchmarking.md)
    isa    pingpong.runtime.compile           compile a kernel offline for a target, print facts
    check  pingpong.schedule.cli      model-check kernel schedules for races and deadlocks
    tune   pingpong.tools.tune              measure configs per shape, write the tuning table
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> (module with add_arguments(parser) and run(args) -> int, help)
SUBCOMMANDS = {
    "demo": ("pingpong.tools.demo", "multiply, check against torch, compare with cuBLAS (or explain the CPU path)"),
    "bench": ("pingpong.tools.bench", "benchmark against cuBLAS: TFLOP/s, ratio, CSV/JSON/PNG"),
    "isa": ("pingpong.tools.isa", "compile a kernel offline for sm_90a/gfx942/gfx950/gfx1151 and print its facts"),
    "check": ("pingpong.schedule.cli", "model-check synchronization schedules for races and deadlocks"),
    "tune": ("pingpong.tools.tune", "measure KernelConfigs per shape on this GPU and write the tuning table"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pingpong", description="Readable, fast GEMM kernels in Triton Gluon.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    runners = {}
    for name, (module_name, help_) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_, description=help_)
        module.add_arguments(p)
        runners[name] = module.run
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(runners[args.command](args) or 0)


if __name__ == "__main__":
    sys.exit(main())
