"""quantize_fp8's tiles and warps on (8192, 8192) bf16 (GPU): which choice moves the most bytes.

The library's kernels (`pingpong.quantize._row_kernel`, `_block_kernel`) launched with other
tiles and warp counts than `quantize.launch` picks, plus variants the library does not have:
a persistent row kernel (a grid of SMs × `per_sm` programs, each walking rows
pid, pid + grid, …, Triton's software pipeline loading the next row while the current one is
cast), the row kernel with cache modifiers on its load and store, and a persistent 1×128
kernel moving its tiles by TMA (host tensor descriptors; GPU only). Run 275 (RESULTS.md)
measured the tiles, warps and the persistent row kernel; run 282 the cache-modifier variants
(0.828–0.832 of peak, as the library's row kernel) and the TMA kernel (0.771–0.787). Every
variant is first checked bitwise against `quantize_fp8`; then all are timed in
ROUNDS alternated rounds (median of ≥ 100 L2-flushed repetitions each). Fraction of peak HBM
bandwidth as in fp8_quant_sweep.py (3 bytes per element: 2 read, 1 written).

    python benchmarks/quant_tiles.py
    DRY=1 TRITON_INTERPRET=1 python benchmarks/quant_tiles.py   # CPU: a small fp16 tensor, checks only
"""
import os
import statistics

import torch
import triton
import triton.language as tl

from pingpong import quantize as qz
from pingpong.toolchain import KERNEL_OPTIONS
from quant_common import alternated_times, check_bitwise

DRY = os.environ.get("DRY") == "1"
M, K = (64, 1024) if DRY else (8192, 8192)
DEV, DT = ("cpu", torch.float16) if DRY else ("cuda", torch.bfloat16)
ROUNDS = 0 if DRY else int(os.environ.get("ROUNDS", "3"))
META = (lambda **kw: {}) if DRY else (lambda **kw: dict(kw, **KERNEL_OPTIONS))


@triton.jit
def _row_persistent(x, q, s, M, K, sxm, sqm, FP8_MAX: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK_K)
    for r in tl.range(tl.program_id(0), M, tl.num_programs(0), num_stages=STAGES):
        row = tl.cast(r, tl.int64)
        v = tl.load(x + row * sxm + cols, mask=cols < K, other=0.0).to(tl.float32)
        amax = tl.maximum(tl.max(tl.abs(v), axis=0), 1e-12)
        scale = tl.fdiv(amax, tl.full(amax.shape, FP8_MAX, tl.float32), ieee_rounding=True)
        inv = tl.fdiv(tl.full(amax.shape, FP8_MAX, tl.float32), amax, ieee_rounding=True)
        qv = tl.clamp(v * inv, -FP8_MAX, FP8_MAX)
        tl.store(q + row * sqm + cols, qv.to(q.dtype.element_ty), mask=cols < K)
        tl.store(s + row, scale)


@triton.jit
def _row_cached(x, q, s, M, K, sxm, sqm, FP8_MAX: tl.constexpr, BLOCK_K: tl.constexpr, LOAD_CM: tl.constexpr,
                STORE_CM: tl.constexpr):
    """The library's one-read row kernel (one row per program) with cache modifiers on x's
    load and q's store (".cg": L2 only; ".cs": streaming, evict first)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_K)
    v = tl.load(x + row * sxm + cols, mask=cols < K, other=0.0, cache_modifier=LOAD_CM).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(v), axis=0), 1e-12)
    scale = tl.fdiv(amax, tl.full(amax.shape, FP8_MAX, tl.float32), ieee_rounding=True)
    inv = tl.fdiv(tl.full(amax.shape, FP8_MAX, tl.float32), amax, ieee_rounding=True)
    qv = tl.clamp(v * inv, -FP8_MAX, FP8_MAX)
    tl.store(q + row * sqm + cols, qv.to(q.dtype.element_ty), mask=cols < K, cache_modifier=STORE_CM)
    tl.store(s + row, scale)


@triton.jit
def _block_tma(x_desc, q_desc, s, M, K, ssm, ssk, FP8_MAX: tl.constexpr, BM: tl.constexpr, G: tl.constexpr,
               STAGES: tl.constexpr):
    """1×128 groups, persistent: TMA boxes of BM rows × G·128 columns in and out, Triton's
    pipeline keeping STAGES loads in flight; scales by pointer."""
    nk = K // (128 * G)
    num_tiles = tl.cdiv(M, BM) * nk
    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), num_stages=STAGES):
        pm = tile // nk
        pk = tile % nk
        v = x_desc.load([pm * BM, pk * 128 * G]).to(tl.float32)
        v3 = tl.reshape(v, [BM, G, 128])
        amax = tl.maximum(tl.max(tl.abs(v3), axis=2), 1e-12)
        scale = tl.fdiv(amax, tl.full(amax.shape, FP8_MAX, tl.float32), ieee_rounding=True)
        inv = tl.fdiv(tl.full(amax.shape, FP8_MAX, tl.float32), amax, ieee_rounding=True)
        qv = tl.reshape(tl.clamp(v3 * inv[:, :, None], -FP8_MAX, FP8_MAX), [BM, G * 128])
        q_desc.store([pm * BM, pk * 128 * G], qv.to(q_desc.dtype))
        rows = pm.to(tl.int64) * BM + tl.arange(0, BM)
        groups = pk * G + tl.arange(0, G)
        tl.store(s + rows[:, None] * ssm + groups[None, :] * ssk, scale, mask=rows[:, None] < M)


torch.manual_seed(0)
x = torch.randn(M, K, device=DEV, dtype=DT) * torch.exp2(torch.randint(-4, 5, (M, 1), device=DEV).float()).to(DT)
q = torch.empty(M, K, dtype=torch.float8_e4m3fn, device=DEV)
FMAX = qz.FP8_MAX[q.dtype]
BK = triton.next_power_of_2(K)
sms = 4 if DRY else torch.cuda.get_device_properties(0).multi_processor_count


def row(bm, warps):
    s = qz.scale_like(x, "row")
    return "row", s, lambda: qz._row_kernel[(-(-M // bm),)](x, q, s, M, K, x.stride(0), q.stride(0), FP8_MAX=FMAX,
                                                          BLOCK_M=bm, BLOCK_K=BK, ONE_READ=True,
                                                          **META(num_warps=warps))


def persistent(per_sm, warps, stages):
    s = qz.scale_like(x, "row")
    return "row", s, lambda: _row_persistent[(sms * per_sm,)](x, q, s, M, K, x.stride(0), q.stride(0), FP8_MAX=FMAX,
                                                             BLOCK_K=BK, STAGES=stages, **META(num_warps=warps))


def block(name, bm, groups, warps):
    s = qz.scale_like(x, name)
    nm, nk = -(-M // bm), K // 128 // groups
    return name, s, lambda: qz._block_kernel[(nm * nk,)](
        x, q, s, M, K, x.stride(0), q.stride(0), s.stride(0), s.stride(1), FP8_MAX=FMAX, BLOCK_M=bm, GROUP_K=128,
        GROUP_M=1 if name == "block" else bm, GROUPS=groups, **META(num_warps=warps))


def row_cached(load_cm, store_cm):
    s = qz.scale_like(x, "row")
    return "row", s, lambda: _row_cached[(M,)](x, q, s, M, K, x.stride(0), q.stride(0), FP8_MAX=FMAX, BLOCK_K=BK,
                                             LOAD_CM=load_cm, STORE_CM=store_cm, **META(num_warps=8))


def block_tma(bm, groups, per_sm, stages, warps):
    from triton.tools.tensor_descriptor import TensorDescriptor

    s = qz.scale_like(x, "block")
    xd = TensorDescriptor.from_tensor(x, [bm, 128 * groups])
    qd = TensorDescriptor.from_tensor(q, [bm, 128 * groups])
    return "block", s, lambda: _block_tma[(sms * per_sm,)](xd, qd, s, M, K, s.stride(0), s.stride(1), FP8_MAX=FMAX,
                                                          BM=bm, G=groups, STAGES=stages, **META(num_warps=warps))


cases = {"library row": ("row", qz.scale_like(x, "row"), None),
         "library 1x128": ("block", qz.scale_like(x, "block"), None),
         "library 128x128": ("block128x128", qz.scale_like(x, "block128x128"), None)}
cases = {k: (g, s, lambda g=g, s=s: qz.launch(x, q, s, g)) for k, (g, s, _) in cases.items()}
for bm, w in ((1, 4), (1, 16), (2, 8), (2, 16), (4, 16)):
    cases[f"row {bm}x{K} {w}w"] = row(bm, w)
for per_sm, w, st in ((4, 8, 2), (8, 8, 2), (4, 8, 3), (2, 16, 2)):
    cases[f"row persistent {per_sm}/SM {w}w {st} stages"] = persistent(per_sm, w, st)
for lcm, scm in ((".cg", ""), ("", ".cs"), (".cg", ".cs")):
    cases[f"row 1x{K} 8w load {lcm or 'default'} store {scm or 'default'}"] = row_cached(lcm, scm)
if not DRY:  # TMA descriptors: GPU only
    for bm, groups, per_sm, st, w in ((32, 2, 2, 3, 8), (64, 2, 1, 3, 8), (16, 2, 4, 3, 4), (32, 1, 4, 4, 4)):
        cases[f"1x128 TMA persistent {bm}x{groups * 128} {per_sm}/SM {st} stages {w}w"] = block_tma(bm, groups, per_sm,
                                                                                                  st, w)
for bm, groups, w in ((1, 64, 8), (2, 32, 8), (4, 16, 8), (8, 8, 8), (16, 4, 8), (64, 1, 8), (32, 2, 8), (1, 64, 16)):
    if groups * 128 <= K:
        cases[f"1x128 tile {bm}x{groups * 128} {w}w"] = block("block", bm, groups, w)
for w in (4, 16):  # 128×128 groups: 128 rows per tile
    cases[f"128x128 {w}w"] = block("block128x128", 128, 1, w)

check_bitwise(x, q, ((key, name, s, fn) for key, (name, s, fn) in cases.items()))
print(f"checked {len(cases)} variants: bitwise equal to quantize_fp8", flush=True)
if DRY:
    raise SystemExit(0)

from pingpong.runtime.device import hbm_bandwidth  # noqa: E402

peak = hbm_bandwidth(0)
times = alternated_times({k: fn for k, (_, _, fn) in cases.items()}, ROUNDS)
print(f"peak {peak / 1e12:.3f} TB/s (hbm_bandwidth), {ROUNDS} rounds, ({M}, {K}) {DT}")
print("| variant | median µs | fraction of peak (min–max) |")
print("|---|---|---|")
for k, ts in times.items():
    frac = [3 * M * K / (t * 1e-3) / peak for t in ts]
    print(f"| {k} | {statistics.median(ts) * 1e3:.1f} | {statistics.median(frac):.3f} ({min(frac):.3f}–{max(frac):.3f}) |",
          flush=True)
