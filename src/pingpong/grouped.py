"""Grouped GEMM (mixture-of-experts): `grouped_mm`, with torch._grouped_mm's conventions.

    | a         | b            | offs (G,) int32                | result                              |
    |-----------|--------------|--------------------------------|-------------------------------------|
    | (T, K)    | (G, K, N)    | cumulative row ends of a       | (T, N): rows of g = a_g @ b[g]      |
    | (G, M, K) | (K, N_total) | cumulative column ends of b    | (M, N_total): cols of g = a[g] @ b_g|
    | (M, K_tot)| (K_tot, N)   | cumulative ends along K        | (G, M, N): a[:, K_g] @ b[K_g, :]    |
    | (G, M, K) | (G, K, N)    | None                           | (G, M, N): batched                  |

Group g spans [offs[g-1], offs[g]) (offs[-1] of g = 0 is 0). bf16 or fp16 inputs (the same),
fp32 accumulation, out_dtype None (the inputs'), the inputs' dtype or float32. Any operand may
be a transposed view (b = w.transpose(1, 2) of (G, N, K) expert weights runs without a copy).

Where each runs: a call builds one GemmSpec with `groups` (pingpong.runtime.spec.build_grouped),
validated when it is new (`check`), and the plan registry (pingpong.runtime.plan) decides once
per spec; `path_for` names the decision:

    ragged rows, ragged columns   the Hopper backend's ragged-rows kernel (pingpong.hopper.kernels.grouped)
                                  on an sm_90 GPU when the operands (or their contiguous copies)
                                  and the output are TMA-legal; 3-D × 2-D is the 2-D × 3-D kernel
                                  on the transposed views, writing out transposed
    ragged K                      the Hopper backend's ragged-K kernel (pingpong.hopper.kernels.grouped_k)
                                  likewise: x = aᵀ (T, M), b (T, N) and out TMA-legal (an operand
                                  whose T is contiguous is copied first)
    batched                       the dense batched product's plan (pingpong.matmul's)
    any other GPU, or refused     the portable backend's grouped kernel (pingpong.portable.grouped)
    empty output, no groups       "empty": no kernel (ragged K with K = 0: zeros)

What is checked, and when. Before any work (PingpongError naming the argument): the
tensors' dims, dtypes and devices, K against K, offs's presence, dtype (int32), dims (1-D),
device (a's) and length (b's group count for 2-D × 3-D, a's for 3-D × 2-D), b's group count
against a's (3-D × 3-D). The *values* of offs live on the GPU and are never read by the
host (no sync: a call is CUDA-graph capturable and its output shape follows from the shapes
only). The kernels treat them safely instead: an end past the ragged extent is clipped to
it, a decreasing offset gives an empty group, and nothing is read or written outside the
operands. `check_offsets(offs, extent)` checks the values with one host sync, for debugging.

Rows (columns, for 3-D × 2-D) past offs[-1] are not written by the forward (torch leaves
them unset too); the gradients set them to zero (`zero_tail`). An empty group of a ragged-K
product gives a zero matrix.

Autograd (the torch.library op `pingpong::grouped_mm`, used whenever autograd records the
call or a tracer runs; a plain eager call goes straight to the kernel):

    out = a @ b[g] (rows)      dA = grouped(dY, bᵀ, offs) (rows)    dB = grouped(aᵀ, dY, offs) (K)
    out[g] = a_g @ b_g (K)     dA = grouped(dY, bᵀ, offs) (columns) dB = grouped(aᵀ, dY, offs) (rows)
    out_g = a[g] @ b_g (cols)  dA = grouped(dY, bᵀ, offs) (K)       dB = grouped(aᵀ, dY, offs) (columns)
    batched                    dA = dY @ bᵀ                         dB = aᵀ @ dY

A 3-D input stored transposed (b = w.transpose(1, 2) of (G, N, K) expert weights) gets its
ragged-K or batched gradient as the transposed product's transpose, (dYᵀ·a)ᵀ, in its own
strides: autograd accumulates it into w without a transposing copy of the weight's size.
"""

from __future__ import annotations

import threading
from typing import Optional

import torch
from torch import Tensor

from . import api as _api  # noqa: F401  (the backends register with the plan registry on import)
from .integration import inductor, ops
from . import portable
from .portable import grouped as portable_grouped
from .errors import PingpongError
from .runtime import plan as plan_mod
from .runtime import spec as spec_mod
from .runtime.spec import BATCHED, COLS, RAGGED_K, ROWS  # noqa: F401  (the modes, by their names here too)

__all__ = ["grouped_mm", "check", "check_offsets", "path_for"]


# ----------------------------------------------------------------------------- validation


def check(a, b, offs, out_dtype) -> tuple[str, tuple[int, ...], torch.dtype]:
    """(mode, result shape, result dtype) of grouped_mm(a, b, offs, out_dtype=out_dtype), or a
    PingpongError naming the argument at fault (pingpong.runtime.spec.validate_grouped).
    Reads shapes, dtypes and devices only."""
    return spec_mod.validate_grouped(a, b, offs, out_dtype)


def check_gpu(device) -> None:
    """Last of the checks of a call that runs (not of the fake implementation's, nor of the
    interpreter's): a GPU tensor."""
    if device.type != "cuda":
        raise PingpongError(f"a and b are on {device}: pingpong runs on CUDA GPUs")


def check_offsets(offs: Tensor, extent: int) -> None:
    """PingpongError unless offs is non-decreasing, ≥ 0 and ends at most `extent` (T, N_total
    or K_total). Reads the values: one host sync (a debugging aid, not called by grouped_mm)."""
    v = offs.detach().to("cpu", torch.int64)
    if v.numel() and (int(v[0]) < 0 or bool((v[1:] < v[:-1]).any()) or int(v[-1]) > extent):
        raise PingpongError(f"offs: expected non-decreasing ends in [0, {extent}], got {v.tolist()}")


# ----------------------------------------------------------------------------- the computation


def _plan(a, b, offs, out_dtype, interpret=False):
    """(spec, plan) of this call: the cached plan, validated when its spec is new (a hit
    means the call is valid and its backend decided). `interpret`: the portable kernels under
    Triton's interpreter (pingpong.portable.Interpreter, CPU tests; fp16/fp32 only), planned
    afresh and not cached."""
    spec = spec_mod.build_grouped(a, b, offs, out_dtype)
    plan = None if interpret else plan_mod.get(spec)
    if plan is None:
        check(a, b, offs, out_dtype)
        if interpret:
            return spec, plan_mod.plan_for(spec, (portable.Interpreter,))
        check_gpu(a.device)
        plan = plan_mod.cached_plan(spec)
    return spec, plan


def _compute(a, b, offs, dtype, zero_tail=False, out=None, interpret=False) -> Tensor:
    """The product into `out` (new, contiguous, when None; else a contiguous tensor of the
    result, as the plan assumes). `interpret`: see `_plan`."""
    spec, plan = _plan(a, b, offs, dtype, interpret)
    (mode, count, _), dtype = spec.groups, spec.out_dtype
    shape = spec_mod.grouped_shape(mode, a, b, count)
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=a.device)
    assert out.is_contiguous() and tuple(out.shape) == shape and out.dtype == dtype, "out: the result, contiguous"
    plan.run(a, b, out, spec_mod.EpilogueArgs(offs=offs))
    if zero_tail and mode in (ROWS, COLS):  # rows (columns) past offs[-1]
        portable_grouped.zero_tail(spec_mod.ragged_view(mode, a, b, out)[2], offs, interpret)
    return out


def path_for(a, b, offs=None, *, out_dtype=None) -> str:
    """The path grouped_mm(a, b, offs, out_dtype=out_dtype) takes, the planned backend's (as
    pingpong.path_for names them): "hopper", "hopper-padded" (an operand copied contiguous
    first), "portable", or "empty" (no kernel); 3-D × 3-D: the dense batched product's path.
    Validated as grouped_mm validates."""
    return _plan(a, b, offs, out_dtype)[1].path


# ----------------------------------------------------------------------------- public function and op


def grouped_mm(a: Tensor, b: Tensor, offs: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """The grouped product (module docstring table), torch._grouped_mm's conventions.

    Args:
        a: (T, K), (G, M, K) or (M, K_total); bf16/fp16 CUDA tensor, any row- or column-major strides.
        b: (G, K, N), (K, N_total), (K_total, N) or (G, K, N); a's dtype and device.
        offs: (G,) int32 on a's device, the groups' cumulative ends; None for 3-D × 3-D.
        bias: None, as torch._grouped_mm takes it (a bias is refused there too).
        out_dtype: None (a's dtype), a's dtype or torch.float32.
    Returns:
        A new contiguous tensor (table); rows past offs[-1] of a ragged-row result are unset.
    """
    if bias is not None:
        raise PingpongError("bias: grouped_mm takes no bias (as torch._grouped_mm, whose bias must be None); "
                            "add it to the result")
    return _route(a, b, offs, out_dtype, False)



def _route(a, b, offs, out_dtype, zero_tail) -> Tensor:
    """The op when autograd records the call or a tracer runs (validated first, on the global
    shapes of DTensors), else the kernel directly (validated when its spec is new)."""
    plain_types = spec_mod.PLAIN_TENSORS
    plain = (type(a) in plain_types and type(b) in plain_types
             and (offs is None or type(offs) in plain_types))  # None: `check`
    if not plain or torch.compiler.is_compiling() or (torch.is_grad_enabled() and (a.requires_grad or
                                                                                     b.requires_grad)):
        _, _, dtype = check(a, b, offs, out_dtype)
        ops.check_sharded(torch.ops.pingpong.grouped_mm.default, a, b, offs, dtype, zero_tail)
        return grouped_mm_op(a, b, offs, dtype, zero_tail)
    return _compute(a, b, offs, out_dtype, zero_tail)


@torch.library.custom_op("pingpong::grouped_mm", mutates_args=())
def grouped_mm_op(a: Tensor, b: Tensor, offs: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None,
                  zero_tail: bool = False) -> Tensor:
    with torch.no_grad():
        return _compute(a, b, offs, out_dtype or a.dtype, zero_tail)


@grouped_mm_op.register_fake
def _(a, b, offs=None, out_dtype=None, zero_tail=False):
    inductor.register()
    _, shape, dtype = check(a, b, offs, out_dtype)
    return a.new_empty(shape, dtype=dtype)


def _setup(ctx, inputs, output):
    a, b, offs, _, _ = inputs
    ctx.save_for_backward(a, b, offs)


_THREAD = threading.local()


def _ensure_context(t: Tensor) -> None:
    """Make the CUDA context current on this thread (once per thread): the autograd engine
    runs a backward on a thread of its own, and when a grouped product is the first CUDA work
    there, creating its TMA descriptors (a driver call) fails with "invalid device context".
    One tiny fill through the runtime API makes the context current."""
    if t.is_cuda and not getattr(_THREAD, "ready", False):
        torch.zeros((), device=t.device)
        _THREAD.ready = True


def _backward(ctx, g):
    """The gradients as grouped products (module docstring), in the inputs' dtype."""
    a, b, offs = ctx.saved_tensors
    _ensure_context(g)
    needs_a, needs_b = ctx.needs_input_grad[:2]
    g = g.to(a.dtype)
    mode = spec_mod.grouped_mode(a, b)
    da = db = None
    if mode == BATCHED:
        da = _gradient(g, b.mT, None, a, False) if needs_a else None
        db = _gradient(a.mT, g, None, b, False) if needs_b else None
        return da, db, None, None, None
    if needs_a:  # rows: rows past the end get zeros; K: complete; columns -> K: complete
        da = _gradient(g, b.mT, offs, a, mode == RAGGED_K or mode == ROWS)
    if needs_b:  # rows -> K: complete; K -> rows, columns -> columns: the tail zeroed
        db = _gradient(a.mT, g, offs, b, mode != ROWS)
    return da, db, None, None, None


def _gradient(x, y, offs, like, zero_tail) -> Tensor:
    """grouped(x, y, offs) in like's dtype (the input it is the gradient of), laid out as
    `like` where that costs nothing: a 3-D input stored transposed (w.transpose(1, 2) of
    (G, N, K) expert weights) gets the transposed product's transpose, (yᵀ·xᵀ)ᵀ, a view with
    like's strides, so autograd accumulates it into the stored weight without a transposing
    copy. Only a ragged-K or batched product (3-D result) is transposed: it stays one."""
    if (x.dim() == 2 and y.dim() == 2) or offs is None:  # ragged K (a 3-D result) or batched
        if like.dim() == 3 and like.stride(-2) == 1 and like.stride(-1) != 1:
            return _route(y.mT, x.mT, offs, like.dtype, False).mT
    return _route(x, y, offs, like.dtype, zero_tail)


grouped_mm_op.register_autograd(_backward, setup_context=_setup)


@inductor.lowered("grouped_mm")
def grouped_mm_out(a, b, *optional, offs: bool, zero_tail: bool, out):
    """pingpong::grouped_mm into inductor's buffer (pingpong.integration.inductor)."""
    _compute(a, b, optional[0] if offs else None, out.dtype, zero_tail, out)
