"""Streaming kernels: a persistent, double-buffered vector add (docs/streaming.md).

    vector_add(a, b, out=None)   Hopper: Gluon TMA kernel (hopper.py); other GPUs: portable
                                 Triton kernel (portable.py); gfx942: the hand-written GCN
                                 design in Gluon, compiled offline (gfx942.py, `pingpong isa`).

The benchmark (`pingpong bench --op vector_add`, `python -m pingpong.streaming`) is a tool:
pingpong.tools.bench_streaming (the kernels never import the tools).
"""

from .api import kernel_path, vector_add

__all__ = ["vector_add", "kernel_path"]
