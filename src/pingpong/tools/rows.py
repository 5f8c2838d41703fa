"""One benchmark row (a shape's check and times against the peer) and the numbers it is made
of: shared by `pingpong bench` (bench.py) and its FP8 and grouped-GEMM parts."""

from __future__ import annotations

import dataclasses
from typing import Any

#: flops per byte above which a GEMM is compute-bound on Hopper (bf16 dense ~989 TFLOP/s over
#: 3.35 TB/s HBM ≈ 295); rows below it get the HBM column (achieved fraction of peak bandwidth)
RIDGE_FLOP_PER_BYTE = 295


def rel_error(out, ref) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; NaN anywhere gives NaN (which fails every bound)."""
    import torch

    diff = torch.linalg.vector_norm(out.double() - ref.double()).item()
    den = torch.linalg.vector_norm(ref.double()).item()
    return diff / den if den > 0 else diff


def tflops(M: int, N: int, K: int, ms: float) -> float:
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12


#: the status of a row whose peer (torch._scaled_mm) refused the shape: ours checked and timed, no ratio
PEER_UNSUPPORTED = "peer-unsupported"


@dataclasses.dataclass
class Row:
    M: int
    N: int
    K: int
    path: str
    status: str  # "ok" | PEER_UNSUPPORTED (ours checked and timed, the peer refused the shape) | "FAILED"
    # (wrong result, not timed) | "ERROR: ..." (raised, not timed)
    rel_err: float | None = None
    ours_ms: float | None = None
    cublas_ms: float | None = None
    ours_reps: int | None = None
    cublas_reps: int | None = None
    ratio_min: float | None = None  # spread of the per-round ratios (--rounds)
    ratio_max: float | None = None
    in_bytes: int = 2  # element sizes, for the bytes a bandwidth-bound row must move
    out_bytes: int = 2
    hbm_bytes_per_s: float | None = None  # the device's peak HBM bandwidth, when known

    @property
    def passed(self) -> bool:
        """Ours ran and was right: "ok", or PEER_UNSUPPORTED (the run's exit status)."""
        return self.status in ("ok", PEER_UNSUPPORTED)

    @property
    def shape(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"

    @property
    def ours_tflops(self) -> float | None:
        return tflops(self.M, self.N, self.K, self.ours_ms) if self.ours_ms else None

    @property
    def cublas_tflops(self) -> float | None:
        return tflops(self.M, self.N, self.K, self.cublas_ms) if self.cublas_ms else None

    @property
    def ratio(self) -> float | None:
        return self.cublas_ms / self.ours_ms if self.ours_ms and self.cublas_ms else None

    @property
    def min_bytes(self) -> int:
        """Bytes the product must move at least: read A and B once, write C once."""
        return (self.M * self.K + self.K * self.N) * self.in_bytes + self.M * self.N * self.out_bytes

    @property
    def hbm_fraction(self) -> float | None:
        """Achieved fraction of peak HBM bandwidth (min_bytes / time), for bandwidth-bound
        rows only: fewer than RIDGE_FLOP_PER_BYTE flops per byte."""
        if not self.ours_ms or not self.hbm_bytes_per_s:
            return None
        if 2.0 * self.M * self.N * self.K / self.min_bytes >= RIDGE_FLOP_PER_BYTE:
            return None
        return self.min_bytes / (self.ours_ms * 1e-3) / self.hbm_bytes_per_s

    def record(self) -> dict[str, Any]:
        """Flat dict for CSV/JSON (derived columns included)."""
        d = dataclasses.asdict(self)
        d.update(shape=self.shape, ours_tflops=self.ours_tflops, cublas_tflops=self.cublas_tflops, ratio=self.ratio,
                 hbm_fraction=self.hbm_fraction)
        return d


def error_status(e: BaseException) -> str:
    """The status column of a shape that raised: ``ERROR: <type>: <first line, shortened>``."""
    return f"ERROR: {type(e).__name__}: {e}".splitlines()[0][:120]
