"""KernelConfig: derivation, every validate() error and bound, the derive cache, and the shared-memory
budget against what the compiler actually allocates (CPU; the sm_90a builds are offline compiles)."""

import functools

import pytest

from pingpong import ConfigError, KernelConfig
from pingpong.hopper.host.config import MAX_PIECE_RATIO, MIN_PIECE, SMEM_LIMIT, column_pieces, swizzle_width
from pingpong.runtime import compile as cc
from pingpong.runtime.spec import EpilogueArgs


def test_defaults_derive_for_each_schedule():
    coop = KernelConfig(128, 256, 64, schedule="cooperative").derive()
    assert (coop.consumer_m, coop.consumer_n, coop.consumers) == (64, 256, 2)
    assert coop.instr_shape == (16, 256, 16)
    assert coop.total_warps == 9 and coop.worker_warps == (4, 1)
    assert coop.worker_regs[0] > coop.worker_regs[1]  # setmaxnreg: consumers get the registers
    assert coop.shared_bytes <= SMEM_LIMIT and coop.stages == 3
    assert (coop.epilogue_n, coop.epilogue_bufs) == (256, 1)  # whole tile: 3 stages still fit
    pp = KernelConfig(128, 128, 64, schedule="pingpong").derive()
    assert (pp.consumer_m, pp.consumer_n) == (128, 128) and pp.stages == 5
    assert pp.epilogue_bytes == 2 * 128 * 128 * 2  # one staging tile per consumer
    base = KernelConfig(128, 256, 64, schedule="persistent").derive()
    assert base.num_warps == 8 and base.worker_warps == () and base.acc_regs == 128


def test_stage_count_follows_the_budget():
    bf16_out = KernelConfig(128, 256, 64, epilogue_n=256).derive(out_bytes=2)
    fp32_out = KernelConfig(128, 256, 64, epilogue_n=256).derive(out_bytes=4)
    assert fp32_out.stages < bf16_out.stages  # the bigger staging tile leaves less room
    assert KernelConfig(128, 256, 64, stages=2).derive().stages == 2


def test_epilogue_subtiles_trade_staging_for_stages():
    whole = KernelConfig(128, 256, 64, epilogue_n=256).derive()
    assert (whole.epilogue_bufs, whole.epilogue_bytes, whole.stages) == (1, 2 * 64 * 256 * 2, 3)
    sub = KernelConfig(128, 256, 64, epilogue_n=64).derive()
    assert (sub.epilogue_bufs, sub.epilogue_bytes, sub.stages) == (2, 2 * 2 * 64 * 64 * 2, 4)
    fp32 = KernelConfig(128, 256, 64).derive(out_bytes=4)  # a whole fp32 tile would leave 2 stages
    assert (fp32.epilogue_n, fp32.epilogue_bufs, fp32.stages) == (64, 2, 3)


def test_swizzle_derived_from_row_bytes():
    assert [swizzle_width(b) for b in (32, 64, 96, 128, 256, 16)] == [32, 64, 32, 128, 128, 0]
    assert KernelConfig(128, 128, 32).derive().a_swizzle == 64


def test_instruction_n_divides_the_consumer_tile():
    assert KernelConfig(128, 64, 64, schedule="cooperative").derive().instr_shape[1] == 64
    assert KernelConfig(64, 256, 64, schedule="pingpong").derive().instr_shape[1] == 256
    assert KernelConfig(128, 256, 64, instr_n=128).derive().instr_shape[1] == 128  # chosen, not derived


def test_three_times_a_power_of_two_is_two_column_pieces():
    assert [column_pieces(n) for n in (192, 96, 48, 24, 256, 64, 160, 0, 200)] == [
        (128, 64), (64, 32), (32, 16), (16, 8), (256,), (64,), (128, 32), (), ()]
    d = KernelConfig(128, 192, 64).derive()
    assert (d.pieces, d.block_n2, d.instr_shape[1], d.instr_shape2[1]) == ((128, 64), 64, 128, 64)
    # the widest sub-tile dividing both pieces, one staging buffer per sub-tile (3, odd)
    assert (d.epilogue_n, d.epilogue_bufs, d.epilogue_bytes) == (64, 3, 2 * 3 * 64 * 64 * 2)
    assert d.stage_bytes == (128 + 192) * 64 * 2 and d.stages == 4
    e = KernelConfig(128, 192, 64, epilogue_n=32).derive()
    assert (e.epilogue_n, e.epilogue_bufs) == (32, 2)  # 6 sub-tiles cycle 2 buffers
    one = KernelConfig(128, 256, 64).derive()
    assert (one.pieces, one.block_n2, one.instr_shape2) == ((256,), 0, ())


def test_column_pieces_are_p1_plus_p2_over_every_width():
    """Every width 8..256: one power of two, or P1 (the largest power of two below it) + P2, P2 a
    power of two ≥ MIN_PIECE with P1/P2 ≤ MAX_PIECE_RATIO, or a 3·2^k width's old (2q, q)."""
    for n in range(8, 257):
        pieces, p1 = column_pieces(n), 1 << (n.bit_length() - 1)
        p2 = n - p1
        if p2 == 0:
            assert pieces == (n,), n
        elif p2 & (p2 - 1) == 0 and p1 <= MAX_PIECE_RATIO * p2 and (p2 >= MIN_PIECE or p1 == 2 * p2):
            assert pieces == (p1, p2) and p1 > p2, n
        else:
            assert pieces == (), n
        if n % 3 == 0 and (n // 3) & (n // 3 - 1) == 0:
            assert pieces == (2 * (n // 3), n // 3), n  # the 3·2^k widths keep their pieces
    two = [n for n in range(8, 257) if len(column_pieces(n)) == 2]
    assert two == [12, 24, 48, 80, 96, 144, 160, 192]  # 12 = 8 + 4: validate refuses P2 < 8 (wgmma N)


@pytest.mark.parametrize("block, schedule, swap, pieces, stages", [
    ((128, 160, 64), "cooperative", False, (128, 32), 5), ((128, 144, 64), "cooperative", False, (128, 16), 5),
    ((64, 80, 64), "pingpong", False, (64, 16), 11), ((64, 160, 64), "pingpong", True, (128, 32), 8),
    ((64, 144, 64), "pingpong", True, (128, 16), 8)])
def test_p1_plus_p2_tiles_derive_their_pieces(block, schedule, swap, pieces, stages):
    """The wgmma N of each piece, the ring, and the epilogue's P1/P2 + 1 sub-tiles of P2 columns:
    an odd count (5, 9) stages one buffer per sub-tile, i.e. the whole tile."""
    d = KernelConfig(*block, schedule=schedule, swap_ab=swap).derive()
    assert (d.pieces, d.block_n2, d.instr_shape[1], d.instr_shape2[1], d.stages) == (pieces, pieces[1], *pieces, stages)
    assert d.stage_bytes == (block[0] + block[1]) * 64 * 2 and d.shared_bytes <= SMEM_LIMIT
    if swap:  # the pointer epilogue: no staging
        assert (d.epilogue_bufs, d.epilogue_bytes) == (0, 0)
        return
    assert (d.epilogue_n, d.epilogue_bufs) == (pieces[1], pieces[0] // pieces[1] + 1)
    assert d.epilogue_bytes == d.consumers * d.consumer_m * block[1] * 2
    halved = KernelConfig(*block, schedule=schedule, epilogue_n=8).derive()  # an even count cycles 2 buffers
    assert (halved.epilogue_bufs, halved.epilogue_bytes) == (2, d.consumers * 2 * d.consumer_m * 8 * 2)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(block_m=100), "multiple of the wgmma M"),
        (dict(block_m=128, block_n=256, schedule="pingpong"), "accumulator needs 256 fp32 registers"),
        (dict(block_n=100), "multiple of 8"),
        (dict(block_n=152), "block_n=152 must be a power of two or two power-of-two column pieces"),
        (dict(block_n=136), "its second piece P2 = 8 < 16 columns, P1/P2 = 128/8 > 8"),
        (dict(block_n=40), "its second piece P2 = 8 < 16 columns"),
        (dict(block_n=272, schedule="persistent"), "P1/P2 = 256/16 > 8"),
        (dict(block_n=192, schedule="persistent"), "runs on the warp-specialized schedules"),
        (dict(block_n=192, epilogue_n=128), "dividing the consumer tile's column pieces (128, 64)"),
        (dict(block_n=192, instr_n=128), "instr_n=128 must be a multiple of 8"),
        (dict(block_k=48), "K-tile row must be 32, 64, 128 or 256 bytes"),
        (dict(block_n=512, schedule="persistent"), "TMA box limit"),
        (dict(stages=5), "exceeds the 232448 B (227 KB) Hopper limit"),
        (dict(stages=1), "stages must be an int ≥ 2"),
        (dict(schedule="diagonal"), "schedule must be one of"),
        (dict(group_m=0), "group_m must be a positive int"),
        (dict(instr_n=96), "instr_n=96 must be a multiple of 8"),
        (dict(epilogue_n=48), "epilogue_n=48 must be a power of two"),
        (dict(epilogue_n=512), "dividing the consumer tile's column pieces (256,)"),
        (dict(epilogue_n=4), "span ≥ 16 bytes"),
        (dict(block_m=-64), "block_m must be a positive int"),
    ],
)
def test_validate_names_the_constraint(kwargs, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        KernelConfig(**kwargs).validate()


def test_validate_rejects_element_sizes():
    with pytest.raises(ConfigError, match="16-bit"):
        KernelConfig().validate(in_bytes=4)
    with pytest.raises(ConfigError, match="output elements"):
        KernelConfig().validate(out_bytes=8)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(cluster_m=3), "cluster_m must be an int in (1, 2)"),
        (dict(cluster_m=0), "cluster_m must be an int in (1, 2)"),
        (dict(cluster_m=2.0), "cluster_m must be an int in (1, 2)"),
        (dict(cluster_m=True), "cluster_m must be an int in (1, 2)"),
        (dict(cluster_m=2, schedule="persistent"), "cluster_m=2 runs on the pingpong / cooperative schedule, not"
                                                   " 'persistent'"),
        (dict(block_m=64, cluster_m=2, schedule="pingpong", split_k=2), "cluster_m=2 cannot pair split_k=2"),
        (dict(block_m=64, block_n=32, cluster_m=2, schedule="pingpong", swap_ab=True), "cannot pair split_k=1 / swap_ab=True"),
        (dict(block_m=64, block_n=192, cluster_m=2, schedule="pingpong"), "needs a one-piece tile"),
        (dict(block_n=192, cluster_m=2), "needs a one-piece tile"),
    ],
)
def test_cluster_validation_names_the_field(kwargs, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        KernelConfig(**kwargs).validate()


def test_cluster_derives_the_one_cta_budget():
    """A pair's CTA holds block_m rows of A and the whole B tile: the same stages and shared
    memory as the one-CTA config (the pair barrier fits the fixed term)."""
    one = KernelConfig(128, 128, 64, schedule="pingpong").derive()
    pair = KernelConfig(128, 128, 64, schedule="pingpong", cluster_m=2).derive()
    assert pair.cluster_m == 2 and one.cluster_m == 1
    assert (pair.stages, pair.shared_bytes) == (one.stages, one.shared_bytes)


def test_cluster_of_a_batched_product_is_refused():
    import torch

    from pingpong.hopper.host.launch import prepare

    a = torch.empty(2, 256, 64, dtype=torch.bfloat16)
    out = torch.empty(2, 256, 256, dtype=torch.bfloat16)
    with pytest.raises(ConfigError, match="cluster_m=2: 2-CTA clusters run unbatched products"):
        prepare(a, torch.empty(2, 64, 256, dtype=torch.bfloat16), out, EpilogueArgs(),
                KernelConfig(128, 128, 64, schedule="pingpong", cluster_m=2), 132)


# ----------------------------------------------------------------------------- config
# KernelConfig bounds, the derive cache, and the shared-memory budget against what the compiler
# actually allocates (CPU; the sm_90a builds are offline compiles).

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
    """Each bad config's fields equal a valid one's, derived just before, in value but not in
    type: the configs differ (every cache keyed by a KernelConfig tells them apart)."""
    good = KernelConfig(128, 256, 64, group_m=1, stages=3, instr_n=256)
    good.derive()
    twin = KernelConfig(**{**dict(block_m=128, block_n=256, block_k=64, group_m=1, stages=3, instr_n=256), **bad})
    assert vars(twin) == vars(good) and twin != good
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


@pytest.mark.slow
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
