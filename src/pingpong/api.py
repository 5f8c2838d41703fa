"""The public GEMM API on PyTorch tensors.

    | function                                   | computes                                 |
    |--------------------------------------------|------------------------------------------|
    | matmul(a, b, *, out_dtype=None)            | a @ b                                    |
    | gemm(a, b, c=None, *, alpha, beta, out_dtype, bias, activation)                       |
    |                                            | act(α·(a@b) + bias) + β·c, one pass      |
    | gemm_(c, a, b, *, alpha, beta, bias, activation) | the same into c, in place          |
    | matmul_tiled(a, b, config)                 | a @ b with an explicit KernelConfig      |

a is (M, K), b is (K, N), both bf16 or both fp16; accumulation is fp32; the output is bf16,
fp16 or fp32 (default: the inputs' dtype). Row- and column-major views of a and b (e.g.
``b = w.t()``, the transpose_b layout) run without copies. matmul and gemm also take
batched a (…, M, K) and b (…, K, N) with torch.matmul's broadcasting (pingpong.batching).
While torch.compile traces, or autograd records, a call goes through pingpong.ops (the
torch.library ops, or an autograd.Function); eager inference takes the direct path below.

Batched: a (B, M, K) and/or b (B, K, N) give a (B, M, N) result in one kernel launch over
the tiles of every batch; a 2-D operand (or batch size 1, or batch stride 0) is shared by
all batches (a weight). c is (B, M, N) or a shared (M, N). (torch.matmul's N-D broadcasting
reduces to this: pingpong's op layer.) The fused epilogue (bias per column or per row, an
activation; pingpong.fused) runs on the fp32 accumulator before the one cast.

A call is validated, then planned once per signature (pingpong.runtime.plan: the decision is cached
and later identical calls skip validation and launch directly); `path_for` names the path:

    | device                       | path            |
    |------------------------------|-----------------|
    | CUDA sm_90 (H100/H200)       | "hopper": the Gluon kernel (pingpong.hopper)        |
    |   an operand, C or the output not TMA-legal (e.g. bf16, K=17: 34-byte rows; a base   |
    |   not 16-byte aligned, x[1:]; odd N in a bf16 output)                                |
    |                              | "hopper-padded": a 16-byte-aligned copy, then the kernel |
    | other CUDA GPUs, ROCm GPUs   | "portable": the plain-Triton kernel (pingpong.portable);  |
    | gfx942/gfx950 (bf16, B N×K), gfx11xx (fp16→fp32) | "amd": the AMD Gluon kernels (pingpong.amd) — compiled, never run here |
    | CPU                          | refused (PingpongError); Triton's interpreter is an explicit |
    |                              | opt-in for tests: pingpong.portable.portable_gemm(..., interpret=True) |
    | M, N or K = 0                | "empty": no kernel                                   |

Every launch runs on the tensors' own GPU (a device guard when it is not the current one),
on that GPU's current stream, and is CUDA-graph capturable.

Bad input raises PingpongError (a ValueError) naming the argument and what was expected, and
changes nothing. Empty M or N gives an empty result; K = 0 gives β·c (or zeros).
"""

from __future__ import annotations

import math
import numbers

import torch

from . import batching as _batching
from . import fused
from . import ops as _ops  # ops imports this module too; each reads the other only at call time
from .runtime import plan as plan_mod
from .runtime.addressing import span
from .hopper.config import KernelConfig
from .errors import PingpongError, check_tensor

INPUT_DTYPES = (torch.bfloat16, torch.float16)
OUTPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

__all__ = ["matmul", "gemm", "gemm_", "matmul_tiled", "path_for"]


# ----------------------------------------------------------------------------- validation


def _check_input_dtype(name: str, t, dtypes=INPUT_DTYPES) -> None:
    if t.dtype not in dtypes:
        raise PingpongError(f"{name}: dtype {t.dtype} is not supported; expected {' or '.join(map(str, dtypes))}")


def _check_operands(a, b, dtypes=INPUT_DTYPES) -> None:
    """a (M, K) and b (K, N), or batched (3-D); `dtypes`: the input dtypes the kernel takes."""
    for name, t in (("a", a), ("b", b)):
        check_tensor(name, t)
        if t.dim() not in (2, 3):
            raise PingpongError(f"{name}: expected a 2-D tensor (or 3-D, batched), got {t.dim()}-D with shape"
                                f" {tuple(t.shape)}")
        _check_input_dtype(name, t, dtypes)
    if a.dtype != b.dtype:
        raise PingpongError(f"a and b must have the same dtype, got a {a.dtype} and b {b.dtype}")
    if a.shape[-1] != b.shape[-2]:
        raise PingpongError(f"shape mismatch: a is {tuple(a.shape)} and b is {tuple(b.shape)}; a.shape[-1] must equal"
                            " b.shape[-2]")
    if a.dim() == b.dim() == 3 and 1 != a.shape[0] != b.shape[0] != 1:
        raise PingpongError(f"a and b: batch sizes {a.shape[0]} (a) and {b.shape[0]} (b) differ (each must be the"
                            " other's or 1)")
    if a.device != b.device:
        raise PingpongError(f"a and b must be on the same device, got a on {a.device} and b on {b.device}")


def _result_shape(a, b) -> tuple:
    """(M, N), or (B, M, N) when a or b is batched."""
    batch = max((t.shape[0] for t in (a, b) if t.dim() == 3), default=None)
    return ((batch,) if batch is not None else ()) + (a.shape[-2], b.shape[-1])


def _check_epilogue(a, b, bias, activation) -> str:
    """The activation's name, after checking it and the bias against the (M, N) result."""
    fused.check_bias(bias, a.shape[-2], b.shape[-1], a.device)
    return fused.check_activation(activation)


def _check_gpu(a) -> None:
    """Last of the checks, so every argument error is reported the same on any machine."""
    if a.device.type != "cuda":
        raise PingpongError(
            f"a and b are on {a.device}: pingpong runs on CUDA/ROCm GPUs. For a CPU check use Triton's "
            "interpreter explicitly: pingpong.portable.portable_gemm(a, b, out, interpret=True)"
        )


def _check_scalar(name: str, v) -> float:
    """A finite real α or β as a float. Non-finite values are refused: inf·0 and NaN would
    spread NaN through the output without the caller asking for it."""
    if type(v) is float and v - v == 0.0:  # the common case: a finite float
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise PingpongError(f"{name}: expected a real number, got {type(v).__name__}")
    try:
        f = float(v)
    except OverflowError:
        raise PingpongError(f"{name}: {v!r} does not fit a float (|{name}| must be below ~1.8e308)") from None
    if not math.isfinite(f):
        raise PingpongError(f"{name}: expected a finite real number, got {f}")
    return f


def _check_out_dtype(out_dtype, default: torch.dtype) -> torch.dtype:
    if out_dtype is None:
        return default
    if out_dtype not in OUTPUT_DTYPES:
        raise PingpongError(f"out_dtype: {out_dtype} is not supported; expected one of {OUTPUT_DTYPES}")
    return out_dtype


def _check_c(c, a, b, dtype: torch.dtype, name: str = "c", shared_ok: bool = False) -> None:
    """c of the result's shape; `shared_ok`: a batched result also takes an (M, N) c."""
    check_tensor(name, c)
    shape = _result_shape(a, b)
    if tuple(c.shape) != shape and not (shared_ok and tuple(c.shape) == shape[-2:]):
        also = f" or {shape[-2:]} (shared by the batches)" if shared_ok and len(shape) == 3 else ""
        raise PingpongError(f"{name}: expected shape {shape}{also} (the result's), got {tuple(c.shape)}")
    if c.dtype != dtype:
        raise PingpongError(f"{name}: expected dtype {dtype} (the output dtype), got {c.dtype}")
    if c.device != a.device:
        raise PingpongError(f"{name} must be on the same device as a and b ({a.device}), got {c.device}")


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last+1) byte addresses of t's elements (t non-empty, strides ≥ 0)."""
    start = t.data_ptr()
    return start, start + t.element_size() * (1 + span(t))


def _overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the address ranges of x and y intersect. Compared by address, not by storage:
    two storages (or a storage and a view made elsewhere) can map the same memory."""
    if x.numel() == 0 or y.numel() == 0:
        return False
    (x0, x1), (y0, y1) = _span(x), _span(y)
    return x0 < y1 and y0 < x1


def _self_overlapping(t: torch.Tensor) -> bool:
    """Whether two elements of t may share memory (an expand()ed or as_strided view).
    Sufficient test: with the dimensions of extent > 1 sorted by stride, each stride is
    positive and at least the span of the dimensions inside it; layouts that interleave
    without overlapping are refused too (rare; the message says so)."""
    dims = sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1)
    inner = 1
    for st, n in dims:
        if st < inner:
            return True
        inner = st * n
    return False


def _check_inplace_target(c, name: str = "c") -> None:
    if _self_overlapping(c):
        raise PingpongError(
            f"{name}: its elements overlap or interleave in memory (shape {tuple(c.shape)}, strides {c.stride()}, e.g."
            f" an expand()ed view); the kernel writes every element of {name} once, so {name} must not alias itself")


def _check_no_alias(c, a, b, name: str = "c") -> None:
    for other, t in (("a", a), ("b", b)):
        if _overlaps(c, t):
            raise PingpongError(f"{name} must not share memory with {other} (the product would read what it overwrites)")


def _check_no_alias_fast(c, a, b, extents) -> None:
    """`_check_no_alias` with the byte extents the plan computed once (strides are keyed)."""
    ea, eb, ec = extents
    c0 = c.data_ptr()
    c1 = c0 + ec
    a0, b0 = a.data_ptr(), b.data_ptr()
    if (c0 < a0 + ea and a0 < c1) or (c0 < b0 + eb and b0 < c1):
        _check_no_alias(c, a, b)  # the same test, reported with the argument's name


def _check_bias_not_in(c, bias, name: str = "c") -> None:
    if bias is not None and _overlaps(c, bias):
        raise PingpongError(f"bias must not share memory with {name} (the epilogue would read what it overwrites)")


def _validate_inplace(c, a, b, bias, activation) -> str:
    """gemm_'s checks (path_for(..., inplace=True) runs the same): arguments, then the device,
    then the address ranges (meaningless off the GPU: meta tensors all sit at address 0).
    Every in-place plan is built after these; its key fixes c's strides, so a plan hit needs
    only the per-call address checks (`_check_inplace_addresses`). Returns the activation."""
    _check_operands(a, b)
    if isinstance(c, torch.Tensor) and c.dtype not in OUTPUT_DTYPES:
        raise PingpongError(f"c: dtype {c.dtype} is not supported; expected one of {OUTPUT_DTYPES}")
    _check_c(c, a, b, getattr(c, "dtype", None))
    act = _check_epilogue(a, b, bias, activation)
    _check_inplace_target(c)
    _check_gpu(a)
    _check_no_alias(c, a, b)
    _check_bias_not_in(c, bias)
    return act


# ----------------------------------------------------------------------------- the plan of a call


def _plan(a, b, c, beta, out_dtype, inplace, config, bias=None, activation=None) -> plan_mod.Plan:
    """The cached plan of this call, or None when there is none yet (then validate, build)."""
    try:
        key = plan_mod.signature(a, b, c, beta, out_dtype, inplace, config, bias, activation)
        plans = plan_mod.PLANS
        plan = plans.get(key)
        if plan is not None:
            plans.move_to_end(key)  # least recently used first: plan.store evicts from that end
        return plan, key
    except (AttributeError, TypeError, RuntimeError):  # not (dense) tensors, unhashable: validation reports it
        return None, None


def _validate_gemm(a, b, c, out_dtype, bias=None, activation=None) -> tuple[torch.dtype, str]:
    _check_operands(a, b)
    dtype = _check_out_dtype(out_dtype, a.dtype)
    if c is not None:
        _check_c(c, a, b, dtype, shared_ok=True)
    act = _check_epilogue(a, b, bias, activation)
    _check_gpu(a)
    return dtype, act


def _new_plan(key, a, b, c, beta, dtype, inplace, config, bias=None, activation="none") -> plan_mod.Plan:
    p = plan_mod.build(a, b, c, beta, dtype, inplace, config, bias, activation)
    if inplace:
        p.extents = tuple(0 if t.numel() == 0 else _span(t)[1] - _span(t)[0] for t in (a, b, c))
    return plan_mod.store(key, p) if key is not None else p


def _new_out(a, b, dtype) -> torch.Tensor:
    if a.dim() == 2 and b.dim() == 2:
        return torch.empty(a.shape[0], b.shape[1], dtype=dtype, device=a.device)
    return torch.empty(_result_shape(a, b), dtype=dtype, device=a.device)


# ----------------------------------------------------------------------------- public API


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, out_dtype=None, bias=None, activation=None) -> torch.Tensor:
    """act(α·(a @ b) + bias) + β·c in one pass (all of it fused into the kernel's epilogue).

    Args:
        a: (M, K) bf16/fp16 CUDA tensor, any row- or column-major strides; or (B, M, K).
        b: (K, N), same dtype and device (``w.t()`` of an (N, K) weight runs without a copy);
            or (B, K, N). A 2-D operand of a batched product is shared by the batches.
        c: optional tensor of the result's shape (or (M, N), shared by the batches) and the
            output dtype; not read when beta == 0.
        alpha, beta: finite real scalars.
        out_dtype: torch.bfloat16, torch.float16 or torch.float32 (default: a.dtype).
        bias: optional (N,) or (1, N) (per output column) or (M, 1) (per row) bf16/fp16/fp32
            tensor, added to α·(a @ b) before the activation.
        activation: None, "relu", "gelu_erf", "gelu_tanh" or "silu" (pingpong.fused).
    Returns:
        A new contiguous (M, N) or (B, M, N) tensor of out_dtype.
    """
    alpha, beta = _check_scalar("alpha", alpha), _check_scalar("beta", beta)
    if _ops.needs_op(a, b, c, bias):  # torch.compile / autograd: the pingpong ops (pingpong.ops)
        return _ops.route_gemm(a, b, c, alpha, beta, out_dtype, bias, activation)
    plan, key = _plan(a, b, c, beta, out_dtype, False, None, bias, activation)
    if plan is None:
        if not _batching.native(a, b):  # torch.matmul's batching: fold, or one batched product
            return _batching.gemm(a, b, c, alpha, beta, out_dtype, bias, activation)
        dtype, act = _validate_gemm(a, b, c, out_dtype, bias, activation)
        plan = _new_plan(key, a, b, c, beta, dtype, False, None, bias, act)
    out = _new_out(a, b, out_dtype or a.dtype)
    plan.run(a, b, out, c, alpha, beta, bias)
    return out


def matmul(a, b, *, out_dtype=None) -> torch.Tensor:
    """a @ b with fp32 accumulation. See `gemm` for the arguments."""
    return gemm(a, b, out_dtype=out_dtype)


def matmul_tiled(a, b, config: KernelConfig, *, out_dtype=None) -> torch.Tensor:
    """a @ b on the Hopper kernel with an explicit KernelConfig (validated first)."""
    plan, key = _plan(a, b, None, 0.0, out_dtype, False, config)
    if plan is None:
        _check_operands(a, b)
        if not isinstance(config, KernelConfig):
            raise PingpongError(f"config: expected a pingpong.KernelConfig, got {type(config).__name__}")
        dtype = _check_out_dtype(out_dtype, a.dtype)
        config.validate(a.element_size(), torch.empty((), dtype=dtype).element_size())
        _check_gpu(a)
        plan = _new_plan(key, a, b, None, 0.0, dtype, False, config)
    out = _new_out(a, b, out_dtype or a.dtype)
    plan.run(a, b, out, None, 1.0, 0.0)
    return out


def gemm_(c, a, b, *, alpha=1.0, beta=0.0, bias=None, activation=None) -> torch.Tensor:
    """In place: c ← act(α·(a @ b) + bias) + β·c (arguments as in `gemm`). Returns c.

    c must be the result's shape ((M, N) or (B, M, N)), on a's device, of dtype
    bf16/fp16/fp32, must not share memory with a
    or b (compared by address range) and must not overlap itself (an expand()ed view). Any
    other c strides work (a c TMA cannot write is computed into a temporary and copied
    back). On a refusal (PingpongError) c is left untouched. Not differentiable: refused while
    autograd would record it (grad mode on and c, a or b requires grad); c's version counter
    is bumped, so a backward that saved c raises instead of reading the new values.
    """
    alpha, beta = _check_scalar("alpha", alpha), _check_scalar("beta", beta)
    if _ops.needs_op(c, a, b, bias):  # autograd (refused) / torch.compile: the pingpong::gemm_ op
        _ops.check_not_differentiated(c, a, b, bias)
        _ops.check_sharded(torch.ops.pingpong.gemm_.default, c, a, b, alpha, beta, bias, activation)
        _ops.gemm_(c, a, b, alpha, beta, bias, activation)
        return c
    plan, key = _plan(a, b, c, beta, getattr(c, "dtype", None), True, None, bias, activation)
    if plan is None:
        act = _validate_inplace(c, a, b, bias, activation)
        plan = _new_plan(key, a, b, c, beta, c.dtype, True, None, bias, act)
    else:
        _check_no_alias_fast(c, a, b, plan.extents)  # addresses change from call to call
        _check_bias_not_in(c, bias)
    plan.run(a, b, c, c, alpha, beta, bias)
    torch.autograd.graph.increment_version(c)  # a backward that saved c must not read the new values
    return c


def path_for(a, b, c=None, *, beta=0.0, out_dtype=None, inplace=False, bias=None, activation=None) -> str:
    """The path the call takes: "hopper", "hopper-padded" (an aligned copy of an operand, of
    c, or of the output), "portable", "amd", or "empty" (M, N or K is 0: no kernel runs).

    path_for(a, b)                         matmul(a, b)
    path_for(a, b, c, beta=β)              gemm(a, b, c, beta=β)
    path_for(a, b, c, beta=β, inplace=True) gemm_(c, a, b, beta=β)  (validated as gemm_ validates)
    path_for(a, b, bias=v, activation=f)   gemm(a, b, bias=v, activation=f)
    """
    beta = _check_scalar("beta", beta)
    dtype = getattr(c, "dtype", None) if inplace else out_dtype
    plan, key = _plan(a, b, c, beta, dtype, inplace, None, bias, activation)
    if plan is None:
        if inplace:  # gemm_'s validation: no in-place plan is cached without it
            act = _validate_inplace(c, a, b, bias, activation)
            dtype = c.dtype
        else:
            dtype, act = _validate_gemm(a, b, c, out_dtype, bias, activation)
        plan = _new_plan(key, a, b, c, beta, dtype, inplace, None, bias, act)
    return plan.path


def _gemm_into(out, a, b, c, alpha, beta, config, bias=None, activation=None) -> torch.Tensor:
    """Tests and benchmarks: out ← act(α·a@b + bias) + β·c with an explicit config (None =
    the default), into a caller-made contiguous out (poisoned by tests), through the same plans."""
    assert out.is_contiguous() and tuple(out.shape) == _result_shape(a, b)
    plan, key = _plan(a, b, c, beta, out.dtype, False, config, bias, activation)
    if plan is None:
        act = _validate_gemm(a, b, c, out.dtype, bias, activation)[1]
        plan = _new_plan(key, a, b, c, beta, out.dtype, False, config, bias, act)
    plan.run(a, b, out, c, float(alpha), float(beta), bias)
    return out
