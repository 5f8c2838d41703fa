"""FP8 grouped GEMM on Hopper (mixture-of-experts forward): ragged groups of rows, one
persistent launch, row-wise (or tensor-wise) scales applied in the epilogue, or DeepSeek-V3's
block-wise scales applied per 128-deep K block at the promotion.

    out[s_g : e_g, :] = (a[s_g : e_g, :] @ W[g]ᵀ) · sa[s_g : e_g, None] · sb[g, None, :]
    block-wise:  out[r, n] = Σ_kb (a[r, kb] @ W[g][n, kb]ᵀ) · sa[r, kb] · sb[g, n/128, kb]

    a (T, K) e4m3 row-major, W (G, N, K) e4m3 row-major (the caller's b = W.transpose(1, 2)),
    offs (G,) int32 cumulative row ends read on the device, sa (T,) per row, sb (G, N) per
    group and column (a zero stride: one value; tensor-wise is the same code), fp32 acc;
    block-wise sa (T, K/128) outer-dim-major (its (K/128, T) rows), sb (G, N/128, K/128).

Composed from parts, nothing copied: the 16-bit grouped kernel's GroupedScheduler (virtual
m-tiles of every group laid end to end, the group of a unit found from offs on the device;
`locate(t)` gives (group, first row, off_n), the dense TileScheduler's (batch, off_m, off_n))
and GroupedEpilogue (TMA store of whole tiles, predicated pointer stores of rows < e_g of a
group's cut last tile), pingpong.hopper.grouped; and the FP8 dense kernel's partitions
(pingpong.hopper.fp8_kernel.run_fp8_partitions: the producer with Fp8Loader, the ping-pong
and cooperative consumers with their promoted K loop, Fp8Scales), where the unit's group
is the batch: it picks W's matrix, the group's b scales and the rows the epilogue stores.
What is here: the kernel's constexpr contract, the host side (tile, scale views, launch) and
the Hopper backend's plan of an FP8 grouped spec (`plan`, Fp8GroupedPlan).

    program p │ unit (g, vm, n) │ unit ...             (GroupedScheduler: p, p+P, p+2P, ...)
    producer  │ A rows [row, row+BM) · W[g] k0..kn (block: + sa, sb boxes) │ next unit ...
    consumer0 │ K loop ═══════ │ ·sa[rows]·sb[g, cols] │ store rows < e_g │ K loop (unit +2) ...
    consumer1 │ wait turn      │ K loop ═══════ │ ·sa·sb[g'] │ store rows < e_g' │ ...
                (ping-pong; cooperative: both consumers on every unit, 64-row halves)

PROMOTED K LOOP (PROMOTE, the default: torch's use_fast_accum=False; block-wise always): the
dense kernel's, two k-steps per iteration, every 128-deep ring slot into a fresh wgmma
accumulator `part` added (block-wise: scaled) into the fp32 accumulator:

    k-step │ wait ready(k) │ wgmma(slot k) -> part │ wait(0) │ acc += part [· sa[rows, k]·sb[g, n/128, k]] │ release(k)

Without PROMOTE the wgmmas accumulate in place: the dense kernels' mainloop.

ROW-WISE SCALES (Fp8Scales.apply_outer, SCALING "row"): after the K loop, the tile's rows'
sa (masked past T) and its group's row of sb (sb + g·sb_g + n·sb_col, masked past N), loaded
in the accumulator's slice layouts and multiplied in before the cast.

BLOCK-WISE SCALES (SCALING "block", Fp8Scales with ANY_ROW): K block kb's sa and sb travel in
the ring slot with its A and B tiles (TMA, one ready barrier). A unit starts at its group's
first row, any row of a, but a TMA box's innermost coordinate is 16-byte aligned: the sa box
[1, 2·BM] starts at the 4-row boundary at or below the unit's row, and the consumers gather
their rows from element off_m % 4 on; the sb box [1, 32] starts at the 4-element boundary at
or below g·sb_g + n_blk·sb_col + kb, its element read by the same gather:

    slot s │ A [BM, 128] │ W[g] [BN, 128] │ sa[kb, row0 - row0 % 4 ...] (2·BM) │ sb box (32) │

Rows of a unit past e_g read the next group's a rows and sa (or 0 past T): garbage, never
stored. Scale values are not checked (a device read would be a host sync).
"""

from __future__ import annotations

import dataclasses

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..runtime import compile as cc
from ..runtime.fp8_spec import scale_kinds
from ..runtime.launcher import CachedLaunch
from ..runtime.plan import Plan, device_index
from ..runtime.spec import NO_ARGS, SCALE_BLOCK
from .config import KernelConfig
from .epilogue import Epilogue, EpilogueConstants
from .fp8_kernel import SCALE_BLOCK as _SCALE_BLOCK, Fp8Scales, run_fp8_partitions
from .fp8_launch import block_scale_a_view, block_scale_descriptors, check_fp8_config, sa_box, scale_boxes
from .grouped import GroupedEpilogue, GroupedScheduler, group_pad
from .launch import _descriptor, kernel_constants, launch_options, tma_orientation
from .loader import TileLoader
from .pipeline import Ring
from .select import Device


# ----------------------------------------------------------------------------- the kernel

_RUNTIME_SCALARS = ["T", "N", "K", "G", "out_sr", "out_sc", "sa_row", "sb_g", "sb_col"]

@gluon.jit(do_not_specialize=_RUNTIME_SCALARS)
def fp8_grouped_gemm(a_desc, b_desc, c_desc, out, offs, sa, sb, T, N, K, G, out_sr, out_sc, sa_row, sb_g, sb_col,
                     CFG: gl.constexpr, PROMOTE: gl.constexpr, TMA_STORE: gl.constexpr, G_PAD: gl.constexpr,
                     SCALING: gl.constexpr):
    """out = (a @ W[g]ᵀ)·scales per group of rows (module docstring). CFG: the dense kernel's
    constexprs (KernelConstants, pingpong.hopper.launch), its EPI a plain store; then the
    promotion, whether out takes TMA stores, the group table's length and the scaling ("row":
    sa, sb pointers, zero strides for one value; "block": their TMA descriptors)."""
    gl.static_assert(CFG.EPI.plain(), "this kernel's epilogue stores α·acc alone (no β·C, bias or activation)")
    gl.static_assert(CFG.STAGES >= 2, "the ring needs at least 2 stages")
    gl.static_assert(CFG.RELEASERS == (1 if CFG.PINGPONG else 2),
                     "ping-pong: one consumer frees a slot; cooperative: both")
    gl.static_assert(not PROMOTE or CFG.BK == _SCALE_BLOCK, "a promotion is one 128-deep ring slot")
    gl.static_assert(SCALING == "row" or SCALING == "block", "SCALING: row (tensor-wise: zero strides) or block")
    gl.static_assert(SCALING != "block" or (PROMOTE and _SCALE_BLOCK % CFG.BN == 0),
                     "block scales are applied at the promotion; a tile's columns share one b scale (BN divides 128)")
    gl.static_assert(SCALING != "block" or sa.block_type.shape[1] >= CFG.BM + 3,
                     "an sa box starts up to 3 rows above its tile (Fp8Scales.ANY_ROW)")
    gl.static_assert(G_PAD >= 32, "the group table holds at least one element per lane")
    sched = GroupedScheduler.create(offs, G, T, N, K, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M, G_PAD)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS)
    tma_epi = Epilogue.allocate(c_desc, c_desc, gl.to_tensor(1.0), gl.to_tensor(0.0), out, T, N, 2, CFG.EPI)
    epi = GroupedEpilogue(tma_epi, out, out_sr, out_sc, offs, T, N, TMA_STORE)
    scales = Fp8Scales.allocate(sa, sb, sa_row, sb_col, sb_g, T, N, CFG.STAGES, SCALING, _SCALE_BLOCK, True)
    run_fp8_partitions(ring, sched, epi, scales, TileLoader(a_desc, b_desc, True, True), CFG, PROMOTE)


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
    one element. A single element (any shape) reads with stride 0. Block-wise (sb (G, N/128,
    K/128)): (0, sb_g, sb_col) in fp32 elements of sb's storage (Fp8Scales' flat sb row)."""
    if scale_b.dim() == 3:
        return 0, scale_b.stride(0), scale_b.stride(1)
    sa_row = scale_a.stride(0) if scale_a.numel() > 1 else 0
    if scale_b.numel() == 1:
        return sa_row, 0, 0
    if scale_b.dim() == 1:  # (G,): one scale per group
        return sa_row, scale_b.stride(0), 0
    return sa_row, scale_b.stride(0), scale_b.stride(1)


def block_scale_views(scale_a, scale_b):
    """Block-wise scales as the kernel's TMA reads them: scale_a's (K/128, T) rows (copied only
    where TMA cannot read them in place: pingpong.hopper.fp8_launch.block_scale_a_view) and
    scale_b (G, N/128, K/128), contiguous in K/128, seen from its base (cloned if that base is
    not 16-byte aligned). The front end's launch addresses and `prepare` both come from here."""
    sb = scale_b if scale_b.data_ptr() % 16 == 0 else scale_b.clone(memory_format=torch.contiguous_format)
    return block_scale_a_view(scale_a), sb


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
    N) row-major; offs (G,) int32 and the fp32 scales on the device (validated by the front
    end). A 3-D scale_b means block-wise (scale_a (T, K/128)): the promotion, always."""
    T, K = a.shape
    G, N, _ = w.shape
    block = scale_b.dim() == 3
    boxes = scale_boxes("block", SCALE_BLOCK, config, any_row=True) if block else (0, 0)
    d = check_fp8_config(config, promote or block, out.element_size(), boxes)
    a_desc = _descriptor(a, [d.block_m, d.block_k])
    b_desc = _descriptor(w, [d.block_n, d.block_k])  # rank 3: box [1, BN, BK] of matrix g
    tma_store = tma_orientation(out) == "row"
    c_desc = _descriptor(out if tma_store else out.t(), [d.consumer_m, d.epilogue_n])  # unused when not tma_store
    g_pad = group_pad(G)
    consumer_regs, producer_regs = worker_regs(d.worker_regs, g_pad)
    cfg = dataclasses.replace(kernel_constants(d, EpilogueConstants(BUFS=d.epilogue_bufs)),
                              CONSUMER_REGS=consumer_regs, PRODUCER_REGS=producer_regs)
    if block:
        sa, sb = block_scale_descriptors(*block_scale_views(scale_a, scale_b), sa_box(d.block_m, any_row=True))
    else:
        sa, sb = scale_a, scale_b
    kwargs = dict(CFG=cfg, PROMOTE=bool(promote or block), TMA_STORE=tma_store, G_PAD=g_pad,
                  SCALING="block" if block else "row", **launch_options(d))
    args = (a_desc, b_desc, c_desc, out, offs, sa, sb, T, N, K, G, out.stride(0), out.stride(1),
            *scale_strides(scale_a, scale_b))
    bound = (-(-T // d.block_m) + G) * -(-N // d.block_n)
    return fp8_grouped_gemm, args, kwargs, (max(1, min(sms, bound)),)


# ----------------------------------------------------------------------------- the plan


def plan(spec) -> "Fp8GroupedPlan":
    """The Hopper backend's plan of an FP8 grouped GemmSpec (validated: pingpong.runtime.
    fp8_spec): the promotion (block-wise always, the scale kinds' one decision; else unless
    use_fast_accum) and the tile (`select_fp8_grouped_config`)."""
    sc = spec.epilogue.scales
    promote = scale_kinds(spec.a, spec.b, sc.a, sc.b)[0] == "block" or not sc.fast_accum
    (T, _), (G, _, N) = spec.a.shape, spec.b.shape
    device = device_index(spec.device)
    return Fp8GroupedPlan(device, promote, select_fp8_grouped_config(T, G, N, promote),
                          Device.of(device, spec.carveout).sms)


class Fp8GroupedPlan(Plan):
    """One FP8 grouped spec on this kernel: its tile, promotion and bound direct launch
    (Triton's JIT on the plan's first call). run(a, b, out, args): b the caller's (G, K, N)
    K-major view, out a new (T, N) row-major tensor, args.scale_a, args.scale_b, args.offs. `sms`: the SMs its
    persistent grid spans (the GPU's less torch's SM carveout when planned)."""

    __slots__ = ("promote", "config", "launch", "sms")

    def __init__(self, device, promote, config, sms):
        self.device, self.promote, self.config, self.path, self.activation = device, promote, config, "hopper", "none"
        self.launch, self.sms = CachedLaunch(), sms

    def run(self, a, b, out, args=NO_ARGS) -> None:
        scale_a, scale_b, offs = args.scale_a, args.scale_b, args.offs
        w = b.transpose(1, 2)  # (G, N, K) row-major: the kernel's view
        sa, sb = block_scale_views(scale_a, scale_b) if scale_b.dim() == 3 else (scale_a, scale_b)
        self.launch(self.device, launch_ptrs(a, w, out, offs, sa, sb), (), prepare, a, w, out, offs, scale_a, scale_b,
                    self.promote, self.config, self.sms)


def launch_ptrs(a, w, out, offs, scale_a, scale_b) -> tuple[int, ...]:
    """The base address of each slot of the kernel's leading arguments (fp8_grouped_gemm: a,
    W, out as TMA descriptors; out, offs as pointers; the scales as pointers, or block-wise as
    TMA descriptors of their views, block_scale_views)."""
    return (a.data_ptr(), w.data_ptr(), out.data_ptr(), out.data_ptr(), offs.data_ptr(), scale_a.data_ptr(),
            scale_b.data_ptr())


# ----------------------------------------------------------------------------- offline compilation


def _offline_builder(config: KernelConfig, G: int, promote: bool, scaling: str):
    def build(target: str) -> cc.Launch:
        T, K, N = 4096, 1024, 1024
        a = torch.empty(T, K, dtype=torch.float8_e4m3fn)
        w = torch.empty(G, N, K, dtype=torch.float8_e4m3fn)
        out = torch.empty(T, N, dtype=torch.bfloat16)
        offs = torch.empty(G, dtype=torch.int32)
        if scaling == "block":
            sa, sb = torch.empty(K // SCALE_BLOCK, T).t(), torch.empty(G, N // SCALE_BLOCK, K // SCALE_BLOCK)
        else:
            sa, sb = torch.empty(T), torch.empty(G, N)
        kernel, args, kwargs, grid = prepare(a, w, out, offs, sa, sb, promote, config, 132)
        return cc.Launch(kernel, args, kwargs, grid)

    build.__doc__ = (f"Hopper FP8 grouped GEMM (ragged rows, {G} groups, {scaling}-wise scales), "
                     f"{'promoted' if promote else 'fast'} accumulation, {config.schedule} "
                     f"{config.block_m}×{config.block_n}×{config.block_k}")
    return build


#: name -> (config, groups, promote, scaling) of the variants compiled offline (tests/test_fp8_grouped.py)
OFFLINE_VARIANTS = {
    "fp8-grouped-cooperative": (KernelConfig(128, 128, SCALE_BLOCK, schedule="cooperative"), 8, True, "row"),
    "fp8-grouped-pingpong": (KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong"), 256, True, "row"),
    "fp8-grouped-cooperative-fast": (KernelConfig(128, 256, SCALE_BLOCK, schedule="cooperative"), 8, False, "row"),
    "fp8-grouped-pingpong-fast": (KernelConfig(64, 256, SCALE_BLOCK, schedule="pingpong"), 128, False, "row"),
    "fp8-grouped-cooperative-512": (KernelConfig(128, 128, SCALE_BLOCK, schedule="cooperative"), 512, True, "row"),
    "fp8-grouped-block-cooperative": (KernelConfig(128, 128, SCALE_BLOCK, schedule="cooperative"), 8, True, "block"),
    "fp8-grouped-block-pingpong": (KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong"), 256, True, "block"),
    "fp8-grouped-block-cooperative-512": (KernelConfig(128, 128, SCALE_BLOCK, schedule="cooperative"), 512, True,
                                          "block"),
}
for _name, (_c, _g, _p, _s) in OFFLINE_VARIANTS.items():
    cc.register(_name, targets=("sm_90a",))(_offline_builder(_c, _g, _p, _s))
