"""`pingpong.vector_add(a, b, out=None)`: input checks, then the fastest kernel that applies.

Dispatch (after validation, which writes nothing when it fails):

    CUDA, Hopper (sm_90), 16-byte aligned a/b/out,
        TMA_MIN_ELEMENTS <= n < 2**31                           -> Hopper TMA kernel (hopper.py)
    any other CUDA or ROCm GPU, or the cases above that miss    -> portable Triton kernel
    CPU tensors                                                 -> PingpongError, unless the
        environment sets TRITON_INTERPRET=1 (Triton's own switch): then the portable kernel
        runs in Triton's CPU interpreter, for fp32 and fp16 (its bf16 results are wrong, in 3.6 and 3.9)
"""

import os

import torch

from ..runtime.device import is_hopper, launch_sms
from ..runtime.spec import sm_carveout
from ..errors import PingpongError, check_tensor
from . import hopper, portable

DTYPES = (torch.float32, torch.bfloat16, torch.float16)

#: Below this many elements Hopper runs the portable kernel too: there the TMA kernel is
#: latency-bound (barrier init, TMA round trip, shared-memory pass, TMA store per tile) and the
#: plain kernel is as fast or faster; from 2**28 the TMA kernel leads (docs/streaming.md).
TMA_MIN_ELEMENTS = 2**25


def interpreter_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _check(a, b, out):
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t is not None or name != "out":
            check_tensor(name, t)
    dtype = a.dtype
    if dtype not in DTYPES:
        raise PingpongError(f"a: dtype {dtype} is not supported; expected one of float32, bfloat16, float16")
    shape, device = a.shape, a.device
    for name, t in (("b", b), ("out", out)):
        if t is None or t is a:
            continue
        if t.dtype != dtype:
            raise PingpongError(f"{name}: dtype {t.dtype} does not match a's dtype {dtype}")
        if t.shape != shape:
            raise PingpongError(f"{name}: shape {tuple(t.shape)} does not match a's shape {tuple(shape)}")
        if t.device != device:
            raise PingpongError(f"{name}: on device {t.device}, but a is on {device}; all tensors must share one device")
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t is not None and not t.is_contiguous():
            raise PingpongError(f"{name}: must be contiguous (strides {t.stride()} for shape {tuple(t.shape)})")
    if a.is_cpu:
        if not interpreter_enabled():
            raise PingpongError(
                "a: is a CPU tensor; vector_add runs on a CUDA/ROCm GPU (move the tensors with .cuda(), "
                "or set TRITON_INTERPRET=1 to run the portable kernel in Triton's CPU interpreter)"
            )
        if dtype == torch.bfloat16:
            raise PingpongError("a: bfloat16 is not supported under TRITON_INTERPRET=1 (Triton's interpreter computes it wrongly)")
    elif not a.is_cuda:
        raise PingpongError(f"a: on device {device}; expected a CUDA/ROCm tensor")
    if out is not None and out.nbytes:
        o0 = out.data_ptr()
        o1 = o0 + out.nbytes
        for name, t in (("a", a), ("b", b)):
            if t is not out and _partial_overlap(o0, o1, t):
                raise PingpongError(f"out: partially overlaps {name}; out may be {name} itself, or disjoint from it")


def _partial_overlap(x0: int, x1: int, y) -> bool:
    """True when the span [x0, x1) and y's memory overlap but are not the same span (exact
    aliasing is allowed)."""
    y0 = y.data_ptr()
    y1 = y0 + y.nbytes
    return x0 < y1 and y0 < x1 and (x0 != y0 or x1 != y1)


def _tma_ok(*ts) -> bool:
    """Every base 16-byte aligned (TMA), n within int32 coordinates and large enough that the
    TMA kernel is the faster one (TMA_MIN_ELEMENTS)."""
    bases = 0
    for t in ts:
        bases |= t.data_ptr()
    return bases % 16 == 0 and TMA_MIN_ELEMENTS <= ts[0].numel() <= hopper.MAX_TMA_ELEMENTS


def kernel_path(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> str:
    """Which kernel `vector_add(a, b, out)` runs: "hopper-tma", "portable" or "interpreter".

    Validates like vector_add (PingpongError on bad input); with out=None, `out` is a fresh
    tensor, always 16-byte aligned.
    """
    _check(a, b, out)
    if a.is_cpu:
        return "interpreter"
    ts = (a, b) if out is None else (a, b, out)
    return "hopper-tma" if is_hopper(_index(a)) and _tma_ok(*ts) else "portable"


def _index(t) -> int:
    return t.get_device()  # CUDA tensors always carry their device index


def vector_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Return a + b (elementwise, bitwise equal to torch.add), written into `out` if given.

    a, b (and out): same shape (1-D or any shape), same dtype (float32, bfloat16, float16),
    same device, contiguous. `out` may be `a` or `b` itself. Bad input raises PingpongError
    naming the argument, before anything is written.
    """
    _check(a, b, out)
    if out is None:
        out = torch.empty_like(a)  # contiguous, 16-byte aligned
    if a.numel() == 0:
        return out
    if a.is_cpu:
        portable.launch(a.view(-1), b.view(-1), out.view(-1), interpret=True)
        return out
    index = _index(a)
    if index != torch.cuda.current_device():
        with torch.cuda.device(index):
            _launch(index, a, b, out)
    else:
        _launch(index, a, b, out)
    return out


def _launch(index, a, b, out):
    """The kernel of kernel_path(a, b, out) on the current device (= a's). The Hopper kernel
    takes the tensors as they are (only base address and numel matter); the portable one
    gets flat views."""
    if is_hopper(index) and _tma_ok(a, b, out):
        hopper.launch(a, b, out, launch_sms(index, sm_carveout()), hopper.DEFAULT, index)  # less torch's SM carveout
    else:
        portable.launch(a.view(-1), b.view(-1), out.view(-1))
