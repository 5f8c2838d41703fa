"""The library's exceptions: each names the argument or constraint at fault."""


class PingpongError(ValueError):
    """Bad input to a pingpong function. Subclasses ValueError so callers can catch either."""


class ConfigError(PingpongError):
    """A KernelConfig that violates a constraint; the message names the constraint."""


class TargetError(PingpongError):
    """An unknown compilation target or kernel name; the message lists the valid names."""
