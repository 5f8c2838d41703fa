"""Which tile config a grouped kernel should take: times of pingpong.grouped_mm under each
candidate KernelConfig next to torch._grouped_mm on MoE cases, one process. A case is
MODEL:TOKENS:ROUTING:PRODUCT (pingpong.tools.suites.moe_suite's names); forward and dgrad
run the ragged-rows kernel (pingpong.hopper.grouped), wgrad the ragged-K kernel
(pingpong.hopper.grouped_k). Prints one line per case: torch's TF/s, then per config TF/s
(ratio to torch; WRONG where the result is off, ERROR where the config does not run).

    python benchmarks/grouped_configs.py [--reps N] [MODEL:TOKENS:ROUTING:PRODUCT ...]
"""

import argparse
import statistics

import torch

from pingpong import KernelConfig, grouped as gm
from pingpong.hopper import grouped as hg, grouped_k as hk
from pingpong.runtime import plan as plan_mod
from pingpong.tools.bench_grouped import case_tensors, flops
from pingpong.tools.timing import time_callable

CANDIDATES = {
    "coop128x256": KernelConfig(128, 256, 64, schedule="cooperative"),
    "coop128x128": KernelConfig(128, 128, 64, schedule="cooperative"),
    "pp128x128": KernelConfig(128, 128, 64, schedule="pingpong"),
    "pp64x256": KernelConfig(64, 256, 64, schedule="pingpong"),
    "pp64x128": KernelConfig(64, 128, 64, schedule="pingpong"),
}
DEFAULT_CASES = [f"{m}:{t}:balanced:{p}" for m, t in (("mixtral-8x7b", 4096), ("qwen3-30b-a3b", 4096),
                                                    ("deepseek-v3", 4096), ("qwen3-30b-a3b", 512))
                 for p in ("forward", "dgrad")]


def force(product: str, cfg: KernelConfig) -> None:
    """Make the product's kernel take `cfg` (its selection function replaced, and the plans,
    which keep the tile they were planned with, dropped)."""
    if product == "wgrad":
        hk.select_ragged_k_config = lambda *_, cfg=cfg: cfg
    else:
        hg.select_grouped_config = lambda *_, cfg=cfg: cfg
    plan_mod.PLANS.clear()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("cases", nargs="*", default=DEFAULT_CASES)
    args = p.parse_args()
    for spec in args.cases:
        model, tokens, routing, product = spec.split(":")
        case = (model, int(tokens), routing, product)
        a, b, offs, sizes = case_tensors(*case)
        f = flops(a, b, sizes, product)
        ref = torch._grouped_mm(a, b, offs)
        t_torch = statistics.median(time_callable(lambda: torch._grouped_mm(a, b, offs), args.reps).median_ms
                                    for _ in range(2))
        line = [f"{spec}: torch {f / t_torch * 1e-9:.0f} TF"]
        for name, cfg in CANDIDATES.items():
            force(product, cfg)
            try:
                out = gm._compute(a, b, offs, a.dtype, out=torch.full_like(ref, float("nan")))
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                t = statistics.median(time_callable(lambda: gm.grouped_mm(a, b, offs), args.reps).median_ms
                                      for _ in range(2))
                line.append(f"{name} {f / t * 1e-9:.0f} ({t_torch / t:.3f}{'' if err < 1e-2 else ' WRONG'})")
            except Exception as e:
                line.append(f"{name} ERROR {type(e).__name__}: {str(e)[:80]}")
        print("  ".join(line), flush=True)
        del a, b, ref


if __name__ == "__main__":
    main()
