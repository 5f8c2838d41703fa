"""What each kernel can address: the limits of its index arithmetic, as pure predicates.

A tensor's *span* is the largest element offset any of its elements has from its base,
``sum((size - 1) * |stride|)`` (0 for an empty tensor): the offset a kernel must be able to
form. Kernels compute offsets in 32 bits unless they say otherwise, and a 32-bit offset that
passes 2**31 - 1 wraps silently (a wrong address, not an error). Per kernel:

    | kernel          | index arithmetic                                  | can address          |
    |-----------------|---------------------------------------------------|----------------------|
    | portable        | int32 element offsets; int64 (offsets, pid, the    | any tensor           |
    |                 | K-step advance) once a span reaches 2**31         |                      |
    | hopper          | TMA: int32 box coordinates, each dim of a         | each dim <= 2**31 -  |
    |                 | descriptor < 2**32, byte strides < 2**40; tile    | 2**10, byte strides  |
    |                 | counts cdiv(M, BM), cdiv(N, BN), cdiv(K, BK) int32 | < 2**40              |
    | cdna_pingpong,  | buffer loads/stores: a 32-bit byte offset from    | span bytes < 2**31   |
    | rdna_wmma       | the base (voffset), element offsets in int32      |                      |
    | stream-portable | int64 offsets                                     | any tensor           |
    | stream-hopper   | TMA, int32 tile coordinates; its tile count       | n <= 2**31 - 2**15   |
    |                 | (n + BLOCK - 1) // BLOCK in int32                 |                      |
    | stream-gfx942   | buffer loads/stores, int32 offsets                | span bytes < 2**31   |

`addressable(kernel, *tensors)` answers for a kernel name of that table;
`unaddressable(kernel, **named)` returns a message naming the first argument the kernel
cannot address (None when all fit), for a dispatcher to route around it or refuse before
allocating or launching. Shapes and strides only: no tensor data is touched, meta tensors
work. Missing tensors (None) are skipped.
"""

from __future__ import annotations

import torch

from .spec import span  # noqa: F401  (the one definition: spec, a leaf)

#: Largest offset a signed 32-bit index holds.
INT32_MAX = 2**31 - 1
#: TMA descriptor limits (CUDA driver, cuTensorMapEncodeTiled): byte strides < 2**40.
TMA_STRIDE_BYTES_LIMIT = 2**40
#: Most elements the streaming TMA kernel takes: it counts its tiles as gl.cdiv(n, BLOCK) =
#: (n + BLOCK - 1) // BLOCK in int32, which wraps negative (no tile stored) for n within BLOCK
#: of 2**31; 2**15 is the largest BLOCK of a valid StreamConfig (64 KB tiles of 2-byte elements).
STREAM_TMA_MAX_ELEMENTS = 2**31 - 2**15
#: Largest dimension the Hopper GEMM takes: its schedulers count tiles and k-steps as
#: gl.cdiv(M, BM) = (M + BM - 1) // BM (N, K likewise) in int32, which wraps negative (no tile
#: computed, out left unwritten) for a dimension within a tile of 2**31; 2**10 covers every
#: tile side (a 2-CTA pair's rows included).
HOPPER_MAX_DIM = 2**31 - 2**10

KERNELS = ("portable", "hopper", "cdna_pingpong", "rdna_wmma", "stream-portable", "stream-hopper", "stream-gfx942")


def needs_int64(*tensors: torch.Tensor | None) -> bool:
    """True when some tensor's span does not fit a signed 32-bit offset (the portable
    kernel then computes its offsets in 64 bits)."""
    return any(t is not None and span(t) > INT32_MAX for t in tensors)


def _why(kernel: str, t: torch.Tensor) -> str | None:
    if kernel in ("portable", "stream-portable"):
        return None
    if kernel == "hopper":
        big = [d for d in t.shape if d > HOPPER_MAX_DIM]
        if big:
            return (f"a dimension of {big[0]} exceeds the kernel's 32-bit tile counts (at most {HOPPER_MAX_DIM}:"
                    " TMA coordinates and cdiv(dim, tile) are int32)")
        far = [st * t.element_size() for st in t.stride() if st * t.element_size() >= TMA_STRIDE_BYTES_LIMIT]
        if far:
            return f"a stride of {far[0]} bytes exceeds the TMA limit (< 2**40 bytes)"
        return None
    if kernel == "stream-hopper":
        return (f"{t.numel()} elements exceed the TMA kernel's 32-bit tile count (at most {STREAM_TMA_MAX_ELEMENTS})"
                if t.numel() > STREAM_TMA_MAX_ELEMENTS else None)
    if kernel in ("cdna_pingpong", "rdna_wmma", "stream-gfx942"):
        nbytes = (span(t) + 1) * t.element_size()
        return f"spans {nbytes} bytes; buffer instructions address < 2**31 bytes from the base" \
            if nbytes > INT32_MAX else None
    raise AssertionError(kernel)


def unaddressable(kernel: str, **tensors: torch.Tensor | None) -> str | None:
    """None when `kernel` can address every given tensor; otherwise "NAME: why" for the
    first one it cannot (for a PingpongError message). ValueError on an unknown kernel."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel: unknown kernel {kernel!r}; one of {', '.join(KERNELS)}")
    for name, t in tensors.items():
        if t is None:
            continue
        why = _why(kernel, t)
        if why:
            return f"{name}: {why} ({kernel} kernel; shape {tuple(t.shape)}, strides {t.stride()})"
    return None


def addressable(kernel: str, *tensors: torch.Tensor | None) -> bool:
    """Whether `kernel` (a name of the module table) can address every tensor given."""
    return unaddressable(kernel, **{f"#{i}": t for i, t in enumerate(tensors)}) is None
