"""`pingpong demo`: the main job. Multiply, check against torch, compare with cuBLAS.

On a Hopper GPU: bf16 A·Bᵀ at a few sizes through `pingpong.matmul`, each checked against
torch and timed against cuBLAS (`pingpong bench`'s method, fewer shapes).
Without one: says so, then shows something real — the portable kernel run by Triton's
interpreter on a small fp16 problem, checked against torch, and the compile facts of the
Hopper ping-pong kernel built offline for sm_90a.
"""

from __future__ import annotations

import argparse


def _size(text: str) -> int:
    """A square size: a positive integer (argparse reports anything else as a usage error)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (a square matrix size), got {text!r}")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=_size, nargs="+", default=[4096, 8192], metavar="N",
                   help="square sizes on a GPU (positive integers)")


def _gpu_demo(sizes) -> int:
    from .. import api
    from . import bench

    settings = bench.Settings(shapes=tuple((s, s, s) for s in sizes))
    rows = [bench.bench_shape(*shape, settings, api) for shape in settings.shapes]
    print(bench.format_table(rows, bench.environment_header(settings)))
    return 0 if all(r.status == "ok" for r in rows) else 1


def _cpu_demo() -> int:
    import torch

    from ..runtime import compile as cc
    from ..portable import portable_gemm

    m, n, k = 37, 29, 45
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).half()
    w = torch.randn(n, k, generator=gen).half()
    out = torch.full((m, n), float("nan"), dtype=torch.float32)
    portable_gemm(a, w.t(), out, interpret=True)
    ref = a.double() @ w.t().double()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    verdict = "ok" if err < 1e-3 else "WRONG"
    print(f"portable kernel under Triton's interpreter: fp16 A·Bᵀ {m}x{n}x{k} -> fp32, "
          f"rel. error vs torch {err:.2e} ({verdict})")
    print("\nHopper ping-pong kernel compiled offline for sm_90a (no GPU needed):")
    print(cc.compile_kernel("pingpong", "sm_90a").facts().table())
    print("\nOn an H100/H200: `pingpong demo` times it against cuBLAS; `pingpong bench` for the full method.")
    return 0 if verdict == "ok" else 1


def run(args: argparse.Namespace) -> int:
    import torch

    from ..runtime.device import is_hopper

    if torch.cuda.is_available() and is_hopper(torch.cuda.current_device()):
        return _gpu_demo(args.size)
    where = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    print(f"No Hopper (sm_90) GPU here (CUDA device: {where}); showing the CPU path instead.\n")
    return _cpu_demo()
