"""AMD kernels, compiled and checked offline; never run on hardware here (docs/amd.md).

    cdna_pingpong   gfx942 / gfx950   8-wave ping-pong, direct-to-LDS, MFMA (cdna_pingpong.py)
    rdna_wmma       gfx1151           the "standard" WMMA kernel (rdna_wmma.py)

Importing this package registers both with pingpong.runtime.compile (`pingpong isa --list`).
"""

from . import cdna_pingpong, rdna_wmma  # noqa: F401  (register the kernels)
from .config import CdnaConfig, WmmaConfig  # noqa: F401
from .dispatch import gemm, select_kernel  # noqa: F401,E402
