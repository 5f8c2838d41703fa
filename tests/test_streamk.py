"""Stream-K on the CPU: the scheduler's unit arithmetic (its `.fn`s, as the kernel runs them)
covers every k-step of every tile exactly once with a consistent fix-up order, the hybrid
split follows its rule, and bad configs are refused. (The offline compile facts of the
stream-K kernels are tests/test_splitk.py's, over OFFLINE_SPLIT_VARIANTS.)"""

import random

import pytest

from pingpong import ConfigError, KernelConfig
from pingpong.hopper import scheduler as sk
from pingpong.hopper.launch import OFFLINE_SPLIT_VARIANTS, partial_slots, workspace_reason, workspace_shape


def units(tiles, k_steps, sms):
    """Every unit of a stream-K launch, as the kernel's StreamKScheduler numbers them: (program,
    local unit, tile id, first k-step in the tile, k-steps, slot, parts, ring counter)."""
    programs, dp, streamers = sk.stream_k_split(tiles, k_steps, sms)
    total = (tiles - dp) * k_steps
    owner = lambda step: sk.stream_owner.fn(step, streamers, total)  # noqa: E731
    out = []
    for pid in range(programs):
        begin = sk.stream_bound.fn(min(pid, streamers), streamers, total)
        end = sk.stream_bound.fn(min(pid + 1, streamers), streamers, total)
        n = sk.stream_units.fn(begin, end, k_steps)
        for u in range(n):
            tile, first, last = sk.stream_unit.fn(begin, end, u, k_steps)
            head = owner(tile * k_steps)
            out.append((pid, u, dp + tile, first - tile * k_steps, last - first, owner(first) - head,
                        owner(tile * k_steps + k_steps - 1) - head + 1, first - begin))
        for j in range(sk.tiles_of_program.fn(dp, pid, programs)):
            out.append((pid, n + j, pid + j * programs, 0, k_steps, 0, 1, end - begin + j * k_steps))
    return programs, dp, streamers, out


def check(tiles, k_steps, sms):
    programs, dp, streamers, us = units(tiles, k_steps, sms)
    assert 1 <= programs <= sms and 1 <= streamers <= programs and (dp == tiles or dp % programs == 0)
    covered = {}
    by_program = {}
    for pid, u, tile, k0, steps, slot, parts, ring in us:
        assert steps >= 1 and 0 <= slot < parts
        for k in range(k0, k0 + steps):
            assert (tile, k) not in covered, "a k-step computed twice"
            covered[tile, k] = slot
        by_program.setdefault(pid, []).append((u, steps, ring))
    assert set(covered) == {(t, k) for t in range(tiles) for k in range(k_steps)}, "a k-step never computed"
    for t in range(tiles):  # the slots run along K: 0, 1, ..., parts-1, one per program sharing the tile
        slots = [covered[t, k] for k in range(k_steps)]
        assert slots == sorted(slots) and set(slots) == set(range(slots[-1] + 1))
    for t in {u[2] for u in us}:
        mine = [u for u in us if u[2] == t]
        assert all(u[6] == len(mine) for u in mine), "parts = the programs that share the tile"
    for pid, seq in by_program.items():  # the ring counters are the k-steps of the program's units before
        seq.sort()
        assert [u for u, _, _ in seq] == list(range(len(seq)))
        assert [ring for _, _, ring in seq] == [sum(s for _, s, _ in seq[:i]) for i in range(len(seq))]
    return programs, dp, streamers, max((u[6] for u in us), default=1)


def test_units_cover_every_k_step_once_random_shapes():
    rng = random.Random(39)
    for _ in range(150):
        tiles, k_steps, sms = rng.randint(1, 400), rng.randint(1, 70), rng.choice((1, 2, 7, 66, 78, 114, 132))
        programs, dp, streamers, parts = check(tiles, k_steps, sms)
        assert parts == sk.stream_parts(tiles, k_steps, sms)


@pytest.mark.parametrize("tiles, k_steps, sms, expect", [
    (160, 128, 132, (132, 132, 132)),  # 589×8192, 128×256: one wave, the 28 tiles of the last streamed
    (36, 112, 132, (132, 0, 132)),  # 124×9216×7168: fewer tiles than SMs, all streamed
    (264, 64, 132, (132, 264, 1)),  # whole waves: data-parallel
    (200, 64, 132, (132, 200, 1)),  # the last wave at least half full: data-parallel
    (100, 64, 132, (100, 100, 1)),  # one wave, at least half full: data-parallel
    (3, 2, 132, (1, 0, 1)),  # 6 k-steps: one streaming program (MIN_STREAM_STEPS)
])
def test_hybrid_split(tiles, k_steps, sms, expect):
    assert sk.stream_k_split(tiles, k_steps, sms) == expect
    check(tiles, k_steps, sms)


def test_parts_per_tile_follow_from_the_share_length():
    """A tile of S k-steps meets at most ⌈(S − 1) / q⌉ + 1 shares of q (or q + 1) k-steps."""
    for tiles in range(1, 400, 7):
        for k_steps in (1, 9, 64, 100):
            programs, dp, streamers = sk.stream_k_split(tiles, k_steps, 132)
            q = (tiles - dp) * k_steps // streamers
            if q:
                assert sk.stream_parts(tiles, k_steps, 132) <= -(-(k_steps - 1) // q) + 1


def test_streaming_shares_are_at_least_min_stream_steps():
    for tiles, k_steps in ((5, 3), (40, 1), (1, 100), (60, 20)):
        programs, dp, streamers = sk.stream_k_split(tiles, k_steps, 132)
        total = (tiles - dp) * k_steps
        assert streamers == 1 or total // streamers >= sk.MIN_STREAM_STEPS


def test_workspace_has_a_slot_per_sharing_program():
    cfg = KernelConfig(128, 256, 64, stream_k=True)
    assert partial_slots(589, 8192, 8192, cfg, sms=132) == 6  # 28 tiles of 128 k-steps, shares of 27
    assert workspace_shape(589, 8192, 8192, cfg, sms=132) == (6 * 640, 8192)
    assert workspace_shape(256, 132 * 256, 1024, cfg, sms=132) == (0, 132 * 256)  # whole waves: no partials
    assert workspace_reason(589, 8192, 8192, cfg, sms=132) is None
    why = workspace_reason(131072, 16640, 4096, KernelConfig(128, 128, 64, stream_k=True), sms=132)
    assert why is not None and "stream_k=True" in why


@pytest.mark.parametrize("fields, words", [
    (dict(stream_k=True, split_k=2), "split_k=1"),
    (dict(stream_k=True, block_n=16, swap_ab=True), "swap_ab=False"),
    (dict(stream_k=True, schedule="persistent"), "warp-specialized"),
    (dict(stream_k=True, cluster_m=2), "cluster_m=1"),
    (dict(stream_k=1), "must be a bool"),
])
def test_bad_stream_k_configs_name_the_constraint(fields, words):
    with pytest.raises(ConfigError, match=words):
        KernelConfig(**fields).derive()


def test_stream_k_takes_16_bit_operands_only():
    with pytest.raises(ConfigError, match="16-bit"):
        KernelConfig(128, 128, 128, stream_k=True).derive(in_bytes=1)


def test_stream_k_configs_use_the_pointer_epilogue():
    d = KernelConfig(128, 256, 64, stream_k=True).derive()
    assert d.workspace and d.stream_k and d.epilogue_bytes == 0
    assert any(c.stream_k for c, _, _ in OFFLINE_SPLIT_VARIANTS.values())


# ----------------------------------------------------------------------------- the hybrid's decision


@pytest.mark.parametrize("tiles, k_steps, sms, kind, dp, splits, words", [
    (264, 64, 132, "data-parallel", 264, 1, "whole waves"),
    (200, 64, 132, "data-parallel", 200, 1, "68/132 full (at least half)"),
    (160, 128, 132, "stream-k", 132, 1, "28/132 full (under half); 132 tiles data-parallel"),
    (36, 112, 132, "stream-k", 0, 1, "streamed by 132 programs, 30-31 each"),
    (33, 16, 132, "split-k", 0, 2, "split-K with 2 splits"),
    (2, 64, 8, "split-k", 0, 4, "4 equal units a tile"),
    (3, 8, 132, "data-parallel", 0, 1, "whole tiles, no fix-up"),  # 24 k-steps: 3 programs, 8 each
])
def test_stream_k_choice_rule(tiles, k_steps, sms, kind, dp, splits, words):
    c = sk.stream_k_choice(tiles, k_steps, sms)
    assert (c.kind, c.dp_tiles, c.splits) == (kind, dp, splits)
    assert words in c.reason


def test_stream_k_choice_agrees_with_the_units_it_describes():
    """Over random launches, the kind is what the kernel's units are: data-parallel exactly when no
    tile is shared; split-K exactly when every tile is streamed in `splits` equal, aligned units."""
    rng = random.Random(3939)
    seen = set()
    for _ in range(400):
        tiles, k_steps, sms = rng.randint(1, 300), rng.randint(1, 80), rng.choice((1, 4, 8, 66, 132))
        c = sk.stream_k_choice(tiles, k_steps, sms)
        seen.add(c.kind)
        programs, dp, streamers, us = units(tiles, k_steps, sms)
        assert (c.programs, c.dp_tiles, c.streamers) == (programs, dp, streamers), (tiles, k_steps, sms)
        shared = [u for u in us if u[6] > 1]
        last = tiles % sms
        if last == 0 or 2 * last >= sms:
            assert c.kind == "data-parallel"
        assert (c.kind == "data-parallel") == (not shared), (tiles, k_steps, sms, c)
        even = dp == 0 and bool(shared) and all(
            u[6] == c.splits and u[4] == k_steps // c.splits and u[3] == u[5] * u[4] for u in us)
        assert (c.kind == "split-k") == even, (tiles, k_steps, sms, c)
        if c.kind == "split-k":
            assert sk.effective_splits(k_steps * 64, 64, c.splits) == c.splits  # the split-K kernel's own units
    assert seen == {"data-parallel", "split-k", "stream-k"}


@pytest.mark.parametrize("args, name", [((0, 4, 132), "tiles"), ((4, 0, 132), "k_steps"), ((4, 4, 1.5), "sms")])
def test_stream_k_choice_names_its_bad_argument(args, name):
    with pytest.raises(ConfigError, match=f"{name} must be an int >= 1"):
        sk.stream_k_choice(*args)


def test_stream_k_note_says_what_stream_k_would_do_and_why_not():
    from pingpong.hopper.select import stream_k_note

    note = stream_k_note(589, 8192, 8192, KernelConfig(128, 256, 64), 132)
    assert note.startswith("stream-K (not selected) would run stream-k: 160 tiles on 132 SMs")
    assert stream_k_note(589, 8192, 8192, KernelConfig(128, 256, 64, stream_k=True), 132).startswith(
        "stream-K (this config) would run stream-k")
    assert "swap_ab=False" in stream_k_note(16, 4096, 4096, KernelConfig(64, 16, 128, schedule="pingpong",
                                                                         swap_ab=True), 132)
    assert "16-bit" in stream_k_note(589, 8192, 8192, KernelConfig(128, 256, 64), 132, in_bytes=1)
    assert "2-D products only" in stream_k_note(589, 8192, 8192, KernelConfig(128, 256, 64), 132, batches=4)


def test_default_selection_never_picks_stream_k():
    """Stream-K is opt-in until measurements say where it wins: the heuristic never selects it."""
    from pingpong.hopper.select import heuristic_config

    rng = random.Random(39)
    for _ in range(200):
        M, N, K = rng.randint(1, 9000), rng.randint(16, 20000), rng.randint(16, 20000)
        assert not heuristic_config(M, N, K).stream_k
