"""Experiment: do pingpong's kernels lose time fetching their TMA descriptors on first use?

    PYTHONPATH=src python benchmarks/tensormap_prefetch.py --prefetch schedules --shapes ... --configs ...
    ncu ... python benchmarks/tensormap_prefetch.py --prefetch ncu_compare --shapes ...

Triton 3.6's Gluon has no tensormap-prefetch operation, so with --prefetch this script installs a
compilation hook (triton.knobs.runtime.add_stages_inspection_hook) that rewrites the PTX of
every kernel it compiles: after each `cvta.param.u64` of a kernel-parameter descriptor's
address it adds `prefetch.tensormap [addr];`, so the descriptors are fetched at kernel start,
in parallel, instead of by the first TMA load (A, B) and the first TMA store (the epilogue).
The kernels compile into a private Triton cache directory per mode. Then it runs the named
benchmark script (schedules or ncu_compare) with the remaining arguments.
"""

import os
import re
import sys
import tempfile


def install_prefetch_hook() -> None:
    from triton import knobs

    def hook(backend, stages, options, language, capability):
        make_ptx = stages["ptx"]

        def ptx_with_prefetch(src, metadata):
            ptx = make_ptx(src, metadata)
            return re.sub(r"(cvta\.param\.u64\s+(%rd\d+), %rd\d+;)", r"\1\n\tprefetch.tensormap [\2];", ptx)

        stages["ptx"] = ptx_with_prefetch

    knobs.runtime.add_stages_inspection_hook = hook


def main() -> int:
    args = sys.argv[1:]
    prefetch = "--prefetch" in args
    args = [a for a in args if a != "--prefetch"]
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"triton-{'prefetch' if prefetch else 'plain'}-")
    if prefetch:
        install_prefetch_hook()
    sys.path.insert(0, os.path.dirname(__file__))
    script, rest = args[0], args[1:]
    module = __import__(script)
    print(f"# tensormap prefetch: {'on' if prefetch else 'off'}", file=sys.stderr)
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
