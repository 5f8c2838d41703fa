"""Streaming kernels: the seed's persistent, double-buffered vector add (docs/streaming.md).

    vector_add(a, b, out=None)   Hopper: Gluon TMA kernel (hopper.py); other GPUs: portable
                                 Triton kernel (portable.py); gfx942: the seed's design in
                                 Gluon, compiled offline (gfx942.py, `pingpong isa`).
"""

from . import offline  # noqa: F401  (registers the kernels for `pingpong isa`)
from .api import vector_add

__all__ = ["vector_add"]
