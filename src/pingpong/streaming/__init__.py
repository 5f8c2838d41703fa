"""Streaming kernels: a persistent, double-buffered vector add (docs/streaming.md).

    vector_add(a, b, out=None)   Hopper: Gluon TMA kernel (hopper.py); other GPUs: portable
                                 Triton kernel (portable.py); gfx942: the hand-written GCN
                                 design in Gluon, compiled offline (gfx942.py, `pingpong isa`).
"""

from . import offline  # noqa: F401  (registers the kernels for `pingpong isa`)
from .api import kernel_path, vector_add
from .bench import bench_vector_add, format_table, run_vector_add_bench

__all__ = ["vector_add", "kernel_path", "run_vector_add_bench", "format_table", "bench_vector_add"]
