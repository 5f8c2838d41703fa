"""FP8 grouped GEMM on Hopper (mixture-of-experts forward): ragged groups of rows, one
persistent launch, row-wise (or tensor-wise) scales applied in the epilogue.

    out[s_g : e_g, :] = (a[s_g : e_g, :] @ W[g]ᵀ) · sa[s_g : e_g, None] · sb[g, None, :]

    a (T, K) e4m3 row-major, W (G, N, K) e4m3 row-major (the caller's b = W.transpose(1, 2)),
    offs (G,) int32 cumulative row ends read on the device, sa (T,) per row, sb (G, N) per
    group and column (a zero stride: one value; tensor-wise is the same code), fp32 acc.

Composed from parts, nothing copied: the 16-bit grouped kernel's GroupedScheduler (virtual
m-tiles of every group laid end to end, the group of a unit found from offs on the device)
and GroupedEpilogue (TMA store of whole tiles, predicated pointer stores of rows < e_g of a
group's cut last tile), pingpong.hopper.grouped; the dense kernels' Ring, TileLoader (B
read from matrix g of its rank-3 descriptor), producer warp, PhaseSync and, without
promotion, their mainloop (pingpong.hopper.kernel). What is new here is the consumer: the
FP8 K loop with promotion, and GroupedScales between the K loop and the epilogue.

    program p │ unit (g, vm, n) │ unit ...             (GroupedScheduler: p, p+P, p+2P, ...)
    producer  │ A rows [row, row+BM) · W[g] k0..kn │ next unit ...            ring of STAGES
    consumer0 │ K loop ═══════ │ ·sa[rows]·sb[g, cols] │ store rows < e_g │ K loop (unit +2) ...
    consumer1 │ wait turn      │ K loop ═══════ │ ·sa·sb[g'] │ store rows < e_g' │ ...
                (ping-pong; cooperative: both consumers on every unit, 64-row halves)

PROMOTED K LOOP (PROMOTE, the default: torch's use_fast_accum=False). fp8 wgmma accumulates
with reduced precision, so every 128-deep ring slot (BK = 128) goes into a fresh wgmma
accumulator `part`, added to the fp32 accumulator in registers:

    k-step │ wait ready(k) │ wgmma(slot k) -> part (fresh) │ wait(0) │ release(k) │ acc += part

Under ping-pong the turn passes once the last promotion is done; cooperatively the other
warpgroup's wgmmas fill the tensor cores while one promotes. Without PROMOTE the wgmmas
accumulate in place: the dense kernels' mainloop, one k-step in flight.

THE SCALES (GroupedScales, row-wise): after the K loop, the tile's rows' sa (masked past T)
and its group's row of sb (masked past N) are loaded in the accumulator's row and column
layouts (SliceLayouts: a few registers, no shared memory) and multiplied in, before the
cast. Rows of the tile past e_g get the next group's sa (or 0 past T); they are never
stored. Scale values are not checked (a device read would be a host sync).

Block-wise scales (1×128 for a, 128×128 per group for W) are not built: the front end
(pingpong.fp8_grouped) refuses them.
"""

from __future__ import annotations

import dataclasses

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_wait
from triton.language.core import _aggregate as aggregate

from ..runtime import compile as cc
from .config import KernelConfig
from .epilogue import Epilogue, EpilogueConstants
from .fp8_kernel import SCALE_BLOCK as _SCALE_BLOCK
from .fp8_launch import SCALE_BLOCK, check_fp8_config
from .grouped import GroupedEpilogue, GroupedScheduler, group_pad
from .kernel import finish_mainloop, mainloop, producer
from .launch import _descriptor, kernel_constants, launch_options, tma_orientation
from .loader import TileLoader
from .mma import MmaOp
from .phase_sync import PhaseSync
from .pipeline import Ring, first_counter


# ----------------------------------------------------------------------------- the scales


@aggregate
class GroupedScales:
    """sa[r] at sa + r·sa_row, sb[g, c] at sb + g·sb_g + c·sb_col (module docstring). A zero
    stride repeats one value: tensor-wise a (sa_row = 0), one scale per group (sb_col = 0)."""

    sa: gl.tensor
    sb: gl.tensor
    sa_row: gl.tensor
    sb_g: gl.tensor
    sb_col: gl.tensor
    T: gl.tensor
    N: gl.tensor

    @gluon.constexpr_function
    def __init__(self, sa, sb, sa_row, sb_g, sb_col, T, N):
        self.sa = sa
        self.sb = sb
        self.sa_row = sa_row
        self.sb_g = sb_g
        self.sb_col = sb_col
        self.T = T
        self.N = N

    @gluon.jit
    def apply(self, acc, off_m, off_n, g):
        """acc · sa[rows] · sb[g, cols] for the tile at (off_m, off_n) of group g."""
        layout: gl.constexpr = acc.type.layout
        rows = off_m + gl.arange(0, acc.shape[0], layout=gl.SliceLayout(1, layout))
        cols = off_n + gl.arange(0, acc.shape[1], layout=gl.SliceLayout(0, layout))
        sa = gl.load(self.sa + rows * self.sa_row, mask=rows < self.T, other=0.0)
        sb = gl.load(self.sb + g * self.sb_g + cols * self.sb_col, mask=cols < self.N, other=0.0)
        return acc * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)


# ----------------------------------------------------------------------------- the consumers


@gluon.jit
def promoted_k_loop(ring, first, k_steps, ROW0: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr,
                    acc_layout: gl.constexpr):
    """The promoted K loop (module docstring): each ring slot into a fresh `part`, added into
    the fp32 accumulator; every slot released as soon as its wgmma is done. `part` is carried
    through the loop as the wgmma's (ignored, use_acc=False) input so its registers are reused."""
    acc = gl.zeros((ROWS, COLS), dtype=gl.float32, layout=acc_layout)
    part = gl.zeros((ROWS, COLS), dtype=gl.float32, layout=acc_layout)
    for k in range(k_steps):
        s = ring.wait_ready(first + k)
        a = ring.a_bufs.index(s).slice(ROW0, ROWS, 0)
        b = ring.b_bufs.index(s).permute((1, 0))  # K-major [BN, BK] slot as wgmma's [K, N] view
        part = warpgroup_mma(a, b, part, use_acc=False, is_async=True)
        part = warpgroup_mma_wait(0, (part,))
        ring.release(first + k)
        acc = acc + part
    return acc


@gluon.jit
def unit_k_loop(ring, first, k_steps, ROW0: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr,
                acc_layout: gl.constexpr, PROMOTE: gl.constexpr, sync, CONSUMER: gl.constexpr, PINGPONG: gl.constexpr):
    """One unit's fp32 accumulator, promoted or in place; under PINGPONG the turn passes to the
    other consumer once the last wgmma is issued (promoted: once it is done)."""
    if PROMOTE:
        acc = promoted_k_loop(ring, first, k_steps, ROW0, ROWS, COLS, acc_layout)
        if PINGPONG:
            sync.pass_turn(CONSUMER)
    else:
        mma = mainloop(ring, first, k_steps, ROW0, ROWS, COLS, 0, acc_layout, acc_layout, True, True)
        if PINGPONG:
            sync.pass_turn(CONSUMER)
        mma = finish_mainloop(mma, ring, first + k_steps - 1)
        acc = mma.acc
    return acc


@gluon.jit
def store_unit(epi, scales, acc, CONSUMER: gl.constexpr, count, off_m, off_n, g):
    """Scale, then the grouped epilogue: rows < e_g of the tile (TMA when the tile is whole)."""
    acc = scales.apply(acc, off_m, off_n, g)
    epi.store(MmaOp(acc, gl.to_tensor(0), gl.to_tensor(True), 1), CONSUMER, count, off_m, off_n, g, 0)


@gluon.jit
def pingpong_consumer(ring, sched, epi, scales, sync, CONSUMER: gl.constexpr, acc_layout: gl.constexpr,
                      PROMOTE: gl.constexpr):
    """Consumer CONSUMER takes this program's units CONSUMER, CONSUMER+2, ... (PhaseSync turns)."""
    for j in range((sched.local_tiles() - CONSUMER + 1) // 2):
        t = 2 * j + CONSUMER
        g, off_m, off_n = sched.locate(t)
        first = first_counter(j, sched.k_steps, 2, CONSUMER)
        sync.wait_turn(CONSUMER, j)
        acc = unit_k_loop(ring, first, sched.k_steps, 0, sched.BM, sched.BN, acc_layout, PROMOTE, sync, CONSUMER,
                          True)
        store_unit(epi, scales, acc, CONSUMER, j, off_m, off_n, g)
    epi.drain()


@gluon.jit
def cooperative_consumer(ring, sched, epi, scales, CONSUMER: gl.constexpr, acc_layout: gl.constexpr,
                         PROMOTE: gl.constexpr):
    """Consumer CONSUMER computes rows [CONSUMER·BM/2, (CONSUMER+1)·BM/2) of every unit."""
    ROWS: gl.constexpr = sched.BM // 2
    for t in range(sched.local_tiles()):
        g, off_m, off_n = sched.locate(t)
        first = first_counter(t, sched.k_steps, 1, 0)  # both consumers read every k-step
        acc = unit_k_loop(ring, first, sched.k_steps, CONSUMER * ROWS, ROWS, sched.BN, acc_layout, PROMOTE, 0,
                          CONSUMER, False)
        store_unit(epi, scales, acc, CONSUMER, t, off_m + CONSUMER * ROWS, off_n, g)
    epi.drain()


# ----------------------------------------------------------------------------- the kernel

_RUNTIME_SCALARS = ["T", "N", "K", "G", "out_sr", "out_sc", "sa_row", "sb_g", "sb_col"]


@gluon.jit(do_not_specialize=_RUNTIME_SCALARS)
def fp8_grouped_gemm(a_desc, b_desc, c_desc, out, offs, sa, sb, T, N, K, G, out_sr, out_sc, sa_row, sb_g, sb_col,
                     CFG: gl.constexpr, PROMOTE: gl.constexpr, TMA_STORE: gl.constexpr, G_PAD: gl.constexpr):
    """out = (a @ W[g]ᵀ)·sa·sb[g] per group of rows (module docstring). CFG: the dense kernel's
    constexprs (KernelConstants, pingpong.hopper.launch), its EPI a plain store; then the
    promotion, whether out takes TMA stores and the group table's length."""
    acc_layout: gl.constexpr = CFG.acc_layout
    gl.static_assert(CFG.EPI.plain(), "this kernel's epilogue stores α·acc alone (no β·C, bias or activation)")
    gl.static_assert(CFG.STAGES >= 2, "the ring needs at least 2 stages")
    gl.static_assert(CFG.RELEASERS == (1 if CFG.PINGPONG else 2),
                     "ping-pong: one consumer frees a slot; cooperative: both")
    gl.static_assert(not PROMOTE or CFG.BK == _SCALE_BLOCK, "a promotion is one 128-deep ring slot")
    gl.static_assert(G_PAD >= 32, "the group table holds at least one element per lane")
    sched = GroupedScheduler.create(offs, G, T, N, K, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M, G_PAD)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS)
    tma_epi = Epilogue.allocate(c_desc, c_desc, gl.to_tensor(1.0), gl.to_tensor(0.0), out, T, N, 2, CFG.EPI)
    epi = GroupedEpilogue(tma_epi, out, out_sr, out_sc, offs, T, N, TMA_STORE)
    scales = GroupedScales(sa, sb, sa_row, sb_g, sb_col, T, N)
    loader = TileLoader(a_desc, b_desc, True, True)
    if CFG.PINGPONG:
        sync = PhaseSync.allocate()
        gl.warp_specialize([
            (pingpong_consumer, (ring, sched, epi, scales, sync, 0, acc_layout, PROMOTE)),
            (pingpong_consumer, (ring, sched, epi, scales, sync, 1, acc_layout, PROMOTE)),
            (producer, (loader, ring, sched)),
        ], [CFG.CONSUMER_WARPS, CFG.PRODUCER_WARPS], [CFG.CONSUMER_REGS, CFG.PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (cooperative_consumer, (ring, sched, epi, scales, 0, acc_layout, PROMOTE)),
            (cooperative_consumer, (ring, sched, epi, scales, 1, acc_layout, PROMOTE)),
            (producer, (loader, ring, sched)),
        ], [CFG.CONSUMER_WARPS, CFG.PRODUCER_WARPS], [CFG.CONSUMER_REGS, CFG.PRODUCER_REGS])


# ----------------------------------------------------------------------------- host side


def select_fp8_grouped_config(T: int, G: int, N: int, promote: bool) -> KernelConfig:
    """The tile from what the host knows (the 16-bit grouped rule, pingpong.hopper.grouped:
    the mean group's rows decide the height) with FP8's 128-deep slots: mean ≥ 192 rows:
    cooperative 128 rows (promoted: 128×128, two accumulators fit; fast: 128×256); fewer:
    ping-pong 64 rows (promoted 64×128; fast 64×256 where N ≥ 256)."""
    mean = T / max(G, 1)
    if mean >= 192 and N >= 256:
        return KernelConfig(128, 128 if promote else 256, SCALE_BLOCK, schedule="cooperative")
    if not promote and N >= 256:
        return KernelConfig(64, 256, SCALE_BLOCK, schedule="pingpong")
    return KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong")


def scale_strides(scale_a: torch.Tensor, scale_b: torch.Tensor) -> tuple[int, int, int]:
    """(sa_row, sb_g, sb_col) of validated scales: sa (T,) or one element; sb (G, N), (G,) or
    one element. A single element (any shape) reads with stride 0."""
    sa_row = scale_a.stride(0) if scale_a.numel() > 1 else 0
    if scale_b.numel() == 1:
        return sa_row, 0, 0
    if scale_b.dim() == 1:  # (G,): one scale per group
        return sa_row, scale_b.stride(0), 0
    return sa_row, scale_b.stride(0), scale_b.stride(1)


def worker_regs(regs: tuple[int, int], g_pad: int) -> tuple[int, int]:
    """(consumer, producer) registers per thread: the schedule's, but the producer warp
    holds the group table too (G_PAD/32 entries per lane in each of its vectors), which
    spilled at 256 groups with 40 registers and at 512 with 72 (offline compile). Past 128
    groups the producer's warpgroup gets 16·(G_PAD/128 − 1) more registers per thread and
    each consumer 8·(G_PAD/128 − 1) fewer (the same register file: 4 producer warps · 16 =
    8 consumer warps · 8): 256 groups (224, 56), 512 groups (208, 88)."""
    extra = max(0, g_pad // 128 - 1)
    return regs[0] - 8 * extra, regs[1] + 16 * extra


def prepare(a, w, out, offs, scale_a, scale_b, promote: bool, config: KernelConfig, sms: int):
    """(kernel, args, kwargs, grid): a (T, K) and W (G, N, K) fp8 row-major, TMA-legal; out (T,
    N) row-major; offs (G,) int32 and the fp32 scales on the device (validated by the front end)."""
    T, K = a.shape
    G, N, _ = w.shape
    d = check_fp8_config(config, promote, out.element_size())
    a_desc = _descriptor(a, [d.block_m, d.block_k])
    b_desc = _descriptor(w, [d.block_n, d.block_k])  # rank 3: box [1, BN, BK] of matrix g
    tma_store = tma_orientation(out) == "row"
    c_desc = _descriptor(out if tma_store else out.t(), [d.consumer_m, d.epilogue_n])  # unused when not tma_store
    g_pad = group_pad(G)
    consumer_regs, producer_regs = worker_regs(d.worker_regs, g_pad)
    cfg = dataclasses.replace(kernel_constants(d, EpilogueConstants(BUFS=d.epilogue_bufs)),
                              CONSUMER_REGS=consumer_regs, PRODUCER_REGS=producer_regs)
    kwargs = dict(CFG=cfg, PROMOTE=bool(promote), TMA_STORE=tma_store, G_PAD=g_pad, **launch_options(d))
    args = (a_desc, b_desc, c_desc, out, offs, scale_a, scale_b, T, N, K, G, out.stride(0), out.stride(1),
            *scale_strides(scale_a, scale_b))
    bound = (-(-T // d.block_m) + G) * -(-N // d.block_n)
    return fp8_grouped_gemm, args, kwargs, (max(1, min(sms, bound)),)


# ----------------------------------------------------------------------------- offline compilation


def _offline_builder(config: KernelConfig, G: int, promote: bool):
    def build(target: str) -> cc.Launch:
        T, K, N = 4096, 1024, 1024
        a = torch.empty(T, K, dtype=torch.float8_e4m3fn)
        w = torch.empty(G, N, K, dtype=torch.float8_e4m3fn)
        out = torch.empty(T, N, dtype=torch.bfloat16)
        offs = torch.empty(G, dtype=torch.int32)
        sa, sb = torch.empty(T), torch.empty(G, N)
        kernel, args, kwargs, grid = prepare(a, w, out, offs, sa, sb, promote, config, 132)
        return cc.Launch(kernel, args, kwargs, grid)

    build.__doc__ = (f"Hopper FP8 grouped GEMM (ragged rows, {G} groups, row-wise scales), "
                     f"{'promoted' if promote else 'fast'} accumulation, {config.schedule} "
                     f"{config.block_m}×{config.block_n}×{config.block_k}")
    return build


#: name -> (config, groups, promote) of the variants compiled offline (tests/test_fp8_grouped.py)
OFFLINE_VARIANTS = {
    "fp8-grouped-cooperative": (KernelConfig(128, 128, 128, schedule="cooperative"), 8, True),
    "fp8-grouped-pingpong": (KernelConfig(64, 128, 128, schedule="pingpong"), 256, True),
    "fp8-grouped-cooperative-fast": (KernelConfig(128, 256, 128, schedule="cooperative"), 8, False),
    "fp8-grouped-pingpong-fast": (KernelConfig(64, 256, 128, schedule="pingpong"), 128, False),
    "fp8-grouped-cooperative-512": (KernelConfig(128, 128, 128, schedule="cooperative"), 512, True),
}
for _name, (_c, _g, _p) in OFFLINE_VARIANTS.items():
    cc.register(_name, targets=("sm_90a",))(_offline_builder(_c, _g, _p))
