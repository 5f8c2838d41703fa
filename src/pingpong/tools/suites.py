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


# ----------------------------------------------------------------------------- mixture-of-experts (`bench --op grouped`)

#: model -> (experts, experts per token, hidden, expert intermediate) (public configs)
MOE_MODELS = {
    "mixtral-8x7b": (8, 2, 4096, 14336),
    "qwen3-30b-a3b": (128, 8, 2048, 768),
    "deepseek-v3": (256, 8, 7168, 2048),
}
MOE_TOKENS = (128, 512, 2048, 8192, 16384)
MOE_ROUTINGS = ("balanced", "zipf")
#: the three products of one expert projection hidden -> intermediate: y = x·w[g]ᵀ, dX = dY·w[g], dW[g] = X_gᵀ·dY_g
MOE_PRODUCTS = ("forward", "dgrad", "wgrad")
ZIPF_EXPONENT = 1.0


def moe_group_sizes(tokens: int, experts: int, top_k: int, routing: str) -> list[int]:
    """Rows per expert of `tokens` tokens routed to `top_k` experts each: "balanced" (equal,
    the remainder to the first experts) or "zipf" (expert i's share ∝ 1/(i+1)^ZIPF_EXPONENT,
    at most `tokens` rows each: a token picks an expert once). Sums to tokens·top_k."""
    for name, v, least in (("tokens", tokens, 0), ("experts", experts, 1), ("top_k", top_k, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise PingpongError(f"{name}: expected an int ≥ {least}, got {v!r}")
    if top_k > experts:
        raise PingpongError(f"top_k: {top_k} experts per token, but there are only {experts} (a token picks an expert"
                            " once)")
    total = tokens * top_k
    if routing == "balanced":
        return [total // experts + (i < total % experts) for i in range(experts)]
    if routing != "zipf":
        raise PingpongError(f"routing: {routing!r} is not one of {', '.join(MOE_ROUTINGS)}")
    weights = [1.0 / (i + 1) ** ZIPF_EXPONENT for i in range(experts)]
    sizes = [0] * experts
    left, free = total, list(range(experts))
    while left > 0 and free:
        share = sum(weights[i] for i in free)
        capped = False
        for i in list(free):
            want = sizes[i] + left * weights[i] / share
            if want >= tokens:
                sizes[i], capped = tokens, True
                free.remove(i)
        if capped:
            left = total - sum(sizes)
            continue
        for i in free:
            sizes[i] += int(left * weights[i] / share)
        rest = total - sum(sizes)
        for i in free[:rest]:
            sizes[i] += 1
        left = 0
    return sizes


def moe_suite(models=tuple(MOE_MODELS), tokens=MOE_TOKENS, routings=MOE_ROUTINGS, products=MOE_PRODUCTS):
    """(model, tokens, routing, product) cases of `bench --op grouped`."""
    return tuple((m, t, r, p) for m in models for t in tokens for r in routings for p in products)
