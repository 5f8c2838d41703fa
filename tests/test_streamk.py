"""Stream-K on the CPU: the scheduler's unit arithmetic (its `.fn`s, as the kernel runs them)
covers every k-step of every tile exactly once with a consistent fix-up order, the hybrid
split follows its rule, and bad configs are refused. (The offline compile facts of the
stream-K kernels are tests/test_splitk.py's over OFFLINE_SPLIT_VARIANTS, and
tests/test_fp8_splitk.py's over the FP8 ones.)"""

import random

import pytest

from pingpong import ConfigError, KernelConfig
from pingpong.hopper.device import scheduler as sk
from pingpong.hopper.host import splits as hs
from pingpong.hopper.host.launch import OFFLINE_SPLIT_VARIANTS, partial_slots, workspace_reason, workspace_shape
from fake_launcher import pointer_slots
from pingpong.schedule.schedules.streamk import schedulers


def units(tiles, k_steps, sms):
    """Every unit of a stream-K launch, as the kernel's StreamKScheduler numbers them (its own
    methods, run in plain Python): (program, local unit, tile id, first k-step in the tile,
    k-steps, slot, parts, ring counter)."""
    programs, dp, streamers = hs.stream_k_split(tiles, k_steps, sms)
    out = []
    for pid, sched in schedulers(tiles, k_steps, sms):
        for u in range(sched.local_tiles()):
            tile, k0, steps, _ = sched.unit(u)
            slot, parts = sched.split(u)
            out.append((pid, u, tile, k0, steps, slot, parts, sched.first_step(u)))
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


def program_units(tiles, k_steps, sms):
    """(program's units in order, its StreamKScheduler in plain Python) of every program of a
    stream-K launch."""
    _, _, _, us = units(tiles, k_steps, sms)
    for pid, sched in schedulers(tiles, k_steps, sms):
        yield sorted((u for u in us if u[0] == pid), key=lambda u: u[1]), sched


def whole_counts(tiles, k_steps, sms):
    """For every unit of parts 1: its number among the TMA-stored units of its consumer, as
    StreamKScheduler.whole_before gives it (ping-pong: consumer u % 2; cooperative: every
    unit), against counting them one by one."""
    for mine, sched in program_units(tiles, k_steps, sms):
        for every, first in ((1, 0), (2, 0), (2, 1)):
            seen = 0
            for u in mine[first::every]:
                if u[6] == 1:
                    got = sched.whole_before(u[1], every, first)
                    assert got == seen, (tiles, k_steps, sms, u, every, first)
                    seen += 1


def test_units_cover_every_k_step_once_random_shapes():
    rng = random.Random(39)
    for _ in range(150):
        tiles, k_steps, sms = rng.randint(1, 400), rng.randint(1, 70), rng.choice((1, 2, 7, 66, 78, 114, 132))
        programs, dp, streamers, parts = check(tiles, k_steps, sms)
        assert parts == hs.stream_parts(tiles, k_steps, sms)
        whole_counts(tiles, k_steps, sms)


def test_streaming_programs_read_near_one_k_offset():
    """Programs run their shares' pieces from the last back, so at ring position s every
    streaming program reads k-step s + d of its tile with 0 <= d <= T - S (T a tile's k-steps,
    S the shortest share, S < T): programs that start together and step at one rate read the
    A and B panels they share at nearby K offsets (L2 hits), not spread over all of K as in
    share order. Checked on hybrid launches and on one wave streamed whole."""
    rng = random.Random(41)
    cases = [(7, 12, 5), (160, 128, 132), (36, 112, 132), (64, 256, 132)]
    cases += [(rng.randint(1, 400), rng.randint(8, 300), rng.choice((7, 66, 114, 132))) for _ in range(150)]
    checked = 0
    for tiles, k_steps, sms in cases:
        programs, dp, streamers, us = units(tiles, k_steps, sms)
        shortest = (tiles - dp) * k_steps // streamers
        if dp == tiles or shortest >= k_steps:
            continue
        offsets = [k0 - ring for _, _, tile, k0, steps, _, parts, ring in us if tile >= dp]
        assert 0 <= min(offsets) and max(offsets) <= k_steps - shortest, (tiles, k_steps, sms, offsets)
        checked += 1
    assert checked > 50


def test_whole_units_are_numbered_per_consumer():
    """The TMA epilogue's tile count (its C barrier's parity) of each whole unit: on launches
    where shares hold whole tiles between partial ones (few tiles of few k-steps)."""
    for tiles, k_steps, sms in ((7, 12, 5), (40, 3, 8), (9, 2, 4), (1, 24, 8), (160, 128, 132), (31, 9, 7)):
        whole_counts(tiles, k_steps, sms)


def test_consumers_second_loop_takes_only_whole_units():
    """The consumer's two loops (pingpong.hopper.kernels.gemm.consumer, LEADING): turns [0, lead)
    then [lead, jobs), lead = residues_in(0, leading(), FIRST, EVERY). Together they take each of
    the consumer's units once, in order; the second (whose epilogue, whole_only, has no fix-up)
    only units of parts 1, and the first every shared one."""
    rng = random.Random(40)
    cases = [(7, 12, 5), (40, 3, 8), (160, 128, 132), (140, 28, 132), (272, 86, 132), (3, 2, 132)]
    cases += [(rng.randint(1, 400), rng.randint(1, 70), rng.choice((2, 7, 66, 132))) for _ in range(60)]
    for tiles, k_steps, sms in cases:
        for mine, sched in program_units(tiles, k_steps, sms):
            leading = sched.units
            for every, first in ((1, 0), (2, 0), (2, 1)):
                jobs = (len(mine) - first + every - 1) // every
                lead = sk.residues_in.fn(0, leading, first, every)
                turns = [every * j + first for j in range(lead)] + [every * j + first for j in range(lead, jobs)]
                assert turns == list(range(first, len(mine), every))
                assert all(mine[t][6] == 1 for t in turns[lead:]), (tiles, k_steps, sms, mine[0][0], every, first)
                assert all(t < leading for t in turns[:lead])
    import inspect

    from pingpong.hopper.kernels import gemm
    body = inspect.getsource(gemm.consumer.fn)
    assert "lead = residues_in(0, sched.leading(), FIRST, EVERY)" in body  # the rule checked above
    assert "for j in range(lead):" in body and "for j in range(lead, jobs):" in body and "rest = epi.whole_only()" in body


@pytest.mark.parametrize("tiles, k_steps, sms, expect", [
    (160, 128, 132, (132, 132, 132)),  # 589×8192, 128×256: one wave, the 28 tiles of the last streamed
    (36, 112, 132, (132, 0, 132)),  # 124×9216×7168: fewer tiles than SMs, all streamed
    (264, 64, 132, (132, 264, 1)),  # whole waves: data-parallel
    (200, 64, 132, (132, 200, 1)),  # the last wave at least half full: data-parallel
    (100, 64, 132, (100, 100, 1)),  # one wave, at least half full: data-parallel
    (3, 2, 132, (1, 0, 1)),  # 6 k-steps: one streaming program (MIN_STREAM_STEPS)
])
def test_hybrid_split(tiles, k_steps, sms, expect):
    assert hs.stream_k_split(tiles, k_steps, sms) == expect
    check(tiles, k_steps, sms)


def test_parts_per_tile_follow_from_the_share_length():
    """A tile of S k-steps meets at most ⌈(S − 1) / q⌉ + 1 shares of q (or q + 1) k-steps."""
    for tiles in range(1, 400, 7):
        for k_steps in (1, 9, 64, 100):
            programs, dp, streamers = hs.stream_k_split(tiles, k_steps, 132)
            q = (tiles - dp) * k_steps // streamers
            if q:
                assert hs.stream_parts(tiles, k_steps, 132) <= -(-(k_steps - 1) // q) + 1


def test_streaming_shares_are_at_least_min_stream_steps():
    for tiles, k_steps in ((5, 3), (40, 1), (1, 100), (60, 20)):
        programs, dp, streamers = hs.stream_k_split(tiles, k_steps, 132)
        total = (tiles - dp) * k_steps
        assert streamers == 1 or total // streamers >= hs.MIN_STREAM_STEPS


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


@pytest.mark.parametrize("config, promote, boxes, words", [
    (KernelConfig(128, 192, 128, stream_k=True), True, (0, 0), "two column pieces"),
    (KernelConfig(128, 128, 64, stream_k=True), True, (0, 0), "block_k=64"),
    (KernelConfig(128, 128, 128, stream_k=True, cluster_m=2), True, (0, 0), "cluster_m=1"),
    (KernelConfig(64, 16, 128, schedule="pingpong", stream_k=True, swap_ab=True), True, (0, 0), "swap_ab=False"),
])
def test_fp8_stream_k_configs_name_the_constraint(config, promote, boxes, words):
    from pingpong.hopper.host.fp8_launch import check_fp8_config

    with pytest.raises(ConfigError, match=words):
        check_fp8_config(config, promote, 2, boxes)


def test_fp8_stream_k_takes_every_scaling():
    from pingpong.hopper.host.fp8_launch import check_fp8_config, scale_boxes

    for scaling, sb_cols in (("tensor", 128), ("row", 128), ("block", 128), ("block", 1)):
        config = KernelConfig(128, 128, 128, stream_k=True)
        d = check_fp8_config(config, True, 2, scale_boxes(scaling, sb_cols, config))
        assert d.stream_k and d.epilogue_bytes > 0


@pytest.mark.parametrize("tile", [(128, 256, 64, "cooperative"), (128, 128, 64, "cooperative"),
                                  (128, 192, 64, "cooperative"), (64, 128, 64, "pingpong"), (64, 256, 64, "pingpong")])
def test_stream_k_configs_stage_the_tma_epilogue(tile):
    """Whole-tile units store through the data-parallel kernel's TMA epilogue: the same staging
    and ring stages, for the tiles the mid-rows sweeps measure."""
    *block, schedule = tile
    d = KernelConfig(*block, schedule=schedule, stream_k=True).derive()
    dp = KernelConfig(*block, schedule=schedule).derive()
    assert d.workspace and d.stream_k and (d.epilogue_bytes, d.epilogue_bufs, d.stages) == \
        (dp.epilogue_bytes, dp.epilogue_bufs, dp.stages)
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
    c = hs.stream_k_choice(tiles, k_steps, sms)
    assert (c.kind, c.dp_tiles, c.splits) == (kind, dp, splits)
    assert words in c.reason


def test_stream_k_choice_agrees_with_the_units_it_describes():
    """Over random launches, the kind is what the kernel's units are: data-parallel exactly when no
    tile is shared; split-K exactly when every tile is streamed in `splits` equal, aligned units."""
    rng = random.Random(3939)
    seen = set()
    for _ in range(400):
        tiles, k_steps, sms = rng.randint(1, 300), rng.randint(1, 80), rng.choice((1, 4, 8, 66, 132))
        c = hs.stream_k_choice(tiles, k_steps, sms)
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
            assert hs.effective_splits(k_steps * 64, 64, c.splits) == c.splits  # the split-K kernel's own units
    assert seen == {"data-parallel", "split-k", "stream-k"}


@pytest.mark.parametrize("args, name", [((0, 4, 132), "tiles"), ((4, 0, 132), "k_steps"), ((4, 4, 1.5), "sms")])
def test_stream_k_choice_names_its_bad_argument(args, name):
    with pytest.raises(ConfigError, match=f"{name} must be an int >= 1"):
        hs.stream_k_choice(*args)


def test_stream_k_note_says_what_stream_k_would_do_and_why_not():
    from pingpong.hopper.host.select import stream_k_note

    note = stream_k_note(589, 8192, 8192, KernelConfig(128, 256, 64), 132)
    assert note.startswith("stream-K (not selected) would run stream-k: 160 tiles on 132 SMs")
    assert stream_k_note(589, 8192, 8192, KernelConfig(128, 256, 64, stream_k=True), 132).startswith(
        "stream-K (this config) would run stream-k")
    assert "swap_ab=False" in stream_k_note(16, 4096, 4096, KernelConfig(64, 16, 128, schedule="pingpong",
                                                                         swap_ab=True), 132)
    assert "would run" in stream_k_note(589, 8192, 8192, KernelConfig(128, 128, 128), 132, in_bytes=1)
    assert "2-D products only" in stream_k_note(589, 8192, 8192, KernelConfig(128, 256, 64), 132, batches=4)


def test_default_selection_picks_stream_k_only_for_the_wave_rules_thin_last_wave():
    """The heuristic selects stream-K in one place, where it was measured to win: the wave
    rule's 128×256 tiles over 3-4 full waves and a last one of at most an eighth of the SMs
    (select.wave_stream); every other product, and every one of fewer rows, runs without it."""
    from pingpong.hopper.host.select import MID_ROWS_MAX_M, WAVE_STREAM, heuristic_config, wave_stream

    rng = random.Random(39)
    picked = 0
    for _ in range(2000):
        M, N, K = rng.randint(1, 9000), rng.randint(16, 20000), rng.randint(16, 20000)
        config = heuristic_config(M, N, K)
        streams = M > MID_ROWS_MAX_M and wave_stream(M, N, -(-K // 64), 132)
        assert config.stream_k == streams and (config == WAVE_STREAM) == streams, (M, N, K, config)
        picked += streams
    assert picked, "the premise: some random products take it"


@pytest.mark.parametrize("reads_c", [False, True])
def test_plan_pointers_follow_the_stream_k_kernel_slots(monkeypatch, reads_c):
    """SplitPlan's base addresses are the stream-K kernel's leading arguments, its two TMA
    epilogue descriptors (out, C) after the pointers."""
    import torch

    from pingpong.hopper.host.backend import SplitPlan
    from pingpong.hopper.host.launch import counter_count, stream_k_gemm
    from pingpong.runtime.spec import EpilogueArgs

    M, N, K = 589, 1024, 4096
    config = KernelConfig(128, 128, 64, stream_k=True)
    a, b = torch.empty(M, K, dtype=torch.bfloat16), torch.empty(N, K, dtype=torch.bfloat16).t()
    out, c = torch.empty(M, N, dtype=torch.bfloat16), torch.empty(M, N, dtype=torch.bfloat16)
    plan = SplitPlan(-1, config, False, False, False, False, reads_c, workspace_shape(M, N, K, config, sms=132),
                     counter_count(M, N, config), sms=132)
    calls = []
    monkeypatch.setattr(plan, "launch", lambda device, ptrs, dyn, prep, *inputs: calls.append((ptrs, prep, inputs)),
                        raising=False)
    plan.run(a, b, out, EpilogueArgs(c=c if reads_c else None, alpha=1.0, beta=0.5 if reads_c else 0.0))
    (ptrs, prep, inputs), = calls
    kernel, args, kwargs, grid = prep(*inputs)
    assert kernel is stream_k_gemm and pointer_slots(kernel, args) == tuple(ptrs) and len(ptrs) == 9
    assert ptrs[-2:] == (out.data_ptr(), (c if reads_c else out).data_ptr())


@pytest.mark.parametrize("scaling, sb_cols", [("tensor", 128), ("row", 128), ("block", 128), ("block", 1)])
def test_fp8_plan_pointers_follow_the_stream_k_kernel_slots(monkeypatch, scaling, sb_cols):
    import torch

    from pingpong.hopper.host import fp8_launch
    from pingpong.runtime.spec import EpilogueArgs

    M, N, K = 200, 512, 4096
    a, w = torch.empty(M, K, dtype=torch.float8_e4m3fn), torch.empty(N, K, dtype=torch.float8_e4m3fn)
    if scaling == "tensor":
        sa, sb = torch.ones(()), torch.ones(())
    elif scaling == "row":
        sa, sb = torch.ones(M, 1), torch.ones(1, N)
    else:
        sa = torch.ones(K // 128, M).t()
        sb = torch.ones(N // 128, K // 128).t() if sb_cols == 128 else torch.ones(K // 128, N)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    config = KernelConfig(128, 128, 128, stream_k=True)
    plan = fp8_launch.Fp8Plan(0, scaling, sb_cols, True, config, "none",
                              fp8_launch.workspace_shape(M, N, K, config, 1, 132),
                              fp8_launch.counter_count(M, N, config, 1), sms=132)
    calls = []
    monkeypatch.setattr(plan, "launch", lambda device, ptrs, dyn, prep, *inputs: calls.append((ptrs, prep, inputs)),
                        raising=False)
    plan.run(a, w.t(), out, EpilogueArgs(bias=torch.ones(N, dtype=torch.bfloat16), scale_a=sa, scale_b=sb))
    (ptrs, prep, inputs), = calls
    kernel, args, kwargs, grid = prep(*inputs)
    assert kernel is fp8_launch.fp8_stream_gemm and pointer_slots(kernel, args) == tuple(ptrs) and len(ptrs) == 9
    assert grid == (fp8_launch.stream_k_split(8, 32, 132)[0],)


def test_fp8_stream_k_plan_broadcasts_long_tensor_wise_scales(monkeypatch):
    """A long tensor-wise product runs the row-wise kernel (fp8_launch.kernel_scaling); its
    stream-K plan must broadcast the scalars into row vectors, as the data-parallel one does."""
    import torch

    from pingpong.hopper.host import fp8_launch
    from pingpong.runtime import spec as spec_mod

    M, N, K = 16384, 8192, 8192
    e4m3 = torch.float8_e4m3fn
    qa, qb = torch.empty(M, K, dtype=e4m3, device="meta"), torch.empty(N, K, dtype=e4m3, device="meta").t()
    one = torch.empty((), dtype=torch.float32, device="meta")
    for config in (KernelConfig(128, 128, 128), KernelConfig(128, 128, 128, stream_k=True)):
        s = spec_mod.build(qa, qb, out_dtype=torch.bfloat16, config=config, scales=(one, one, False))
        p = fp8_launch.plan(s)
        assert (p.scaling, p.broadcast) == ("row", True), (config, p.scaling, p.broadcast)
