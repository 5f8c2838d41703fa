"""Dispatch on a ROCm device: which AMD kernel runs, and the host launcher the API calls.

    select_kernel("gfx942" | "gfx950")  -> "cdna_pingpong"
    select_kernel("gfx11xx")            -> "rdna_wmma"
    select_kernel(anything else)        -> "portable"

None of these paths has been run on AMD hardware by this project (see docs/amd.md).
"""

from __future__ import annotations

from ..errors import PingpongError
from . import cdna_pingpong, rdna_wmma
from .config import CdnaConfig, WmmaConfig

CDNA_PINGPONG_ARCHS = ("gfx942", "gfx950")


def select_kernel(arch: str) -> str:
    """Kernel name for a ROCm architecture string such as "gfx942:sramecc+:xnack-"."""
    base = arch.split(":")[0].strip().lower()
    if base in CDNA_PINGPONG_ARCHS:
        return "cdna_pingpong"
    if base.startswith("gfx11"):
        return "rdna_wmma"
    return "portable"


def _device_arch(t) -> str:
    import torch

    return torch.cuda.get_device_properties(t.device).gcnArchName


def accepts(a, b, out_dtype) -> bool:
    """Whether `gemm(a, b, out)` (a (M, K), b (K, N), as everywhere in the library) has an
    AMD Gluon kernel for this device and these dtypes/strides; the plan sends everything
    else to the portable kernel. The CDNA kernel reads B stored N×K (b = w.t())."""
    import torch

    name = select_kernel(_device_arch(a))
    if name == "cdna_pingpong":
        width = CdnaConfig.for_target(_device_arch(a).split(":")[0]).derive().load_width
        return (a.dtype == b.dtype == torch.bfloat16 and a.stride(1) == 1 and b.stride(0) == 1
                and a.shape[1] % width == 0 and out_dtype in (torch.bfloat16, torch.float32))
    if name == "rdna_wmma":
        return a.dtype == b.dtype == torch.float16 and out_dtype == torch.float32
    return False


def gemm(a, b, out, *, alpha=1.0, beta=0.0, c=None) -> None:
    """out = alpha · a @ b + beta · c on a ROCm device; a (M, K), b (K, N).

    CDNA ping-pong: bf16 a/b with b stored N×K (b = w.t(), the transpose_b layout), out bf16
    or fp32. RDNA WMMA: fp16 a/b, out fp32 (b is passed to the kernel as a K×N copy).
    Other archs: the portable kernel.
    """
    import torch

    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] or out.shape != (a.shape[0], b.shape[1]):
        raise PingpongError(f"shapes: a {tuple(a.shape)}, b {tuple(b.shape)} (K×N), out {tuple(out.shape)} do not match")
    b = b.t()  # the kernels below take B as N×K
    arch = _device_arch(a)
    name = select_kernel(arch)
    if name == "portable":
        from ..portable import portable_gemm

        portable_gemm(a, b.t(), out, alpha=alpha, beta=beta, c=c)
        return None
    base = arch.split(":")[0]
    if name == "cdna_pingpong":
        config = CdnaConfig.for_target(base)
        width = config.derive().load_width
        if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
            raise PingpongError("dtype: the CDNA ping-pong takes bf16 a and b")
        if a.shape[1] % width or a.stride(1) != 1 or b.stride(1) != 1:
            raise PingpongError(f"layout: a and b must be K-contiguous with K % {width} == 0 (direct-to-LDS width)")
        args, kwargs, grid = cdna_pingpong.launch_args(a, b, out, c, alpha, beta, config)
        cdna_pingpong.cdna_pingpong_gemm[grid](*args, **kwargs)
        return None
    config = WmmaConfig("gfx1151" if base not in ("gfx1151",) else base)
    if a.dtype != torch.float16 or b.dtype != torch.float16 or out.dtype != torch.float32:
        raise PingpongError("dtype: the RDNA WMMA kernel takes fp16 a and b and writes fp32 out")
    args, kwargs, grid = rdna_wmma.launch_args(a, b.t().contiguous(), out, c, alpha, beta, config)
    rdna_wmma.rdna_wmma_gemm[grid](*args, **kwargs)
    return None
