"""A small run of each schedule for compute-sanitizer (racecheck / memcheck).

    compute-sanitizer --tool racecheck python benchmarks/sanitize_small.py
"""

import torch

from pingpong import KernelConfig
from pingpong.api import _gemm_into

for cfg in (KernelConfig(128, 256, 64, schedule="persistent"), KernelConfig(128, 256, 64, schedule="cooperative"),
            KernelConfig(128, 128, 64, schedule="pingpong")):
    m, n, k = 384, 520, 320
    a = torch.randn(m, k, device="cuda").bfloat16()
    w = torch.randn(n, k, device="cuda").bfloat16()
    c = torch.randn(m, n, device="cuda").bfloat16()
    out = _gemm_into(torch.empty(m, n, device="cuda", dtype=torch.bfloat16), a, w.t(), c, 1.0, 0.5, cfg)
    torch.cuda.synchronize()
    ref = a.float() @ w.t().float() + 0.5 * c.float()
    print(cfg.schedule, "rel err", ((out.float() - ref).norm() / ref.norm()).item())
