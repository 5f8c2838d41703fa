"""The public GEMM API on PyTorch tensors.

    | function                                   | computes                                 |
    |--------------------------------------------|------------------------------------------|
    | matmul(a, b, *, out_dtype=None)            | a @ b                                    |
    | gemm(a, b, c=None, *, alpha, beta, out_dtype) | α·(a@b) + β·c, fused in the epilogue  |
    | gemm_(c, a, b, *, alpha, beta)             | c ← α·(a@b) + β·c, in place              |
    | matmul_tiled(a, b, config)                 | a @ b with an explicit KernelConfig      |

a is (M, K), b is (K, N), both bf16 or both fp16; accumulation is fp32; the output is bf16,
fp16 or fp32 (default: the inputs' dtype). Row- and column-major views of a and b (e.g.
``b = w.t()``, the transpose_b layout) run without copies.

Dispatch (`path_for` names the path a call takes):

    | device                       | path            |
    |------------------------------|-----------------|
    | CUDA sm_90 (H100/H200)       | "hopper": the Gluon kernel (pingpong.hopper)        |
    |   operand/C strides not TMA-legal (e.g. bf16, K=17: 34-byte rows)                  |
    |                              | "hopper-padded": a 16-byte-aligned copy, then the kernel |
    | other CUDA GPUs, ROCm GPUs   | "portable": the plain-Triton kernel (pingpong.portable);  |
    |                              | on gfx942/gfx950 (bf16, K-contiguous) and gfx11xx (fp16→fp32) |
    |                              | the seeds' AMD kernels (pingpong.amd) — compiled, never run here |
    | CPU                          | refused (PingpongError); Triton's interpreter is an explicit |
    |                              | opt-in for tests: pingpong.portable.portable_gemm(..., interpret=True) |

Bad input raises PingpongError (a ValueError) naming the argument and what was expected, and
changes nothing. Empty M or N gives an empty result; K = 0 gives β·c (or zeros).
"""

from __future__ import annotations

import numbers

import torch

from .config import KernelConfig, default_config
from .device import is_hopper
from .errors import PingpongError
from . import batching as _batching
from . import ops as _ops  # noqa: E402  (ops imports this module; it reads it only at call time)

INPUT_DTYPES = (torch.bfloat16, torch.float16)
OUTPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

__all__ = ["matmul", "gemm", "gemm_", "matmul_tiled", "path_for"]


# ----------------------------------------------------------------------------- validation


def _check_operands(a, b) -> None:
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise PingpongError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise PingpongError(f"{name}: expected a 2-D tensor, got {t.dim()}-D with shape {tuple(t.shape)}")
        if t.dtype not in INPUT_DTYPES:
            raise PingpongError(f"{name}: dtype {t.dtype} is not supported; expected torch.bfloat16 or torch.float16")
    if a.dtype != b.dtype:
        raise PingpongError(f"a and b must have the same dtype, got a {a.dtype} and b {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise PingpongError(f"shape mismatch: a is {tuple(a.shape)} and b is {tuple(b.shape)}; a.shape[1] must equal b.shape[0]")
    if a.device != b.device:
        raise PingpongError(f"a and b must be on the same device, got a on {a.device} and b on {b.device}")


def _check_gpu(a) -> None:
    """Last of the checks, so every argument error is reported the same on any machine."""
    if a.device.type != "cuda":
        raise PingpongError(
            f"a and b are on {a.device}: pingpong runs on CUDA/ROCm GPUs. For a CPU check use Triton's "
            "interpreter explicitly: pingpong.portable.portable_gemm(a, b, out, interpret=True)"
        )


def _check_scalar(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise PingpongError(f"{name}: expected a real number, got {type(v).__name__}")
    return float(v)


def _check_out_dtype(out_dtype, default: torch.dtype) -> torch.dtype:
    if out_dtype is None:
        return default
    if out_dtype not in OUTPUT_DTYPES:
        raise PingpongError(f"out_dtype: {out_dtype} is not supported; expected one of {OUTPUT_DTYPES}")
    return out_dtype


def _check_c(c, a, b, dtype: torch.dtype, name: str = "c") -> None:
    if not isinstance(c, torch.Tensor):
        raise PingpongError(f"{name}: expected a torch.Tensor, got {type(c).__name__}")
    shape = (a.shape[0], b.shape[1])
    if tuple(c.shape) != shape:
        raise PingpongError(f"{name}: expected shape {shape} (a.shape[0], b.shape[1]), got {tuple(c.shape)}")
    if c.dtype != dtype:
        raise PingpongError(f"{name}: expected dtype {dtype} (the output dtype), got {c.dtype}")
    if c.device != a.device:
        raise PingpongError(f"{name} must be on the same device as a and b ({a.device}), got {c.device}")


def _overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    if x.numel() == 0 or y.numel() == 0 or x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr():
        return False
    span = lambda t: (t.data_ptr(), t.data_ptr() + t.element_size() * (1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))))  # noqa: E731
    (x0, x1), (y0, y1) = span(x), span(y)
    return x0 < y1 and y0 < x1


# ----------------------------------------------------------------------------- dispatch


def _is_hopper(device: torch.device) -> bool:
    return is_hopper(device.index if device.index is not None else torch.cuda.current_device())


def _tma_ready(t: torch.Tensor) -> bool:
    from .hopper.launch import tma_orientation

    return tma_orientation(t) is not None


def path_for(a: torch.Tensor, b: torch.Tensor) -> str:
    """The path `matmul(a, b)` takes: "hopper", "hopper-padded" or "portable" (see module doc)."""
    _check_operands(a, b)
    _check_gpu(a)
    if not _is_hopper(a.device):
        return "portable"
    return "hopper" if _tma_ready(a) and _tma_ready(b) else "hopper-padded"


def _tma_copy(t: torch.Tensor) -> torch.Tensor:
    """A row-major copy of 2-D `t` whose row stride is padded to 16 bytes (TMA's rule).

    This is the "hopper-padded" path: one extra pass over the operand, documented in the
    README, taken only when the caller's strides cannot be described to TMA.
    """
    rows, cols = t.shape
    align = 16 // t.element_size()
    storage = torch.empty(max(rows, 1), -(-max(cols, 1) // align) * align, dtype=t.dtype, device=t.device)
    view = storage[:, :cols]
    view.copy_(t)
    return view


def _run(a, b, out, c, alpha, beta, config: KernelConfig | None) -> None:
    """out ← α·a@b + β·c on the path for this device (out may be c)."""
    M, K = a.shape
    N = b.shape[1]
    if not _is_hopper(a.device):
        if config is not None:
            raise PingpongError("config: matmul_tiled configures the Hopper kernel; this GPU takes the portable path")
        c = c if beta != 0.0 else None
        if torch.version.hip is not None:  # the seeds' AMD kernels where they apply (compiled, not run here)
            from .amd import dispatch

            if dispatch.accepts(a, b.t(), out):
                dispatch.gemm(a, b.t(), out, alpha=alpha, beta=beta, c=c)
                return
        from .portable import portable_gemm

        portable_gemm(a, b, out, alpha=alpha, beta=beta, c=c)
        return
    from .hopper.launch import launch, tma_orientation

    a = a if _tma_ready(a) else _tma_copy(a)
    b = b if _tma_ready(b) else _tma_copy(b)
    if c is not None and beta != 0.0 and tma_orientation(c) != "row":
        c = _tma_copy(c)
    target = out if tma_orientation(out) == "row" else _tma_copy(out)  # values unused: fully overwritten
    launch(a, b, target, c=c, alpha=alpha, beta=beta, config=config or default_config(M, N, K))
    if target is not out:
        out.copy_(target)


def _new_out(a, b, dtype) -> torch.Tensor:
    return torch.empty(a.shape[0], b.shape[1], dtype=dtype, device=a.device)


def _gemm_into(out, a, b, c, alpha, beta, config) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    if M == 0 or N == 0:
        return out
    if K == 0:  # the empty sum: out = β·c (BLAS: β = 0 means c is not read)
        if c is None or beta == 0.0:
            out.zero_()
        else:
            out.copy_(c.float() * beta)
        return out
    _run(a, b, out, c, alpha, beta, config)
    return out


# ----------------------------------------------------------------------------- public API


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, out_dtype=None) -> torch.Tensor:
    """α·(a @ b) + β·c in one pass (β·c fused into the kernel's epilogue).

    Args:
        a: (M, K) bf16/fp16 CUDA tensor, any row- or column-major strides.
        b: (K, N), same dtype and device (``w.t()`` of an (N, K) weight runs without a copy).
        c: optional (M, N) tensor of the output dtype; ignored when beta == 0.
        alpha, beta: real scalars.
        out_dtype: torch.bfloat16, torch.float16 or torch.float32 (default: a.dtype).
    Returns:
        A new (M, N) tensor of out_dtype.
    """
    alpha, beta = _check_scalar("alpha", alpha), _check_scalar("beta", beta)
    if _ops.needs_op(a, b, c):  # torch.compile / autograd: the pingpong::gemm op (pingpong.ops)
        return _ops.gemm(a, b, c, alpha, beta, out_dtype)
    if getattr(a, "ndim", 2) > 2 or getattr(b, "ndim", 2) > 2:  # batched: pingpong.batching
        return _batching.gemm(a, b, c, alpha, beta, out_dtype)
    _check_operands(a, b)
    dtype = _check_out_dtype(out_dtype, a.dtype)
    if c is not None:
        _check_c(c, a, b, dtype)
    _check_gpu(a)
    return _gemm_into(_new_out(a, b, dtype), a, b, c, alpha, beta, None)


def matmul(a, b, *, out_dtype=None) -> torch.Tensor:
    """a @ b with fp32 accumulation. See `gemm` for the arguments."""
    if _ops.needs_op(a, b):  # torch.compile / autograd: the pingpong::mm op (pingpong.ops)
        return _ops.mm(a, b, out_dtype)
    return gemm(a, b, out_dtype=out_dtype)


def matmul_tiled(a, b, config: KernelConfig, *, out_dtype=None) -> torch.Tensor:
    """a @ b on the Hopper kernel with an explicit KernelConfig (validated first)."""
    _check_operands(a, b)
    if not isinstance(config, KernelConfig):
        raise PingpongError(f"config: expected a pingpong.KernelConfig, got {type(config).__name__}")
    dtype = _check_out_dtype(out_dtype, a.dtype)
    config.validate(a.element_size(), torch.empty((), dtype=dtype).element_size())
    _check_gpu(a)
    return _gemm_into(_new_out(a, b, dtype), a, b, None, 1.0, 0.0, config)


def gemm_(c, a, b, *, alpha=1.0, beta=0.0) -> torch.Tensor:
    """In place: c ← α·(a @ b) + β·c. Returns c.

    c must be (M, N), on a's device, of dtype bf16/fp16/fp32, and must not share memory with
    a or b. Any c strides work (a non-TMA-legal c is computed into a temporary and copied
    back). On a refusal (PingpongError) c is left untouched. Not differentiable: refused while
    autograd would record it (grad mode on and c, a or b requires grad); c's version counter
    is bumped, so a backward that saved c raises instead of reading the new values.
    """
    if torch.is_grad_enabled():
        for name, t in (("c", c), ("a", a), ("b", b)):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise PingpongError(f"{name}: requires grad; gemm_ writes c in place and is not differentiable "
                                    "(use pingpong.gemm, or call gemm_ under torch.no_grad())")
    if _ops.needs_op(c, a, b):  # torch.compile: the pingpong::gemm_ op (pingpong.ops)
        _ops.gemm_(c, a, b, alpha, beta)
        return c
    _check_operands(a, b)
    alpha, beta = _check_scalar("alpha", alpha), _check_scalar("beta", beta)
    if isinstance(c, torch.Tensor) and c.dtype not in OUTPUT_DTYPES:
        raise PingpongError(f"c: dtype {c.dtype} is not supported; expected one of {OUTPUT_DTYPES}")
    _check_c(c, a, b, getattr(c, "dtype", None))
    if _overlaps(c, a) or _overlaps(c, b):
        raise PingpongError("c must not share memory with a or b (the product would read what it overwrites)")
    _check_gpu(a)
    _gemm_into(c, a, b, c, alpha, beta, None)
    torch.autograd.graph.increment_version(c)
    return c
