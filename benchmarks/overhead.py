"""Host overhead at small sizes: the full API call vs a pre-built launch of the same kernel.

    PYTHONPATH=src python benchmarks/overhead.py --size 2048
"""

import argparse

import torch
import triton

from pingpong import api
from pingpong.config import default_config
from pingpong.device import sm_count
from pingpong.hopper.launch import prepare

p = argparse.ArgumentParser()
p.add_argument("--size", type=int, nargs="+", default=[1024, 2048])
for n in p.parse_args().size:
    a = torch.randn(n, n, device="cuda").bfloat16()
    w = torch.randn(n, n, device="cuda").bfloat16()
    out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    kernel, args, kwargs, grid = prepare(a, w.t(), out, None, 1.0, 0.0, default_config(n, n, n), sm_count(0))
    raw = triton.testing.do_bench(lambda: kernel[grid](*args, **kwargs), return_mode="median")
    full = triton.testing.do_bench(lambda: api.matmul(a, w.t()), return_mode="median")
    cublas = triton.testing.do_bench(lambda: torch.matmul(a, w.t()), return_mode="median")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kernel[grid](*args, **kwargs)
    graph = triton.testing.do_bench(lambda: g.replay(), return_mode="median")
    print(f"{n}^3: api.matmul {full*1e3:.1f} us, pre-built launch {raw*1e3:.1f} us, graph replay {graph*1e3:.1f} us,"
          f" cuBLAS {cublas*1e3:.1f} us")
