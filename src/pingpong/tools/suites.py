"""Named shape lists that `pingpong bench --suite` and `pingpong tune --suite` both read.

    | suite   | shapes (M, N, K)                                                           |
    |---------|----------------------------------------------------------------------------|
    | llm     | Llama-3-8B projections a @ wᵀ: (N, K) = (6144, 4096) qkv, (4096, 4096) o,  |
    |         | (28672, 4096) gate_up, (4096, 14336) down, at M = 1 .. 8192 tokens         |
    | squares | n³ for n = 1024 .. 16384                                                   |
    | largek  | few output tiles, long K: 512×512×65536, 1024×1024×16384, 64×4096×65536    |
    | all     | the three above                                                            |
    | random  | a seeded draw of RANDOM_COUNT shapes (`--seed S`): M log-uniform in        |
    |         | 1 .. 16384 (any integer, most not multiples of 64), (N, K) a projection    |
    |         | of a model family the suites above do not name (RANDOM_FAMILIES)          |

`random` is the held-out check of a selection change: tune on the named suites, then read
the random suite with seeds nobody tuned on. Its shapes depend only on the seed.
"""

from __future__ import annotations

import math
import random

from ..errors import PingpongError

LLM_PROJECTIONS = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))  # (N, K): qkv, o, gate_up, down
LLM_TOKENS = (1, 16, 64, 128, 512, 2048, 8192)

SUITES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "llm": tuple((m, n, k) for m in LLM_TOKENS for n, k in LLM_PROJECTIONS),
    "squares": tuple((n, n, n) for n in (1024, 2048, 4096, 8192, 16384)),
    "largek": ((512, 512, 65536), (1024, 1024, 16384), (64, 4096, 65536)),
}
SUITES["all"] = SUITES["llm"] + SUITES["squares"] + SUITES["largek"]

#: family -> (hidden, q + k + v width, intermediate) of its decoder layer (public configs).
RANDOM_FAMILIES = {
    "qwen2.5-7b": (3584, 4608, 18944),
    "qwen2.5-14b": (5120, 7168, 13824),
    "gemma-2-9b": (3584, 8192, 14336),
    "phi-3-mini": (3072, 9216, 8192),
    "llama-3-70b": (8192, 10240, 28672),
    "yi-34b": (7168, 9216, 20480),
    "deepseek-v2-lite": (2048, 6144, 10944),
}
RANDOM_COUNT = 64
#: Largest M·N·K drawn (about 1.5 ms of bf16 work on an H100): the suite stays minutes long.
RANDOM_MAX_WORK = 2 ** 40


def _projections(hidden: int, qkv: int, inter: int) -> tuple[tuple[int, int], ...]:
    """(N, K) of a layer's products y = x·wᵀ: qkv, o, gate+up (fused), down."""
    return (qkv, hidden), (hidden, hidden), (2 * inter, hidden), (hidden, inter)


def random_suite(seed: int, count: int = RANDOM_COUNT) -> tuple[tuple[int, int, int], ...]:
    """`count` distinct (M, N, K), a pure function of `seed` (module docstring)."""
    rng = random.Random(seed)
    pool = sorted({nk for dims in RANDOM_FAMILIES.values() for nk in _projections(*dims)})
    shapes: dict[tuple[int, int, int], None] = {}
    while len(shapes) < count:
        n, k = rng.choice(pool)
        m = int(round(math.exp(rng.uniform(0.0, math.log(16384)))))
        if m * n * k <= RANDOM_MAX_WORK:
            shapes[(m, n, k)] = None
    return tuple(shapes)


def suite(name: str, option: str = "--suite", seed: int = 0) -> tuple[tuple[int, int, int], ...]:
    """The shapes of suite `name` (`random`: drawn with `seed`); an unknown name is a
    PingpongError naming `option`."""
    if name == "random":
        return random_suite(seed)
    if name not in SUITES:
        raise PingpongError(f"{option}: unknown suite {name!r}; expected one of {', '.join(SUITES)}, random")
    return SUITES[name]
