"""Kept FP8 copies of parameters: `keep_quantized_weights(*modules)`, for gradient accumulation.

A training step with gradient accumulation runs several micro-batches between two optimizer
steps, and the weights do not change between them; yet each micro-batch quantizes every FP8
weight again. Inside a `keep_quantized_weights(model)` block each FP8 copy of one of the named
modules' parameters is made once and then reused (`kept`), while the parameter's version
counter is unchanged:

    with keep_quantized_weights(model):            # one optimizer step's micro-batches
        for batch in micro_batches:
            loss(model(batch)).backward()           # the first quantizes the weights, the rest reuse
    optimizer.step()                                # after the block: the next block quantizes anew

What is kept and who asks (`kept(x, what, make)`, keyed by what, the parameter's address, shape,
strides and dtype): the MoE experts' weights (pingpong.fp8_grouped_training: the forward's rows
with their column maxima, pingpong.quantize.quantize_stacked_direct; dX's Wᵀ along N,
quantize_columns_direct, which torch.compile's backward calls too) and the FP8 training layers'
weights (pingpong.fp8_training: W's quantize_fp8_pair, along K for Y and along N for dX, eager
and compiled; inductor's buffers take a copy). Nothing is kept while a CUDA graph is captured.
The copies cost about two bytes per weight element while the block is open and are freed when
it ends.

Contract: an in-place change torch tracks (``w.add_(...)`` under no_grad, a foreach
optimizer's update) moves the version counter and makes a new copy; so does any optimizer's
step (a fused optimizer's update, AdamW(fused=True), moves no version counter: the step itself,
through torch's global step hook, drops every copy); a change through ``w.data`` is not
tracked, so do not change a kept parameter that way inside the block; do not modify a returned
copy in place. Only the named modules' parameters are kept (a tensor made per call, such as a
transposed copy, never is: its address is not theirs). Blocks nest: the outermost's copies serve
the inner ones. Bad arguments: PingpongError naming them, before anything is kept.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from .errors import PingpongError
from .integration.ops import traced

__all__ = ["keep_quantized_weights", "kept", "keeping"]


@dataclasses.dataclass
class _Block:
    """An open block: the kept parameters' data pointers, and per key the parameter's version
    counter when its copy was made, and the copy."""

    pointers: frozenset
    copies: dict = dataclasses.field(default_factory=dict)


#: the open block (None: none open)
_BLOCK: _Block | None = None


@contextlib.contextmanager
def keep_quantized_weights(*modules: torch.nn.Module):
    """Keep the FP8 copies of `modules`' parameters for the block (module docstring)."""
    global _BLOCK
    if not modules or not all(isinstance(m, torch.nn.Module) for m in modules):
        raise PingpongError("modules: keep_quantized_weights takes the torch.nn.Module(s) whose weights' FP8 copies"
                            f" to keep, got {[type(m).__name__ for m in modules] or 'none'}")
    if _BLOCK is not None:
        yield
        return
    stepped = register_optimizer_step_post_hook(_stepped)
    try:
        _BLOCK = _Block(frozenset(p.data_ptr() for m in modules for p in m.parameters()))
        yield
    finally:
        stepped.remove()
        _BLOCK = None


def _stepped(optimizer, args, kwargs) -> None:
    """Any optimizer's step inside the open block: every copy is made anew (a fused optimizer's
    update, AdamW(fused=True), moves no version counter)."""
    if _BLOCK is not None:
        _BLOCK.copies.clear()


def keeping(x: torch.Tensor) -> bool:
    """Whether `x` is a kept parameter of the open block, on the direct path (not traced) and
    not while a CUDA graph is captured (a replay runs the kernels captured: a copy taken from
    the block there would never be made again after an optimizer step)."""
    return _BLOCK is not None and not traced(x) and x.data_ptr() in _BLOCK.pointers and not _capturing(x)


def _capturing(x: torch.Tensor) -> bool:
    """Whether a CUDA graph is being captured on the current stream of x's GPU."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def kept(x: torch.Tensor, what, make):
    """make(): the copy `what` of `x`, or the kept one while x's version is the one it was made
    from; outside a block, while tracing, or for a tensor that is not a kept parameter, make()."""
    block = _BLOCK  # read once: another thread may close the block meanwhile
    if block is None or not keeping(x):
        return make()
    key = (what, x.data_ptr(), tuple(x.shape), x.stride(), x.dtype)
    hit = block.copies.get(key)
    if hit is None or hit[0] != x._version:
        hit = block.copies[key] = (x._version, make())
    return hit[1]
