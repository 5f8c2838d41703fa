"""`linear`: F.linear's shapes on pingpong's GEMM, with the bias and an activation fused.

    y = act(x @ wᵀ + bias)        x (…, K)   w (N, K)   bias (N,)   y (…, N)

x's leading dims fold into the GEMM's M without a copy whenever they merge (see
`pingpong.batching`); ``w.t()`` is the transpose_b layout (no copy). The activation is applied
to the fp32 accumulator before the cast. Autograd and torch.compile go through the
``pingpong::linear`` op (`pingpong.ops`); eager inference calls the kernel directly.
"""

from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F

from .errors import PingpongError

__all__ = ["linear", "ACTIVATIONS", "check_linear", "activation_forward", "activation_backward"]

#: Activation names: "gelu" is the erf form (F.gelu's default), "gelu_tanh" its tanh
#: approximation (F.gelu(approximate="tanh")).
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")


def check_linear(x, w, bias, activation) -> None:
    """Argument checks of `linear` that are not the GEMM's own (those name a and b)."""
    for name, t in (("x", x), ("w", w)):
        if not isinstance(t, torch.Tensor):
            raise PingpongError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if x.dim() < 1:
        raise PingpongError(f"x: expected a tensor of shape (…, K), got a 0-D tensor")
    if w.dim() != 2:
        raise PingpongError(f"w: expected a 2-D (N, K) weight, got shape {tuple(w.shape)}")
    if x.shape[-1] != w.shape[1]:
        raise PingpongError(
            f"x: expected last dim K = w.shape[1] = {w.shape[1]}, got shape {tuple(x.shape)} (w is {tuple(w.shape)})"
        )
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise PingpongError(f"bias: expected a torch.Tensor or None, got {type(bias).__name__}")
        if tuple(bias.shape) != (w.shape[0],):
            raise PingpongError(f"bias: expected shape ({w.shape[0]},) (w.shape[0], one per output column), got {tuple(bias.shape)}")
        if bias.dtype != w.dtype:
            raise PingpongError(f"bias: expected dtype {w.dtype} (the weight's), got {bias.dtype}")
        if bias.device != w.device:
            raise PingpongError(f"bias: expected device {w.device} (the weight's), got {bias.device}")
    if activation is not None and activation not in ACTIVATIONS:
        raise PingpongError(f"activation: expected None or one of {ACTIVATIONS}, got {activation!r}")


def activation_forward(name: str | None, z: torch.Tensor) -> torch.Tensor:
    """The activation in torch (the reference for tests, and the derivative's partner)."""
    if name is None:
        return z
    if name == "relu":
        return F.relu(z)
    if name == "silu":
        return F.silu(z)
    return F.gelu(z, approximate="tanh" if name == "gelu_tanh" else "none")


def activation_backward(name: str, grad: torch.Tensor, saved: torch.Tensor) -> torch.Tensor:
    """dL/dz from dL/dy for y = act(z), by torch's own derivative kernels.

    `saved` is the output y for relu (y > 0 exactly where z > 0) and the pre-activation z
    (fp32) otherwise. Returns fp32.
    """
    grad, saved = grad.float(), saved.float()
    aten = torch.ops.aten
    if name == "relu":
        return aten.threshold_backward(grad, saved, 0)
    if name == "silu":
        return aten.silu_backward(grad, saved)
    return aten.gelu_backward(grad, saved, approximate="tanh" if name == "gelu_tanh" else "none")


def linear(x, w, bias=None, activation=None) -> torch.Tensor:
    """act(x @ wᵀ + bias) with F.linear's shapes; x, w bf16/fp16 on a GPU, bias of w's dtype.

    Args:
        x: (…, K). w: (N, K), the nn.Linear weight layout. bias: (N,) or None.
        activation: None, "relu", "gelu" (erf), "gelu_tanh" or "silu".
    Returns:
        (…, N) of x's dtype.
    """
    from . import ops

    if ops.needs_op(x, w, bias):
        return ops.linear(x, w, bias, activation)
    return linear_direct(x, w, bias, activation)


def linear_direct(x, w, bias, activation) -> torch.Tensor:
    """`linear` without the op machinery (eager, no autograd): validate, then the kernel.

    The epilogue (bias, activation) runs in torch on the GEMM's fp32 result until the GEMM
    API takes `bias=` / `activation=` (the fused epilogue kernel).
    """
    from . import api

    check_linear(x, w, bias, activation)
    x2 = x if x.dim() > 1 else x.unsqueeze(0)
    if api_has_fused_epilogue():
        y = api.gemm(x2, w.t(), bias=bias, activation=activation)
    else:
        z = api.gemm(x2, w.t(), out_dtype=torch.float32)
        if bias is not None:
            z += bias
        y = activation_forward(activation, z).to(x.dtype)
    return y if x.dim() > 1 else y.squeeze(0)


@functools.lru_cache(maxsize=None)
def api_has_fused_epilogue() -> bool:
    from . import api

    return "activation" in inspect.signature(api.gemm).parameters
