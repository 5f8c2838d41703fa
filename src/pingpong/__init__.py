"""pingpong: readable, fast GEMM kernels in Triton Gluon.

    import pingpong
    c = pingpong.matmul(a, w.t())                       # a @ wᵀ, bf16/fp16, fp32 accumulate
    d = pingpong.gemm(a, b, c, alpha=2.0, beta=0.5)     # α·a@b + β·c, fused
    pingpong.gemm_(c, a, b, beta=1.0)                   # in place
    y = pingpong.grouped_mm(x, w.transpose(1, 2), offs) # experts: rows of group g @ w[g]ᵀ
    pingpong.matmul_tiled(a, b, pingpong.KernelConfig(128, 128, 64, schedule="pingpong"))

See README.md for what runs where, and `pingpong --help` for the command line.

`import pingpong` checks the Triton version and nothing more: torch and the kernels load on the
first use of a public name (`pingpong.matmul`, `from pingpong import nn`, ...), all at once, so
the command line's help and usage errors do not wait for torch.
"""

from .errors import ConfigError, PingpongError, TargetError
from .toolchain import UnsupportedTritonError, __version__
from .toolchain import check as _check_triton

TRITON = _check_triton()  # a clear UnsupportedTritonError here, not a compile error in a kernel

__all__ = [
    "matmul", "gemm", "gemm_", "matmul_tiled", "path_for", "explain", "linear", "scaled_mm", "quantize_fp8",
    "grouped_mm", "vector_add", "scaled_grouped_mm", "scaled_grouped_k_mm", "quantize_groups_t",
    "KernelConfig", "ConfigError", "PingpongError", "TargetError", "UnsupportedTritonError",
]


_loading = False


def _load() -> None:
    """The public API, imported on the first use of any of it."""
    global _loading, gemm, gemm_, matmul, matmul_tiled, path_for, explain, KernelConfig, nn, linear, grouped_mm
    global vector_add, scaled_mm, scaled_grouped_mm, scaled_grouped_k_mm, quantize_fp8, quantize_groups_t
    _loading = True  # a submodule's `from . import x` probes this package's attributes meanwhile
    try:
        from .api import explain, gemm, gemm_, matmul, matmul_tiled, path_for
        from .hopper.host.config import KernelConfig
        from . import nn
        from .functional import linear
        from .grouped import grouped_mm
        from .streaming import vector_add
        from .fp8 import scaled_mm
        from .fp8_grouped import scaled_grouped_k_mm, scaled_grouped_mm
        from .quantize import quantize_fp8
        from .quantize_groups import quantize_groups_t

        import sys

        if "torch.distributed.tensor" in sys.modules:  # DTensors may come: their sharding rules
            from . import distributed  # noqa: F401
    finally:
        _loading = False


#: what `_load` defines: a use of any of these loads the API
_API = frozenset(__all__) | {"nn"}


def __getattr__(name: str):
    """A public name loads the API; a submodule's name (`from . import quantize` inside a submodule
    imported first, `pingpong.fp8`) imports that submodule alone, as a package without this hook
    would: loading the API there would import the very module still being initialized."""
    missing = AttributeError(f"module 'pingpong' has no attribute {name!r}")
    if _loading or name.startswith("__"):  # hasattr probes load nothing
        raise missing
    if name in _API:
        _load()
        if name in globals():
            return globals()[name]
        raise missing
    import importlib
    import importlib.util

    if importlib.util.find_spec(f"{__name__}.{name}") is None:
        raise missing
    return importlib.import_module(f"{__name__}.{name}")


def __dir__():
    return sorted(set(globals()) | set(__all__) | {"nn"})
