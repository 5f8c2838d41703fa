"""Where does a 2-CTA cluster's time go? Three launches of the same ping-pong tile, timed
against cuBLAS in one process (alternating rounds, L2 flushed, pingpong.tools.timing):

    one CTA      KernelConfig(..., cluster_m=1)                    the one-CTA kernel
    pair, apart  cluster_m=2's CTA layouts and launch (num_ctas=2), but each CTA loads its own
                 B (no multicast) and releases only its own ring: the cost of the cluster
                 form itself (SPMD layouts, cluster launch and barriers)
    pair         cluster_m=2 as shipped: B multicast by the leader, pair_empty barriers

    PYTHONPATH=src python benchmarks/cluster_ablation.py --shapes 2048,2048,2048 --block 128,128,64
"""

import argparse
import statistics

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from pingpong import KernelConfig
from pingpong.hopper import kernel as k
from pingpong.hopper.launch import prepare
from pingpong.tools.timing import time_callable


@gluon.jit(do_not_specialize=k._RUNTIME_SCALARS)
def pair_apart_gemm(a_desc, b_desc, c_desc, cin_desc, bias, M, N, K, alpha, beta, batches, CFG: gl.constexpr):
    """warp_specialized_gemm of a cluster config with the ring and loader of one CTA."""
    sched = k.TileScheduler.create(M, N, K, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M, batches)
    ring = k.Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS, CFG.BN2, CFG.B_KMAJOR)
    epi = k.Epilogue.allocate(c_desc, cin_desc, alpha, beta, bias, M, N, 2, CFG.EPI)
    k.run_partitions(ring, sched, epi, k.TileLoader(a_desc, b_desc, CFG.A_KMAJOR, CFG.B_KMAJOR, CFG.BN2), CFG)


def launcher(a, w, out, config, apart=False):
    kernel, args, kwargs, grid = prepare(a, w.t(), out, None, 1.0, 0.0, config, torch.cuda.get_device_properties(0).multi_processor_count)
    kernel = pair_apart_gemm if apart else kernel
    return lambda: kernel[grid](*args, **kwargs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["2048,2048,2048"])
    p.add_argument("--block", default="128,128,64")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    bm, bn, bk = (int(x) for x in args.block.split(","))
    print(f"# {torch.cuda.get_device_name()}, ping-pong {bm}x{bn}x{bk}, bf16 nt; ours/cuBLAS, median of rounds")
    for text in args.shapes:
        M, N, K = (int(x) for x in text.split(","))
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        w = torch.randn(N, K, device="cuda", generator=g).bfloat16()
        ref = (a.float() @ w.float().t())
        variants = {"one CTA": launcher(a, w, torch.empty(M, N, device="cuda", dtype=torch.bfloat16),
                                        KernelConfig(bm, bn, bk, schedule="pingpong")),
                    "pair, apart": None, "pair": None}
        pair = KernelConfig(bm, bn, bk, schedule="pingpong", cluster_m=2)
        outs = {name: torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16) for name in variants}
        variants["one CTA"] = launcher(a, w, outs["one CTA"], KernelConfig(bm, bn, bk, schedule="pingpong"))
        variants["pair, apart"] = launcher(a, w, outs["pair, apart"], pair, apart=True)
        variants["pair"] = launcher(a, w, outs["pair"], pair)
        ratios = {name: [] for name in variants}
        for name, fn in variants.items():
            fn()
            torch.cuda.synchronize()
            err = ((outs[name].float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, (name, err)
        for _ in range(args.rounds):
            for name, fn in variants.items():
                ours = time_callable(fn, args.reps).median_ms
                cublas = time_callable(lambda: a @ w.t(), args.reps).median_ms
                ratios[name].append(cublas / ours)
        print(f"{text:>16}  " + "  ".join(f"{name}: {statistics.median(r):.3f}" for name, r in ratios.items()))


if __name__ == "__main__":
    main()
