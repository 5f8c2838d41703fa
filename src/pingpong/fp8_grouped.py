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
pingpong.hopper.kernels.fp8_grouped (Hopper only). use_fast_accum as torch's: False (default)
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
use_fast_accum of another kind; inputs that require grad (the FP8 operands have no
backward: MoE experts train through pingpong.fp8_grouped_training.fp8_grouped_linear, which
quantizes inside); a device that is not a Hopper GPU.

Where it runs: a call builds one grouped GemmSpec with its scales in the epilogue
(pingpong.runtime.spec.build_grouped), the plan cache's key; a new spec is validated once
(pingpong.runtime.fp8_spec.validate_scaled_grouped: this table's refusals) and planned by the
backend registry: the Hopper backend takes it where the GPU is a Hopper and a's and b's bases
are 16-byte aligned; portable and AMD refuse it, naming the missing kernel.

As grouped_mm: the host never reads offs (no sync; a CUDA graph replays the call with new
offsets), rows past offs[-1] are not written (the op's zero_tail flag, which FP8 training's
data gradient sets, zeroes them after the product, writing only those rows), an end past T is clipped to T and a decreasing
end gives an empty group (pingpong.grouped.check_offsets checks the values on request).
Scale values are not checked either (pingpong.fp8.check_scales, one sync, on request).
While torch.compile traces, the call is the ``pingpong::scaled_grouped_mm`` op, whose fake
implementation runs the same validation and gives the (T, N) shape.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .integration import inductor, ops
from .errors import PingpongError, check_tensor
from .portable import grouped as portable_grouped
from .runtime import fp8_spec
from .runtime import plan as plan_mod
from .runtime import spec as spec_mod
from .runtime.device import is_hopper
from .runtime.spec import SCALE_BLOCK

__all__ = ["scaled_grouped_mm", "check_scaled_grouped_mm", "scaled_grouped_k_mm", "check_scaled_grouped_k_mm"]


# ----------------------------------------------------------------------------- validation


def check_scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum,
                            device_checks: bool = True) -> tuple[str, str]:
    """Validate a scaled_grouped_mm call (module docstring): the scale kinds, or a
    PingpongError naming the argument (pingpong.runtime.fp8_spec.validate_scaled_grouped);
    then, unless `device_checks` is False (the fake implementation), a CUDA device. Whether
    that GPU is a Hopper and the bases 16-byte aligned is the Hopper backend's answer."""
    kinds = fp8_spec.validate_scaled_grouped(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum)
    if device_checks:
        check_gpu(a.device)
    return kinds


def check_gpu(device) -> None:
    """Last of the checks of a call that runs (not of the fake implementation's): a GPU tensor."""
    if device.type != "cuda":
        raise PingpongError(f"a: pingpong.scaled_grouped_mm runs on a Hopper (sm_90) GPU, got a tensor on {device}")


# ----------------------------------------------------------------------------- plan and launch


def _plan(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum):
    """The cached plan of this call's grouped GemmSpec (its scales in the epilogue), validated
    when the spec is new and planned by the backend registry (the Hopper backend's
    pingpong.hopper.host.fp8_grouped.Fp8GroupedPlan; "empty" where there is nothing to compute).
    A hit means the call is valid but for requires_grad, which is not in the key."""
    spec = spec_mod.build_grouped(a, b, offs, out_dtype, (scale_a, scale_b, use_fast_accum))
    plan = plan_mod.get(spec)
    if plan is None:
        check_scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum)
        plan = plan_mod.cached_plan(spec)
    else:
        fp8_spec.refuse_grad("scaled_grouped_mm", a, b, scale_a, scale_b)
    return plan


def scaled_grouped_mm_direct(a, b, scale_a, scale_b, offs, out_dtype=torch.bfloat16, use_fast_accum=False,
                             out=None, zero_tail=False) -> Tensor:
    """The product on the direct path (no dispatcher): validate (plan miss), launch; into
    `out` (contiguous (T, N) of out_dtype: inductor's buffer) when given. zero_tail: the rows
    past offs[-1] set to zero after (pingpong.portable.grouped.zero_tail: only those rows
    written, the end read on the device), as a data gradient needs them."""
    plan = _plan(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum)
    if out is None:
        out = torch.empty(a.shape[0], b.shape[2], dtype=out_dtype, device=a.device)
    if out.numel() and b.shape[0]:
        plan.run(a, b, out, spec_mod.EpilogueArgs(scale_a=scale_a, scale_b=scale_b, offs=offs))
    if zero_tail:
        portable_grouped.zero_tail(out, offs, interpret=out.device.type == "cpu")
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
    return scaled_grouped_mm_route(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum)


def scaled_grouped_mm_route(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum, zero_tail=False) -> Tensor:
    """scaled_grouped_mm, and with zero_tail the rows past offs[-1] set to zero (a data
    gradient's, pingpong.fp8_grouped_training): the op while a tracer runs, else the direct path."""
    if ops.traced(a, b, scale_a, scale_b, offs):
        fp8_spec.check_fast_accum(use_fast_accum)  # before the dispatcher makes a bool of it
        return torch.ops.pingpong.scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum,
                                                    zero_tail)
    return scaled_grouped_mm_direct(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum, zero_tail=zero_tail)


@torch.library.custom_op("pingpong::scaled_grouped_mm", mutates_args=())
def _scaled_grouped_mm_op(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, offs: Tensor,
                          out_dtype: torch.dtype, use_fast_accum: bool, zero_tail: bool = False) -> Tensor:
    return scaled_grouped_mm_direct(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum, zero_tail=zero_tail)


@_scaled_grouped_mm_op.register_fake
def _(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum, zero_tail=False):
    inductor.register()
    check_scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype, use_fast_accum, device_checks=False)
    return a.new_empty((a.shape[0], b.shape[2]), dtype=out_dtype)


@inductor.lowered("scaled_grouped_mm")
def scaled_grouped_mm_out(a, b, scale_a, scale_b, offs, *, use_fast_accum: bool, zero_tail: bool = False, out):
    """pingpong::scaled_grouped_mm into inductor's buffer (pingpong.integration.inductor)."""
    scaled_grouped_mm_direct(a, b, scale_a, scale_b, offs, out.dtype, use_fast_accum, out, zero_tail)


# ----------------------------------------------------------------------------- K grouped: the weight gradient

#: the scalings of scaled_grouped_k_mm: per expert and row ("row"), per 128 tokens and row ("block")
GROUPED_K_SCALINGS = ("row", "block")
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_scaled_grouped_k_mm(a, b, scale_a, scale_b, poffs, scaling, out_dtype, device_checks: bool = True) -> None:
    """scaled_grouped_k_mm's arguments: PingpongError naming the argument (shapes, dtypes,
    strides, devices; the padded ends are device data, not read); then, unless `device_checks`
    is False (the fake implementation), a Hopper GPU and 16-byte aligned bases."""
    for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("poffs", poffs)):
        check_tensor(name, t)
    if scaling not in GROUPED_K_SCALINGS:
        raise PingpongError(f"scaling: expected one of {GROUPED_K_SCALINGS}, got {scaling!r}")
    if out_dtype not in _OUT_DTYPES:
        raise PingpongError(f"out_dtype: expected one of {_OUT_DTYPES}, got {out_dtype!r}")
    for name, t in (("a", a), ("b", b)):
        if t.dim() != 2 or t.dtype not in _FP8:
            raise PingpongError(f"{name}: expected a 2-D fp8 tensor (e4m3fn or e5m2), got {t.dtype} of shape"
                                f" {tuple(t.shape)}")
        if t.shape[0] % 16 or t.shape[1] % 16 or (t.shape[1] and (t.stride(1) != 1 or t.stride(0) % 16
                                                                   or t.stride(0) < t.shape[1])):
            raise PingpongError(f"{name}: expected rows of the padded tokens, contiguous, 16-byte aligned, and a"
                                f" multiple of 16 of them (pingpong.quantize_groups_t's layout), got shape"
                                f" {tuple(t.shape)} and strides {tuple(t.stride())}")
        if t.device != a.device:
            raise PingpongError(f"{name}: on {t.device}; expected a's device {a.device}")
    if b.shape[1] != a.shape[1]:
        raise PingpongError(f"b: its padded token length {b.shape[1]} differs from a's {a.shape[1]}")
    if poffs.dim() != 1 or poffs.dtype != torch.int32 or not poffs.shape[0] or not poffs.is_contiguous():
        raise PingpongError(f"poffs: expected a non-empty contiguous 1-D int32 tensor of padded ends, got"
                            f" {poffs.dtype} of shape {tuple(poffs.shape)}")
    G, (M, TP), N = poffs.shape[0], a.shape, b.shape[0]
    rows = G if scaling == "row" else TP // SCALE_BLOCK  # (every run ends at a multiple of 128 ≤ TP)
    for name, t, width in (("scale_a", scale_a, M), ("scale_b", scale_b, N)):
        if t.dtype != torch.float32 or tuple(t.shape) != (rows, width) or (width > 1 and t.stride(1) != 1) \
                or (rows > 1 and (t.stride(0) % 4 or t.stride(0) < width)):
            what = "(G, rows)" if scaling == "row" else "(padded length / 128, rows)"
            raise PingpongError(f"{name}: expected fp32 {what} = {(rows, width)} with contiguous, 16-byte aligned"
                                f" rows ({scaling}-wise), got {t.dtype} of shape {tuple(t.shape)} and strides"
                                f" {tuple(t.stride())}")
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b), ("poffs", poffs)):
        if t.device != a.device:
            raise PingpongError(f"{name}: on {t.device}; expected a's device {a.device}")
    fp8_spec.refuse_grad("scaled_grouped_k_mm", a, b, scale_a, scale_b, names=("a", "b", "scale_a", "scale_b"))
    if device_checks:
        check_gpu(a.device)
        check_hopper(a.device)
        for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
            if t.data_ptr() % 16:
                raise PingpongError(f"{name}: its base address must be 16-byte aligned (TMA); pass a fresh tensor")


def check_hopper(device) -> None:
    """The K-grouped kernel runs on Hopper (sm_90) only."""
    if not is_hopper(device.index if device.index is not None else torch.cuda.current_device()):
        raise PingpongError(f"a: pingpong.scaled_grouped_k_mm runs on a Hopper (sm_90) GPU; {device} is not one")


def scaled_grouped_k_mm_direct(a, b, scale_a, scale_b, poffs, scaling="row", out_dtype=torch.bfloat16,
                               out=None) -> Tensor:
    """The product on the direct path (no dispatcher): validate, launch; into `out`
    (contiguous (G, M, N) of out_dtype: inductor's buffer) when given."""
    check_scaled_grouped_k_mm(a, b, scale_a, scale_b, poffs, scaling, out_dtype)
    if out is None:
        out = torch.empty(poffs.shape[0], a.shape[0], b.shape[0], dtype=out_dtype, device=a.device)
    if a.shape[1] < SCALE_BLOCK:  # no run fits: every expert is empty (and no scale row exists block-wise)
        out.zero_()
    elif out.numel():
        _launch_grouped_k(a, b, out, poffs, scale_a, scale_b, scaling)
    return out


def _launch_grouped_k(a, b, out, poffs, scale_a, scale_b, scaling) -> None:
    """The Hopper kernel's launch (pingpong.hopper.host.fp8_grouped_k); the CPU tests replace it."""
    from .hopper.host import fp8_grouped_k

    fp8_grouped_k.launch(a, b, out, poffs, scale_a, scale_b, scaling)


def scaled_grouped_k_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, poffs: Tensor, *,
                        scaling: str = "row", out_dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """FP8 product with K grouped: out[g] = (a[:, P_{g-1}:P_g] @ b[:, P_{g-1}:P_g]ᵀ)·scales, the
    mixture-of-experts weight gradient dW_g = dY_gᵀ·X_g (pingpong.hopper.kernels.fp8_grouped_k).

    Args:
        a: (M, TP) fp8, b: (N, TP) fp8: the tokens of each expert contiguous, expert g's in
            [P_{g-1}, P_g), a multiple of 128 long, zeros after its tokens
            (pingpong.quantize_groups_t(dY) and (X) give them so).
        scale_a, scale_b: fp32. scaling "row": (G, M) and (G, N), per expert along its tokens;
            "block": (TP/128, M) and (TP/128, N), per 128 tokens.
        poffs: (G,) int32 padded ends P_g on a's device (read on the device only).
    Returns:
        (G, M, N) out_dtype; an expert with no token gets zeros.
    """
    if ops.traced(a, b, scale_a, scale_b, poffs):
        return torch.ops.pingpong.scaled_grouped_k_mm(a, b, scale_a, scale_b, poffs, scaling, out_dtype)
    return scaled_grouped_k_mm_direct(a, b, scale_a, scale_b, poffs, scaling, out_dtype)


@torch.library.custom_op("pingpong::scaled_grouped_k_mm", mutates_args=())
def _scaled_grouped_k_mm_op(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, poffs: Tensor, scaling: str,
                            out_dtype: torch.dtype) -> Tensor:
    return scaled_grouped_k_mm_direct(a, b, scale_a, scale_b, poffs, scaling, out_dtype)


@_scaled_grouped_k_mm_op.register_fake
def _(a, b, scale_a, scale_b, poffs, scaling, out_dtype):
    inductor.register()
    check_scaled_grouped_k_mm(a, b, scale_a, scale_b, poffs, scaling, out_dtype, device_checks=False)
    return a.new_empty((poffs.shape[0], a.shape[0], b.shape[0]), dtype=out_dtype)


@inductor.lowered("scaled_grouped_k_mm")
def scaled_grouped_k_mm_out(a, b, scale_a, scale_b, poffs, *, scaling: str, out):
    """pingpong::scaled_grouped_k_mm into inductor's buffer (pingpong.integration.inductor)."""
    scaled_grouped_k_mm_direct(a, b, scale_a, scale_b, poffs, scaling, out.dtype, out)
