"""The FP8 grouped GEMM's host side (the kernel and its design:
pingpong.hopper.kernels.fp8_grouped): the tile, the scale views and strides, the launch, and
the Hopper backend's plan of an FP8 grouped spec (`plan`, Fp8GroupedPlan)."""


from __future__ import annotations

import dataclasses

import torch

from ...runtime import compile as cc
from ...runtime.fp8_spec import scale_kinds
from ...runtime.launcher import CachedLaunch
from ...runtime.plan import Plan, device_index
from ...runtime.spec import NO_ARGS, SCALE_BLOCK
from ..device.epilogue import EpilogueConstants
from ..kernels.fp8_grouped import fp8_grouped_gemm
from .config import KernelConfig
from .fp8_launch import block_scale_a_view, block_scale_descriptors, check_fp8_config, sa_box, scale_boxes
from .grouped import group_pad
from .launch import _descriptor, kernel_constants, launch_options, tma_orientation
from .select import Device




def select_fp8_grouped_config(T: int, G: int, N: int, promote: bool) -> KernelConfig:
    """The tile from what the host knows (the 16-bit grouped rule, pingpong.hopper.kernels.grouped:
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
    where TMA cannot read them in place: pingpong.hopper.host.fp8_launch.block_scale_a_view) and
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
    if block:  # the strides are the views' (a clone where scale_b's base is not 16-byte aligned)
        scale_a, scale_b = block_scale_views(scale_a, scale_b)
        sa, sb = block_scale_descriptors(scale_a, scale_b, sa_box(d.block_m, any_row=True))
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
