"""The CDNA 8-wave ping-pong GEMM for gfx942 and gfx950 (docs/amd.md, docs/design.md).

    C[M, N] = alpha · A[M, K] · B[N, K]ᵀ + beta · Cin        (bf16 in, fp32 accumulate; B
                                                               stored N×K: transpose_b)
    C[M, N] = alpha · (sa ⊗ sb) · A[M, K] · B[N, K]ᵀ + beta · Cin   (fp8 e4m3 in: the same
              schedule at twice the K per byte, fp32 scales sa, sb in the epilogue, Scales)

Status — what has been verified and what has not:
  * verified here, on a CPU, from the compiled machine code (tests/test_amd_kernels.py):
    it compiles for gfx950 and gfx942; 8 waves (512 threads); MFMA count; direct-to-LDS
    `buffer_load ... lds` instructions; the s_barrier count and the vmcnt values of the main
    loop equal the schedule below (and, per barrier phase, the race-checked model); LDS
    within the target; no scratch; no AGPRs, VGPRs in budget.
  * NOT verified: it has never been executed. No AMD GPU was available to this project, so
    numerical correctness and speed on MI300X / MI355X are unknown.

Parts (as the Hopper kernel's; CdnaConfig in KernelConfig's place): CdnaConfig (config.py)
derives every number; Buffers / TileLoader (buffers.py) own the LDS double buffer and the
global→LDS loads; MmaOp (mma.py) owns the accumulator and the MFMAs; `schedule` below is
orchestration only.

Direct-to-LDS loads, per target:
  * gfx950: `gl.amd.cdna4.async_copy.buffer_load_to_shared` lowers to
    `buffer_load_dwordx4 ... lds` (16 bytes per lane): subtile 16×32, swizzle Swizzle(1,4,4).
  * gfx942: the same op lowers to `buffer_load_dword ... lds` (4 bytes per lane; CDNA3 has no
    wider LDS DMA, Triton refuses > 4 bytes there): subtile 16×8, swizzle Swizzle(1,2,4).
    It is used as is (tried first; no fallback to buffer_load + ds_write was needed). Four
    times as many DMA instructions per byte as gfx950.
  * gfx942 LDS is 64 KB: CdnaConfig.for_target picks BK = 32, so the two stages of A and B
    take 2·(256+256)·32·2 B = 64 KB. gfx950 keeps BK = 64 (128 KB of 160 KB).

Waves and the stagger. 8 waves = 2 groups of 4; wave w computes 128×64 outputs, 8×4 MFMA tiles
of 16×16 dealt round-robin (the MFMA layout): rows 16·(2i + g) + [0, 16) for group g = w // 4
and columns 16·(4j + w % 4) + [0, 16). The LDS halves follow the same 16-row stripes, so
group g self-loads exactly the A rows it reads (buffers.py; an earlier version loaded the top
and bottom 128 rows per group, which made A shared between the groups and the schedule below
racy; the race model now takes who reads what from the layouts). All waves run the
same instruction stream; the stagger is one extra `s_barrier` that group 1 executes after the
prologue (so group 0 runs one barrier phase ahead) and one that group 0 executes at the end
(so both have executed the same number of barriers). Both are a scalar branch around an
`s_barrier` on the wave's group, emitted by `stagger_barrier`.

Schedule (per wave; one main-loop iteration = 2 K-steps, stage 0 = even, stage 1 = odd;
a = DMA instructions of one A load per wave: 4 on gfx950, 8 on gfx942):

    PROLOGUE   load B0, A0 (k=0) ─ vmcnt(0) ─ BARRIER ─ [group 1: BARRIER]   (stagger)
    MAIN LOOP  i = 0 .. pairs-2   (barrier = s_barrier without fences, `wait_then_barrier`):
      S1  barrier ─ load B1, A1 (k=2i+1) ─ vmcnt(a)              B1 landed, A1 in flight
      S2  barrier ─ compute stage 0 ─ vmcnt(0)                   A1 landed under stage 0
      S3  barrier ─ load A0 (k=2i+2) ─ compute stage 1 ─ vmcnt(a)   A0 in flight across S4
                                              (satisfied already: no instruction in the ISA)
      S4  barrier ─ load B0 (k=2i+2) ─ vmcnt(0)                  A0, B0 landed
    EPILOGUE   (last pair, no prefetch; every wait is vmcnt(0): drained before fenced barriers)
      E1  BARRIER ─ load B1, A1 ─ vmcnt(0)
      E2  BARRIER ─ compute stage 0
      E3  BARRIER ─ compute stage 1 ─ [group 0: BARRIER]     (re-sync)
    STORE      alpha·acc + beta·Cin → C (masked buffer stores, no LDS)
    (BARRIER = gl.barrier(), fenced; every barrier is preceded by lgkmcnt(0))

    timeline (one column per barrier phase; G0 is one phase ahead of G1):
      G0 │ S1 load   │ S2 mma s0 │ S3 mma s1 │ S4 load   │ S1 load   │ S2 mma s0 │
      G1 │ S4 load   │ S1 load   │ S2 mma s0 │ S3 mma s1 │ S4 load   │ S1 load   │
    each SIMD holds one wave of each group, so while one computes the other loads.

Why these distances (the race analysis; pingpong.schedule model in schedule_model.py): A is
group-private, so a write may follow the group's last read after 1 barrier and a read may
follow the write's vmcnt wait after 1 barrier: A1 is waited at the end of S2 and read in S3;
A0 is written in S3 after its last read in S2. B is shared, and with the stagger the other
group is one phase behind, so both distances must be 2 barriers: B1 is waited in S1 and read
in S3; B0 is written in S4 after its last read in S2 and waited before the next S1, read in
the next S2. Loads are issued B before A, so vmcnt(a) (an in-order counter) means "all but
this wave's newest A load". The wait before S4 has slack by design (only A0 is in flight
there); the other three are tight: one more load in flight is a race (tests/test_amd_schedule).
This is the textbook 4-step ping-pong loop with the A0 load moved from the end of S2 to the
start of S3 (issued at the end of S2 it overwrites A0 while the other waves of the same group
may still be reading it).

Waits, and how Triton 3.9 expresses them. The schedule's main-loop waits per iteration are
(a, 0, a, 0), so loads stay in flight across a barrier and under the MFMAs (A1 under stage 0,
A0 across S4): a non-zero vmcnt inside the loop is what lets loads overlap the other group's
math. `wait_group(N)` lowers to LLVM's async marks (`llvm.amdgcn.asyncmark` after each commit
group, `llvm.amdgcn.wait.asyncmark(N)`), and LLVM turns a mark wait into `s_waitcnt vmcnt(n)`,
n = the DMA instructions of the N newest groups, only where more than n can be in flight. The
S4 wait (at most A0's a loads) follows S3's vmcnt(0) and A0's a loads, so it is already
satisfied and the ISA has no instruction for it: the loop's ISA waits are (a, 0, 0)
(`CdnaDerived.main_loop_vmcnt_isa`, computed by the same rule as
`schedule_model.vmcnt_sequence(..., emitted=True)`); the hardware state is that of the schedule.

Barriers. The direct-to-LDS loads are `llvm.amdgcn.raw.ptr.buffer.load.async.lds`, which LLVM
orders only through those async marks, not through fences: neither `gl.barrier()` (`ttg.barrier
all`: `fence syncscope("workgroup") release; s_barrier; fence acquire`) nor the LDS-only
barrier waits for them (checked: a `gl.barrier()` in place of S4's barrier leaves A0 in
flight, as the schedule wants). In older Triton (3.6) the release fence of the then
`gl.thread_barrier()` did wait for every DMA in flight (an `s_waitcnt vmcnt(0)` before the
s_barrier, even with no wait written); that is why the loop's barriers are not `gl.barrier()`.
They are the barrier Triton's shared-memory analysis (Membar) puts right after an async wait
that no barrier follows: `ttg.barrier local`, the same fences restricted to LDS by the MMRA
tag `amdgpu-synchronize-as local`, i.e. `s_waitcnt lgkmcnt(0); s_barrier`. `wait_then_barrier`
is that idiom; in the ISA each of its calls is `s_waitcnt vmcnt(n)` (where not satisfied
already) and `lgkmcnt(0)` followed by one `s_barrier` (LLVM may schedule MFMAs in between). A
bare inline-asm s_barrier would be invisible to Membar, which would add a barrier of its own
after the async wait. The prologue and epilogue drain explicitly: `wait_group(0)` +
`gl.barrier()` (a load still in flight when the loop ends would otherwise land after the last
barrier that protects its buffer). On gfx950 LLVM places A0's loads after stage 1's MFMAs
(just before S4); on gfx942 they are interleaved with them. MFMA operands are read with
16-byte LDS reads (k_width 8; on gfx942 one read feeds two 16x16x16 MFMAs), which also saves
registers there. Barriers per iteration: 4. All counts are in CdnaDerived (config.py) and
checked in the ISA, per barrier phase against the checked model.

Registers. 8 waves on 4 SIMDs leave a wave 256 VGPR+AGPR. The LLVM in Triton 3.9 splits that
budget in halves (128 VGPRs + 128 AGPRs) unless the kernel says how many AGPRs it needs, and
the ping-pong does not fit in 128 VGPRs (the accumulator went to AGPRs, the operands and
addresses spilled: 20 B of scratch on gfx942, 88 B on gfx950). The kernel is compiled with
`amdgpu-agpr-alloc=0` (`launch_args`, `CdnaDerived.agprs`): no AGPRs, all 256 registers are
VGPRs, accumulator included, as older Triton allocated it. A `sched_barrier` after the last
compute stage keeps the stores' address and mask arithmetic from being scheduled into E3's
MFMAs and LDS reads (with both live, gfx950 spilled 36 B).
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate

from ..runtime import compile as cc
from ..toolchain import KERNEL_OPTIONS
from .buffers import Buffers, TileLoader, lds_layout, load_layout, mma_view
from ..errors import PingpongError
from .config import TARGETS, CdnaConfig
from .mma import MmaOp, mfma_layout


@gluon.jit
def stagger_barrier(GROUP: gl.constexpr, THREADS_PER_GROUP: gl.constexpr, THREADS: gl.constexpr):
    """One s_barrier executed only by the waves of group GROUP (a scalar branch per wave)."""
    tid = gl.arange(0, THREADS, layout=gl.BlockedLayout([1], [64], [THREADS // 64], [0]))
    if GROUP == 1:
        skip: gl.constexpr = "s_cbranch_scc0"  # skip when tid < THREADS_PER_GROUP
    else:
        skip: gl.constexpr = "s_cbranch_scc1"  # skip when tid >= THREADS_PER_GROUP
    gl.inline_asm_elementwise(
        "v_readfirstlane_b32 $1, $2\n"
        f"s_cmp_ge_u32 $1, {THREADS_PER_GROUP}\n"
        f"{skip} .Lpp_stagger_${{:uid}}\n"
        "s_barrier\n"
        ".Lpp_stagger_${:uid}:\n"
        "v_mov_b32 $0, 0",
        "=v,=&s,v", [tid], dtype=(gl.int32, gl.int32), is_pure=False, pack=1)


@gluon.jit
def wait_then_barrier(OUTSTANDING: gl.constexpr):
    """`s_waitcnt vmcnt(N) lgkmcnt(0); s_barrier`: wait until at most OUTSTANDING of this wave's
    commit groups (TileLoader.load calls) are in flight, then an LDS-only workgroup barrier.

    N is the number of DMA instructions in the OUTSTANDING newest groups: the wait lowers to
    `llvm.amdgcn.wait.asyncmark(OUTSTANDING)` and LLVM counts them; where no more than N can be
    in flight the wait is satisfied already and emits nothing. The barrier is not written here:
    Triton's shared memory barrier analysis (Membar) puts a `ttg.barrier local` right after
    every async wait that is not followed by a barrier, which on CDNA lowers to `s_waitcnt
    lgkmcnt(0); s_barrier` (fences restricted to LDS). The ISA tests check that each call site
    yields exactly one s_barrier.
    """
    gl.amd.cdna4.async_copy.wait_group(OUTSTANDING)


@gluon.jit
def schedule(la, lb, bufs, mma, pairs, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
             THREADS_PER_GROUP: gl.constexpr, THREADS: gl.constexpr):
    """The ping-pong schedule of the module docstring; returns the accumulated MmaOp."""
    # PROLOGUE (conservative: drain, fenced barriers)
    lb.load(bufs.b0, 0)
    la.load(bufs.a0, 0)
    gl.amd.cdna4.async_copy.wait_group(0)
    gl.barrier()
    stagger_barrier(1, THREADS_PER_GROUP, THREADS)
    gl.barrier()  # S1 of the first iteration (E1 if there is none)
    # MAIN LOOP; its S1 barrier closes the body, so the loop back-edge carries no pending
    # LDS access and the compiler's barrier analysis adds nothing (same dynamic sequence).
    for i in range(pairs - 1):
        k1 = (2 * i + 1) * BK
        k2 = (2 * i + 2) * BK
        lb.load(bufs.b1, k1)  # S1
        la.load(bufs.a1, k1)
        wait_then_barrier(1)  # S2: B1 landed; A1, the newest group, stays in flight
        mma = mma.compute(mma_view(bufs.a0, BM, BK), mma_view(bufs.b0, BN, BK))
        wait_then_barrier(0)  # S3: A1 landed
        la.load(bufs.a0, k2)
        mma = mma.compute(mma_view(bufs.a1, BM, BK), mma_view(bufs.b1, BN, BK))
        wait_then_barrier(1)  # S4: nothing to wait for; A0 stays in flight
        lb.load(bufs.b0, k2)
        wait_then_barrier(0)  # S1 of the next iteration (E1 after the last): A0, B0 landed
    # EPILOGUE (drain before every barrier, fenced barriers: nothing may land after the last one)
    k1 = (2 * pairs - 1) * BK
    lb.load(bufs.b1, k1)  # E1
    la.load(bufs.a1, k1)
    gl.amd.cdna4.async_copy.wait_group(0)
    gl.barrier()  # E2
    mma = mma.compute(mma_view(bufs.a0, BM, BK), mma_view(bufs.b0, BN, BK))
    gl.barrier()  # E3
    mma = mma.compute(mma_view(bufs.a1, BM, BK), mma_view(bufs.b1, BN, BK))
    # stage 1's LDS reads and MFMAs before anything of the stores (register pressure: docstring)
    gl.amd.hint.sched_barrier()
    stagger_barrier(0, THREADS_PER_GROUP, THREADS)
    return mma


SCALE_MODES = {"none": 0, "tensor": 1, "row": 2}  # Scales.MODE


@aggregate
class Scales:
    """The fp8 dequantization scales the epilogue multiplies in (MODE, SCALE_MODES):
    0 none; 1 tensor-wise, one fp32 each for A and B; 2 row-wise, A's per row (M) and B's per
    column (N, a row of B stored N×K). Read once per stored chunk, after the K loop."""

    a: gl.tensor
    b: gl.tensor
    MODE: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, a, b, MODE):
        self.a = a
        self.b = b
        self.MODE = gl.constexpr(MODE)

    @gluon.jit
    def apply(self, x, rows, cols, M, N):
        if self.MODE == 1:
            x = x * (gl.load(self.a) * gl.load(self.b))
        elif self.MODE == 2:
            sa = gl.amd.cdna3.buffer_load(self.a, rows, mask=rows < M, other=0.0)
            sb = gl.amd.cdna3.buffer_load(self.b, cols, mask=cols < N, other=0.0)
            x = x * sa[:, None] * sb[None, :]
        return x


@gluon.jit
def column_halves(x):
    """(x[:, :C/2], x[:, C/2:]) of an [R, C] register tensor: reshape to [R, 2, C/2] (row-major,
    so the new dim 1 is the column's top bit), move that dim last and split it. No data moves
    when every lane holds both halves, i.e. the top column bit is a register bit of the layout,
    as in the MFMA accumulator (tests: no LDS writes, no scratch)."""
    R: gl.constexpr = x.shape[0]
    C: gl.constexpr = x.shape[1]
    return gl.split(gl.permute(gl.reshape(x, [R, 2, C // 2]), [0, 2, 1]))


@gluon.jit
def store_part(acc, c_ptr, cin_ptr, scales, off_m, off_n, M, N, stride_cm, stride_cim, alpha, beta,
               HAS_C: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr):
    """alpha·scale·acc + beta·Cin for the BM×BN block at (off_m, off_n), cast to C's type,
    masked buffer stores straight from acc's layout (no LDS)."""
    layout: gl.constexpr = acc.type.layout
    rows = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    out = scales.apply(acc * alpha, rows, cols, M, N)
    if HAS_C:
        cin = gl.amd.cdna3.buffer_load(cin_ptr, rows[:, None] * stride_cim + cols[None, :], mask=mask, other=0.0)
        out = out + beta * cin.to(gl.float32)
    gl.amd.cdna3.buffer_store(out.to(c_ptr.dtype.element_ty), c_ptr, rows[:, None] * stride_cm + cols[None, :],
                              mask=mask)


@gluon.jit
def store_tile(acc, c_ptr, cin_ptr, scales, off_m, off_n, M, N, stride_cm, stride_cim, alpha, beta,
               HAS_C: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, COL_CHUNKS: gl.constexpr):
    """Epilogue: the tile in COL_CHUNKS column chunks (1, 2 or 4), one `store_part` each.

    Why chunks: each output element needs its own offset, mask and conversion registers
    (N is not specialized, so the stores are per element). Written as one tensor expression
    the compiler computes them for all 128 accumulators of a lane before the first store and
    runs out of the 256 VGPRs that 2 waves per SIMD allow (measured with older Triton (3.6):
    gfx942, bf16 out: 36 bytes of scratch; with beta·C: 1.2-1.5 KB on both targets, docs/amd.md). Chunk by chunk, only one
    chunk's temporaries are live: no scratch on either target, for bf16 and fp32 out, with
    and without C. CdnaConfig derives COL_CHUNKS = the wave's 16-column MFMA tiles (4),
    the finest split in which every lane still holds all chunks (`column_halves`).
    """
    gl.static_assert(COL_CHUNKS == 1 or COL_CHUNKS == 2 or COL_CHUNKS == 4, "COL_CHUNKS must be 1, 2 or 4")
    if COL_CHUNKS == 1:
        store_part(acc, c_ptr, cin_ptr, scales, off_m, off_n, M, N, stride_cm, stride_cim, alpha, beta, HAS_C, BM, BN)
    else:
        left, right = column_halves(acc)
        if COL_CHUNKS == 2:
            H: gl.constexpr = BN // 2
            store_part(left, c_ptr, cin_ptr, scales, off_m, off_n, M, N, stride_cm, stride_cim, alpha, beta, HAS_C, BM, H)
            store_part(right, c_ptr, cin_ptr, scales, off_m, off_n + H, M, N, stride_cm, stride_cim, alpha, beta, HAS_C, BM,
                       H)
        else:
            Q: gl.constexpr = BN // 4
            q0, q1 = column_halves(left)
            q2, q3 = column_halves(right)
            store_part(q0, c_ptr, cin_ptr, scales, off_m, off_n, M, N, stride_cm, stride_cim, alpha, beta, HAS_C, BM, Q)
            store_part(q1, c_ptr, cin_ptr, scales, off_m, off_n + Q, M, N, stride_cm, stride_cim, alpha, beta, HAS_C, BM, Q)
            store_part(q2, c_ptr, cin_ptr, scales, off_m, off_n + 2 * Q, M, N, stride_cm, stride_cim, alpha, beta, HAS_C,
                       BM, Q)
            store_part(q3, c_ptr, cin_ptr, scales, off_m, off_n + 3 * Q, M, N, stride_cm, stride_cim, alpha, beta, HAS_C,
                       BM, Q)


@gluon.jit(do_not_specialize=["M", "N", "alpha", "beta"])
def cdna_pingpong_gemm(a_ptr, b_ptr, c_ptr, cin_ptr, scale_a, scale_b, M, N, K, stride_am, stride_bn, stride_cm,
                       stride_cim, alpha, beta, HAS_C: gl.constexpr, SCALES: gl.constexpr,
                       BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, WAVES_PER_GROUP: gl.constexpr,
                       MFMA_VERSION: gl.constexpr, MFMA_K: gl.constexpr, SCALED_MFMA: gl.constexpr, K_WIDTH: gl.constexpr,
                       LOAD_WIDTH: gl.constexpr, SUB_ROWS: gl.constexpr, SUB_COLS: gl.constexpr,
                       SW_VEC: gl.constexpr, SW_PER_PHASE: gl.constexpr, SW_MAX_PHASE: gl.constexpr,
                       EPILOGUE_CHUNKS: gl.constexpr):
    """One workgroup = one BM×BN output tile; grid = (cdiv(M, BM) · cdiv(N, BN),). A and B are
    bf16, or both the target's fp8 (e4m3) with SCALES (Scales) applied in the epilogue."""
    THREADS: gl.constexpr = 2 * WAVES_PER_GROUP * 64
    gl.static_assert(gl.num_warps() == 2 * WAVES_PER_GROUP, "launch with num_warps = 2 groups × WAVES_PER_GROUP")
    gl.static_assert(SUB_COLS == (64 // SUB_ROWS) * LOAD_WIDTH,
                     "a load subtile is what one wave's DMA instruction writes: 64 lanes × LOAD_WIDTH")
    gl.static_assert(BK % SUB_COLS == 0, "BK must be a whole number of load subtiles")
    gl.static_assert((BM // 2) % (SUB_ROWS * WAVES_PER_GROUP) == 0, "a group loads its A half in 16-row passes")
    gl.static_assert((BN // 2) % (SUB_ROWS * WAVES_PER_GROUP) == 0, "a group loads its B half in 16-row passes")
    gl.static_assert(BK % MFMA_K == 0, "BK must be a whole number of MFMA K-steps")
    gl.static_assert(a_ptr.dtype.element_ty == b_ptr.dtype.element_ty, "A and B must have one operand type")
    gl.static_assert(SCALES == 0 or a_ptr.dtype.element_ty.is_fp8(), "scales dequantize fp8 operands only")

    pid = gl.program_id(0)
    tiles_n = gl.cdiv(N, BN)
    off_m = (pid // tiles_n) * BM
    off_n = (pid % tiles_n) * BN

    LL: gl.constexpr = load_layout(LOAD_WIDTH, SUB_ROWS, WAVES_PER_GROUP)
    SH: gl.constexpr = lds_layout(SW_VEC, SW_PER_PHASE, SW_MAX_PHASE)
    la = TileLoader.create(a_ptr, off_m, M, stride_am, K, BM, LL, SUB_ROWS, BK // SUB_COLS, SUB_COLS)
    lb = TileLoader.create(b_ptr, off_n, N, stride_bn, K, BN, LL, SUB_ROWS, BK // SUB_COLS, SUB_COLS)
    bufs = Buffers.allocate(BM, BN, SUB_ROWS, BK // SUB_COLS, SUB_COLS, SH, a_ptr.dtype.element_ty)
    ACC: gl.constexpr = mfma_layout(MFMA_VERSION, MFMA_K, 2, WAVES_PER_GROUP)
    mma = MmaOp.start(BM, BN, ACC, K_WIDTH, SCALED_MFMA)

    pairs = gl.cdiv(gl.cdiv(K, BK), 2)
    mma = schedule(la, lb, bufs, mma, pairs, BM, BN, BK, WAVES_PER_GROUP * 64, THREADS)
    store_tile(mma.acc, c_ptr, cin_ptr, Scales(scale_a, scale_b, SCALES), off_m, off_n, M, N, stride_cm, stride_cim, alpha, beta, HAS_C, BM, BN,
               EPILOGUE_CHUNKS)


def kernel_constexprs(config: CdnaConfig) -> dict:
    """The kernel's constexpr arguments, all taken from the derived config."""
    d = config.derive()
    return dict(BM=d.block_m, BN=d.block_n, BK=d.block_k, WAVES_PER_GROUP=d.waves_per_group,
                MFMA_VERSION=d.mfma_version, MFMA_K=d.mfma_shape[2], SCALED_MFMA=d.scaled_mfma, K_WIDTH=d.k_width,
                LOAD_WIDTH=d.load_width, SUB_ROWS=d.subtile_rows, SUB_COLS=d.subtile_cols,
                SW_VEC=d.smem_vec, SW_PER_PHASE=d.smem_per_phase, SW_MAX_PHASE=d.smem_max_phase,
                EPILOGUE_CHUNKS=d.epilogue_chunks)


def gemm_args(a, b, out, c, alpha, beta, M, N, K) -> tuple:
    """Runtime arguments shared by the AMD GEMM kernels (C defaults to out, unread without HAS_C)."""
    cin = c if c is not None else out
    return (a, b, out, cin, M, N, K, a.stride(0), b.stride(0), out.stride(0), cin.stride(0),
            float(alpha), float(beta), c is not None)


def launch_scale_mode(scale_a, scale_b, M: int, N: int) -> str:
    """The Scales mode of launch_args' fp32 scale tensors: both None, both one element
    (tensor-wise), or scale_a of M elements and scale_b of N (row-wise); anything else is
    refused. The kernel's own argument check for the offline builds, not a public product's
    decision: that is runtime.spec.scale_mode, and the AMD backend refuses scaled specs."""
    if scale_a is None and scale_b is None:
        return "none"
    if scale_a is None or scale_b is None:
        raise PingpongError("scale_a, scale_b: give both or neither")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s.dtype != torch.float32 or not s.is_contiguous():
            raise PingpongError(f"{name}: expected a contiguous float32 tensor, got {s.dtype}")
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return "tensor"
    if scale_a.numel() == M and scale_b.numel() == N:
        return "row"
    raise PingpongError(f"scale_a, scale_b: expected 1 and 1 (tensor-wise) or {M} and {N} (row-wise) elements, "
                        f"got {scale_a.numel()} and {scale_b.numel()}")


def launch_args(a, b, out, c, alpha, beta, config: CdnaConfig, scale_a=None, scale_b=None):
    """(args, kwargs, grid) for cdna_pingpong_gemm: a (M,K), b (N,K), out (M,N), c optional;
    fp8 a and b take fp32 scales (launch_scale_mode)."""
    d = config.derive()
    M, K = a.shape
    N = b.shape[0]
    mode = launch_scale_mode(scale_a, scale_b, M, N)
    cin = c if c is not None else out
    sa, sb = (scale_a, scale_b) if mode != "none" else (cin, cin)  # unread without SCALES
    args = (a, b, out, cin, sa, sb, M, N, K, a.stride(0), b.stride(0), out.stride(0), cin.stride(0),
            float(alpha), float(beta), c is not None, SCALE_MODES[mode])
    grid = (((M + d.block_m - 1) // d.block_m) * ((N + d.block_n - 1) // d.block_n),)
    return args, dict(kernel_constexprs(config), **compile_options(config)), grid


def compile_options(config: CdnaConfig) -> dict:
    """Triton compile options of the kernel: its waves, the AGPRs LLVM may allocate (none:
    without the attribute LLVM reserves half of the 256 registers for AGPRs and the kernel
    spills; module docstring, Registers), and pingpong's own (toolchain.KERNEL_OPTIONS)."""
    d = config.derive()
    return dict(num_warps=d.waves, llvm_fn_attrs=f"amdgpu-agpr-alloc={d.agprs}", **KERNEL_OPTIONS)


@cc.register("cdna_pingpong", targets=("gfx942", "gfx950"),
             doc="CDNA 8-wave ping-pong GEMM (bf16, 256x256 tile, direct-to-LDS, stagger)")
def build(target: str, out_dtype=torch.bfloat16, has_c: bool = False, dtype: str = "bf16",
          scales: str = "none") -> cc.Launch:
    """CDNA 8-wave ping-pong GEMM (bf16, 256x256 tile, direct-to-LDS, stagger). The registered
    build writes bf16 without C; tests also compile the fp32-out and beta·C variants, and the
    fp8 ones (`build_fp8`) with each scale mode."""
    config = CdnaConfig.for_target(target, dtype)
    M = N = K = 512
    operand = getattr(torch, TARGETS[target].fp8_dtype) if dtype == "fp8" else torch.bfloat16
    a = torch.empty(M, K, dtype=operand)
    b = torch.empty(N, K, dtype=operand)
    out = torch.empty(M, N, dtype=out_dtype)
    c = torch.empty(M, N, dtype=out_dtype) if has_c else None
    sa, sb = {"none": (None, None), "tensor": (torch.ones(1), torch.ones(1)),
              "row": (torch.ones(M), torch.ones(N))}[scales]
    args, kwargs, grid = launch_args(a, b, out, c, 1.0, 0.5 if has_c else 0.0, config, sa, sb)
    return cc.Launch(cdna_pingpong_gemm, args, kwargs, grid)


@cc.register("cdna_pingpong_fp8", targets=("gfx942", "gfx950"),
             doc="CDNA 8-wave ping-pong GEMM, fp8 e4m3 (gfx942 FNUZ, gfx950 OCP), row-wise scales")
def build_fp8(target: str, out_dtype=torch.bfloat16, has_c: bool = False, scales: str = "row") -> cc.Launch:
    """The same kernel on the target's fp8 e4m3 (TargetSpec.fp8_dtype), twice the K per byte,
    with fp32 scales in the epilogue (row-wise by default)."""
    return build(target, out_dtype, has_c, "fp8", scales)
