"""Named shape lists that `pingpong bench --suite` and `pingpong tune --suite` both read.

    | suite   | shapes (M, N, K)                                                           |
    |---------|----------------------------------------------------------------------------|
    | llm     | Llama-3-8B projections a @ wᵀ: (N, K) = (6144, 4096) qkv, (4096, 4096) o,  |
    |         | (28672, 4096) gate_up, (4096, 14336) down, at M = 1 .. 8192 tokens         |
    | squares | n³ for n = 1024 .. 16384                                                   |
    | largek  | few output tiles, long K: 512×512×65536, 1024×1024×16384, 64×4096×65536    |
    | all     | the three above                                                            |
"""

from __future__ import annotations

from .errors import PingpongError

LLM_PROJECTIONS = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))  # (N, K): qkv, o, gate_up, down
LLM_TOKENS = (1, 16, 64, 128, 512, 2048, 8192)

SUITES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "llm": tuple((m, n, k) for m in LLM_TOKENS for n, k in LLM_PROJECTIONS),
    "squares": tuple((n, n, n) for n in (1024, 2048, 4096, 8192, 16384)),
    "largek": ((512, 512, 65536), (1024, 1024, 16384), (64, 4096, 65536)),
}
SUITES["all"] = SUITES["llm"] + SUITES["squares"] + SUITES["largek"]


def suite(name: str, option: str = "--suite") -> tuple[tuple[int, int, int], ...]:
    """The shapes of suite `name`; an unknown name is a PingpongError naming `option`."""
    if name not in SUITES:
        raise PingpongError(f"{option}: unknown suite {name!r}; expected one of {', '.join(SUITES)}")
    return SUITES[name]
