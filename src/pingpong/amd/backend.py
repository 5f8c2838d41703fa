"""The AMD backend: the AMD Gluon kernels (pingpong.amd; compiled and checked offline, never
run here), only where the user opts in (PINGPONG_AMD_KERNELS=1, read when a product is first
planned; docs/amd.md), and where they apply: a ROCm GPU of a supported architecture, 2-D, no
fused bias or activation, the dtypes and layout the kernel takes, spans its buffer
instructions address. Everything else on ROCm takes the portable kernel, grouped products
(pingpong.grouped) too."""

from __future__ import annotations

import os

import torch

from ..runtime.addressing import unaddressable
from ..runtime.plan import Plan, device_index
from ..runtime.spec import NO_ARGS, GemmSpec
from . import dispatch

NAME = "amd"


def can_implement(spec: GemmSpec) -> str | None:
    if torch.version.hip is None or spec.device.type == "cpu":
        return "not a ROCm GPU"
    if spec.groups is not None:
        if spec.epilogue.scales is not None:
            return "no AMD FP8 grouped kernel (scaled_grouped_mm runs on Hopper only)"
        return "no AMD grouped kernel: grouped products take the portable kernel"
    if len(spec.a.shape) != 2 or len(spec.b.shape) != 2:
        return "batched products take the portable kernel"
    if spec.epilogue.scales is not None:
        return "the AMD fp8 kernels are compiled offline only (docs/amd.md)"
    if not spec.plain:
        return "a fused bias or activation takes the portable kernel"
    if os.environ.get("PINGPONG_AMD_KERNELS", "0") != "1":  # never run on hardware: not a default
        return ("the AMD Gluon kernels are opt-in (compiled and checked offline, never run on AMD hardware by this"
                " project: docs/amd.md): set PINGPONG_AMD_KERNELS=1, or call pingpong.amd.gemm")
    arch = dispatch._device_arch(spec.a)
    kernel = dispatch.select_kernel(arch)
    if kernel == "portable" or not dispatch.accepts(spec.a, spec.b, spec.out_dtype):
        return f"no AMD Gluon kernel for {arch.split(':')[0]} with {spec.a.dtype} inputs, this layout and" \
               f" {spec.out_dtype} output"
    out = spec.c if spec.inplace else None
    read = spec.c if spec.epilogue.reads_c else None
    why = unaddressable(kernel, a=spec.a, b=spec.b, out=out, c=read)
    if why is None and out is None:  # a fresh contiguous output
        M, N = spec.a.shape[0], spec.b.shape[1]
        why = unaddressable(kernel, out=torch.empty(M, N, dtype=spec.out_dtype, device="meta"))
    return why


def plan(spec: GemmSpec) -> "AmdPlan":
    return AmdPlan(device_index(spec.device), spec.epilogue.reads_c)


class AmdPlan(Plan):
    """2-D only, no fused bias or activation (those take the portable kernel)."""

    __slots__ = ("reads_c",)

    def __init__(self, device, read):
        self.device, self.reads_c, self.path, self.activation = device, read, "amd", "none"

    def run(self, a, b, out, args=NO_ARGS):
        dispatch.gemm(a, b, out, alpha=args.alpha, beta=args.beta, c=args.c if self.reads_c else None)
