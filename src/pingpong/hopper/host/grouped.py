"""The grouped GEMM's host side (ragged rows; the kernel and its design:
pingpong.hopper.kernels.grouped): the tile from what the host knows, TMA legality of its
operands, and the launch; what both grouped kernels' launches share (this one's and the ragged-K
kernel's, pingpong.hopper.host.grouped_k): the derived tile, the offline build."""

from __future__ import annotations

import torch

from ...runtime import compile as cc
from ..device.epilogue import EpilogueConstants
from ..kernels.grouped import grouped_gemm
from .config import KernelConfig
from .launch import _descriptor, kernel_constants, launch_options, operand_descriptor, tma_groups, tma_orientation


def group_pad(G: int) -> int:
    """G_PAD: the group table's length, a power of two ≥ G and ≥ 32 (one entry per lane)."""
    return max(32, 1 << max(0, G - 1).bit_length())


def select_grouped_config(T: int, G: int, N: int) -> KernelConfig:
    """The tile of a ragged product from what the host knows (T rows over G groups, N): the
    mean group's rows decide the tile height (a tile's rows past its group's end are wasted):
    mean ≥ 192 rows: cooperative 128×256; fewer: ping-pong 64×256, whose 64-row tiles waste half
    as much of a short group's last tile; N < 256: 64×128 ("Grouped GEMM" in
    benchmarks/results/2026-11-28-design-history.md)."""
    mean = T / max(G, 1)
    if mean >= 192 and N >= 256:
        return KernelConfig(128, 256, 64, schedule="cooperative")
    if N >= 256:
        return KernelConfig(64, 256, 64, schedule="pingpong")
    return KernelConfig(64, 128, 64, schedule="pingpong")


def legal(t, orientation: str | None = None) -> bool:
    """t (2-D, or each matrix of a 3-D t; a tensor or a spec's Operand) can be read by TMA as
    it is stored (2-D: in `orientation`, "row" or "col", if given)."""
    if t.dim() == 2 and orientation:
        return tma_orientation(t) == orientation
    if t.dim() == 3:
        return tma_orientation(t) is not None and tma_groups(t)
    return tma_orientation(t) is not None


def derived(config: KernelConfig, a, out):
    """`config` derived for a grouped kernel (this module's or grouped_k's) reading operands of
    a's element size into out: one-piece warp-specialized tiles, one CTA each."""
    d = config.derive(a.element_size(), out.element_size())
    assert not d.workspace and d.block_n2 == 0 and d.cluster_m == 1 and d.schedule != "persistent", \
        "one-piece warp-specialized tiles, one CTA each"
    return d


def prepare(a, b, out, offs, config: KernelConfig, sms: int):
    """(kernel, args, kwargs, grid) of out[rows of g] = a[rows of g] @ b[g] for every group.

    a (T, K) row-major, b (G, K, N) in either orientation: TMA-legal (`legal`); out (T, N)
    TMA-legal, row-major (full tiles stored by TMA) or column-major (pointer stores); offs (G,)
    int32 on the device."""
    T, K = a.shape
    G, _, N = b.shape
    d = derived(config, a, out)
    a_desc, a_kmajor = operand_descriptor(a, d.block_m, d.block_k, True)
    b_desc, b_kmajor = operand_descriptor(b.transpose(-1, -2), d.block_n, d.block_k, True)
    assert a_kmajor, "A K-major: TMA boxes of an MN-major A would start at a group's (unaligned) row"
    tma_store = tma_orientation(out) == "row"  # else pointer stores only (a transposed out: 3-D × 2-D)
    c_desc = _descriptor(out if tma_store else out.t(), [d.consumer_m, d.epilogue_n])  # unused when not tma_store
    cfg = kernel_constants(d, EpilogueConstants(BUFS=d.epilogue_bufs), a_kmajor, b_kmajor)
    kwargs = dict(CFG=cfg, TMA_STORE=tma_store, G_PAD=group_pad(G), **launch_options(d))
    args = (a_desc, b_desc, c_desc, out, offs, T, N, K, G, out.stride(0), out.stride(1), 1.0, 0.0)  # α = 1, β = 0
    bound = (-(-T // d.block_m) + G) * -(-N // d.block_n)
    return grouped_gemm, args, kwargs, (max(1, min(sms, bound)),)


def offline_builder(prepare, config: KernelConfig, shapes: tuple, G: int, kind: str, layout: str,
                    b_kmajor: bool = False):
    """The offline build (pingpong.runtime.compile) of a grouped kernel's launch on 132 SMs:
    `prepare` (this module's or grouped_k's) of `config` on new bf16 a, b, out stored in
    `shapes` (b passed as its transposed view where b_kmajor) and G offsets."""
    def build(target: str) -> cc.Launch:
        a, b, out = (torch.empty(shape, dtype=torch.bfloat16) for shape in shapes)
        b = b.transpose(-1, -2) if b_kmajor else b
        return cc.Launch(*prepare(a, b, out, torch.empty(G, dtype=torch.int32), config, 132))

    build.__doc__ = (f"Hopper grouped GEMM{kind}, {config.schedule} {config.block_m}×{config.block_n}×{config.block_k},"
                     f" bf16, {layout}")
    return build


for _config, _G, _kmajor in ((KernelConfig(128, 128, 64, schedule="cooperative"), 8, True),
                             (KernelConfig(64, 128, 64, schedule="pingpong"), 128, False)):
    cc.register(f"grouped-{_config.schedule}", targets=("sm_90a",))(offline_builder(
        prepare, _config, ((4096, 1024), (_G, 1024, 1024), (4096, 1024)), _G, f" (ragged rows, {_G} groups)",
        f"B {'K' if _kmajor else 'N'}-major", _kmajor))
