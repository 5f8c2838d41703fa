"""Host side of the Hopper GEMM: TMA descriptors, the derived constexprs, the persistent grid.

`tma_orientation(t)` says whether a 2-D tensor can be described to TMA as it is stored (last
stride 1 in one of its two orientations, the other stride 16-byte aligned, base 16-byte
aligned). The plan (pingpong.plan) decides what to do with tensors that are not (a padded
copy) and launches `prepare`'s kernel, first through Triton's JIT, then directly
(pingpong.launcher); this module assumes legal inputs and asserts it.

Batched products (out (B, M, N)) get rank-3 descriptors [B, rows, cols] with a box of one
matrix tile (pingpong.hopper.batched); an operand shared by every batch (2-D, or batch size
1, or batch stride 0) keeps a rank-2 descriptor of its one matrix. A batch stride must be a
multiple of 16 bytes, like every other TMA stride.
"""

from __future__ import annotations

import functools

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .. import compile as cc
from .. import fused
from ..config import KernelConfig, swizzle_width
from .kernel import persistent_gemm, warp_specialized_gemm

_GL_DTYPE = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}


def tma_orientation(t: torch.Tensor) -> str | None:
    """"row" if t's last dim is contiguous, "col" if its first is, None if TMA cannot read it."""
    elem = t.element_size()
    if t.data_ptr() % 16:
        return None
    if t.stride(1) == 1 and (t.stride(0) * elem) % 16 == 0 and t.stride(0) >= max(t.shape[1], 1):
        return "row"
    if t.stride(0) == 1 and (t.stride(1) * elem) % 16 == 0 and t.stride(1) >= max(t.shape[0], 1):
        return "col"
    return None


@functools.lru_cache(maxsize=None)
def _smem_layout(row_bytes: int, element_bits: int, rank: int = 2) -> gl.NVMMASharedLayout:
    return gl.NVMMASharedLayout(swizzle_byte_width=swizzle_width(row_bytes), element_bitwidth=element_bits, rank=rank)


def _descriptor(t: torch.Tensor, box: list[int]) -> TensorDescriptor:
    """TMA descriptor of a row-major view, NVMMA-swizzled by its box's row width: 2-D with
    box `box`, or 3-D [batch, rows, cols] with box [1, *box] (one matrix's tile)."""
    layout = _smem_layout(box[-1] * t.element_size(), 8 * t.element_size(), t.dim())
    if t.dim() == 3:
        assert (t.stride(0) * t.element_size()) % 16 == 0 and t.stride(0) > 0, "batch stride: non-zero, 16-byte multiple"
        box = [1, *box]
    return TensorDescriptor(t, list(t.shape), list(t.stride()), box, layout)


def per_batch(t: torch.Tensor | None) -> torch.Tensor | None:
    """`t` as the kernels read it: its one matrix if every batch shares it (2-D, batch size 1,
    or batch stride 0), else the (B, rows, cols) tensor."""
    if t is None or t.dim() == 2:
        return t
    return t[0] if t.shape[0] == 1 or t.stride(0) == 0 else t


def operand_descriptor(t: torch.Tensor, rows: int, k: int, k_is_dim1: bool) -> tuple[TensorDescriptor, bool]:
    """Descriptor of an operand tile of `rows` × `k` and whether it is K-major in memory.

    `t` is A (M, K) (k_is_dim1=True) or B viewed as (N, K) (k_is_dim1=True after the caller
    transposes B's (K, N) view), or a batch (B, ·, ·) of them (`per_batch` first).
    Whichever dimension is contiguous becomes the TMA box's row.
    """
    orient = tma_orientation(t if t.dim() == 2 else t[0])
    assert orient is not None, "operand must be TMA-legal (the API pads it otherwise)"
    if orient == "row":
        return _descriptor(t, [rows, k]), True
    return _descriptor(t.transpose(-1, -2), [k, rows]), False


@functools.lru_cache(maxsize=None)
def acc_layout(d) -> gl.NVMMADistributedLayout:
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=list(d.warps_per_cta),
                                     instr_shape=list(d.instr_shape))


def prepare(a, b, out, c, alpha, beta, config: KernelConfig, sms: int, bias=None, activation="none"):
    """(kernel, args, kwargs, grid) for out = act(α·a@b + bias) + β·c (pingpong.fused).

    a (M,K), b (K,N), out (M,N) row-major; or batched: out (B,M,N), a/b/c 3-D or shared
    (`per_batch`). `bias` (N,)/(1,N) per column or (M,1) per row, shared by the batches."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batches = out.shape[0] if out.dim() == 3 else 1
    a, b, c, out = per_batch(a), per_batch(b), per_batch(c), out if batches > 1 else per_batch(out)
    d = config.derive(a.element_size(), out.element_size())
    a_desc, a_kmajor = operand_descriptor(a, d.block_m, d.block_k, True)
    b_desc, b_kmajor = operand_descriptor(b.transpose(-1, -2), d.block_n, d.block_k, True)
    c_box = [d.consumer_m, d.epilogue_n]  # one epilogue sub-tile
    c_desc = _descriptor(out, c_box)
    has_c = c is not None and beta != 0.0
    assert not has_c or (tma_orientation(c if c.dim() == 2 else c[0]) == "row" and c.dtype == out.dtype), \
        "C must be TMA-legal, out's dtype"
    cin_desc = _descriptor(c, c_box) if has_c else c_desc
    tiles = -(-M // d.block_m) * -(-N // d.block_n) * batches
    bias_ptr = fused.bias_vector(bias) if bias is not None else out  # never read without a bias
    args = (a_desc, b_desc, c_desc, cin_desc, bias_ptr, M, N, K, float(alpha), float(beta))
    common = dict(HAS_C=has_c, A_KMAJOR=a_kmajor, B_KMAJOR=b_kmajor, BM=d.block_m, BN=d.block_n, BK=d.block_k,
                  STAGES=d.stages, GROUP_M=d.group_m, EPI_BUFS=d.epilogue_bufs, acc_layout=acc_layout(d),
                  batches=batches, BIAS=fused.bias_kind(bias), ACTIVATION=activation)
    grid = (max(1, min(sms, tiles)),)
    if d.schedule == "persistent":
        return persistent_gemm, args, dict(common, num_warps=d.num_warps), grid
    kwargs = dict(common, PINGPONG=d.schedule == "pingpong", CONSUMER_REGS=d.worker_regs[0],
                  PRODUCER_REGS=d.worker_regs[1], num_warps=d.num_warps, maxnreg=d.maxnreg)
    return warp_specialized_gemm, args, kwargs, grid


# ----------------------------------------------------------------------------- offline compilation


def _offline_builder(schedule: str, block: tuple[int, int, int], fusion: str = "", batches: int = 1):
    """`fusion` "": α·acc + β·C; else the activation name, with a per-column bias too."""

    def build(target: str) -> cc.Launch:
        M, N, K = 512, 512, 512
        lead = (batches,) if batches > 1 else ()
        a = torch.empty(*lead, M, K, dtype=torch.bfloat16)
        w = torch.empty(*lead, N, K, dtype=torch.bfloat16)  # transpose_b: b = w.t()
        out = torch.empty(*lead, M, N, dtype=torch.bfloat16)
        bias = torch.empty(N, dtype=torch.bfloat16) if fusion else None
        config = KernelConfig(*block, schedule=schedule)
        kernel, args, kwargs, grid = prepare(a, w.transpose(-1, -2), out, out, 1.0, 1.0, config, 132, bias,
                                             fusion or "none")
        return cc.Launch(kernel, args, kwargs, grid)

    extra = (f", bias + {fusion}" if fusion else "") + (f", batched ({batches}, M, K) @ ({batches}, K, N)" if batches > 1 else "")
    build.__doc__ = f"Hopper GEMM, {schedule} schedule, {block[0]}×{block[1]}×{block[2]}, bf16 transpose_b, β·C{extra}"
    return build


for _name, _block in (("persistent", (128, 256, 64)), ("cooperative", (128, 256, 64)), ("pingpong", (128, 128, 64))):
    cc.register(_name, targets=("sm_90a",))(_offline_builder(_name, _block))
# The fused epilogue at the headline shape (cooperative 128×256: the most registers per
# consumer thread) and the batched path (rank-3 descriptors) on the other warp-specialized schedule.
cc.register("cooperative-gelu", targets=("sm_90a",))(_offline_builder("cooperative", (128, 256, 64), "gelu_erf"))
cc.register("pingpong-batched", targets=("sm_90a",))(_offline_builder("pingpong", (128, 128, 64), batches=4))
