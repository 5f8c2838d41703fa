"""The library's exceptions: each names the argument or constraint at fault."""


class PingpongError(ValueError):
    """Bad input to a pingpong function. Subclasses ValueError so callers can catch either."""


class ConfigError(PingpongError):
    """A KernelConfig that violates a constraint; the message names the constraint."""


class TargetError(PingpongError):
    """An unknown compilation target or kernel name; the message lists the valid names."""


class ToolMissing(PingpongError):
    """A CUDA binary tool the offline compile facts read (cuobjdump) is not where Triton's NVIDIA
    backend keeps its tools; the message names the tool and the path looked at."""


def check_tensor(name: str, t, expected: str = "a torch.Tensor") -> None:
    """PingpongError naming `name` unless `t` is a dense (strided, not nested, not negated)
    torch.Tensor: the one check of what every tensor argument is, before anything reads its
    shape, strides or data."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise PingpongError(f"{name}: expected {expected}, got {type(t).__name__}")
    if t.layout is not torch.strided:
        kind = "sparse tensors" if "sparse" in str(t.layout) else "tensors of this layout"
        raise PingpongError(f"{name}: {kind} are not supported (layout {t.layout}); pass a dense tensor")
    if t.is_nested:  # a strided nested tensor has no sizes: torch raises on .shape
        raise PingpongError(f"{name}: nested tensors are not supported; pass a dense tensor (e.g. padded)")
    # the kernels read memory, which holds -t (a negated view: torch.conj(z).imag, torch._neg_view);
    # dynamo cannot trace is_neg() (a bool): under torch.compile this one check is not made
    if not torch.compiler.is_compiling() and t.is_neg():
        raise PingpongError(f"{name}: a negated view (is_neg(): its memory holds the negation) is not supported;"
                            f" pass {name}.resolve_neg()")
