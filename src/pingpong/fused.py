"""The fused epilogue's vocabulary on the host: activation names, the bias's shapes, and their
validation. Both kernels (pingpong.hopper.device.epilogue, pingpong.portable) compute, in fp32 on the
accumulator, before the single cast to the output dtype:

    y = act(α·acc + bias) + β·C          acc = A @ B (fp32)

    acc ──×α──(+ bias)──act──(+ β·C)──cast──▶ out
                 │               │
       per column (N,) / (1, N)  residual: added after the activation,
       or per row (M, 1)         as a transformer block adds its skip connection

Each part is optional; with no bias, activation "none" and β = 0 this is the plain GEMM.

    | activation  | act(z)                                          | torch equivalent                |
    |-------------|-------------------------------------------------|---------------------------------|
    | "none"      | z                                               |                                 |
    | "relu"      | max(z, 0)                                       | F.relu                          |
    | "gelu_erf"  | z/2 · (1 + erf(z/√2))                           | F.gelu (approximate="none")     |
    | "gelu_tanh" | z/2 · (1 + tanh(√(2/π)·(z + 0.044715 z³)))      | F.gelu(approximate="tanh")      |
    | "silu"      | z · sigmoid(z)                                  | F.silu                          |

The bias follows torch broadcasting against the (M, N) result: shape (N,) or (1, N) is one
value per output column (nn.Linear's bias; a 1-D bias is always per column), (M, 1) one per
row. Its dtype is bf16, fp16 or fp32 (the kernels convert it to fp32). A batched product
shares one bias across its batches.
"""

from __future__ import annotations

import torch

from .runtime.plan import bias_vector
from .runtime.spec import ACTIVATIONS, BIAS_DTYPES, bias_kind, check_activation, torch_activation
from .runtime import spec as _spec

__all__ = ["ACTIVATIONS", "BIAS_DTYPES", "check_activation", "bias_kind", "check_bias", "torch_activation",
           "bias_vector"]


def check_bias(bias, m: int, n: int, device: torch.device) -> None:
    """PingpongError naming `bias` unless it is None or a (n,), (1, n) or (m, 1) tensor of a
    supported dtype on `device` (pingpong.runtime.spec.check_bias)."""
    _spec.check_bias(bias, m, n, device)
