"""The "standard" WMMA GEMM for gfx1151 (RDNA3.5, Strix Halo), in Gluon.

    C[M, N] (fp32) = alpha · A[M, K] · B[K, N] + beta · Cin      (fp16 in, fp32 accumulate)

Status: compiled and checked offline (WMMA present, wave32, LDS ≤ 64 KB, no scratch;
tests/test_amd_kernels.py); NEVER executed — no RDNA GPU was available to this project.

Design (the "standard" RDNA3 WMMA kernel):
  * 128×64 block, 8 waves of 32 lanes as 4×2, each wave a 32×32 tile = 2×2 WMMA tiles
    (register blocking) of `v_wmma_f32_16x16x16_f16`; BK = 16 (BK = 32 is reported slower).
  * Double buffer in LDS, rows padded by 8 halves (stride 24: the padding spreads rows over LDS banks).
  * RDNA has no direct-to-LDS DMA: global → registers (buffer_load, 16-byte `half8` vectors)
    → LDS (ds_write). The next K-step's global loads are issued before the current step's
    WMMAs ("GMEM spreading"), written to the other LDS buffer after them:

        prologue:  regs ← global(k=0); LDS[0] ← regs; barrier
        loop k:    regs ← global(k+1)          (in flight during the WMMAs)
                   acc += LDS[k%2]              (WMMA)
                   LDS[(k+1)%2] ← regs; barrier

    The write to the other buffer is safe without a second barrier: its previous readers
    (step k-1) all passed the barrier that ended step k-1.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..runtime import compile as cc
from ..toolchain import KERNEL_OPTIONS
from .cdna_pingpong import Scales, gemm_args, store_tile
from .config import WmmaConfig


@gluon.constexpr_function
def wmma_layout(WARPS_M, WARPS_N, TILES_M, TILES_N):
    """The accumulator layout: WARPS_M×WARPS_N waves, each a contiguous TILES_M×TILES_N block of
    16×16 WMMA tiles (register blocking). AMDWMMALayout takes linear bases in units of WMMA
    tiles: register bases walk the wave's own tiles (N first), warp bases place the waves'
    blocks, N first: wave w owns tile rows TILES_M·(w // WARPS_N) + [0, TILES_M) and tile
    columns TILES_N·(w % WARPS_N) + [0, TILES_N) (what older Triton (3.6) spelled
    warps_per_cta=[WARPS_M, WARPS_N], tiles_per_warp=[TILES_M, TILES_N]; tests check the
    placement from the linear layout)."""
    def bits(n):  # one basis per bit of n (a power of two): 1, 2, 4, ... < n
        assert n > 0 and n & (n - 1) == 0, f"{n} is not a power of two"
        return [1 << i for i in range(n.bit_length() - 1)]

    reg = [[0, t] for t in bits(TILES_N)] + [[t, 0] for t in bits(TILES_M)]
    warp = [[0, TILES_N * w] for w in bits(WARPS_N)] + [[TILES_M * w, 0] for w in bits(WARPS_M)]
    return gl.amd.AMDWMMALayout(version=1, transposed=True, warp_bases=warp, reg_bases=reg)


@gluon.jit
def _load_tile(ptr, r0, c0, R, C, stride, ROWS: gl.constexpr, COLS: gl.constexpr, L: gl.constexpr):
    r = r0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, L))
    c = c0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, L))
    mask = (r[:, None] < R) & (c[None, :] < C)
    return gl.amd.cdna3.buffer_load(ptr, r[:, None] * stride + c[None, :], mask=mask, other=0.0)


@gluon.jit(do_not_specialize=["M", "N", "alpha", "beta"])
def rdna_wmma_gemm(a_ptr, b_ptr, c_ptr, cin_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cim,
                   alpha, beta, HAS_C: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                   WARPS_M: gl.constexpr, WARPS_N: gl.constexpr, TILES_M: gl.constexpr, TILES_N: gl.constexpr,
                   PAD: gl.constexpr):
    gl.static_assert(gl.num_warps() == WARPS_M * WARPS_N, "launch with num_warps = WARPS_M × WARPS_N")
    gl.static_assert(BM == WARPS_M * TILES_M * 16, "BM = waves × 16×16 WMMA tiles per wave (2×2 blocking)")
    gl.static_assert(BN == WARPS_N * TILES_N * 16, "BN = waves × 16×16 WMMA tiles per wave (2×2 blocking)")
    gl.static_assert(BK % 16 == 0, "BK must be a whole number of WMMA K-steps")
    WAVES: gl.constexpr = WARPS_M * WARPS_N
    LA: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (BK // 8), BK // 8], [WAVES, 1], [1, 0])
    LB: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (BN // 8), BN // 8], [WAVES, 1], [1, 0])
    SA: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[BK, PAD]], [BM, BK], [1, 0])
    SB: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[BN, PAD]], [BK, BN], [1, 0])
    ACC: gl.constexpr = wmma_layout(WARPS_M, WARPS_N, TILES_M, TILES_N)
    DA: gl.constexpr = gl.DotOperandLayout(0, ACC, 16)
    DB: gl.constexpr = gl.DotOperandLayout(1, ACC, 16)

    pid = gl.program_id(0)
    tiles_n = gl.cdiv(N, BN)
    off_m = (pid // tiles_n) * BM
    off_n = (pid % tiles_n) * BN
    a_s = gl.allocate_shared_memory(gl.float16, [2, BM, BK], SA)
    b_s = gl.allocate_shared_memory(gl.float16, [2, BK, BN], SB)
    acc = gl.zeros([BM, BN], gl.float32, ACC)

    a_s.index(0).store(_load_tile(a_ptr, off_m, 0, M, K, stride_am, BM, BK, LA))
    b_s.index(0).store(_load_tile(b_ptr, 0, off_n, K, N, stride_bk, BK, BN, LB))
    gl.barrier()
    steps = gl.cdiv(K, BK)
    for k in range(steps):
        s = k % 2
        a_next = _load_tile(a_ptr, off_m, (k + 1) * BK, M, K, stride_am, BM, BK, LA)
        b_next = _load_tile(b_ptr, (k + 1) * BK, off_n, K, N, stride_bk, BK, BN, LB)
        acc = gl.amd.rdna3.wmma(a_s.index(s).load(DA), b_s.index(s).load(DB), acc)
        a_s.index(1 - s).store(a_next)
        b_s.index(1 - s).store(b_next)
        gl.barrier()

    store_tile(acc, c_ptr, cin_ptr, Scales(c_ptr, c_ptr, 0), off_m, off_n, M, N, stride_cm, stride_cim, alpha, beta, HAS_C,
               BM, BN, 1)


def launch_args(a, b, out, c, alpha, beta, config: WmmaConfig):
    """(args, kwargs, grid) for rdna_wmma_gemm: a (M,K), b (K,N), out (M,N) fp32, c optional."""
    d = config.derive()
    M, K = a.shape
    N = b.shape[1]
    args = gemm_args(a, b, out, c, alpha, beta, M, N, K)
    kwargs = dict(BM=d.block_m, BN=d.block_n, BK=d.block_k, WARPS_M=d.warps_per_cta[0], WARPS_N=d.warps_per_cta[1],
                  TILES_M=d.tiles_per_wave[0], TILES_N=d.tiles_per_wave[1], PAD=d.pad, num_warps=d.waves,
                  **KERNEL_OPTIONS)
    grid = (((M + d.block_m - 1) // d.block_m) * ((N + d.block_n - 1) // d.block_n),)
    return args, kwargs, grid


@cc.register("rdna_wmma", targets=("gfx1151",), doc="RDNA3.5 WMMA GEMM (fp16 in, fp32 out, 128x64 tile, double buffer)")
def build(target: str) -> cc.Launch:
    """RDNA3.5 WMMA GEMM (fp16 in, fp32 out, 128x64 tile, double buffer)."""
    M = N = K = 512
    a = torch.empty(M, K, dtype=torch.float16)
    b = torch.empty(K, N, dtype=torch.float16)
    out = torch.empty(M, N, dtype=torch.float32)
    args, kwargs, grid = launch_args(a, b, out, None, 1.0, 0.0, WmmaConfig(target))
    return cc.Launch(rdna_wmma_gemm, args, kwargs, grid)
