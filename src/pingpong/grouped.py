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

Where each runs (`_compute`):

    ragged rows, ragged columns   the Hopper grouped kernel (pingpong.hopper.grouped) on an sm_90
                                  GPU when the operands are TMA-legal; 3-D × 2-D is the 2-D × 3-D
                                  kernel on the transposed views, writing out transposed
    ragged K                      the Hopper ragged-K kernel (pingpong.hopper.grouped_k) on an sm_90
                                  GPU when x = aᵀ (T, M), b (T, N) and out are TMA-legal (an operand
                                  whose T is contiguous is copied first)
    batched                       pingpong.matmul's batched path
    no Hopper GPU / not TMA-legal the portable kernel

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
"""

from __future__ import annotations

import threading
from typing import Optional

import torch
from torch import Tensor

from . import ops
from .portable import grouped as portable_grouped
from .errors import PingpongError, check_tensor
from .runtime import plan as plan_mod
from .runtime.spec import check_input_dtype

__all__ = ["grouped_mm", "check", "check_offsets"]

ROWS, COLS, RAGGED_K, BATCHED = "rows", "columns", "k", "batched"


# ----------------------------------------------------------------------------- validation


def _mode(a, b) -> str:
    return {(2, 3): ROWS, (3, 2): COLS, (2, 2): RAGGED_K, (3, 3): BATCHED}[(a.dim(), b.dim())]


def check(a, b, offs, out_dtype) -> tuple[str, tuple[int, ...], torch.dtype]:
    """(mode, result shape, result dtype) of grouped_mm(a, b, offs, out_dtype=out_dtype), or a
    PingpongError naming the argument at fault. Reads shapes, dtypes and devices only."""
    for name, t in (("a", a), ("b", b)):
        check_tensor(name, t)
        if t.dim() not in (2, 3):
            raise PingpongError(f"{name}: expected a 2-D or 3-D tensor, got {t.dim()}-D with shape {tuple(t.shape)}")
        check_input_dtype(name, t)
    if a.dtype != b.dtype:
        raise PingpongError(f"a and b must have the same dtype, got a {a.dtype} and b {b.dtype}")
    if a.device != b.device:
        raise PingpongError(f"a and b must be on the same device, got a on {a.device} and b on {b.device}")
    if a.shape[-1] != b.shape[-2]:
        raise PingpongError(f"b: its K ({b.shape[-2]}, b.shape[-2]) must equal a's ({a.shape[-1]}, a.shape[-1]); "
                            f"a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    mode = _mode(a, b)
    dtype = a.dtype if out_dtype is None else out_dtype
    if dtype not in (a.dtype, torch.float32):
        raise PingpongError(f"out_dtype: expected None, {a.dtype} (the inputs') or torch.float32, got {out_dtype}")
    if mode == BATCHED:
        if offs is not None:
            raise PingpongError("offs: must be None for a 3-D × 3-D (batched) product, got a tensor")
        if a.shape[0] != b.shape[0]:
            raise PingpongError(f"b: group count {b.shape[0]} (b.shape[0]) must equal a's {a.shape[0]}")
        return mode, (a.shape[0], a.shape[1], b.shape[2]), dtype
    if offs is None:
        raise PingpongError(f"offs: required for a {a.dim()}-D × {b.dim()}-D product (the groups' cumulative ends)")
    check_tensor("offs", offs, "a 1-D int32 tensor")
    if offs.dtype != torch.int32:
        raise PingpongError(f"offs: dtype {offs.dtype}; expected torch.int32 (cumulative group ends)")
    if offs.dim() != 1:
        raise PingpongError(f"offs: expected a 1-D tensor, got shape {tuple(offs.shape)}")
    if offs.device != a.device:
        raise PingpongError(f"offs: on {offs.device}; expected a's device {a.device} (offsets are read on the device)")
    G = offs.shape[0]
    if mode == ROWS:
        if b.shape[0] != G:
            raise PingpongError(f"b: group count {b.shape[0]} (b.shape[0]) must equal offs's length {G}")
        return mode, (a.shape[0], b.shape[2]), dtype
    if mode == COLS:
        if a.shape[0] != G:
            raise PingpongError(f"a: group count {a.shape[0]} (a.shape[0]) must equal offs's length {G}")
        return mode, (a.shape[1], b.shape[1]), dtype
    return mode, (G, a.shape[0], b.shape[1]), dtype


def check_offsets(offs: Tensor, extent: int) -> None:
    """PingpongError unless offs is non-decreasing, ≥ 0 and ends at most `extent` (T, N_total
    or K_total). Reads the values: one host sync (a debugging aid, not called by grouped_mm)."""
    v = offs.detach().to("cpu", torch.int64)
    if v.numel() and (int(v[0]) < 0 or bool((v[1:] < v[:-1]).any()) or int(v[-1]) > extent):
        raise PingpongError(f"offs: expected non-decreasing ends in [0, {extent}], got {v.tolist()}")


# ----------------------------------------------------------------------------- the computation


def _hopper_rows(a, b, out, offs) -> bool:
    """out[rows of g] = a[rows of g] @ b[g] on the Hopper kernel; False if it cannot run it."""
    from .hopper import grouped as hg
    from .runtime import device as dev
    from .runtime.launcher import CachedLaunch

    index = a.device.index if a.device.index is not None else torch.cuda.current_device()
    if not dev.is_hopper(index):
        return False
    if not hg.legal(a, "row"):  # A K-major (pingpong.hopper.grouped.prepare)
        a = a.contiguous()
    if not hg.legal(b):
        b = b.contiguous()
    if not (hg.legal(a, "row") and hg.legal(b) and hg.legal(out)):
        return False
    T, N, G = a.shape[0], b.shape[2], b.shape[0]
    config = hg.select_grouped_config(T, G, N)
    # the bound launch of this call signature, in the plan cache (least recently used evicted:
    # token counts vary call to call)
    key = ("grouped", index, a.shape, a.stride(), b.shape, b.stride(), out.shape, out.stride(), a.dtype, out.dtype,
           config)
    launch = plan_mod.get(key)
    if launch is None:
        launch = plan_mod.store(key, CachedLaunch())
    launch(index, (a.data_ptr(), b.data_ptr(), out.data_ptr(), out.data_ptr(), offs.data_ptr()), (), hg.prepare, a, b,
           out, offs,
           config, dev.sm_count(index))
    return True


def _hopper_ragged_k(a, b, out, offs) -> bool:
    """out[g] = a[:, K_g] @ b[K_g, :] on the Hopper ragged-K kernel; False if it cannot run it.
    The kernel reads x = aᵀ (T, M) and b (T, N) with T as the row dimension
    (pingpong.hopper.grouped_k): the backward's a = x.t() and dY are read as they are; an
    operand with T contiguous is copied once."""
    from .hopper import grouped_k as hk
    from .runtime import device as dev
    from .runtime.launcher import CachedLaunch

    index = a.device.index if a.device.index is not None else torch.cuda.current_device()
    if not dev.is_hopper(index):
        return False
    x = a.t()
    if not hk.legal_operand(x):
        x = x.contiguous()
    if not hk.legal_operand(b):
        b = b.contiguous()
    if not (hk.legal_operand(x) and hk.legal_operand(b) and hk.legal_out(out)):
        return False
    (T, M), N, G = x.shape, b.shape[1], out.shape[0]
    config = hk.select_ragged_k_config(M, N, T, G)
    key = ("grouped_k", index, x.shape, x.stride(), b.shape, b.stride(), out.shape, out.stride(), x.dtype, out.dtype,
           config)
    launch = plan_mod.get(key)
    if launch is None:
        launch = plan_mod.store(key, CachedLaunch())
    launch(index, (x.data_ptr(), b.data_ptr(), out.data_ptr(), offs.data_ptr()), (), hk.prepare, x, b, out, offs,
           config, dev.sm_count(index))
    return True


def _ragged_k(a, b, out, offs, interpret) -> None:
    if out.numel() == 0:
        return
    if a.shape[1] == 0:  # no K at all: every group is empty
        out.zero_()
        return
    if interpret or not _hopper_ragged_k(a, b, out, offs):
        portable_grouped.grouped(a, b, out, offs, ragged_k=True, interpret=interpret)


def _rows(a, b, out, offs, interpret) -> None:
    if out.numel() == 0 or b.shape[0] == 0:
        return
    if interpret or not _hopper_rows(a, b, out, offs):
        portable_grouped.grouped(a, b, out, offs, ragged_k=False, interpret=interpret)


def _compute(a, b, offs, dtype, zero_tail=False, out=None, interpret=False) -> Tensor:
    """The product into `out` (new, contiguous, when None). `interpret`: the portable kernel
    under Triton's interpreter (CPU tests; fp16/fp32 only)."""
    mode, shape, _ = check(a, b, offs, dtype)
    if a.device.type != "cuda" and not interpret:
        raise PingpongError(f"a and b are on {a.device}: pingpong runs on CUDA GPUs")
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=a.device)
    if mode == ROWS:
        _rows(a, b, out, offs, interpret)
        if zero_tail:
            portable_grouped.zero_tail(out, offs, interpret)
    elif mode == COLS:  # outᵀ (N_total, M) = bᵀ (N_total, K) · aᵀ (G, K, M): ragged rows, written transposed
        _rows(b.t(), a.transpose(1, 2), out.t(), offs, interpret)
        if zero_tail:
            portable_grouped.zero_tail(out.t(), offs, interpret)
    elif mode == RAGGED_K:
        _ragged_k(a, b, out, offs, interpret)
    else:
        from . import api
        out.copy_(torch.bmm(a, b) if interpret else api.matmul(a, b, out_dtype=dtype))
    return out


# ----------------------------------------------------------------------------- public function and op


def grouped_mm(a: Tensor, b: Tensor, offs: Optional[Tensor] = None, *, out_dtype: Optional[torch.dtype] = None
               ) -> Tensor:
    """The grouped product (module docstring table), torch._grouped_mm's conventions.

    Args:
        a: (T, K), (G, M, K) or (M, K_total); bf16/fp16 CUDA tensor, any row- or column-major strides.
        b: (G, K, N), (K, N_total), (K_total, N) or (G, K, N); a's dtype and device.
        offs: (G,) int32 on a's device, the groups' cumulative ends; None for 3-D × 3-D.
        out_dtype: None (a's dtype), a's dtype or torch.float32.
    Returns:
        A new contiguous tensor (table); rows past offs[-1] of a ragged-row result are unset.
    """
    _, _, dtype = check(a, b, offs, out_dtype)
    return _route(a, b, offs, dtype, False)


def _route(a, b, offs, dtype, zero_tail) -> Tensor:
    """The op when autograd records the call or a tracer runs, else the kernel directly."""
    plain = all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in (a, b, offs) if t is not None)
    if not plain or torch.compiler.is_compiling() or (torch.is_grad_enabled() and (a.requires_grad or
                                                                                     b.requires_grad)):
        ops.check_sharded(torch.ops.pingpong.grouped_mm.default, a, b, offs, dtype, zero_tail)
        return grouped_mm_op(a, b, offs, dtype, zero_tail)
    return _compute(a, b, offs, dtype, zero_tail)


@torch.library.custom_op("pingpong::grouped_mm", mutates_args=())
def grouped_mm_op(a: Tensor, b: Tensor, offs: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None,
                  zero_tail: bool = False) -> Tensor:
    with torch.no_grad():
        return _compute(a, b, offs, out_dtype or a.dtype, zero_tail)


@grouped_mm_op.register_fake
def _(a, b, offs=None, out_dtype=None, zero_tail=False):
    _, shape, dtype = check(a, b, offs, out_dtype)
    return a.new_empty(shape, dtype=dtype)


def _setup(ctx, inputs, output):
    a, b, offs, _, _ = inputs
    ctx.save_for_backward(a, b, offs)


_THREAD = threading.local()


def _ensure_context(t: Tensor) -> None:
    """Make the CUDA context current on this thread (once per thread): the autograd engine
    runs a backward on a thread of its own, and when a grouped product is the first CUDA work
    there, creating its TMA descriptors (a driver call) fails with "invalid device context"
    (RESULTS.md run 142). One tiny fill through the runtime API makes the context current."""
    if t.is_cuda and not getattr(_THREAD, "ready", False):
        torch.zeros((), device=t.device)
        _THREAD.ready = True


def _backward(ctx, g):
    """The gradients as grouped products (module docstring), in the inputs' dtype."""
    a, b, offs = ctx.saved_tensors
    _ensure_context(g)
    needs_a, needs_b = ctx.needs_input_grad[:2]
    g = g.to(a.dtype)
    mode = _mode(a, b)
    da = db = None
    if mode == BATCHED:
        da = _route(g, b.mT, None, a.dtype, False) if needs_a else None
        db = _route(a.mT, g, None, b.dtype, False) if needs_b else None
        return da, db, None, None, None
    if needs_a:  # rows: rows past the end get zeros; K: complete; columns -> K: complete
        da = _route(g, b.mT, offs, a.dtype, mode == RAGGED_K or mode == ROWS)
    if needs_b:  # rows -> K: complete; K -> rows, columns -> columns: the tail zeroed
        db = _route(a.mT, g, offs, b.dtype, mode != ROWS)
    return da, db, None, None, None


grouped_mm_op.register_autograd(_backward, setup_context=_setup)
