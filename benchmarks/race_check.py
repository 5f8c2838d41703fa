"""Race safety: repeated runs must agree bitwise, and a dimension sweep must be correct, for
every schedule. A moving result is a race (a race that corrupts 10-20% of runs shows only in
repeats).

    PYTHONPATH=src python benchmarks/race_check.py --runs 50 --size 8192
"""

import argparse
import sys

import torch

from pingpong import KernelConfig
from pingpong.api import _gemm_into

SCHEDULES = [KernelConfig(128, 256, 64, schedule="persistent"), KernelConfig(128, 256, 64, schedule="cooperative"),
             KernelConfig(128, 128, 64, schedule="pingpong")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--sweep", type=int, nargs="*", default=[1024, 2048, 3000, 4096, 5555, 8192, 12288, 16384])
    args = p.parse_args(argv)
    bad = 0
    for cfg in SCHEDULES:
        n = args.size
        a = torch.randn(n, n, device="cuda").bfloat16()
        w = torch.randn(n, n, device="cuda").bfloat16()
        out = lambda: _gemm_into(torch.full((n, n), float("nan"), device="cuda", dtype=torch.bfloat16),  # noqa: E731
                                 a, w.t(), None, 1.0, 0.0, cfg)
        first = out()
        differ = sum(not torch.equal(out(), first) for _ in range(args.runs - 1))
        sweep_errs = []
        for d in args.sweep:
            x = torch.randn(d, d, device="cuda").bfloat16()
            y = torch.randn(d, d, device="cuda").bfloat16()
            r = _gemm_into(torch.full((d, d), float("nan"), device="cuda", dtype=torch.bfloat16), x, y.t(), None, 1.0,
                           0.0, cfg).float()
            ref = x.float() @ y.t().float()
            sweep_errs.append(((r - ref).norm() / ref.norm()).item())
        ok = differ == 0 and all(e < 1e-2 for e in sweep_errs)
        bad += not ok
        print(f"{cfg.schedule:<12} {args.runs} runs at {n}^3: {differ} differ from the first; "
              f"sweep {args.sweep} max rel err {max(sweep_errs):.2e} -> {'ok' if ok else 'RACE/WRONG'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
