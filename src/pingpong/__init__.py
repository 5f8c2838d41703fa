"""pingpong: readable, fast GEMM kernels in Triton Gluon.

    import pingpong
    c = pingpong.matmul(a, w.t())                       # a @ wᵀ, bf16/fp16, fp32 accumulate
    d = pingpong.gemm(a, b, c, alpha=2.0, beta=0.5)     # α·a@b + β·c, fused
    pingpong.gemm_(c, a, b, beta=1.0)                   # in place
    y = pingpong.grouped_mm(x, w.transpose(1, 2), offs) # experts: rows of group g @ w[g]ᵀ
    pingpong.matmul_tiled(a, b, pingpong.KernelConfig(128, 128, 64, schedule="pingpong"))

See README.md for what runs where, and `pingpong --help` for the command line.
"""

from .toolchain import check as _check_triton

TRITON = _check_triton()  # a clear UnsupportedTritonError here, not a compile error in a kernel

from .api import gemm, gemm_, matmul, matmul_tiled, path_for
from .hopper.config import KernelConfig
from . import nn
from .functional import linear
from .grouped import grouped_mm
from .errors import ConfigError, PingpongError, TargetError
from .toolchain import UnsupportedTritonError
from .streaming import vector_add
from .fp8 import scaled_mm
from .fp8_grouped import scaled_grouped_mm
from .quantize import quantize_fp8

import sys as _sys

if "torch.distributed.tensor" in _sys.modules:  # DTensors may come: their sharding rules (pingpong.distributed)
    from . import distributed as _distributed  # noqa: F401

from .toolchain import __version__

__all__ = [
    "matmul", "gemm", "gemm_", "matmul_tiled", "path_for", "linear", "scaled_mm", "quantize_fp8", "grouped_mm",
    "vector_add", "scaled_grouped_mm",
    "KernelConfig", "ConfigError", "PingpongError", "TargetError", "UnsupportedTritonError",
]
