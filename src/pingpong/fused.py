"""The fused epilogue's vocabulary on the host: activation names, the bias's shapes, and their
validation. Both kernels (pingpong.hopper.epilogue, pingpong.portable) compute, in fp32 on the
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

from .errors import PingpongError, check_tensor

ACTIVATIONS = ("none", "relu", "gelu_erf", "gelu_tanh", "silu")
BIAS_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_activation(activation) -> str:
    """The activation's name (None means "none"); PingpongError for anything else."""
    if activation is None:
        return "none"
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise PingpongError(f"activation: expected None or one of {ACTIVATIONS}, got {activation!r}")
    return activation


def bias_kind(bias: torch.Tensor | None, m: int) -> str:
    """"none", "col" (one value per output column) or "row", from a validated bias's shape and
    the result's rows m. A (1, 1) bias is per row when m = 1 (then n may be anything), per
    column otherwise (then n = 1)."""
    if bias is None:
        return "none"
    return "row" if bias.dim() == 2 and bias.shape[1] == 1 and bias.shape[0] == m else "col"


def check_bias(bias, m: int, n: int, device: torch.device) -> None:
    """PingpongError naming `bias` unless it is None or a (n,), (1, n) or (m, 1) tensor of a
    supported dtype on `device`."""
    if bias is None:
        return
    check_tensor("bias", bias, "a torch.Tensor or None")
    shape = tuple(bias.shape)
    if shape not in ((n,), (1, n), (m, 1)):
        raise PingpongError(
            f"bias: expected shape ({n},) or (1, {n}) (per output column) or ({m}, 1) (per row)"
            f" for a ({m}, {n}) result, got {shape}"
        )
    if bias.dtype not in BIAS_DTYPES:
        raise PingpongError(f"bias: dtype {bias.dtype} is not supported; expected one of {BIAS_DTYPES}")
    if bias.device != device:
        raise PingpongError(f"bias must be on the result's device ({device}), got {bias.device}")


def torch_activation(activation: str):
    """The activation as a torch function (the empty-K product, z = bias, runs it on the host)."""
    import torch.nn.functional as F

    return {"none": lambda z: z, "relu": F.relu, "gelu_erf": F.gelu, "silu": F.silu,
            "gelu_tanh": lambda z: F.gelu(z, approximate="tanh")}[activation]


def bias_vector(bias: torch.Tensor | None) -> torch.Tensor | None:
    """The bias as the 1-D, unit-stride vector the kernels read (a view when it already is)."""
    if bias is None:
        return None
    v = bias.reshape(-1)
    return v if v.stride(0) == 1 or v.numel() <= 1 else v.contiguous()
