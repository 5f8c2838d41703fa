"""Which tile config the ragged-K (weight gradient) kernel should take: times of
pingpong.grouped_mm under each candidate KernelConfig next to torch._grouped_mm on MoE wgrad
cases, one process. Prints one line per case: torch's TF/s, then per config TF/s (ratio).

    python benchmarks/grouped_k_configs.py [reps] [model:tokens:routing ...]
"""

import statistics
import sys

import torch

from pingpong import KernelConfig, grouped as gm
from pingpong.hopper import grouped_k as hk
from pingpong.tools.bench_grouped import case_tensors, flops
from pingpong.tools.timing import time_callable

CANDIDATES = {
    "coop128x256": KernelConfig(128, 256, 64, schedule="cooperative"),
    "coop128x128": KernelConfig(128, 128, 64, schedule="cooperative"),
    "pp64x256": KernelConfig(64, 256, 64, schedule="pingpong"),
}
DEFAULT_CASES = [f"{m}:{t}:{r}" for m in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3")
                 for t, r in ((2048, "balanced"), (16384, "balanced"), (16384, "zipf"))]
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
for spec in sys.argv[2:] or DEFAULT_CASES:
    model, tokens, routing = spec.split(":")
    case = (model, int(tokens), routing, "wgrad")
    a, b, offs, sizes = case_tensors(*case)
    f = flops(a, b, sizes, "wgrad")
    ref = torch._grouped_mm(a, b, offs)
    t_torch = statistics.median(time_callable(lambda: torch._grouped_mm(a, b, offs), reps).median_ms for _ in range(2))
    line = [f"{spec}: torch {f / t_torch * 1e-9:.0f} TF"]
    for name, cfg in CANDIDATES.items():
        hk.select_ragged_k_config = lambda M, N, T, G, cfg=cfg: cfg
        try:
            out = gm._compute(a, b, offs, a.dtype, out=torch.full_like(ref, float("nan")))
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            t = statistics.median(time_callable(lambda: gm.grouped_mm(a, b, offs), reps).median_ms for _ in range(2))
            line.append(f"{name} {f / t * 1e-9:.0f} ({t_torch / t:.3f}{'' if err < 1e-2 else ' WRONG'})")
        except Exception as e:
            line.append(f"{name} ERROR {type(e).__name__}: {str(e)[:80]}")
    print("  ".join(line), flush=True)
    del a, b, ref
