"""Does the FP8 kernels' speed follow the data or the scaling mode? (GPU)

At 16384³ the H100 runs at its 700 W limit, and our kernel measured 997 TFLOP/s on
tensor-wise inputs but 1205 on row-wise ones with the same KernelConfig (the two modes share
the main loop; only the epilogue's scale differs). This times, in one process and alternated
rounds, each kernel (ours and torch._scaled_mm, tensor- and row-wise scaling) on each data set
(x quantized tensor-wise, x quantized row-wise). The scales a kernel is given are the data's
own, broadcast to the kernel's layout where they are finer (a tensor scale as a row of equal
values), or 1.0 where the data's are finer than the kernel takes (its result then differs, its
time does not); the SM clock and power after each loop as in fp8_configs.py.
(fp8_tensor_as_row.py runs the row-wise kernel on stride-0 views of the scalars instead.)

    python benchmarks/fp8_data_power.py --shapes 16384,16384,16384 8192,8192,8192

`--ncu`: instead of timing, one call of each case (in the printed order) inside
cudaProfilerStart/Stop, after a warm-up call each, for
`ncu --profile-from-start off --clock-control none --metrics ... python benchmarks/fp8_data_power.py --ncu`.
"""
import argparse
import os
import statistics
import sys

import torch

from pingpong.fp8 import scaled_mm_direct
from pingpong.tools import bench
from pingpong.tools.bench_fp8 import make_fp8_inputs
from pingpong.tools.timing import time_callable

sys.path.insert(0, os.path.dirname(__file__))
from fp8_configs import sm_clock  # noqa: E402


def scales_for(kernel, data, sa, sb, M, N):
    one = torch.ones((), device=sa.device)
    if kernel == data:
        return sa, sb
    if kernel == "row":  # tensor-wise data: its scalars broadcast to a row and a column
        return sa.expand(M, 1).contiguous(), sb.expand(1, N).contiguous()
    return one, one  # row-wise data under a tensor-wise kernel: timing only


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", type=bench.parse_shape, default=[(16384, 16384, 16384)])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--ncu", action="store_true", help="one profiled call per case (run under ncu)")
    args = p.parse_args()
    for M, N, K in args.shapes:
        cases = {}
        for data in ("tensor", "row"):
            qa, qb, sa, sb = make_fp8_inputs(M, N, K, data)
            for kernel in ("tensor", "row"):
                a_s, b_s = scales_for(kernel, data, sa, sb, M, N)
                cases[f"ours {kernel}-wise on {data}-wise data"] = \
                    lambda qa=qa, qb=qb, a_s=a_s, b_s=b_s: scaled_mm_direct(qa, qb, a_s, b_s)
                cases[f"torch {kernel}-wise on {data}-wise data"] = \
                    lambda qa=qa, qb=qb, a_s=a_s, b_s=b_s: torch._scaled_mm(qa, qb, a_s, b_s, out_dtype=torch.bfloat16)
        if args.ncu:
            for fn in cases.values():
                fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            for k, fn in cases.items():
                print(f"profiled: {M}x{N}x{K} {k}", flush=True)
                fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            continue
        times = {k: [] for k in cases}
        clocks = {k: [] for k in cases}
        for r in range(args.rounds):
            for k, fn in (cases.items() if r % 2 == 0 else reversed(cases.items())):
                times[k].append(time_callable(fn, 50).median_ms)
                clocks[k].append(sm_clock())
        for k, ts in times.items():
            t = statistics.median(ts)
            print(f"{M}x{N}x{K} {k:34s} {2 * M * N * K / (t * 1e-3) / 1e12:6.0f} TFLOP/s  {t * 1e3:9.1f} us"
                  f"  (rounds {' '.join(f'{x * 1e3:.0f}' for x in ts)})  SM MHz W: {' / '.join(clocks[k])}", flush=True)


if __name__ == "__main__":
    main()
