"""FP8 grouped GEMM for mixture-of-experts inference: `scaled_grouped_mm`, with
torch._scaled_grouped_mm's conventions for the 2-D × 3-D (ragged rows) product.

    q_x, s_x = pingpong.quantize_fp8(x, "row")                     # (T, K) e4m3, (T, 1)
    q_w, s_w = pingpong.quantize_fp8(w.reshape(G * N, K), "row")   # w (G, N, K): expert weights
    y = pingpong.scaled_grouped_mm(q_x, q_w.view(G, N, K).transpose(1, 2), s_x.view(T),
                                   s_w.view(G, N), offs)           # (T, N) bf16

    y[s_g : e_g] = (a[s_g : e_g] @ b[g]) · scale_a[s_g : e_g, None] · scale_b[g, None, :]
    (e_g = offs[g], s_g = e_{g-1}, s_0 = 0), fp32 accumulation, one cast to out_dtype

Block-wise (DeepSeek-V3's recipe; K and N multiples of 128):

    q_x, s_x = pingpong.quantize_fp8(x, "block")                   # (T, K/128), strides (1, T)
    q_w, s_w = pingpong.quantize_fp8(w.reshape(G * N, K), "block128x128")   # (G·N/128, K/128)
    y = pingpong.scaled_grouped_mm(q_x, q_w.view(G, N, K).transpose(1, 2), s_x,
                                   s_w.view(G, N // 128, K // 128), offs)

    y[r, n] = Σ_kb (a[r, kb-block] · b[g][kb-block, n]) · scale_a[r, kb] · scale_b[g, n // 128, kb]

| argument | shape, layout                              | notes                                    |
|----------|--------------------------------------------|------------------------------------------|
| a        | (T, K) row-major, fp8 (e4m3fn or e5m2)     | the routed tokens, sorted by expert      |
| b        | (G, K, N), K-major: w.transpose(1, 2) of   | refused, not copied, otherwise (a copy   |
|          | row-major (G, N, K) expert weights         | per call costs as much as the product)   |
| scale_a  | (T,) fp32 contiguous: row-wise             | or one element: tensor-wise              |
|          | block: (T, K/128), strides (1, T)          | per token and 128-deep K block (1×128),  |
|          |                                            | pingpong.scaled_mm's outer-dim-major     |
| scale_b  | (G, N) fp32, stride(1) = 1: row-wise       | or (G,): one per group; or one element   |
|          | block: (G, N/128, K/128), stride(2) = 1    | per 128×128 block of each expert's w     |
| offs     | (G,) int32 contiguous, cumulative row ends | read on the device only                  |

A 3-D scale_b names the block-wise mode; scale_a must then be block-wise too. The kernel is
pingpong.hopper.fp8_grouped (Hopper only). use_fast_accum as torch's: False (default)
promotes every 128-deep K block into the fp32 accumulator, True lets the wgmmas accumulate
in place; block-wise scales are applied at the promotion, so block-wise always promotes and
ignores the flag (pingpong.scaled_mm's choice). out_dtype bf16 (default, torch's only
choice), fp16 or fp32.

What is refused (PingpongError naming the argument, before any work): operands that are not
fp8 of one kind, not 2-D / 3-D, not K-major, K or N not a multiple of 16, K mismatch,
misaligned strides; scales of the wrong dtype (fp32 only), device, shape or strides;
block-wise: K or N not a multiple of 128, scale_b's group count (shape[0]) other than offs'
length, scale_a not (T, K/128) outer-dim-major, scale_b not (G, N/128, K/128) contiguous in
K/128, a block-wise scale_a beside a row-wise scale_b; offs not a 1-D contiguous int32
tensor on a's device, or of a length other than b's group count; an out_dtype or
use_fast_accum of another kind; inputs that require grad (inference only: there is no
backward); a device that is not a Hopper GPU.

As grouped_mm: the host never reads offs (no sync; a CUDA graph replays the call with new
offsets), rows past offs[-1] are not written, an end past T is clipped to T and a decreasing
end gives an empty group (pingpong.grouped.check_offsets checks the values on request).
Scale values are not checked either (pingpong.fp8.check_scales, one sync, on request).
While torch.compile traces, the call is the ``pingpong::scaled_grouped_mm`` op, whose fake
implementation runs the same validation and gives the (T, N) shape.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .errors import PingpongError, check_tensor
from .fp8 import FP8_DTYPES, FP8_OUT_DTYPES, _check_scale_tensor
from .runtime import plan as plan_mod
from .runtime.spec import SCALE_BLOCK, check_block_scale_a

__all__ = ["scaled_grouped_mm", "check_scaled_grouped_mm"]

BLOCK = SCALE_BLOCK  # K (and N) elements of a block-wise scale's block


# ----------------------------------------------------------------------------- validation


def _check_fp8(name: str, t, dims: int) -> None:
    check_tensor(name, t)
    if t.dim() != dims:
        raise PingpongError(f"{name}: expected a {dims}-D tensor, got shape {tuple(t.shape)}")
    if t.dtype not in FP8_DTYPES:
        raise PingpongError(f"{name}: dtype {t.dtype} is not supported; expected one of {FP8_DTYPES}"
                            " (quantize with pingpong.quantize_fp8)")


def _block_scale_kinds(T: int, K: int, N: int, G: int, scale_a, scale_b) -> tuple[str, str]:
    """("block", "block") for DeepSeek-V3's scales (module docstring), checked: K and N
    multiples of 128, scale_b (G, N/128, K/128) contiguous in K/128, scale_a (T, K/128) as
    pingpong.scaled_mm's (spec.check_block_scale_a)."""
    if K % BLOCK:
        raise PingpongError(f"K={K}: block-wise scales (1×{BLOCK} of a, {BLOCK}×{BLOCK} of b) need K to be a multiple"
                            f" of {BLOCK}")
    if N % BLOCK:
        raise PingpongError(f"N={N}: block-wise scales ({BLOCK}×{BLOCK} blocks of each expert's weight) need N to be"
                            f" a multiple of {BLOCK}")
    nb, kb = N // BLOCK, K // BLOCK
    if scale_b.shape[0] != G:
        raise PingpongError(f"scale_b: {scale_b.shape[0]} groups of block scales (scale_b.shape[0]), but offs has"
                            f" {G} (one (N/{BLOCK}, K/{BLOCK}) block of scales per group)")
    if tuple(scale_b.shape[1:]) != (nb, kb):
        raise PingpongError(f"scale_b: block-wise scales are (G, N/{BLOCK}, K/{BLOCK}) = ({G}, {nb}, {kb}) (one per"
                            f" {BLOCK}×{BLOCK} block of each expert's (N, K) weight), got shape {tuple(scale_b.shape)}")
    if scale_b.stride(2) != 1 and kb > 1:
        raise PingpongError(f"scale_b: block-wise scales must be contiguous in K/{BLOCK} (stride(2) = 1), got strides"
                            f" {tuple(scale_b.stride())}")
    check_block_scale_a(scale_a, T, kb)
    return "block", "block"


def scale_kinds(a, b, scale_a, scale_b) -> tuple[str, str]:
    """("row" | "tensor", "row" | "group" | "tensor") of validated operands' scales, or
    ("block", "block") (a 3-D scale_b names the block-wise mode), or a PingpongError naming
    the scale."""
    T, K = a.shape
    G, _, N = b.shape
    if scale_b.dim() == 3:
        return _block_scale_kinds(T, K, N, G, scale_a, scale_b)
    if scale_a.dim() == 2 and scale_a.numel() > 1 and scale_a.shape[1] > 1:
        raise PingpongError(f"scale_b: scale_a {tuple(scale_a.shape)} looks block-wise (T, K/{BLOCK}); block-wise"
                            f" scale_b is (G, N/{BLOCK}, K/{BLOCK}) = ({G}, {N // BLOCK}, {K // BLOCK}), got shape"
                            f" {tuple(scale_b.shape)}")
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


def check_scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum,
                            device_checks: bool = True) -> tuple[str, str]:
    """Validate a scaled_grouped_mm call (module docstring); the scale kinds. `device_checks`
    False (the fake implementation) skips what fake tensors cannot answer (CUDA, addresses)."""
    _check_fp8("a", a, 2)
    if b is not None and isinstance(b, Tensor) and b.dim() == 2:
        raise PingpongError(f"b: expected a 3-D (G, K, N) tensor (2-D × 3-D, ragged rows: the MoE forward), got shape"
                            f" {tuple(b.shape)}; the other grouped layouts are not built for FP8")
    _check_fp8("b", b, 3)
    if a.dtype != b.dtype:
        raise PingpongError(f"b: dtype {b.dtype} differs from a's {a.dtype}; mixed fp8 kinds are not supported")
    if b.device != a.device:
        raise PingpongError(f"b: on {b.device}; expected a's device {a.device}")
    T, K = a.shape
    G, Kb, N = b.shape
    if Kb != K:
        raise PingpongError(f"b: its K ({Kb}, b.shape[1]) must equal a's ({K}, a.shape[1]); a is {tuple(a.shape)},"
                            f" b is {tuple(b.shape)}")
    if K % 16 or K == 0:
        raise PingpongError(f"K={K}: must be a positive multiple of 16 (16-byte TMA rows of fp8; torch's rule)")
    if N % 16:
        raise PingpongError(f"N={N}: must be a multiple of 16 (torch._scaled_grouped_mm's rule; 16-byte rows)")
    if a.stride(1) != 1 and K > 1 or (T > 1 and (a.stride(0) % 16 or a.stride(0) < K)):
        raise PingpongError(f"a: expected row-major (T, K) with a row stride that is a multiple of 16 and ≥ K, got"
                            f" strides {tuple(a.stride())} (refused, not copied)")
    if b.stride(1) != 1 or (N > 1 and (b.stride(2) % 16 or b.stride(2) < K)) or \
            (G > 1 and (b.stride(0) % 16 or b.stride(0) <= 0)):
        raise PingpongError(f"b: expected K-major (G, K, N), i.e. w.transpose(1, 2) of row-major (G, N, K) expert"
                            f" weights (16-byte multiple strides), got strides {tuple(b.stride())}; fp8 wgmma reads"
                            " K-major operands only (refused, not copied)")
    check_tensor("offs", offs, "a 1-D int32 tensor")
    if offs.dtype != torch.int32:
        raise PingpongError(f"offs: dtype {offs.dtype}; expected torch.int32 (cumulative group ends)")
    if offs.dim() != 1:
        raise PingpongError(f"offs: expected a 1-D tensor, got shape {tuple(offs.shape)}")
    if offs.stride(0) != 1 and offs.shape[0] > 1:
        raise PingpongError(f"offs: must be contiguous, got stride {offs.stride(0)}")
    if offs.device != a.device:
        raise PingpongError(f"offs: on {offs.device}; expected a's device {a.device} (offsets are read on the device)")
    if offs.shape[0] != G:
        raise PingpongError(f"offs: length {offs.shape[0]} must equal b's group count {G} (b.shape[0])")
    _check_scale_tensor("scale_a", scale_a, a.device)
    _check_scale_tensor("scale_b", scale_b, a.device)
    kinds = scale_kinds(a, b, scale_a, scale_b)
    if out_dtype not in FP8_OUT_DTYPES:
        raise PingpongError(f"out_dtype: expected one of {FP8_OUT_DTYPES}, got {out_dtype!r}")
    if not isinstance(use_fast_accum, bool):
        raise PingpongError(f"use_fast_accum: expected a bool, got {use_fast_accum!r}")
    _refuse_grad(a, b, scale_a, scale_b)
    if device_checks:
        from .runtime import device as dev

        if a.device.type != "cuda" or not dev.is_hopper(plan_mod.device_index(a.device)):
            raise PingpongError(f"a: pingpong.scaled_grouped_mm runs on a Hopper (sm_90) GPU, got a tensor on {a.device}")
        _check_addresses(a, b)
    return kinds


def _refuse_grad(*tensors) -> None:
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise PingpongError("scaled_grouped_mm: an input requires grad, but the FP8 grouped product has no backward"
                            " (inference only); detach the inputs or run under torch.no_grad()")


def _check_addresses(a, b) -> None:
    for name, t in (("a", a), ("b", b)):
        if t.data_ptr() % 16:
            raise PingpongError(f"{name}: base address must be 16-byte aligned (TMA)")


# ----------------------------------------------------------------------------- plan and launch


class _Fp8GroupedPlan:
    """One validated call signature: its tile, promotion and cached direct launch."""

    __slots__ = ("device", "promote", "config", "launch")

    def __init__(self, device, promote, config):
        from .runtime.launcher import CachedLaunch

        self.device, self.promote, self.config, self.launch = device, promote, config, CachedLaunch()

    def run(self, a, b, scale_a, scale_b, offs, out) -> None:
        from .hopper import fp8_grouped as kernel
        from .runtime.device import sm_count

        w = b.transpose(1, 2)  # (G, N, K) row-major: the kernel's view
        sa, sb = kernel.block_scale_views(scale_a, scale_b) if scale_b.dim() == 3 else (scale_a, scale_b)
        self.launch(self.device, launch_ptrs(a, w, out, offs, sa, sb), (), kernel.prepare, a, w, out, offs,
                    scale_a, scale_b, self.promote, self.config, sm_count(self.device))


def launch_ptrs(a, w, out, offs, scale_a, scale_b) -> tuple[int, ...]:
    """The base address of each slot of the kernel's leading arguments (pingpong.hopper.
    fp8_grouped.fp8_grouped_gemm: a, W, out as TMA descriptors; out, offs as pointers; the
    scales as pointers, or block-wise as TMA descriptors of their views, block_scale_views)."""
    return (a.data_ptr(), w.data_ptr(), out.data_ptr(), out.data_ptr(), offs.data_ptr(), scale_a.data_ptr(),
            scale_b.data_ptr())


def _key(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum) -> tuple:
    """Everything validation reads but the addresses (checked per call) and requires_grad."""
    return ("fp8-grouped", a.device, a.dtype, a.shape, a.stride(), b.dtype, b.device, b.shape, b.stride(),
            scale_a.dtype, scale_a.device, scale_a.shape, scale_a.stride(), scale_b.dtype, scale_b.device,
            scale_b.shape, scale_b.stride(), offs.dtype, offs.device, offs.shape, offs.stride(), out_dtype,
            use_fast_accum)


def _plan(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum) -> _Fp8GroupedPlan:
    try:
        key = _key(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum)
    except AttributeError:  # not tensors: validation names the argument
        key = None
    plan = plan_mod.get(key)
    if plan is None:
        kinds = check_scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum)
        from .hopper.fp8_grouped import select_fp8_grouped_config

        promote = kinds[0] == "block" or not use_fast_accum  # block scales apply at the promotion
        config = select_fp8_grouped_config(a.shape[0], b.shape[0], b.shape[2], promote)
        plan = plan_mod.store(key, _Fp8GroupedPlan(plan_mod.device_index(a.device), promote, config))
    else:
        _refuse_grad(a, b, scale_a, scale_b)
        _check_addresses(a, b)
    return plan


def scaled_grouped_mm_direct(a, b, scale_a, scale_b, offs, out_dtype=torch.bfloat16, use_fast_accum=False) -> Tensor:
    """The product on the direct path (no dispatcher): validate (plan miss), launch."""
    plan = _plan(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum)
    out = torch.empty(a.shape[0], b.shape[2], dtype=out_dtype, device=a.device)
    if out.numel() and b.shape[0]:
        plan.run(a, b, scale_a, scale_b, offs, out)
    return out


def scaled_grouped_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, offs: Tensor, *,
                      out_dtype: torch.dtype = torch.bfloat16, use_fast_accum: bool = False) -> Tensor:
    """FP8 grouped product, rows of group g times b[g], row- or block-wise scaled (module docstring).

    Args:
        a: (T, K) fp8 row-major, rows sorted by group.
        b: (G, K, N) fp8, the K-major view w.transpose(1, 2) of (G, N, K) weights.
        scale_a: (T,) fp32 per row (or one element). scale_b: (G, N) fp32 per group and column
            (or (G,), or one element). Block-wise: scale_a (T, K/128) strides (1, T), scale_b
            (G, N/128, K/128).
        offs: (G,) int32 cumulative row ends on a's device.
    Returns:
        (T, N) out_dtype; rows past offs[-1] are unset.
    """
    if torch.compiler.is_compiling() or any(type(t) not in (Tensor, torch.nn.Parameter)
                                            for t in (a, b, scale_a, scale_b, offs) if isinstance(t, Tensor)):
        return torch.ops.pingpong.scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum)
    return scaled_grouped_mm_direct(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum)


@torch.library.custom_op("pingpong::scaled_grouped_mm", mutates_args=())
def _scaled_grouped_mm_op(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, offs: Tensor,
                          out_dtype: torch.dtype, use_fast_accum: bool) -> Tensor:
    return scaled_grouped_mm_direct(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum)


@_scaled_grouped_mm_op.register_fake
def _(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum):
    check_scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum, device_checks=False)
    return a.new_empty((a.shape[0], b.shape[2]), dtype=out_dtype)
