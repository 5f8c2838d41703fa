"""The ragged-K grouped GEMM's host side (the kernel and its ragged TMA descriptor's design:
pingpong.hopper.kernels.grouped_k): the descriptor, the operands' legality, the tile from
what the host knows, and the launch."""

from __future__ import annotations

import torch
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ...runtime import compile as cc
from ..device.epilogue import EpilogueConstants
from ..kernels.grouped_k import RAGGED_ROWS, grouped_k_gemm
from .config import KernelConfig
from .grouped import derived, offline_builder
from .launch import _descriptor, _smem_layout, kernel_constants, launch_options, tma_groups, tma_orientation

#: the ragged descriptor's constants (pingpong.hopper.kernels.grouped_k): the two leading
#: dimensions' extent, the wrap-around stride base
_LEAD_EXTENT = 0x7FFF0000
_WRAP = 2**34


def ragged_descriptor(t: torch.Tensor, box_rows: int, box_cols: int) -> TensorDescriptor:
    """The ragged descriptor (module docstring) of t (T, C), row-major and TMA-legal, with a
    box of box_rows × box_cols."""
    assert tma_orientation(t) == "row" and t.shape[0] <= RAGGED_ROWS.value, "ragged operand: row-major, TMA-legal"
    r = t.stride(0)
    layout = _smem_layout(box_cols * t.element_size(), 8 * t.element_size(), 4)
    return TensorDescriptor(t, [_LEAD_EXTENT, _LEAD_EXTENT, RAGGED_ROWS.value, t.shape[1]], [_WRAP - r, r, r, 1],
                            [1, 1, box_rows, box_cols], layout)


def legal_operand(t) -> bool:
    """t (T, C) can be a ragged operand as stored: row-major (T the row), TMA-legal (a tensor
    or a spec's Operand)."""
    return t.dim() == 2 and tma_orientation(t) == "row" and t.shape[0] <= RAGGED_ROWS.value


def legal_out(out) -> bool:
    """out (G, M, N): each matrix row-major and TMA-legal, a 16-byte multiple apart (a tensor
    or a spec's Operand)."""
    return out.dim() == 3 and tma_orientation(out) == "row" and tma_groups(out)


def select_ragged_k_config(M: int, N: int, T: int, G: int) -> KernelConfig:
    """The tile of a ragged-K product from what the host knows (T rows over G groups, not
    their sizes; "Grouped GEMM" in benchmarks/results/2026-11-28-design-history.md):

        > 128 rows per group   cooperative 128×256: K loops long enough for the wide tile's
                               reuse of each A box to pay
        ≤ 128 rows per group   cooperative 128×128: a unit is one or two k-steps and its store
                               dominates, which a wider tile does not shorten
        N < 256                cooperative 128×128"""
    if N >= 256 and T > 128 * max(G, 1):
        return KernelConfig(128, 256, 64, schedule="cooperative")
    return KernelConfig(128, 128, 64, schedule="cooperative")


def prepare(x, b, out, offs, config: KernelConfig, sms: int):
    """(kernel, args, kwargs, grid) of out[g] = xᵀ[:, K_g] @ b[K_g, :] for every group.

    x (T, M) and b (T, N) row-major (`legal_operand`: the caller passes a = x.t()), out
    (G, M, N) (`legal_out`), offs (G,) int32 on the device."""
    T, M = x.shape
    N = b.shape[1]
    G = out.shape[0]
    d = derived(config, x, out)
    a_desc = ragged_descriptor(x, d.block_k, d.block_m)
    b_desc = ragged_descriptor(b, d.block_k, d.block_n)
    c_desc = _descriptor(out, [d.consumer_m, d.epilogue_n])  # rank 3: matrix g of out
    kwargs = dict(CFG=kernel_constants(d, EpilogueConstants(BUFS=d.epilogue_bufs)), **launch_options(d))
    args = (a_desc, b_desc, c_desc, offs, M, N, T, G, 1.0, 0.0)  # α = 1, β = 0
    units = G * -(-M // d.block_m) * -(-N // d.block_n)
    return grouped_k_gemm, args, kwargs, (max(1, min(sms, units)),)


for _config in (KernelConfig(128, 256, 64, schedule="cooperative"), KernelConfig(128, 128, 64, schedule="pingpong")):
    cc.register(f"grouped-k-{_config.schedule}", targets=("sm_90a",))(offline_builder(
        prepare, _config, ((4096, 1024), (4096, 1024), (8, 1024, 1024)), 8, ", ragged K (weight gradient)",
        "ragged TMA boxes"))
