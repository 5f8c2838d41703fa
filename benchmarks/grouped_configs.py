"""Which tile config the grouped kernel should take: times of pingpong.grouped_mm under each
candidate KernelConfig next to torch._grouped_mm (and, for equal groups, pingpong's batched
path) on MoE cases, one process, alternating. Prints one line per (case, config)."""

import statistics
import sys

import torch

from pingpong import KernelConfig, grouped as gm
from pingpong.hopper import grouped as hg
from pingpong.tools.bench_grouped import case_tensors, flops
from pingpong.tools.timing import time_callable

CANDIDATES = {
    "coop128x256": KernelConfig(128, 256, 64, schedule="cooperative"),
    "coop128x128": KernelConfig(128, 128, 64, schedule="cooperative"),
    "pp128x128": KernelConfig(128, 128, 64, schedule="pingpong"),
    "pp64x256": KernelConfig(64, 256, 64, schedule="pingpong"),
    "pp64x128": KernelConfig(64, 128, 64, schedule="pingpong"),
}
CASES = [(m, t, r, p) for m, t in (("mixtral-8x7b", 4096), ("qwen3-30b-a3b", 4096), ("deepseek-v3", 4096),
                                     ("qwen3-30b-a3b", 512)) for r in ("balanced",) for p in ("forward", "dgrad")]
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
for case in CASES:
    a, b, offs, sizes = case_tensors(*case)
    f = flops(a, b, sizes, case[3])
    ref = torch._grouped_mm(a, b, offs)
    t_torch = statistics.median(time_callable(lambda: torch._grouped_mm(a, b, offs), reps).median_ms for _ in range(2))
    line = [f"{'/'.join(map(str, case))}: torch {f / t_torch * 1e-9:.0f} TF"]
    for name, cfg in CANDIDATES.items():
        hg.select_grouped_config = lambda T, G, N, cfg=cfg: cfg
        try:
            out = gm._compute(a, b, offs, a.dtype, out=torch.full_like(ref, float("nan")))
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            t = statistics.median(time_callable(lambda: gm.grouped_mm(a, b, offs), reps).median_ms for _ in range(2))
            line.append(f"{name} {f / t * 1e-9:.0f} ({t_torch / t:.3f}{'' if err < 1e-2 else ' WRONG'})")
        except Exception as e:
            line.append(f"{name} ERROR {type(e).__name__}: {str(e)[:80]}")
    print("  ".join(line), flush=True)
