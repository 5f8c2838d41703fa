"""quantize_fp8's kernels on (8192, 8192) bf16 (GPU): the fraction of peak HBM bandwidth each
variant reaches. Peak = `hbm_bandwidth(0)`: 2 transfers per memory clock × the bus width from
the device properties (3.35 TB/s on an H100 SXM). Bytes counted: 2 read + 1 written per element
(tensor-wise: 2 + 2 + 1, it reads x twice; its 3-byte fraction printed too).

Every variant is first checked bitwise (q and scales) against `quantize_fp8`'s own output, then
timed in ROUNDS alternated rounds (median of ≥ 100 L2-flushed repetitions each, the kernels
launched directly); printed: the median over rounds and the range.

    python benchmarks/fp8_quant_sweep.py [VARIANT ...]     (default: all)

Variants (kernel options, the library's tiles): base (as quantize_fp8 launches), evict (x loaded
with evict_first), kmajor (2-D tiles walked along each row of tiles, 1-D grid), kmajor+evict,
kmajor+evict 8x8 (1×128: 8 rows × 8 groups per program), kmajor+reverse (tensor-wise: the
second pass from the last tile, which the first pass left in L2), and int32: with
QUANT_INT32=path/to/quantize.py (a copy without the int64 offsets), that copy's base kernels.
"""
import importlib.util
import os
import statistics
import sys

import torch
import triton

import pingpong
from pingpong import quantize as qz
from pingpong.runtime.device import hbm_bandwidth
from pingpong.tools.timing import time_callable
from pingpong.toolchain import KERNEL_OPTIONS

# DRY=1: a (256, 1024) fp16 tensor on the CPU in Triton's interpreter (TRITON_INTERPRET=1): the
# checks only, no timing
DRY = os.environ.get("DRY") == "1"
M, K = (256, 1024) if DRY else (8192, 8192)
DEV, DT = ("cpu", torch.float16) if DRY else ("cuda", torch.bfloat16)
ROUNDS = 0 if DRY else int(os.environ.get("ROUNDS", "3"))
torch.manual_seed(0)
x = torch.randn(M, K, device=DEV, dtype=DT) * torch.exp2(torch.randint(-4, 5, (M, 1), device=DEV).float()).to(DT)
peak = None if DRY else hbm_bandwidth(0)
q = torch.empty(M, K, dtype=torch.float8_e4m3fn, device=DEV)
OPT_NOMAX = {} if DRY else KERNEL_OPTIONS
OPT = dict(FP8_MAX=448.0, **OPT_NOMAX)


def row(mod, evict=""):
    s = torch.empty(M, 1, device=DEV)
    return s, lambda: mod._row_kernel[(M,)](x, q, s, M, K, K, K, BLOCK_M=1, BLOCK_K=K, ONE_READ=True,
                                            num_warps=8, **OPT, **({"EVICT": evict} if evict else {}))


def block(mod, g128=False, kmajor=False, evict="", tile=None):
    bm, groups = (128, 1) if g128 else tile or qz.BLOCK_TILE
    s = torch.empty(M // 128, K // 128, device=DEV) if g128 else torch.empty(K // 128, M, device=DEV).t()
    nm, nk = M // bm, K // 128 // groups
    extra = dict(KMAJOR=kmajor, EVICT=evict) if kmajor or evict else {}
    return s, lambda: mod._block_kernel[(nm * nk,) if kmajor else (nm, nk)](
        x, q, s, M, K, K, K, s.stride(0), s.stride(1), BLOCK_M=bm, GROUP_K=128, GROUP_M=bm if g128 else 1,
        GROUPS=groups, num_warps=8 if bm * groups >= 64 else 4, **OPT, **extra)


def tensor(mod, kmajor=False, evict="", reverse=False):
    bm, bk = 32, 256
    nm, nk = M // bm, K // bk
    part = torch.empty(nm * nk, device=DEV)
    s = torch.empty((), device=DEV)
    grid = (nm * nk,) if kmajor else (nm, nk)
    extra = dict(KMAJOR=kmajor, EVICT=evict) if kmajor or evict else {}

    def both():
        mod._amax_kernel[grid](x, part, M, K, K, BLOCK_M=bm, BLOCK_K=bk, num_warps=8, **OPT_NOMAX, **extra)
        mod._tensor_cast_kernel[grid](x, q, s, part, nm * nk, M, K, K, K, BLOCK_M=bm, BLOCK_K=bk,
                                      BLOCK_P=triton.next_power_of_2(nm * nk), num_warps=8, **OPT, **extra,
                                      **({"REVERSE": True} if reverse else {}))
    return s, both


def variants(mod, int32=False):
    v = {("row", "base"): row(mod), ("1x128", "base"): block(mod), ("128x128", "base"): block(mod, True),
         ("tensor", "base"): tensor(mod)}
    if int32:
        return {(g, "int32"): f for (g, _), f in v.items()}
    v.update({("row", "evict"): row(mod, "evict_first")})
    for g, g128 in (("1x128", False), ("128x128", True)):
        v.update({(g, "evict"): block(mod, g128, evict="evict_first"), (g, "kmajor"): block(mod, g128, kmajor=True),
                  (g, "kmajor+evict"): block(mod, g128, kmajor=True, evict="evict_first")})
    v[("1x128", "kmajor+evict 8x8")] = block(mod, kmajor=True, evict="evict_first", tile=(8, 8))
    v.update({("tensor", "evict"): tensor(mod, evict="evict_first"), ("tensor", "kmajor"): tensor(mod, kmajor=True),
              ("tensor", "kmajor+evict"): tensor(mod, kmajor=True, evict="evict_first"),
              ("tensor", "kmajor+reverse"): tensor(mod, kmajor=True, reverse=True)})
    return v


cases = variants(qz)
if os.environ.get("QUANT_INT32"):
    spec = importlib.util.spec_from_file_location("pingpong._quantize_int32", os.environ["QUANT_INT32"])
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    cases.update(variants(old, int32=True))
wanted = set(sys.argv[1:])
cases = {k: v for k, v in cases.items() if not wanted or k[1] in wanted or k[1] == "base"}
GRAN = {"row": "row", "1x128": "block", "128x128": "block128x128", "tensor": "tensor"}
want = {g: pingpong.quantize_fp8(x, name) for g, name in GRAN.items()}
for (g, name), (s, fn) in cases.items():
    q.fill_(float("nan"))
    s.fill_(float("nan"))
    fn()
    if not DRY:
        torch.cuda.synchronize()
    wq, ws = want[g]
    same = torch.equal(q.view(torch.uint8), wq.view(torch.uint8)) and torch.equal(s, ws)
    print(f"check {g} {name}: {'bitwise equal' if same else 'DIFFERENT'}", flush=True)
    assert same, (g, name)
if DRY:
    sys.exit(0)
y = torch.empty_like(x)
cases[("copy", "torch bf16 -> bf16")] = (None, lambda: y.copy_(x))
BYTES = {"tensor": 5, "copy": 4}
times = {k: [] for k in cases}
for r in range(ROUNDS):
    for k, (_, fn) in (cases.items() if r % 2 == 0 else reversed(cases.items())):
        times[k].append(time_callable(fn, 100).median_ms)
print(f"peak {peak / 1e12:.3f} TB/s (hbm_bandwidth), {ROUNDS} rounds")
print("| granularity | variant | median µs | fraction of peak (min–max) |")
print("|---|---|---|---|")
for (g, name), ts in times.items():
    frac = [BYTES.get(g, 3) * M * K / (t * 1e-3) / peak for t in ts]
    extra = f"; 3-byte {3 * M * K / (statistics.median(ts) * 1e-3) / peak:.3f}" if g == "tensor" else ""
    print(f"| {g} | {name} | {statistics.median(ts) * 1e3:.1f} | {statistics.median(frac):.3f} "
          f"({min(frac):.3f}–{max(frac):.3f}){extra} |", flush=True)
