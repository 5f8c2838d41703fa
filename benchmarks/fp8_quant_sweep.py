"""Sweep quantize_fp8's tile sizes and warps on (8192, 8192) bf16 (GPU): which meta-parameters
reach the highest fraction of HBM bandwidth. Prints one line per variant."""
import torch
import triton

from pingpong import quantize as qz
from pingpong.runtime.device import hbm_bandwidth
from pingpong.tools.timing import time_callable

M = K = 8192
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
peak = hbm_bandwidth(0)
q = torch.empty(M, K, dtype=torch.float8_e4m3fn, device="cuda")


def report(name, fn, reads=1):
    t = time_callable(fn, 100).median_ms
    print(f"{name}: {t * 1e3:.1f} us, {(reads * 2 + 1) * M * K / (t * 1e-3) / peak:.3f} of peak", flush=True)


for bm, nw in ((1, 4), (1, 8), (1, 16), (2, 8), (2, 16), (4, 16)):
    s = torch.empty(M, 1, device="cuda")
    report(f"row BLOCK_M={bm} warps={nw}", lambda: qz._row_kernel[(M // bm,)](
        x, q, s, M, K, K, K, FP8_MAX=448.0, BLOCK_M=bm, BLOCK_K=8192, ONE_READ=True, num_warps=nw))
for bm, g, nw in ((32, 1, 4), (16, 2, 4), (8, 4, 4), (16, 4, 8), (32, 2, 8), (8, 8, 8), (4, 8, 4), (64, 2, 8)):
    s = torch.empty(K // 128, M, device="cuda").t()
    report(f"block BLOCK_M={bm} GROUPS={g} warps={nw}", lambda: qz._block_kernel[(M // bm, K // 128 // g)](
        x, q, s, M, K, K, K, s.stride(0), s.stride(1), FP8_MAX=448.0, BLOCK_M=bm, GROUP_K=128, GROUP_M=1, GROUPS=g,
        num_warps=nw))
s = torch.empty(M // 128, K // 128, device="cuda")
report("block128x128", lambda: qz._block_kernel[(M // 128, K // 128)](
    x, q, s, M, K, K, K, s.stride(0), s.stride(1), FP8_MAX=448.0, BLOCK_M=128, GROUP_K=128, GROUP_M=128, GROUPS=1,
    num_warps=8))
for bk, nw in ((2048, 4), (4096, 8), (1024, 4)):
    s = torch.empty(M, 1, device="cuda")
    report(f"row two reads BLOCK_K={bk} warps={nw}", lambda: qz._row_kernel[(M,)](
        x, q, s, M, K, K, K, FP8_MAX=448.0, BLOCK_M=1, BLOCK_K=bk, ONE_READ=False, num_warps=nw))
y = torch.empty_like(x)
report("torch copy bf16 -> bf16 (reference: 4 bytes per element)", lambda: y.copy_(x), reads=1.5)
for bm, bk, nw in ((32, 256, 8), (64, 256, 8), (16, 512, 8), (32, 512, 8), (64, 512, 16)):
    grid = (M // bm, K // bk)
    P = grid[0] * grid[1]
    part = torch.empty(P, device="cuda")
    s = torch.empty((), device="cuda")

    def both():
        qz._amax_kernel[grid](x, part, M, K, K, BLOCK_M=bm, BLOCK_K=bk, num_warps=nw)
        p, n = (part.amax().reshape(1), 1) if P > 8192 else (part, P)
        qz._tensor_cast_kernel[grid](x, q, s, p, n, M, K, K, K, FP8_MAX=448.0, BLOCK_M=bm, BLOCK_K=bk,
                                     BLOCK_P=triton.next_power_of_2(n), num_warps=nw)
    report(f"tensor {bm}x{bk} warps={nw} (2 reads)", both, reads=2)
