"""The `pingpong` command line (also `python -m pingpong`).

Each subcommand lives in the module that owns its subject; this file only wires them up:

    demo   pingpong.tools.demo       multiply, check against torch, compare with cuBLAS
    bench  pingpong.tools.bench      the benchmark harness (docs/benchmarking.md)
    isa    pingpong.tools.isa        compile a kernel offline for a target, print facts
    check  pingpong.schedule.cli     model-check kernel schedules for races and deadlocks
    tune   pingpong.tools.tune       measure configs per shape, write the tuning table

Only the subcommand named is imported, and subcommand modules import torch when they run, not
when they build their arguments: `pingpong --help` and usage errors never wait for torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

#: subcommand -> (module with add_arguments(parser) and run(args) -> int, help)
SUBCOMMANDS = {
    "demo": ("pingpong.tools.demo", "multiply, check against torch, compare with cuBLAS (or explain the CPU path)"),
    "bench": ("pingpong.tools.bench", "benchmark against cuBLAS: TFLOP/s, ratio, CSV/JSON/PNG"),
    "isa": ("pingpong.tools.isa", "compile a kernel offline for sm_90a/gfx942/gfx950/gfx1151 and print its facts"),
    "check": ("pingpong.schedule.cli", "model-check synchronization schedules for races and deadlocks"),
    "tune": ("pingpong.tools.tune", "measure KernelConfigs per shape on this GPU and write the tuning table"),
}

EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a tool ended by SIGPIPE


def main(argv: list[str] | None = None) -> int:
    from ..toolchain import silence_exit_report

    silence_exit_report()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="pingpong", description="Readable, fast GEMM kernels in Triton Gluon.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = argv[0] if argv else None  # the top level has no options but --help: the command comes first
    run = None
    for name, (module_name, help_) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == named:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            run = module.run
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        code = int(run(args) or 0)
        sys.stdout.flush()  # a reader that went away is found here, not at interpreter exit
    except BrokenPipeError:  # `pingpong isa --list | head -2`: stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the exit's own flush of stdout finds no broken pipe
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
