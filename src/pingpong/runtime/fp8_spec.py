"""The FP8 grouped product's contract (pingpong.scaled_grouped_mm), checked on its GemmSpec's
arguments: a leaf beside pingpong.runtime.spec (torch, pingpong.errors and spec only), as
spec.py's `validate_grouped` is grouped_mm's. One job: what a scaled grouped call may be,
under its argument names (a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum), before
any work, on any machine (the op's fake implementation validates through it too).

    spec.build_grouped(a, b, offs, out_dtype, scales=(scale_a, scale_b, use_fast_accum))
        the key: groups (ROWS, G, offs) and the scales in epilogue.scales (spec.ScaleSpec)
    validate_scaled_grouped(...)   on a cache miss: PingpongError naming the argument, or the
        scale kinds (`scale_kinds`: the one decision of the mode, which the Hopper backend's
        plan asks again from the spec's Operands)

What is not decided here: the device. A CUDA tensor is the front end's last check
(pingpong.fp8_grouped); a Hopper GPU and 16-byte-aligned bases are the Hopper backend's
answer (pingpong.hopper.host.backend.can_implement), and the portable and AMD backends refuse a
scaled grouped spec with their reason.
"""

from __future__ import annotations

import torch

from ..errors import PingpongError, check_tensor
from .spec import SCALE_BLOCK, check_block_scale_a, check_fp8_sizes, check_offs, tma_matrix_stride, tma_row_stride

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
FP8_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_scale_tensor(name: str, s, device) -> None:
    """An fp32 scale tensor on `device` (scaled_mm's and scaled_grouped_mm's)."""
    check_tensor(name, s)
    if s.dtype != torch.float32:
        raise PingpongError(f"{name}: dtype {s.dtype} is not supported; scales are torch.float32")
    if s.device != device:
        raise PingpongError(f"{name} must be on the operands' device ({device}), got {s.device}")


def check_fp8(name: str, t, dims: int) -> None:
    """An fp8 tensor of `dims` dims (scaled_mm's and scaled_grouped_mm's operands)."""
    check_tensor(name, t)
    if t.dim() != dims:
        raise PingpongError(f"{name}: expected a {dims}-D tensor, got shape {tuple(t.shape)}")
    if t.dtype not in FP8_DTYPES:
        raise PingpongError(f"{name}: dtype {t.dtype} is not supported; expected one of {FP8_DTYPES}"
                            " (quantize with pingpong.quantize_fp8)")


def _block_scale_kinds(T: int, K: int, N: int, G: int, scale_a, scale_b) -> tuple[str, str]:
    """("block", "block") for DeepSeek-V3's scales (pingpong.fp8_grouped), checked: K and N
    multiples of 128, scale_b (G, N/128, K/128) contiguous in K/128, scale_a (T, K/128) as
    pingpong.scaled_mm's (spec.check_block_scale_a)."""
    B = SCALE_BLOCK
    if K % B:
        raise PingpongError(f"K={K}: block-wise scales (1×{B} of a, {B}×{B} of b) need K to be a multiple of {B}")
    if N % B:
        raise PingpongError(f"N={N}: block-wise scales ({B}×{B} blocks of each expert's weight) need N to be a"
                            f" multiple of {B}")
    nb, kb = N // B, K // B
    if scale_b.shape[0] != G:
        raise PingpongError(f"scale_b: {scale_b.shape[0]} groups of block scales (scale_b.shape[0]), but offs has"
                            f" {G} (one (N/{B}, K/{B}) block of scales per group)")
    if tuple(scale_b.shape[1:]) != (nb, kb):
        raise PingpongError(f"scale_b: block-wise scales are (G, N/{B}, K/{B}) = ({G}, {nb}, {kb}) (one per {B}×{B}"
                            f" block of each expert's (N, K) weight), got shape {tuple(scale_b.shape)}")
    if scale_b.stride(2) != 1 and kb > 1:
        raise PingpongError(f"scale_b: block-wise scales must be contiguous in K/{B} (stride(2) = 1), got strides"
                            f" {tuple(scale_b.stride())}")
    check_block_scale_a(scale_a, T, kb)
    return "block", "block"


def scale_kinds(a, b, scale_a, scale_b) -> tuple[str, str]:
    """("row" | "tensor", "row" | "group" | "tensor") of validated operands' scales, or
    ("block", "block") (a 3-D scale_b names the block-wise mode), or a PingpongError naming
    the scale. Tensors or a spec's Operands alike."""
    T, K = a.shape
    G, _, N = b.shape
    if scale_b.dim() == 3:
        return _block_scale_kinds(T, K, N, G, scale_a, scale_b)
    if scale_a.dim() == 2 and scale_a.numel() > 1 and scale_a.shape[1] > 1:
        B = SCALE_BLOCK
        raise PingpongError(f"scale_b: scale_a {tuple(scale_a.shape)} looks block-wise (T, K/{B}); block-wise"
                            f" scale_b is (G, N/{B}, K/{B}) = ({G}, {N // B}, {K // B}), got shape {tuple(scale_b.shape)}")
    if scale_a.numel() == 1:
        ka = "tensor"
    elif scale_a.dim() == 1 and scale_a.shape[0] == T:
        if scale_a.stride(0) != 1:
            raise PingpongError(f"scale_a: must be contiguous, got stride {scale_a.stride(0)}")
        ka = "row"
    else:
        raise PingpongError(f"scale_a: expected (T,) = ({T},) fp32 (one scale per row of a) or one element, got shape"
                            f" {tuple(scale_a.shape)}")
    if scale_b.numel() == 1:
        kb = "tensor"
    elif scale_b.dim() == 1 and scale_b.shape[0] == G:
        kb = "group"
    elif scale_b.dim() == 2 and tuple(scale_b.shape) == (G, N):
        if scale_b.stride(1) != 1:
            raise PingpongError(f"scale_b: (G, N) scales must be contiguous in N (stride(1) = 1), got strides"
                                f" {tuple(scale_b.stride())}")
        kb = "row"
    else:
        raise PingpongError(f"scale_b: expected (G, N) = ({G}, {N}) fp32 (one scale per group and column of b), (G,)"
                            f" or one element, got shape {tuple(scale_b.shape)}")
    return ka, kb


#: the FP8 products' operands and scales, in `refuse_grad`'s default order (a call with more
#: tensors names them all: a tensor without a name is an error, never left unchecked)
GRAD_NAMES = ("a", "b", "scale_a", "scale_b")


def refuse_grad(op: str, *tensors, names=GRAD_NAMES) -> None:
    """The one decision of what differentiates through FP8: not the FP8 operands. scaled_mm,
    scaled_grouped_mm, quantize_fp8 and the inference Float8Linear have no backward, so an
    argument that requires grad while grad mode is on is a PingpongError naming it (`names`,
    in `tensors`' order). FP8 training differentiates the high-precision inputs instead
    (pingpong.fp8_training: its forward and gradient GEMMs quantize inside, where no grad is
    recorded). Not in any spec: checked on every call, cache hits included."""
    if torch.is_grad_enabled():
        for name, t in zip(names, tensors, strict=True):
            if t is not None and t.requires_grad:
                raise PingpongError(f"{name}: requires grad, but {op} is inference only (no backward through FP8"
                                    " operands); for FP8 training use pingpong.fp8_training.fp8_linear or"
                                    " pingpong.nn.replace_linear(model, fp8=\"row\", training=True), else detach it"
                                    " or run under torch.no_grad()")


def check_fast_accum(use_fast_accum) -> None:
    """use_fast_accum must be a bool: 1 or 2.0 would be one as a cache key or once the
    dispatcher coerced it for a traced op, where eager refuses them. Every FP8 product's front
    end checks it, the traced calls before they reach their op."""
    if not isinstance(use_fast_accum, bool):
        raise PingpongError(f"use_fast_accum: expected a bool, got {use_fast_accum!r}")


def validate_scaled_grouped(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum) -> tuple[str, str]:
    """scaled_grouped_mm's contract (pingpong.fp8_grouped's table): the scale kinds, or a
    PingpongError naming the argument at fault. Reads shapes, dtypes, strides and devices only
    (never offs's or the scales' values, never an address). A spec is only cached after this
    passed, so an equal spec later needs no validation."""
    check_fp8("a", a, 2)
    if b is not None and isinstance(b, torch.Tensor) and b.dim() == 2:
        raise PingpongError(f"b: expected a 3-D (G, K, N) tensor (2-D × 3-D, ragged rows: the MoE forward), got shape"
                            f" {tuple(b.shape)}; the other grouped layouts are not built for FP8")
    check_fp8("b", b, 3)
    if a.dtype != b.dtype:
        raise PingpongError(f"b: dtype {b.dtype} differs from a's {a.dtype}; mixed fp8 kinds are not supported")
    if b.device != a.device:
        raise PingpongError(f"b: on {b.device}; expected a's device {a.device}")
    T, K = a.shape
    G, Kb, N = b.shape
    if Kb != K:
        raise PingpongError(f"b: its K ({Kb}, b.shape[1]) must equal a's ({K}, a.shape[1]); a is {tuple(a.shape)},"
                            f" b is {tuple(b.shape)}")
    check_fp8_sizes(K, N, "torch._scaled_grouped_mm")
    if a.stride(1) != 1 and K > 1 or (T > 1 and not tma_row_stride(a.stride(0), K, 1)):
        raise PingpongError(f"a: expected row-major (T, K) with a row stride that is a multiple of 16 and ≥ K, got"
                            f" strides {tuple(a.stride())} (refused, not copied)")
    if b.stride(1) != 1 or (N > 1 and not tma_row_stride(b.stride(2), K, 1)) or \
            (G > 1 and not tma_matrix_stride(b.stride(0), 1)):
        raise PingpongError(f"b: expected K-major (G, K, N), i.e. w.transpose(1, 2) of row-major (G, N, K) expert"
                            f" weights (16-byte multiple strides), got strides {tuple(b.stride())}; fp8 wgmma reads"
                            " K-major operands only (refused, not copied)")
    if check_offs(offs, a.device) != G:
        raise PingpongError(f"offs: length {offs.shape[0]} must equal b's group count {G} (b.shape[0])")
    check_scale_tensor("scale_a", scale_a, a.device)
    check_scale_tensor("scale_b", scale_b, a.device)
    kinds = scale_kinds(a, b, scale_a, scale_b)
    if out_dtype not in FP8_OUT_DTYPES:
        raise PingpongError(f"out_dtype: expected one of {FP8_OUT_DTYPES}, got {out_dtype!r}")
    check_fast_accum(use_fast_accum)
    refuse_grad("scaled_grouped_mm", a, b, scale_a, scale_b)
    return kinds
