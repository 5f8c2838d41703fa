"""`linear`: F.linear's shapes on pingpong's GEMM, with the bias and an activation fused; and the
epilogue's derivative for autograd.

    y = act(x @ wᵀ + bias)        x (…, K)   w (N, K)   bias (N,)   y (…, N)

x's leading dims fold into the GEMM's M without a copy whenever they merge (see
`pingpong.integration.batching`); ``w.t()`` is the transpose_b layout (no copy). The epilogue contract is
the GEMM's: y = act(α·acc + bias) + β·c, the activation on the fp32 accumulator before the
cast. Autograd and torch.compile go through the ``pingpong::linear`` op (`pingpong.integration.ops`);
eager inference calls the kernel directly, on a plan cached per call signature
(pingpong.integration.direct.LayerPlan: the forward launch and, for autograd, the two backward launches).
Errors name the arguments as `linear` does: x, weight, bias.

    | activation  | torch                          | derivative used by autograd            |
    |-------------|--------------------------------|----------------------------------------|
    | "relu"      | F.relu                         | aten.threshold_backward                |
    | "gelu_erf"  | F.gelu                         | aten.gelu_backward                     |
    | "gelu_tanh" | F.gelu(approximate="tanh")     | aten.gelu_backward(approximate="tanh") |
    | "silu"      | F.silu                         | aten.silu_backward                     |
"""

from __future__ import annotations

import torch

from .integration import ops
from .integration.ops import activation_backward, activation_forward
from .runtime.spec import validate_linear

__all__ = ["linear", "check_linear", "activation_forward", "activation_backward"]


def check_linear(x, weight, bias, activation) -> str:
    """`linear`'s argument checks (pingpong.runtime.spec.validate_linear); the activation name."""
    return validate_linear(x, weight, bias, activation)


def linear(x, weight, bias=None, activation=None) -> torch.Tensor:
    """act(x @ weightᵀ + bias) with F.linear's shapes; x, weight bf16/fp16 on a GPU.

    Args:
        x: (…, K). weight: (N, K), the nn.Linear weight layout. bias: (N,) bf16/fp16/fp32, or None.
        activation: None, "relu", "gelu_erf", "gelu_tanh" or "silu".
    Returns:
        (…, N) of x's dtype.
    """
    return ops.call_linear(x, weight, bias, activation)  # direct, autograd or torch.compile (pingpong.integration.ops)
