"""`pingpong.vector_add(a, b, out=None)`: input checks, then the fastest kernel that applies.

Dispatch (after validation, which writes nothing when it fails):

    CUDA, Hopper (sm_90), 16-byte aligned a/b/out, n < 2**31   -> Hopper TMA kernel (hopper.py)
    any other CUDA or ROCm GPU, or the cases above that miss    -> portable Triton kernel
    CPU tensors                                                 -> PingpongError, unless the
        environment sets TRITON_INTERPRET=1 (Triton's own switch): then the portable kernel
        runs in Triton's CPU interpreter, for fp32 and fp16 (its bf16 results are wrong in 3.6)
"""

import functools
import os

import torch

from ..errors import PingpongError
from . import hopper, portable

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    """Number of SMs (CUs on ROCm) of a device: the persistent grid. Queried once per device."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=None)
def _is_hopper(device_index: int) -> bool:
    return torch.version.hip is None and torch.cuda.get_device_capability(device_index)[0] == 9


def interpreter_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _check(a, b, out):
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise PingpongError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if a.dtype not in DTYPES:
        raise PingpongError(f"a: dtype {a.dtype} is not supported; expected one of float32, bfloat16, float16")
    for name, t in (("b", b), ("out", out)):
        if t is None:
            continue
        if t.dtype != a.dtype:
            raise PingpongError(f"{name}: dtype {t.dtype} does not match a's dtype {a.dtype}")
        if t.shape != a.shape:
            raise PingpongError(f"{name}: shape {tuple(t.shape)} does not match a's shape {tuple(a.shape)}")
        if t.device != a.device:
            raise PingpongError(f"{name}: on device {t.device}, but a is on {a.device}; all tensors must share one device")
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t is not None and not t.is_contiguous():
            raise PingpongError(f"{name}: must be contiguous (strides {t.stride()} for shape {tuple(t.shape)})")
    if a.device.type == "cpu":
        if not interpreter_enabled():
            raise PingpongError(
                "a: is a CPU tensor; vector_add runs on a CUDA/ROCm GPU (move the tensors with .cuda(), "
                "or set TRITON_INTERPRET=1 to run the portable kernel in Triton's CPU interpreter)"
            )
        if a.dtype == torch.bfloat16:
            raise PingpongError("a: bfloat16 is not supported under TRITON_INTERPRET=1 (Triton 3.6 computes it wrongly)")
    elif a.device.type != "cuda":
        raise PingpongError(f"a: on device {a.device}; expected a CUDA/ROCm tensor")
    if out is not None and a.numel() > 0:
        for name, t in (("a", a), ("b", b)):
            if _partial_overlap(out, t):
                raise PingpongError(f"out: partially overlaps {name}; out may be {name} itself, or disjoint from it")


def _partial_overlap(x, y) -> bool:
    """True when x and y share memory but are not the same span (exact aliasing is allowed)."""
    x0, y0 = x.data_ptr(), y.data_ptr()
    x1, y1 = x0 + x.numel() * x.element_size(), y0 + y.numel() * y.element_size()
    return x0 < y1 and y0 < x1 and (x0, x1) != (y0, y1)


def _tma_ok(*ts) -> bool:
    return ts[0].numel() <= hopper.MAX_TMA_ELEMENTS and all(t.data_ptr() % 16 == 0 for t in ts)


def kernel_path(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> str:
    """Which kernel `vector_add(a, b, out)` runs: "hopper-tma", "portable" or "interpreter".

    Validates like vector_add (PingpongError on bad input); with out=None, `out` is a fresh
    tensor, always 16-byte aligned.
    """
    _check(a, b, out)
    if a.device.type == "cpu":
        return "interpreter"
    index = _index(a)
    ts = (a, b) if out is None else (a, b, out)
    return "hopper-tma" if _is_hopper(index) and _tma_ok(*ts) else "portable"


def _index(t) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


def vector_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Return a + b (elementwise, bitwise equal to torch.add), written into `out` if given.

    a, b (and out): same shape (1-D or any shape), same dtype (float32, bfloat16, float16),
    same device, contiguous. `out` may be `a` or `b` itself. Bad input raises PingpongError
    naming the argument, before anything is written.
    """
    path = kernel_path(a, b, out)
    if out is None:
        out = torch.empty_like(a)
    n = a.numel()
    if n == 0:
        return out
    fa, fb, fo = a.view(-1), b.view(-1), out.view(-1)
    if path == "interpreter":
        portable.launch(fa, fb, fo, interpret=True)
        return out
    index = _index(a)
    if index != torch.cuda.current_device():
        with torch.cuda.device(index):
            _launch(path, index, fa, fb, fo)
    else:
        _launch(path, index, fa, fb, fo)
    return out


def _launch(path, index, fa, fb, fo):
    if path == "hopper-tma":
        sms = sm_count(index)
        hopper.launch(fa, fb, fo, sms, hopper.choose_config(fa.numel(), fa.element_size(), sms))
    else:
        portable.launch(fa, fb, fo)
