"""KernelConfig bounds, the derive cache, and the shared-memory budget against what the compiler
actually allocates (CPU; the sm_90a builds are offline compiles)."""

import functools

import pytest

from pingpong import ConfigError, KernelConfig
from pingpong.runtime import compile as cc


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(group_m=257), "group_m=257 exceeds 256"),
        (dict(group_m=2**31), "group_m=2147483648 exceeds"),
        (dict(block_m=128, block_n=16, stages=13), "stages=13 exceeds 12"),  # 13 × 18 KB would fit 227 KB
        (dict(group_m=True), "group_m must be a positive int"),
        (dict(block_m=128.0), "block_m must be a positive int"),
        (dict(stages=3.0), "stages must be an int"),
        (dict(block_n=[256]), "block_n must be a positive int"),
    ],
)
def test_bounds_name_the_constraint(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        KernelConfig(**kwargs).derive()


def test_bounds_allow_their_limits():
    KernelConfig(group_m=256).derive()
    assert KernelConfig(128, 64, 64, stages=6).derive().stages == 6


@pytest.mark.parametrize("bad", [dict(block_m=128.0), dict(group_m=True), dict(stages=3.0), dict(instr_n=256.0)])
def test_derive_cache_never_answers_for_an_unvalidated_config(bad):
    """Each bad config compares (and hashes) equal to a valid one derived just before."""
    good = KernelConfig(128, 256, 64, group_m=1, stages=3, instr_n=256)
    good.derive()
    twin = KernelConfig(**{**dict(block_m=128, block_n=256, block_k=64, group_m=1, stages=3, instr_n=256), **bad})
    assert twin == good and hash(twin) == hash(good)
    with pytest.raises(ConfigError):
        twin.derive()


def test_derive_cache_never_answers_for_unvalidated_element_sizes():
    KernelConfig().derive(2, 2)
    with pytest.raises(ConfigError, match="16-bit"):
        KernelConfig().derive(2.0, 2)
    with pytest.raises(ConfigError, match="output elements"):
        KernelConfig().derive(2, 2.0)


def test_shared_bytes_counted_by_hand():
    """Ring + staging + the fixed term, computed here from the tile sizes: 128×256×64 bf16
    cooperative = 3 stages of (128+256)·64·2 B, one 64×256 bf16 staging tile per consumer."""
    d = KernelConfig(128, 256, 64, schedule="cooperative").derive()
    ring, staging = 3 * (128 + 256) * 64 * 2, 2 * 64 * 256 * 2
    assert d.stages == 3 and d.epilogue_bytes == staging
    fixed = d.shared_bytes - ring - staging
    assert fixed >= 2 * 6 * 8 + 4 * 8, "the budget must hold 6 stages' ring barriers, C and turn barriers"
    assert d.shared_bytes <= 227 * 1024


def test_smallest_overflow_of_the_budget_is_refused():
    """5 stages of (64+256)·32·2 B plus a whole 64×256 fp32 staging tile per ping-pong
    consumer = 102400 + 131072 = 233472 B, over the 232448 B (227 KB) Hopper limit by 1 KB
    before any barrier is counted; 4 stages (212992 B + barriers) fit."""
    with pytest.raises(ConfigError, match="shared memory"):
        KernelConfig(64, 256, 32, stages=5, schedule="pingpong").validate(out_bytes=4)
    KernelConfig(64, 256, 32, stages=4, schedule="pingpong").validate(out_bytes=4)


@functools.lru_cache(maxsize=None)
def _facts(kernel):
    return cc.compile_kernel(kernel, "sm_90a").facts()


@pytest.mark.parametrize("kernel, block", [("persistent", (128, 256, 64)), ("cooperative", (128, 256, 64)),
                                           ("pingpong", (128, 128, 64))])
def test_budget_covers_what_the_compiler_allocates(kernel, block):
    """The derived shared-memory budget is an upper bound of the compiled kernel's shared
    memory (the offline builds: 512³ bf16, β·C, bf16 out). A budget that forgets a term
    admits configs that fail to launch."""
    d = KernelConfig(*block, schedule=kernel).derive()
    compiled = _facts(kernel).shared_bytes
    assert compiled <= d.shared_bytes, f"compiler allocates {compiled} B, budget says {d.shared_bytes} B"
    assert d.shared_bytes - compiled < 4096, "budget far above the allocation: a term counted twice?"
