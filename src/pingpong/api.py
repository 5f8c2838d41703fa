"""The public GEMM API on PyTorch tensors.

    | function                                   | computes                                 |
    |--------------------------------------------|------------------------------------------|
    | matmul(a, b, *, out_dtype=None)            | a @ b                                    |
    | gemm(a, b, c=None, *, alpha, beta, out_dtype, bias, activation)                       |
    |                                            | act(α·(a@b) + bias) + β·c, one pass      |
    | gemm_(c, a, b, *, alpha, beta, bias, activation) | the same into c, in place          |
    | matmul_tiled(a, b, config)                 | a @ b with an explicit KernelConfig      |

a is (M, K), b is (K, N), both bf16 or both fp16; accumulation is fp32; the output is bf16,
fp16 or fp32 (default: the inputs' dtype). Row- and column-major views of a and b (e.g.
``b = w.t()``, the transpose_b layout) run without copies. matmul and gemm also take
batched a (…, M, K) and b (…, K, N) with torch.matmul's broadcasting (pingpong.integration.batching).
While torch.compile traces, or autograd records, a call goes through pingpong.integration.ops (the
torch.library ops, or an autograd.Function); eager inference takes the direct path below.

Batched: a (B, M, K) and/or b (B, K, N) give a (B, M, N) result in one kernel launch over
the tiles of every batch; a 2-D operand (or batch size 1, or batch stride 0) is shared by
all batches (a weight). c is (B, M, N) or a shared (M, N). (torch.matmul's N-D broadcasting
reduces to this: pingpong's op layer.) The fused epilogue (bias per column or per row, an
activation; docs/epilogue.md) runs on the fp32 accumulator before the one cast.

A call builds one GemmSpec (pingpong.runtime.spec), validated when it is new, then planned
once per spec (pingpong.runtime.plan: the backends answer can_implement / plan, the decision is
cached and later identical calls skip validation and launch directly); `path_for` names the
planned backend's path:

    | device                       | path            |
    |------------------------------|-----------------|
    | CUDA sm_90 (H100/H200)       | "hopper": the Gluon kernel (pingpong.hopper)        |
    |   an operand, C or the output not TMA-legal (e.g. bf16, K=17: 34-byte rows; a base   |
    |   not 16-byte aligned, x[1:]; odd N in a bf16 output)                                |
    |                              | "hopper-padded": a 16-byte-aligned copy, then the kernel |
    | other CUDA GPUs, ROCm GPUs   | "portable": the plain-Triton kernel (pingpong.portable);  |
    | gfx942/gfx950 (bf16, B N×K), gfx11xx (fp16→fp32) | "amd": the AMD Gluon kernels (pingpong.amd) — compiled, never run here |
    | CPU                          | refused (PingpongError); Triton's interpreter is an explicit |
    |                              | opt-in for tests: pingpong.portable.portable_gemm(..., interpret=True) |
    | M, N or K = 0                | "empty": no kernel                                   |

Every launch runs on the tensors' own GPU (a device guard when it is not the current one),
on that GPU's current stream, and is CUDA-graph capturable.

Bad input raises PingpongError (a ValueError) naming the argument and what was expected, and
changes nothing. Empty M or N gives an empty result; K = 0 gives act(bias) + β·c (or zeros).
"""

from __future__ import annotations

import torch

from .integration import direct
from .integration import ops as _ops
from .errors import PingpongError
from .hopper.host.config import KernelConfig
from .runtime import plan as plan_mod
from .runtime.spec import INPUT_DTYPES, NO_ARGS, OUTPUT_DTYPES, EpilogueArgs, check_scalar

__all__ = ["matmul", "gemm", "gemm_", "matmul_tiled", "path_for", "explain", "INPUT_DTYPES", "OUTPUT_DTYPES"]


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, out_dtype=None, bias=None, activation=None) -> torch.Tensor:
    """act(α·(a @ b) + bias) + β·c in one pass (all of it fused into the kernel's epilogue).

    Args:
        a: (M, K) bf16/fp16 CUDA tensor, any row- or column-major strides; or (B, M, K).
        b: (K, N), same dtype and device (``w.t()`` of an (N, K) weight runs without a copy);
            or (B, K, N). A 2-D operand of a batched product is shared by the batches.
        c: optional tensor of the result's shape (or (M, N), shared by the batches) and the
            output dtype; not read when beta == 0 (a beta ≠ 0 without c is refused).
        alpha, beta: finite real scalars.
        out_dtype: torch.bfloat16, torch.float16 or torch.float32 (default: a.dtype).
        bias: optional (N,) or (1, N) (per output column) or (M, 1) (per row) bf16/fp16/fp32
            tensor, added to α·(a @ b) before the activation.
        activation: None, "relu", "gelu_erf", "gelu_tanh" or "silu" (docs/epilogue.md).
    Returns:
        A new contiguous (M, N) or (B, M, N) tensor of out_dtype.
    """
    args = EpilogueArgs(c, check_scalar("alpha", alpha), check_scalar("beta", beta), bias, activation=activation)
    if _ops.needs_op(a, b, c, bias):  # torch.compile / autograd: the pingpong ops (pingpong.integration.ops)
        return _ops.route_gemm(a, b, args, out_dtype)
    return direct.gemm(a, b, args, out_dtype)


def matmul(a, b, *, out_dtype=None) -> torch.Tensor:
    """a @ b with fp32 accumulation. See `gemm` for the arguments."""
    if _ops.needs_op(a, b):
        return _ops.route_gemm(a, b, NO_ARGS, out_dtype)
    return direct.gemm(a, b, NO_ARGS, out_dtype)


def matmul_tiled(a, b, config: KernelConfig, *, out_dtype=None) -> torch.Tensor:
    """a @ b on the Hopper kernel with an explicit KernelConfig (validated first)."""
    return direct.matmul_tiled(a, b, config, out_dtype)


def gemm_(c, a, b, *, alpha=1.0, beta=0.0, bias=None, activation=None) -> torch.Tensor:
    """In place: c ← act(α·(a @ b) + bias) + β·c (arguments as in `gemm`). Returns c.

    c must be the result's shape ((M, N) or (B, M, N)), on a's device, of dtype
    bf16/fp16/fp32, must not share memory with a
    or b (compared by address range) and must not overlap itself (an expand()ed view). Any
    other c strides work (a c TMA cannot write is computed into a temporary and copied
    back). On a refusal (PingpongError) c is left untouched. Not differentiable: refused while
    autograd would record it (grad mode on and c, a or b requires grad); c's version counter
    is bumped, so a backward that saved c raises instead of reading the new values.
    """
    args = EpilogueArgs(c, check_scalar("alpha", alpha), check_scalar("beta", beta), bias, activation=activation)
    if _ops.needs_op(c, a, b, bias):  # autograd (refused) / torch.compile: the pingpong::gemm_ op
        _ops.route_gemm_(a, b, args)
        return c
    return direct.gemm_(a, b, args)


def path_for(a, b, c=None, *, beta=0.0, out_dtype=None, inplace=False, bias=None, activation=None) -> str:
    """The path the call takes, the planned backend's: "hopper", "hopper-padded" (an aligned
    copy of an operand, of c, or of the output), "portable", "amd", or "empty" (M, N or K is
    0: no kernel runs).

    path_for(a, b)                         matmul(a, b)
    path_for(a, b, c, beta=β)              gemm(a, b, c, beta=β)
    path_for(a, b, c, beta=β, inplace=True) gemm_(c, a, b, beta=β)  (validated as gemm_ validates)
    path_for(a, b, bias=v, activation=f)   gemm(a, b, bias=v, activation=f)
    """
    if not isinstance(inplace, bool):  # "no" is truthy: it would be validated and planned as in place
        raise PingpongError(f"inplace: expected a bool, got {inplace!r}")
    return direct.path_for(a, b, _args(c, beta, bias, activation), out_dtype, inplace)


def explain(a, b, c=None, *, beta=0.0, out_dtype=None, inplace=False, bias=None, activation=None) -> dict:
    """Which kernel the call runs, and why: the plan's {"path": as path_for, "config": its
    KernelConfig (None where the backend has none), "why": where the config came from (the
    heuristic, a tuning table, the one given) and which backends declined, "stream_k": what
    stream-K would do with the config's tile (None off the Hopper 16-bit kernel; the heuristic
    itself picks stream-K only for 128×256 tiles whose last wave is thin, select.wave_stream;
    elsewhere a KernelConfig asks for it)}. The arguments are path_for's. Every new plan is also logged by the `pingpong` logger (PINGPONG_LOG=info)."""
    return plan_mod.explain(direct.plan_of(a, b, _args(c, beta, bias, activation), out_dtype, inplace))


def _args(c, beta, bias, activation) -> EpilogueArgs:
    """path_for's and explain's epilogue (α does not choose the plan)."""
    return EpilogueArgs(c, beta=check_scalar("beta", beta), bias=bias, activation=activation)


_gemm_into = direct.gemm_into  # tests and benchmarks (pingpong.integration.direct.gemm_into)
