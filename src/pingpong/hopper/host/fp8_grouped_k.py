"""The FP8 K-grouped GEMM's host side (the kernel and the padded layout it reads:
pingpong.hopper.kernels.fp8_grouped_k): the tile from what the host knows, the descriptors and
scale views, and the launch (one CachedLaunch per call signature)."""

from __future__ import annotations

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ...runtime import compile as cc
from ...runtime.launcher import LaunchCache
from ...runtime.spec import SCALE_BLOCK
from ..device.epilogue import EpilogueConstants
from ..kernels.fp8_grouped_k import fp8_grouped_k_gemm
from .config import KernelConfig
from .fp8_launch import check_fp8_config, scale_boxes
from .launch import _descriptor, kernel_constants, launch_options, persistent_grid
from .select import Device

#: the bound launch of each call signature
_LAUNCHES = LaunchCache(256)


def select_fp8_grouped_k_config(M: int, N: int) -> KernelConfig:
    """The tile of dW_g (M × N per expert, K = its padded tokens): 128-deep K blocks (one
    promotion per ring slot); M > 64: cooperative 128×128 (two 64×128 halves: an accumulator
    and two parts in registers); M ≤ 64: ping-pong 64×128, whose whole tile a 64-row product
    fills."""
    if M > 64:
        return KernelConfig(128, 128, SCALE_BLOCK, schedule="cooperative")
    return KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong")


def prepare(a, b, out, poffs, sa, sb, scaling: str, config: KernelConfig, sms: int):
    """(kernel, args, kwargs, grid) of out[g] = (a[:, run g] @ b[:, run g]ᵀ)·scales.

    a (M, TP) and b (N, TP) fp8 row-major (the tokens contiguous), out (G, M, N) contiguous,
    poffs (G,) int32 padded ends; row-wise sa (G, M), sb (G, N) fp32 contiguous rows; block-wise
    sa (TP/128, M), sb (TP/128, N) fp32 contiguous (validated by the front end,
    pingpong.fp8_grouped.scaled_grouped_k_mm)."""
    M, N = a.shape[0], b.shape[0]
    G = out.shape[0]
    d = check_fp8_config(config, True, out.element_size(), scale_boxes(scaling, 1, config))
    assert not d.workspace and d.block_n2 == 0 and d.cluster_m == 1, "one-piece tiles, one CTA, unsplit"
    a_desc = _descriptor(a, [d.block_m, d.block_k])
    b_desc = _descriptor(b, [d.block_n, d.block_k])
    c_desc = _descriptor(out, [d.consumer_m, d.epilogue_n])  # rank 3: matrix g of out
    if scaling == "block":
        flat = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
        sa = TensorDescriptor(sa, list(sa.shape), [sa.stride(0), 1], [1, d.block_m], flat)
        sb = TensorDescriptor(sb, list(sb.shape), [sb.stride(0), 1], [1, d.block_n], flat)
        strides = (0, 0)
    else:
        strides = (sa.stride(0), sb.stride(0))
    kwargs = dict(CFG=kernel_constants(d, EpilogueConstants(BUFS=d.epilogue_bufs)), SCALING=scaling,
                  **launch_options(d))
    args = (a_desc, b_desc, c_desc, poffs, sa, sb, M, N, G, *strides)
    return fp8_grouped_k_gemm, args, kwargs, persistent_grid(M, N, d, sms, G)  # a unit per tile of each expert


def launch(a, b, out, poffs, sa, sb, scaling: str, config: KernelConfig | None = None) -> None:
    """The kernel on validated operands (`prepare`'s), through the bound launch of this call
    signature (Triton's JIT on its first call); config: the tile (select_fp8_grouped_k_config's
    when None)."""
    config = config or select_fp8_grouped_k_config(a.shape[0], b.shape[0])
    device = a.device.index
    key = (scaling, config, a.dtype, b.dtype, out.dtype, *a.shape, *b.shape, *out.shape, a.stride(0), b.stride(0),
           sa.stride(0), sb.stride(0), device, *(t.data_ptr() % 16 == 0 for t in (a, b, out, poffs, sa, sb)))
    ptrs = (a.data_ptr(), b.data_ptr(), out.data_ptr(), poffs.data_ptr(), sa.data_ptr(), sb.data_ptr())
    _LAUNCHES.get_or_make(key)(device, ptrs, (), _prepare_here, a, b, out, poffs, sa, sb, scaling, config)


def _prepare_here(a, b, out, poffs, sa, sb, scaling: str, config: KernelConfig):
    """`prepare` on the operands' GPU, its SM count read on the JIT path only."""
    return prepare(a, b, out, poffs, sa, sb, scaling, config, Device.of(a.device.index).sms)


# ----------------------------------------------------------------------------- offline compilation


def _offline_builder(config: KernelConfig, scaling: str):
    def build(target: str) -> cc.Launch:
        G, M, N, TP = 8, 1024, 1024, 4096 + 128 * 8
        a = torch.empty(M, TP, dtype=torch.float8_e4m3fn)
        b = torch.empty(N, TP, dtype=torch.float8_e4m3fn)
        out = torch.empty(G, M, N, dtype=torch.bfloat16)
        if scaling == "block":
            sa, sb = torch.empty(TP // SCALE_BLOCK, M), torch.empty(TP // SCALE_BLOCK, N)
        else:
            sa, sb = torch.empty(G, M), torch.empty(G, N)
        return cc.Launch(*prepare(a, b, out, torch.empty(G, dtype=torch.int32), sa, sb, scaling, config, 132))

    build.__doc__ = (f"Hopper FP8 K-grouped GEMM (the experts' weight gradient, padded token runs), {scaling}-wise"
                     f" scales, {config.schedule} {config.block_m}×{config.block_n}×{config.block_k}")
    return build


#: name -> (config, scaling) of the variants compiled offline (tests/test_fp8_grouped_k.py)
OFFLINE_VARIANTS = {
    "fp8-grouped-k-cooperative": (KernelConfig(128, 128, SCALE_BLOCK, schedule="cooperative"), "row"),
    "fp8-grouped-k-pingpong": (KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong"), "row"),
    "fp8-grouped-k-block-cooperative": (KernelConfig(128, 128, SCALE_BLOCK, schedule="cooperative"), "block"),
    "fp8-grouped-k-block-pingpong": (KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong"), "block"),
}
for _name, (_c, _s) in OFFLINE_VARIANTS.items():
    cc.register(_name, targets=("sm_90a",))(_offline_builder(_c, _s))
