"""`linear`: F.linear's shapes on pingpong's GEMM, with the bias and an activation fused; and the
epilogue's derivative for autograd.

    y = act(x @ wᵀ + bias)        x (…, K)   w (N, K)   bias (N,)   y (…, N)

x's leading dims fold into the GEMM's M without a copy whenever they merge (see
`pingpong.batching`); ``w.t()`` is the transpose_b layout (no copy). The epilogue contract is
the GEMM's: y = act(α·acc + bias) + β·c, the activation on the fp32 accumulator before the
cast. Autograd and torch.compile go through the ``pingpong::linear`` op (`pingpong.ops`);
eager inference calls the kernel directly.

    | activation  | torch                          | derivative used by autograd            |
    |-------------|--------------------------------|----------------------------------------|
    | "relu"      | F.relu                         | aten.threshold_backward                |
    | "gelu_erf"  | F.gelu                         | aten.gelu_backward                     |
    | "gelu_tanh" | F.gelu(approximate="tanh")     | aten.gelu_backward(approximate="tanh") |
    | "silu"      | F.silu                         | aten.silu_backward                     |
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import fused
from .errors import PingpongError, check_tensor

__all__ = ["linear", "check_linear", "activation_forward", "activation_backward"]

def check_linear_bias(bias, n: int, device) -> None:
    """nn.Linear's bias: None or (n,) (one value per output column), a GEMM bias dtype, on `device`."""
    if bias is None:
        return
    check_tensor("bias", bias, "a torch.Tensor or None")
    if tuple(bias.shape) != (n,):
        raise PingpongError(f"bias: expected shape ({n},) (w.shape[0]: one value per output column), got {tuple(bias.shape)}")
    fused.check_bias(bias, 1, n, device)  # dtype and device


def check_linear(x, w, bias, activation) -> str:
    """Argument checks of `linear` that are not the GEMM's own; returns the activation name."""
    for name, t in (("x", x), ("w", w)):
        check_tensor(name, t)
    if x.dim() < 1:
        raise PingpongError("x: expected a tensor of shape (…, K), got a 0-D tensor")
    if w.dim() != 2:
        raise PingpongError(f"w: expected a 2-D (N, K) weight, got shape {tuple(w.shape)}")
    if x.shape[-1] != w.shape[1]:
        raise PingpongError(
            f"x: expected last dim K = w.shape[1] = {w.shape[1]}, got shape {tuple(x.shape)} (w is {tuple(w.shape)})")
    check_linear_bias(bias, w.shape[0], w.device)
    return fused.check_activation(activation)


def activation_forward(name: str, z: torch.Tensor) -> torch.Tensor:
    """The activation in torch."""
    if name == "none":
        return z
    if name == "relu":
        return F.relu(z)
    if name == "silu":
        return F.silu(z)
    return F.gelu(z, approximate="tanh" if name == "gelu_tanh" else "none")


def activation_backward(name: str, grad: torch.Tensor, saved: torch.Tensor) -> torch.Tensor:
    """dL/dz from dL/dy for y = act(z), by torch's own derivative kernels, in fp32.

    `saved` is the pre-activation z, or for relu also the output y (y > 0 exactly where z > 0).
    """
    grad, saved = grad.float(), saved.float()
    aten = torch.ops.aten
    if name == "relu":
        return aten.threshold_backward(grad, saved, 0)
    if name == "silu":
        return aten.silu_backward(grad, saved)
    return aten.gelu_backward(grad, saved, approximate="tanh" if name == "gelu_tanh" else "none")


def linear(x, w, bias=None, activation=None) -> torch.Tensor:
    """act(x @ wᵀ + bias) with F.linear's shapes; x, w bf16/fp16 on a GPU.

    Args:
        x: (…, K). w: (N, K), the nn.Linear weight layout. bias: (N,) bf16/fp16/fp32, or None.
        activation: None, "relu", "gelu_erf", "gelu_tanh" or "silu".
    Returns:
        (…, N) of x's dtype.
    """
    from . import ops

    if ops.needs_op(x, w, bias):  # autograd or torch.compile (pingpong.ops)
        return ops.route_linear(x, w, bias, activation)
    return linear_direct(x, w, bias, activation)


def linear_direct(x, w, bias, activation) -> torch.Tensor:
    """`linear` without the op machinery (eager, no autograd): validate, then the kernel."""
    from . import api

    act = check_linear(x, w, bias, activation)
    if x.dim() != 2 and x.is_contiguous():  # (…, K) folded into M: a view, one 2-D GEMM
        y = api.gemm(x.view(-1, x.shape[-1]), w.t(), bias=bias, activation=act)
        return y.view(*x.shape[:-1], w.shape[0])
    return api.gemm(x, w.t(), bias=bias, activation=act)  # other layouts: pingpong.batching
