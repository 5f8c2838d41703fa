"""FP8 on the CPU: scaled_mm's refusals (PingpongError naming the argument, before any work),
the fake implementations (shapes and scale layouts for torch.compile), the Hopper kernel's
offline compile facts, the tile choice, and quantize_fp8 under Triton's interpreter."""

import re
import textwrap

import pytest
import torch

import pingpong
from pingpong.errors import ConfigError, PingpongError
from pingpong.fp8 import check_scaled_mm, scaling_of
from pingpong.hopper.host import fp8_launch
from pingpong.hopper.host.fp8_launch import check_fp8_config, kernel_scaling, scale_boxes, select_fp8
from pingpong.hopper.host.fp8_select import least_wave_time, rule_fp8
from pingpong.hopper.host.config import SMEM_LIMIT, column_pieces
from pingpong.runtime import compile as cc
from interpreted import interpreted

KC = pingpong.KernelConfig

E4M3 = torch.float8_e4m3fn
M, N, K = 64, 256, 512


def ops(m=M, n=N, k=K, dtype=E4M3):
    a = torch.zeros(m, k).to(dtype)
    w = torch.zeros(n, k).to(dtype)
    return a, w.t()


def block_scales(m=M, n=N, k=K):
    return torch.ones(-(-k // 128), m).t(), torch.ones(-(-n // 128), -(-k // 128)).t()


def check(a, b, sa, sb, bias=None, out_dtype=torch.bfloat16, activation=None, fast=False):
    return check_scaled_mm(a, b, sa, sb, bias, out_dtype, activation, fast, device_checks=False)


def test_modes_follow_torch_scaled_mm_layouts():
    a, b = ops()
    one = torch.tensor(1.0)
    assert check(a, b, one, one)[:2] == ("tensor", 1)
    assert check(a, b, torch.ones(M, 1), torch.ones(1, N))[:2] == ("row", 1)
    assert check(a, b, *block_scales())[:2] == ("block", 128)
    sa, _ = block_scales()
    assert check(a, b, sa, torch.ones(K // 128, N))[:2] == ("block", 1)  # 1×128 × 1×128


@pytest.mark.parametrize("case, match", [
    ("a_bf16", "a: dtype torch.bfloat16"),
    ("b_row_major", "b: fp8 wgmma reads K-major"),
    ("a_col_major", "a: fp8 wgmma reads K-major"),
    ("mixed", "mixed fp8 kinds"),
    ("k_odd", "K=520"),
    ("n_odd", "N=250"),
    ("shapes", "cannot be multiplied"),
    ("scale_dtype", "scale_a: dtype torch.float16"),
    ("scale_b_shape", "scale_b: shape"),
    ("row_a_shape", r"scale_a: scale_b is row-wise \(1, 256\), so scale_a must be \(64, 1\)"),
    ("block_a_layout", "scale_a: scale_b is block-wise.*outer-dim-major"),
    ("block_b_layout", "scale_b: 128×128 block scales"),
    ("block_k", "K=528: block-wise"),
    ("tensor_a", "scale_a: scale_b is one value"),
    ("out_dtype", "out_dtype"),
    ("activation", "activation"),
    ("bias", "bias"),
    ("fast", "use_fast_accum"),
    ("three_d", "a: expected a 2-D tensor"),
    ("a_stride_odd", "a: the stride between K-rows must be a multiple of 16 bytes and ≥ K, got 520"),
    ("b_rows_overlap", "b: the stride between K-rows must be a multiple of 16 bytes and ≥ K, got 16"),
])
def test_bad_input_names_the_argument(case, match):
    a, b = ops()
    one = torch.tensor(1.0)
    args = dict(a=a, b=b, sa=one, sb=one)
    if case == "a_bf16":
        args["a"] = a.bfloat16()
    elif case == "b_row_major":
        args["b"] = b.contiguous()
    elif case == "a_col_major":
        args["a"] = a.t().contiguous().t()
    elif case == "mixed":
        args["b"] = b.float().to(torch.float8_e5m2)
        args["b"] = torch.zeros(N, K).to(torch.float8_e5m2).t()
    elif case == "k_odd":
        args["a"], args["b"] = ops(k=520)
    elif case == "a_stride_odd":  # TMA's 16-byte row stride (pingpong.runtime.spec.tma_row_stride)
        args["a"] = torch.zeros(M, 520).to(E4M3)[:, :K]
    elif case == "b_rows_overlap":  # rows 16 apart, 512 long: they overlap
        args["b"] = torch.zeros(N * 16 + K).to(E4M3).as_strided((N, K), (16, 1)).t()
    elif case == "n_odd":
        args["a"], args["b"] = ops(n=250)
    elif case == "shapes":
        args["b"] = ops(k=256)[1]
    elif case == "scale_dtype":
        args["sa"] = one.half()
    elif case == "scale_b_shape":
        args["sb"] = torch.ones(2, 3)
    elif case == "row_a_shape":
        args["sa"], args["sb"] = torch.ones(1, M), torch.ones(1, N)
    elif case == "block_a_layout":
        sa, sb = block_scales()
        args["sa"], args["sb"] = sa.contiguous(), sb
    elif case == "block_b_layout":
        sa, sb = block_scales()
        args["sa"], args["sb"] = sa, sb.contiguous()
    elif case == "block_k":
        args["a"], args["b"] = ops(k=528)
        args["sa"], args["sb"] = block_scales(k=528)
    elif case == "tensor_a":
        args["sa"] = torch.ones(M, 1)
    elif case == "three_d":
        args["a"] = a[None]
    kw = dict(out_dtype=torch.int8 if case == "out_dtype" else torch.bfloat16,
              activation="tanh" if case == "activation" else None,
              bias=torch.ones(N + 1) if case == "bias" else None, fast=1 if case == "fast" else False)
    with pytest.raises(PingpongError, match=match):
        check(args["a"], args["b"], args["sa"], args["sb"], **kw)


def test_public_call_refuses_before_any_work():
    a, b = ops()
    one = torch.tensor(1.0)
    with pytest.raises(PingpongError, match="runs on a Hopper GPU"):
        pingpong.scaled_mm(a, b, one, one)
    with pytest.raises(PingpongError, match="b: fp8 wgmma reads K-major"):
        pingpong.scaled_mm(a, b.contiguous(), one, one)


def test_fake_implementations_give_shapes_and_torch_layouts():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b = ops()
        sa, sb = block_scales()
        out = torch.ops.pingpong.scaled_mm(a, b, sa, sb, None, torch.float16, "none", False)
        assert out.shape == (M, N) and out.dtype == torch.float16
        x = torch.empty(M, K, dtype=torch.bfloat16)
        for g, shape, stride in (("row", (M, 1), (1, 1)), ("block", (M, K // 128), (1, M)),
                                 ("block128x128", (1, K // 128), (K // 128, 1)), ("tensor", (), ())):
            q, s = torch.ops.pingpong.quantize_fp8(x, g, E4M3)
            assert q.shape == x.shape and q.dtype == E4M3
            assert tuple(s.shape) == shape and (not shape or s.stride() == stride), g
        with pytest.raises(PingpongError, match="scale_b"):
            torch.ops.pingpong.scaled_mm(a, b, sa, torch.empty(3, 3), None, torch.float16, "none", False)


def test_quantize_refusals():
    x = torch.zeros(8, 256)
    with pytest.raises(PingpongError, match="granularity"):
        pingpong.quantize_fp8(x, "col")
    with pytest.raises(PingpongError, match="dtype"):
        pingpong.quantize_fp8(x, "row", torch.int8)
    with pytest.raises(PingpongError, match="multiple of 128"):
        pingpong.quantize_fp8(torch.zeros(8, 200), "block")
    with pytest.raises(PingpongError, match="2-D"):
        pingpong.quantize_fp8(torch.zeros(8), "row")


def test_selection_and_config_limits():
    assert select_fp8(16, 8192, 8192, True, 132).block_m == 64
    assert select_fp8(8192, 8192, 8192, True, 132).block_n == 128  # two accumulators: 2 × 64 registers
    assert select_fp8(8192, 8192, 8192, False, 132).block_n == 256  # fast accumulation: one
    with pytest.raises(ConfigError, match="two accumulators"):
        check_fp8_config(pingpong.KernelConfig(128, 256, 128), True, 2)
    with pytest.raises(ConfigError, match="block_k"):
        check_fp8_config(pingpong.KernelConfig(128, 128, 64), True, 2)
    swap = pingpong.KernelConfig(128, 128, 128, swap_ab=True)  # built for tensor/row (test_fp8_swap.py)
    with pytest.raises(ConfigError, match="swap-AB with block-wise scales"):
        check_fp8_config(swap, True, 2, scale_boxes("block", 128, swap))
    pair = pingpong.KernelConfig(128, 128, 128, cluster_m=2)  # tensor- and row-wise scales pair
    assert check_fp8_config(pair, True, 2).cluster_m == 2
    with pytest.raises(ConfigError, match="cluster_m=2 with block-wise scales"):  # a table entry must not reach it
        check_fp8_config(pair, True, 2, scale_boxes("block", 128, pair))
    # block-wise scales ride in every ring slot: 128 fp32 of sa + a 128-byte sb box beside the
    # 2 × 128 × 128 fp8 bytes; as many stages as fit in 227 KB with them, and no more
    cfg = pingpong.KernelConfig(128, 128, 128)
    d = check_fp8_config(cfg, True, 2, scale_boxes("block", 128, cfg))
    per_stage, rest = 2 * 128 * 128 + 4 * 128 + 128, d.shared_bytes - d.stages * d.stage_bytes
    assert d.stages * per_stage + rest <= 227 * 1024 < (d.stages + 1) * per_stage + rest
    assert check_fp8_config(cfg, True, 2, scale_boxes("tensor", 1, cfg)).stages == d.stages + 1
    with pytest.raises(ConfigError, match="at most 5 stages"):
        check_fp8_config(pingpong.KernelConfig(128, 128, 128, stages=6), True, 2, scale_boxes("block", 128, cfg))
    narrow = pingpong.KernelConfig(64, 16, 128, schedule="pingpong")
    with pytest.raises(ConfigError, match="128-byte aligned"):
        check_fp8_config(narrow, True, 2, scale_boxes("block", 1, narrow))


def test_rule_tile_by_modelled_wave_time():
    """Outside the FP8 mid-rows model (next test: tensor- and row-wise promoted products of
    65-960 rows), 65-128 rows (under a wave of 128×128 tiles) and unsplit 128×128 products take
    the tile whose waves of 132 SMs take the least modelled time, ⌈tiles / 132⌉ · BM·BN /
    efficiency (against 128×128: 128×64 and ping-pong 64×128 at 3/4 of its per-FLOP speed,
    128×192 at 0.95; 1.0 among the mid-row tiles); ties keep the first (128×64, 128×128,
    128×192, 64×128)."""
    coop = lambda bn: KC(128, bn, 128)  # noqa: E731
    pp64 = KC(64, 64, 128, schedule="pingpong")
    # 65-128 rows whose 128×128 tiles fill a wave take those (N = 28672: 224), block-wise too;
    # with fast accumulation, 128 rows, N = 6144: 96 tiles of 128×64 (1 wave, 8192) tie 192 of
    # 64×64 (2 waves, 2·4096)
    assert rule_fp8(128, 28672, 4096, True, 132, "block") == coop(128)
    assert rule_fp8(96, 28672, 4096, False, 132) == coop(128)
    assert rule_fp8(128, 6144, 4096, False, 132) == coop(64)
    assert rule_fp8(128, 6144, 4096, False, 132, "row") == coop(64)
    assert rule_fp8(128, 16384, 4096, False, 132) != coop(128)  # 128 tiles: under a wave
    # 64 rows keep the skinny rule: 64×128 where 128-column tiles fill 3/4 of a wave, else 64×64,
    # and tensor- and row-wise 64×32 where its tiles fit one wave (N = 4096: 128 tiles)
    assert rule_fp8(64, 28672, 4096, True, 132) == KC(64, 128, 128, schedule="pingpong")
    assert rule_fp8(64, 6144, 4096, True, 132) == pp64  # 64×32: 192 tiles
    assert rule_fp8(64, 4096, 4096, True, 132) == KC(64, 32, 128, schedule="pingpong")
    assert rule_fp8(64, 4096, 4096, True, 132, "row") == KC(64, 32, 128, schedule="pingpong")
    assert rule_fp8(64, 4096, 4096, True, 132, "block") == pp64
    # 1024³: 64 tiles of 128×128 (one half-empty wave, 16384) vs 128 of 128×64 (8192 / 0.75)
    assert rule_fp8(1024, 1024, 1024, True, 132) == coop(64)
    # 512×6144 block-wise (no 128×64 or 128×192 tile): 128×128; 2048×6144 (above the mid rows):
    # 6 waves of 128×128 (6 · 16384) vs 4 of 128×192 (4 · 25869)
    assert rule_fp8(512, 6144, 4096, True, 132, "block") == coop(128)
    assert rule_fp8(2048, 6144, 4096, True, 132) == coop(128)
    # the two-piece tiles where they take a wave fewer of few (H200, runs 420-422): 1229×3584×14336
    # 2 waves of 128×144 against 3 of 128×128 (1.19× / 1.19× tensor- / row-wise), 962×5120×13824 2
    # of 128×160 against 3 (1.12× / 1.14×); 7 of 128×160 against 9 keeps 128×128 (0.96× / 1.00×),
    # 4 of 128×144 against 3 of 128×192 keeps 128×192 (0.89× / 0.90×); block-wise and fast
    # accumulation keep their tiles
    for scaling in ("tensor", "row"):
        assert rule_fp8(1229, 3584, 14336, True, 132, scaling) == coop(144)
        assert rule_fp8(962, 5120, 13824, True, 132, scaling) == coop(160)
        assert rule_fp8(1862, 9216, 7168, True, 132, scaling) == coop(128)
        assert rule_fp8(2492, 3584, 18944, True, 132, scaling) == coop(192)
    assert rule_fp8(1229, 3584, 14336, True, 132, "block") == coop(128)
    assert rule_fp8(1229, 3584, 14336, False, 132) == coop(256)
    assert rule_fp8(778, 5120, 13824, True, 132, "block") == coop(128)
    # many waves: 4096 tiles of 128×128 (32 waves) vs 8192 of 128×64 (63 waves / 0.75)
    assert rule_fp8(8192, 8192, 8192, True, 132) == coop(128)
    # row-wise as tensor-wise; block-wise takes no 128×64 tile (its timing is bimodal):
    # 128 rows take the 64-row ping-pong tiles (96 tiles of 64×128 fill under 3/4 of a wave:
    # 64×64), 1024³ keeps 128×128
    assert rule_fp8(1024, 1024, 1024, True, 132, "row") == coop(64)
    assert rule_fp8(128, 6144, 4096, True, 132, "block") == pp64
    assert rule_fp8(1024, 1024, 1024, True, 132, "block") == coop(128)
    assert rule_fp8(1024, 1024, 4096, True, 132, "block") == coop(128)
    # long block-wise products (M·N·K ≥ 2^40 on 132 SMs): 4 stages, groups of 4 tile-rows
    long_block = KC(128, 128, 128, stages=4, group_m=4)
    assert rule_fp8(16384, 16384, 16384, True, 132, "block") == long_block
    assert rule_fp8(16384, 16384, 4096, True, 132, "block") == long_block
    assert rule_fp8(8192, 8192, 8192, True, 132, "block") == coop(128)
    assert rule_fp8(8192, 8192, 8192, True, 33, "block") == long_block  # the threshold is per SM
    assert rule_fp8(16384, 16384, 16384, True, 132) == coop(128)  # tensor-wise: kernel_scaling instead
    # launch-bound (1.5 MB moved: no split): 16 tiles of 128×128 or 32 of 128×64, one wave each
    assert rule_fp8(512, 512, 1024, True, 132) == coop(64)
    assert rule_fp8(512, 512, 1024, True, 132, "block") == coop(128)
    # launch-bound 300×3072×512: 120 tiles of ping-pong 64×128 (one wave, 8192 / 0.75) against 72
    # of 128×128 (one wave, 16384)
    assert rule_fp8(300, 3072, 512, True, 132) == KC(64, 128, 128, schedule="pingpong")
    # the model itself, on a made-up GPU of 10 SMs: 300×300 is 9 tiles of 128×128 (1 wave,
    # 16384) or 15 of 128×64 (2 waves, 2 · 8192 / e): 128×64 only where e > 1
    tiles = lambda e: ((coop(128), 1.0), (coop(64), e))  # noqa: E731
    assert least_wave_time(300, 300, 10, tiles(1.0)) == coop(128)  # a tie: the first
    assert least_wave_time(300, 300, 10, tiles(1.01)) == coop(64)
    assert least_wave_time(300, 300, 9, tiles(0.75)) == coop(128)


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_piece_efficiency_fits_the_measured_sweeps(scaling):
    """Above the mid rows the rule's picks among 128×128, 128×144, 128×160, 128×192
    (PIECE_EFFICIENCY) and the staged swap-AB 128×144 and 128×160 (STAGED_SWAP_EFFICIENCY) are
    within 0.7% of the best measured config per shape (geomean) in each H200 sweep: the pieces'
    (runs 420-421), their held-out A/B (run 422), the staged swap-AB's held-out A/B (run 451) and
    its picks on the earlier sweeps' shapes against their best (run 452); a pick one sweep did
    not measure must be measured in another. Never more than 5.5% off: the staged 128×144 loses
    4.7-5.1% at 1006×7168×20480 (and wins 0.6-2.2% at 964×7168×20480), 128×160 3.8% at
    3307×7168×5120 row-wise. A constant changed without a new measurement fails here."""
    import json
    import math

    from bench_scripts import BENCHMARKS as benchmarks, load

    schedules = load("schedules")  # parse_config: schedules.py's config names
    names = ("run420-fp8-pieces", "run421-fp8-pieces-ab", "run422-fp8-pieces-heldout",
             "run451-fp8-staged-swap-heldout", "run452-fp8-pieces-staged-swap")
    sweeps = {}
    for name in names:
        measured = sweeps[name] = {}
        for row in json.loads((benchmarks / "results" / "raw" / f"2026-11-29-{name}-{scaling}.json").read_text())["rows"]:
            config = schedules.parse_config(row["path"].split(" ", 1)[1])  # "fp8-tensor cooperative:128x160x128/g8"
            measured.setdefault((row["M"], row["N"], row["K"]), {})[config] = row["ratio"]
    for name, measured in sweeps.items():
        logs = []
        for (M, N, K), ratios in measured.items():
            pick = rule_fp8(M, N, K, True, 132, scaling)
            if pick not in ratios:  # measured with the configs it was compared with in another sweep
                assert any(pick in other.get((M, N, K), {}) for other in sweeps.values()), \
                    f"{name}: {M}x{N}x{K} picks {pick}, not measured"
                continue
            logs.append(math.log(ratios[pick] / max(ratios.values())))
        assert min(logs) > math.log(0.945), name
        assert math.exp(sum(logs) / len(logs)) > 0.993, name


def test_staged_swaps_above_the_mid_rows_stay_within_the_rows_measured():
    """The staged swap-AB 128×144 takes 1041×2048×10944 (run 451's fit: 0.831 → 0.871 over the
    two-piece 128×160), and no swap-AB tile is picked past 4096 rows, where no sweep measured
    them (5254×2048×10944 and 5254×4096×4096 would take 128×160 swap-AB at their speeds), nor on
    a long tensor-wise product."""
    assert rule_fp8(1041, 2048, 10944, True, 132) == KC(128, 144, 128, swap_ab=True)
    assert rule_fp8(1577, 3072, 8192, True, 132, "row") == KC(128, 144, 128, swap_ab=True)
    for M, N, K in ((5254, 2048, 10944), (5254, 4096, 4096), (9726, 3584, 14336)):
        for scaling in ("tensor", "row"):
            assert not rule_fp8(M, N, K, True, 132, scaling).swap_ab, (M, N, K, scaling)
    # long tensor-wise products keep their unswapped tile (the row-wise kernel's, kernel_scaling);
    # row-wise, 128×160 swap-AB was measured faster at 1415×57344×8192 (run 451)
    assert not rule_fp8(1426, 57344, 14336, True, 132).swap_ab
    assert rule_fp8(1426, 57344, 14336, True, 132, "row") == KC(128, 160, 128, swap_ab=True)


def test_fp8_mid_rows_model_picks_what_was_measured_faster():
    """Tensor- and row-wise promoted products of 65-960 rows take the FP8 mid-rows model's tile
    (fp8_select.FP8_MID_ROWS); each pin is a shape of an A/B on an H200 (runs 382-383, 411-413,
    416-418, 440-442, 481-482 and 568-571, benchmarks/data/midrows_sweeps.json and benchmarks/results) where the
    model's pick beat the old rule's, or a limit that measurement set; block-wise, fast
    accumulation, 64 and 961 rows, and launch-bound products keep the rule."""
    from pingpong.hopper.host.fp8_select import fp8_mid_rows_decides

    coop = lambda bn, k=1: KC(128, bn, 128, split_k=k)  # noqa: E731
    half = KC(64, 128, 128, schedule="pingpong")
    swap = lambda bn: KC(64, bn, 128, schedule="pingpong", swap_ab=True)  # noqa: E731
    staged = lambda bn: KC(128, bn, 128, swap_ab=True)  # noqa: E731  cooperative swap-AB, TMA-stored transposed
    for scaling in ("tensor", "row"):
        # 65-96 rows in one narrow staged swap-AB tile (64 + 16 or 64 + 32 columns of M), held out
        # (run 482, tensor / row): 1.16× / 1.17× and 1.02× / 1.02× over 128×128 (itself 1.28× / 1.34×
        # over 64×64 at 83 rows, run 382); not over more rows than their width
        assert rule_fp8(72, 10240, 8192, True, 132, scaling) == staged(80)
        assert rule_fp8(89, 10240, 8192, True, 132, scaling) == staged(96)
        assert rule_fp8(97, 10240, 8192, True, 132, scaling) not in (staged(80), staged(96))
        # the cooperative 128×96 (64 + 32 columns) where its tiles fill one wave, held out (runs
        # 570-571, tensor / row): 1.02× / 1.04× over 128×128 at 375×3072×8192, 1.08× / 1.10× over
        # 128×128 split 3 at 250×5120×13824; also where its last row of tiles is under half full
        # (run 578, tensor-wise: 406 rows, 22 of 128, 1.01× over 128×128), not past 512 rows
        assert rule_fp8(375, 3072, 8192, True, 132, scaling) == coop(96)
        assert rule_fp8(250, 5120, 13824, True, 132, scaling) == coop(96)
        assert rule_fp8(406, 3072, 8192, True, 132, scaling) == coop(96)
        assert rule_fp8(610, 2048, 2048, True, 132, scaling).block_n != 96
        assert rule_fp8(591, 3584, 3584, True, 132, scaling) == coop(144)  # 1.07× / 1.08× over 128×192
        assert rule_fp8(103, 8192, 28672, True, 132, scaling) == half  # 1.16× / 1.16× over 128×64
        assert rule_fp8(175, 5120, 13824, True, 132, scaling) == half  # 1.40× over 128×128 split 3
        # swap-AB in two pieces, M in 128 + 16 or 128 + 32 columns: 1.55× / 1.55× and 1.40× / 1.38× over
        # 128×128, 1.36× / 1.36× over 64×128; up to its width only (145 rows leave 64×144 a second column)
        assert rule_fp8(138, 7168, 20480, True, 132, scaling) == swap(144)
        assert rule_fp8(146, 8192, 8192, True, 132, scaling) == swap(160)
        assert rule_fp8(161, 8192, 8192, True, 132, scaling).block_n not in (144, 160)
        # the staged cooperative swap-AB tiles, over the pick before them (runs 440-442, tensor / row):
        # 286 rows in 2 tiles of 144 where 128×128 padded them to 384: 0.65 → 0.84 of torch (tensor)
        assert rule_fp8(286, 27648, 5120, True, 132, scaling) == staged(144)
        assert rule_fp8(547, 5120, 13824, True, 132, scaling) == staged(192)  # one wave, not 2: 0.71 → 1.06
        assert rule_fp8(407, 10240, 8192, True, 132, scaling) == staged(144)  # 1.02× / 1.03× over 128×160
        assert rule_fp8(566, 8192, 8192, True, 132, scaling) == staged(144)  # 1.04× / 1.05× over 128×160
        assert rule_fp8(852, 8192, 8192, True, 132, scaling) == staged(144)  # 1.04× / 1.05× over 128×160
        assert rule_fp8(529, 37888, 3584, True, 132, scaling) == staged(192)  # 1.10× / 1.12× over 128×192
        assert rule_fp8(129, 57344, 8192, True, 132, scaling) == staged(144)  # 1.17× / 1.16× over 64×144
        # the swap-AB 96 = 64 + 32 columns of M is no candidate over 96 rows: 196×5120×5120 in 3 of
        # them ran 0.84× of 128×128 (the unswapped 128×96 ran 1.01× / 1.03×, runs 568-569)
        assert rule_fp8(196, 5120, 5120, True, 132, scaling) == coop(96)
        # swap-AB 64×64 only up to 192 rows (measured winning at 112-179 rows only)
        assert not rule_fp8(778, 5120, 13824, True, 132, scaling).swap_ab
        assert fp8_mid_rows_decides(65, 8192, 8192, 132, scaling) and fp8_mid_rows_decides(960, 8192, 8192, 132, scaling)
    for args in ((175, 5120, 13824, 132, "block"), (175, 5120, 13824, 132, "row", False), (64, 8192, 8192, 132),
                 (961, 8192, 8192, 132), (128, 512, 1024, 132)):
        assert not fp8_mid_rows_decides(*args), args


def test_long_tensor_wise_products_take_the_row_kernel():
    """Tensor-wise products of at least 2^40 multiply-adds on 132 SMs (the threshold scales with
    the SM count) run the row-wise kernel with broadcast scalars; shorter ones, other scalings,
    fast accumulation, split-K, swap-AB and cluster launches keep their own kernel."""
    sq = KC(128, 128, 128)
    assert kernel_scaling("tensor", 16384, 16384, 16384, sq, True, 132) == ("row", True)
    assert kernel_scaling("tensor", 16384, 16384, 4096, sq, True, 132) == ("row", True)  # 2^40 exactly
    assert kernel_scaling("tensor", 8192, 16384, 8191, sq, True, 132) == ("tensor", False)  # just below
    assert kernel_scaling("tensor", 8192, 8192, 8192, sq, True, 132) == ("tensor", False)
    assert kernel_scaling("tensor", 8192, 8192, 8192, sq, True, 33) == ("row", True)  # 2^39 on a quarter
    assert kernel_scaling("tensor", 16384, 16384, 16384, KC(128, 256, 128), False, 132) == ("tensor", False)
    assert kernel_scaling("tensor", 16384, 16384, 16384, KC(128, 128, 128, split_k=2), True, 132) \
        == ("tensor", False)
    assert kernel_scaling("tensor", 16384, 16384, 16384, KC(128, 128, 128, cluster_m=2), True, 132) \
        == ("tensor", False)
    for scaling in ("row", "block"):
        assert kernel_scaling(scaling, 16384, 16384, 16384, sq, True, 132) == (scaling, False)


def test_float8_linear_refuses_grad_and_bad_granularity():
    from pingpong.fp8 import Float8Linear

    layer = torch.nn.Linear(256, 128)
    with pytest.raises(PingpongError, match="fp8"):
        Float8Linear.from_linear(layer, "col")
    with pytest.raises(PingpongError, match="in_features=200"):
        Float8Linear.from_linear(torch.nn.Linear(200, 128), "block")
    with pytest.raises(PingpongError, match="fp8"):
        pingpong.nn.replace_linear(torch.nn.Sequential(layer), fp8="tensorwise")


def test_refuse_grad_names_every_tensor_it_checks():
    """refuse_grad (the one requires-grad decision) names the tensor by the caller's names; a
    tensor without a name (an operand added to scaled_mm but not to TENSOR_ARGS) is an error,
    never silently left unchecked."""
    from pingpong.fp8 import TENSOR_ARGS
    from pingpong.runtime.fp8_spec import refuse_grad

    grad = torch.zeros(1, requires_grad=True)
    with pytest.raises(PingpongError, match="bias: requires grad, but scaled_mm"):
        refuse_grad("scaled_mm", None, None, None, None, grad, names=TENSOR_ARGS)
    with pytest.raises(ValueError):
        refuse_grad("scaled_mm", None, None, None, None, torch.zeros(1))  # five tensors, four default names


def test_float8_linear_forgets_its_kept_launches_when_moved_or_copied():
    """The input signatures' launches (Float8Linear._runs, taken on a GPU) hold views of the
    layer's buffers and bound launches: a move (`_apply`) forgets them, and a copy or a pickle
    starts without them; a run answers `holds` only while the layer's buffers are its own."""
    import copy
    import pickle

    from pingpong.fp8 import Float8Linear, _LayerRun

    layer = Float8Linear.__new__(Float8Linear)
    torch.nn.Module.__init__(layer)
    layer.fp8, layer.fp8_dtype, layer.in_features, layer.out_features = "row", torch.float8_e4m3fn, 32, 16
    layer.register_buffer("weight_fp8", torch.zeros(16, 32))  # (fp8 storages do not pickle on every torch)
    layer.register_buffer("weight_scale", torch.ones(16, 1))
    layer.register_buffer("bias", None)
    run = _LayerRun.__new__(_LayerRun)
    run.weights = (layer.weight_fp8, layer.weight_scale, None)
    layer._runs = {"signature": run}
    assert run.holds(layer._buffers)
    layer.weight_scale = torch.ones(16, 1)
    assert not run.holds(layer._buffers), "a replaced buffer must send the call back through validation"
    assert copy.deepcopy(layer)._runs == {} and pickle.loads(pickle.dumps(layer))._runs == {}
    older = Float8Linear.__new__(Float8Linear)  # a layer pickled before `_runs` existed
    older.__setstate__({k: v for k, v in layer.__dict__.items() if k != "_runs"})
    assert older._runs == {}
    assert layer._runs, "copying must not empty the original's"
    layer.to(torch.device("cpu"))
    assert layer._runs == {}, "a move replaces the buffers the runs view"


def test_float8_linear_lets_go_of_replaced_weights(interpreted_kernels, monkeypatch):
    """A buffer replaced (load_state_dict(..., assign=True), a weight swap by assignment): the
    kept runs of other input signatures (a prefill's token counts) still held views of the old
    weight, keeping it alive until the layer saw RUNS signatures. The next call that misses drops
    them (their `holds` is False anyway), so the old weight is freed."""
    import gc
    import weakref

    from fp8_emulation import emulate_fp8
    from pingpong.fp8 import Float8Linear, _LayerRun

    emulate_fp8(monkeypatch.setattr)
    lin = torch.nn.Linear(32, 16, dtype=torch.float16)
    layer = Float8Linear(lin.weight, lin.bias, "row")
    for i in range(3):  # runs kept for three earlier token counts (taken on a GPU: stand-ins here)
        run = _LayerRun.__new__(_LayerRun)
        run.weights = (layer.weight_fp8, layer.weight_scale, layer.bias)
        run.b, run.sb = layer.weight_fp8.t(), layer.weight_scale.t()
        layer._runs[("signature", i)] = run
    old = weakref.ref(layer.weight_fp8)
    swapped = Float8Linear(lin.weight * 2, lin.bias, "row")
    layer.load_state_dict(swapped.state_dict(), assign=True)
    del run, swapped
    x = torch.randn(4, 32, dtype=torch.float16)
    layer(x)
    gc.collect()
    assert old() is None, "the old weight is still held by the runs of other signatures"
    assert layer._runs == {}


def test_float8_linear_keeps_its_fp8_weight_when_the_model_is_cast(interpreted_kernels, monkeypatch):
    """model.half() / .to(dtype) / .float() cast every floating-point buffer, and fp8 is one:
    the quantized weight and its fp32 scales keep their dtypes (the bias follows the model's),
    so the layer still computes what it did."""
    from fp8_emulation import emulate_fp8
    from pingpong.fp8 import Float8Linear

    emulate_fp8(monkeypatch.setattr)
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 16, dtype=torch.float16)
    layer = Float8Linear(lin.weight, lin.bias, "row")
    model = torch.nn.Sequential(layer)
    q, s = layer.weight_fp8.clone(), layer.weight_scale.clone()
    x = torch.randn(4, 32, dtype=torch.float16)
    want = model(x)
    for cast, dtype in ((lambda m: m.float(), torch.float32), (lambda m: m.half(), torch.float16),
                        (lambda m: m.to(torch.bfloat16), torch.bfloat16)):
        cast(model)
        assert layer.weight_fp8.dtype == E4M3 and layer.weight_scale.dtype == torch.float32
        assert torch.equal(layer.weight_fp8.float(), q.float()) and torch.equal(layer.weight_scale, s)
        assert layer.bias.dtype == dtype
        if dtype == torch.float16:
            torch.testing.assert_close(model(x), want, rtol=0, atol=0)


def test_replace_linear_fp8_keeps_an_eval_model_in_eval_mode(interpreted_kernels, monkeypatch):
    """The swapped Float8Linear layers take each layer's train/eval mode, as pingpong.nn.Linear's
    do: replace_linear on a model in eval mode leaves every module in eval mode."""
    from fp8_emulation import emulate_fp8

    emulate_fp8(monkeypatch.setattr)
    for module in (pingpong.fp8, pingpong.nn):  # the layer is on the CPU here: quantized by the emulation
        monkeypatch.setattr(module, "fp8_unsupported_reason", lambda layer, fp8: None)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16, dtype=torch.float16)).eval()
    assert pingpong.nn.replace_linear(model, fp8="row").replaced == ["0"]
    assert isinstance(model[0], pingpong.fp8.Float8Linear) and not model[0].training


# ----------------------------------------------------------------------------- offline compile facts


@pytest.mark.slow
@pytest.mark.parametrize("kernel, shape", [("fp8-block", "m64n128k32"), ("fp8-tensor-fast", "m64n256k32"),
                                           ("fp8-block-1x128", "m64n128k32"), ("fp8-row-pingpong", "m64n64k32"),
                                           ("fp8-block-pingpong", "m64n128k32"), ("fp8-tensor-narrow", "m64n64k32"),
                                           ("fp8-block-long", "m64n128k32")])
def test_fp8_kernel_compiles_to_fp8_wgmma_without_spills(kernel, shape):
    c = cc.compile_kernel(kernel, "sm_90a")
    f = c.facts()
    ptx = c.asm["ptx"]
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k\d+)\.f32\.e4m3\.e4m3", ptx)) == {shape}
    assert "bf16" not in re.findall(r"wgmma\.mma_async\S*", ptx)[0]
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"
    assert f.counts["UTMALDG"] > 0 and f.counts["UTMASTG"] > 0 and f.warps == 12
    # block-wise, the producer loads the slot's scales with TMA beside A and B, and nothing is
    # read from global memory in the kernel (the K loop's scales come from shared memory)
    tma_loads = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global", ptx))
    if kernel.startswith("fp8-block"):
        assert tma_loads == 4 and "ld.global" not in ptx, (tma_loads, ptx.count("ld.global"))
    else:
        assert tma_loads == 2
    waits = set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx))
    # promoted: each K block's wgmma completes before it is added in, on ping-pong and 64-column
    # cooperative tiles with the next K block's in flight (wait(1)), else with none; fast: one
    # k-step in flight
    config = fp8_launch.OFFLINE_FP8_VARIANTS[kernel][2]
    paired = config.schedule == "pingpong" or config.block_n <= 64
    assert waits == ({"0", "1"} if kernel.endswith("fast") or paired else {"0"}), waits


@pytest.mark.slow
@pytest.mark.parametrize("kernel, second, loads", [
    ("fp8-tensor-wide", 64, 4), ("fp8-row-wide", 64, 4), ("fp8-row-wide-fast", 64, 4),
    ("fp8-tensor-144", 16, 10), ("fp8-row-160", 32, 6), ("fp8-tensor-coop-96", 32, 4)])
def test_two_piece_fp8_tile_compiles_to_two_wgmmas_per_k_step(kernel, second, loads):
    """P1 + P2 columns (192, 160, 144 = 128 + P2; 96 = 64 + 32): per k-step P1/P2 + 1 B boxes of
    P2 columns (P1/P2 into the first piece's buffer) beside A, two wgmma widths, no spills;
    promoted, each k-step's two wgmmas complete before they are added in (wait(0) only: one set
    of parts); fast, one k-step (two groups) in flight (wait(2))."""
    c = cc.compile_kernel(kernel, "sm_90a")
    f, ptx = c.facts(), c.asm["ptx"]
    first = column_pieces(fp8_launch.OFFLINE_FP8_VARIANTS[kernel][2].block_n)[0]
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k\d+)\.f32\.e4m3\.e4m3", ptx)) == \
        {f"m64n{first}k32", f"m64n{second}k32"}
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global", ptx)) == loads  # A, then B's boxes
    assert f.shared_bytes <= SMEM_LIMIT and f.warps == 12
    waits = set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx))
    assert waits == ({"0", "2"} if kernel.endswith("fast") else {"0"}), waits


@pytest.mark.parametrize("config, second", [(KC(128, 192, 128), 64), (KC(128, 96, 128), 32),
                                            (KC(128, 192, 128, stages=3), 64), (KC(128, 160, 128), 32),
                                            (KC(128, 144, 128), 16), (KC(128, 80, 128), 16)])
def test_two_piece_fp8_tiles_take_tensor_and_row_scales(config, second):
    for scaling in ("tensor", "row"):
        for promote in (True, False):
            d = check_fp8_config(config, promote, 2, scale_boxes(scaling, 128, config))
            assert d.block_n2 == second and d.shared_bytes <= SMEM_LIMIT


@pytest.mark.parametrize("config", [KC(64, 144, 128, schedule="pingpong", swap_ab=True),
                                    KC(64, 160, 128, schedule="pingpong", swap_ab=True), KC(128, 144, 128, swap_ab=True)])
def test_two_piece_fp8_swap_tiles_take_tensor_and_row_scales(config):
    """Swap-AB in two pieces: M on the wgmma's N side as 128 + 16 or 128 + 32 columns."""
    for scaling in ("tensor", "row"):
        for promote in (True, False):
            d = check_fp8_config(config, promote, 2, scale_boxes(scaling, 128, config))
            assert d.swap_ab and d.pieces == (128, config.block_n - 128) and d.shared_bytes <= SMEM_LIMIT


@pytest.mark.parametrize("config, scaling", [
    (KC(128, 192, 128), "block"), (KC(64, 192, 128, schedule="pingpong"), "tensor"),
    (KC(128, 192, 128, split_k=2), "tensor"), (KC(64, 144, 128, schedule="pingpong", swap_ab=True, split_k=2), "row"),
    (KC(128, 192, 128, stream_k=True), "row"),
    (KC(64, 144, 128, schedule="pingpong", swap_ab=True), "block"),
])
def test_two_piece_fp8_tiles_refused_elsewhere_with_the_reason(config, scaling):
    with pytest.raises(ConfigError, match=rf"block_n={config.block_n} \(two column pieces\) runs unsplit, without"
                                          r" stream-K or a cluster, with tensor- or row-wise scales, on the cooperative"
                                          r" schedule or swap-AB"):
        check_fp8_config(config, True, 2, scale_boxes(scaling, 128, config))


# ----------------------------------------------------------------------------- quantize under the interpreter

_CHECK = textwrap.dedent("""
    import sys, torch, pingpong


    def check(src, g, dtype):
        M, K = src.shape
        G = K // 128
        fmax = torch.finfo(dtype).max
        q, s = pingpong.quantize_fp8(src, g, dtype)
        xf = src.float()
        if g == "row":
            amax = xf.abs().amax(1, keepdim=True).expand(M, K)
            assert s.shape == (M, 1)
        elif g == "block":
            amax = xf.view(M, G, 128).abs().amax(2).repeat_interleave(128, 1)
            assert s.shape == (M, G) and s.stride() == (1, M)
            s = s.repeat_interleave(128, 1)
        elif g == "block128x128":
            amax = xf.view(M, G, 128).abs().amax((0, 2)).repeat_interleave(128).expand(M, K)
            assert s.shape == (1, G)
            s = s.repeat_interleave(128, 1)
        else:
            amax = xf.abs().amax().expand(M, K)
            assert s.shape == ()
        assert torch.equal(s.expand(M, K), amax / fmax), g  # IEEE division, as torch's
        xs = (xf * (fmax / amax)).clamp(-fmax, fmax)
        want = xs.to(dtype).float()
        got = q.float()
        # Two flaws of Triton's interpreter's fp8 cast, the only differences allowed: a
        # round-up into the next binade does not carry into the exponent (124.3 -> 64
        # instead of 128 in e4m3), and ties round away from zero (84 -> 88, not 80)
        # (and subnormals come out wrong: compared to within a few of their steps only)
        sub = want.abs() <= 2 * torch.finfo(dtype).smallest_normal
        assert ((got - want)[sub].abs() <= 4 * torch.finfo(dtype).smallest_normal).all(), (g, dtype)
        bad = (got != want) & ~sub
        rollover = (got * 2 == want) & (want.abs().log2() % 1 == 0)
        tie = ((got + want) / 2 - xs).abs() <= 1e-6 * xs.abs()  # (its x·(1/s) is not torch's to the last bit)
        assert (rollover | tie)[bad].all(), (g, dtype, got[bad & ~(rollover | tie)][:5], want[bad & ~(rollover | tie)][:5])
        assert bad.float().mean() < 0.05, (g, dtype, bad.float().mean())


    def spread(M, K):  # magnitudes 2^-4..2^4 across rows and across 128-column groups
        x = torch.randn(M, K) * torch.exp2(torch.randint(-4, 5, (M, 1)).float())
        return x * torch.exp2(torch.randint(-4, 5, (1, K // 128)).float()).repeat_interleave(128, 1)


    torch.manual_seed(0)
""")

_INTERPRETED = _CHECK + textwrap.dedent("""
    x = spread(70, 384)
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        for g in ("row", "block", "block128x128", "tensor"):
            for src in (x, x.half()):
                check(src, g, dtype)

    # ±inf in a group: its scale is inf (amax / FP8_MAX, amax clamped from below only, as torch's
    # float8 recipes), so the whole group dequantizes to non-finite values; other groups as usual
    y = spread(4, 256)
    y[1, 5], y[2, 130] = float("inf"), -float("inf")
    for src in (y, y.half()):
        for g, inf_groups in (("row", [(1, 0), (2, 0)]), ("block", [(1, 0), (2, 1)]),
                              ("block128x128", [(0, 0), (0, 1)]), ("tensor", [(0, 0)])):
            q, s = pingpong.quantize_fp8(src, g)
            s2 = s.reshape(1, 1) if g == "tensor" else s
            rows, cols = (128 if g in ("block128x128", "tensor") else 1), (256 if g in ("row", "tensor") else 128)
            for i in range(s2.shape[0]):
                for j in range(s2.shape[1]):
                    v = s2[i, j].item()
                    group = q[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols].float() * v
                    if (i, j) in inf_groups:
                        assert v == float("inf") and not torch.isfinite(group).any(), (g, i, j, v)
                    else:
                        assert 0 < v < float("inf") and torch.isfinite(group).all(), (g, i, j, v)

    # 128×128 blocks of W and of Wᵀ hold the same values: the same quantization, transposed,
    # bitwise (FP8 training's block-wise data gradient reuses W's instead of quantizing Wᵀ)
    w = spread(256, 384)
    for src in (w, w.half()):
        q, s = pingpong.quantize_fp8(src, "block128x128")
        qt, st = pingpong.quantize_fp8(src.t().contiguous(), "block128x128")
        assert torch.equal(qt.view(torch.uint8), q.t().view(torch.uint8)) and torch.equal(st, s.t()), src.dtype
    print("OK")
""")

# Rows 2^30 + 2^20 fp16 elements apart: the third starts at 2^31 + 2^21 elements, where an
# int32 offset wraps negative. The storage is 4 GiB of address space of which only the three
# rows' pages are ever touched (torch.empty does not write; the interpreter reads and writes
# the tensors in place).
_FAR_ROWS = _CHECK + textwrap.dedent("""
    stride = (1 << 30) + (1 << 20)
    try:
        storage = torch.empty(2 * stride + 384, dtype=torch.float16)
    except RuntimeError as e:
        print("SKIP", e)
        raise SystemExit(0)
    x = storage.as_strided((3, 384), (stride, 1))
    x.copy_(spread(3, 384))
    for g in sys.argv[1:]:
        check(x, g, torch.float8_e4m3fn)  # (the offsets do not depend on the fp8 kind)
    print("OK")
""")


@pytest.mark.slow
def test_quantize_under_the_interpreter():
    """Scales exact (amax / FP8_MAX per group, torch's layouts); q equal to torch's cast of x / s
    but for the interpreter's two rounding flaws (the GPU test requires bitwise equality). A
    group holding ±inf gets an infinite scale and dequantizes to non-finite values (fp8.py)."""
    r = interpreted(_INTERPRETED)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


@pytest.mark.slow
def test_quantize_reads_rows_past_2_to_the_31_elements():
    """Every granularity's kernels read a row that starts 2^31 + 2^21 elements past x's first
    (int64 row offsets; an int32 product wraps to a negative offset: a crash or garbage)."""
    r = interpreted(_FAR_ROWS, "row", "block", "block128x128", "tensor")
    if r.returncode == 0 and r.stdout.startswith("SKIP"):
        pytest.skip(f"no 4 GiB of address space for the strided view: {r.stdout}")
    assert r.returncode == 0 and "OK" in r.stdout, (r.returncode, r.stderr[-3000:])


_NAN_INPUT = textwrap.dedent("""
    import torch, pingpong
    from pingpong.quantize import quantize_fp8_columns, quantize_fp8_pair
    from pingpong.quantize_groups import quantize_groups_t

    E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


    def nan_kept(q, where, dtype, name):
        # torch's cast of NaN is NaN (e4m3fn and e5m2 both have one); the interpreter casts a
        # NaN to e4m3 as 0x7C (384), so there a NaN is only required not to be the -FP8_MAX that
        # a NaN-dropping clamp makes of it
        v = q.float()[where]
        if dtype == E5:
            assert v.isnan().all(), (name, v)
        else:
            assert (v != -torch.finfo(dtype).max).all(), (name, v)

    torch.manual_seed(0)
    x = torch.randn(5, 256)
    x[1, 5] = x[3, 200] = float("nan")
    where = (torch.tensor([1, 3]), torch.tensor([5, 200]))
    for dtype in (E4, E5):
        for g in ("row", "block", "block128x128", "tensor"):
            for src in (x, x.half()):
                q, s = pingpong.quantize_fp8(src, g, dtype)
                nan_kept(q, where, dtype, g)
            q, s, qt, st = quantize_fp8_pair(x, g, dtype, pad=128)
            nan_kept(q, where, dtype, "pair " + g)
            nan_kept(qt, (where[1], where[0]), dtype, "pair qt " + g)
        q, s = quantize_fp8_columns(x.half().view(1, 5, 256), dtype)
        nan_kept(q[0], (where[1], where[0]), dtype, "columns")
        offs = torch.tensor([2, 5], dtype=torch.int32)
        for g in ("row", "block"):
            qt, s, poffs = quantize_groups_t(x.half(), offs, dtype, g)
            nan_kept(qt, (where[1], torch.tensor([1, 128 + 1])), dtype, "groups_t " + g)
    print("OK")
""")


@pytest.mark.slow
def test_quantize_keeps_nan_as_torch_cast_does():
    """A NaN in x quantizes to NaN, as torch's `x.to(float8)` (and torch.clamp) keep it, in every
    quantizer: not to -FP8_MAX, the finite value a NaN-dropping clamp makes of it, which hid the
    NaN from the product (its group's scale ignores the NaN, as the kernels' max does)."""
    r = interpreted(_NAN_INPUT)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_bench_takes_fp8_and_names_a_bad_scaling():
    import argparse

    from pingpong.tools import bench

    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    st = bench.settings_from_args(p.parse_args(["--dtype", "fp8", "--scaling", "block", "--fast-accum"]))
    assert (st.dtype, st.scaling, st.fast_accum) == ("fp8", "block", True)
    with pytest.raises(PingpongError, match="--scaling"):
        bench.settings_from_args(p.parse_args(["--dtype", "fp8", "--scaling", "col"]))


def test_bench_row_of_a_shape_the_peer_refuses(monkeypatch, capsys):
    """torch._scaled_mm refusing a shape (block-wise at M = 1: CUBLAS_STATUS_NOT_SUPPORTED) is
    the peer's status: ours still checked against the reference and timed, no ratio (the
    geometric mean leaves the row out), exit status 0; a wrong result of ours still FAILS."""
    import argparse

    from pingpong import fp8
    from pingpong.tools import bench, bench_fp8, timing
    from pingpong.tools.rows import Row

    ref = torch.randn(1, 256, dtype=torch.float64)
    ours = {"out": ref.bfloat16()}
    monkeypatch.setattr(bench_fp8, "make_fp8_inputs", lambda *a: (None,) * 4)
    monkeypatch.setattr(bench_fp8, "reference", lambda *a: ref)
    monkeypatch.setattr(fp8, "scaled_mm", lambda *a, **k: ours["out"])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)

    def refuse(*a, **k):
        raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    timed = []
    timer = lambda fn, reps: timed.append(fn) or timing.Timing(2.0, reps)  # noqa: E731
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    st = bench.settings_from_args(p.parse_args(["--dtype", "fp8", "--scaling", "block", "--rounds", "2"]))
    row = bench_fp8.bench_fp8_shape(1, 256, 512, st, "cpu", timer)
    assert row.status == "peer-unsupported" and row.passed, row
    assert row.ours_ms == 2.0 and row.cublas_ms is None and row.ratio is None and row.rel_err < 1e-2
    assert len(timed) == 2, "ours timed once per round, the peer never"
    assert "CUBLAS_STATUS_NOT_SUPPORTED" in capsys.readouterr().err
    ok = Row(64, 64, 64, "fp8-block", "ok", 1e-3, 1.0, 2.0, 10, 10, 2.0, 2.0, 1, 2)
    assert bench.geomean_ratio([row, ok]) == 2.0
    assert "over 1 timed shape(s)" in bench.format_table([row, ok])
    monkeypatch.setattr(bench, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(bench, "fp8_gpu_reason", lambda: None)  # (a Hopper GPU stands in)
    monkeypatch.setattr(bench, "environment_header", lambda s: {})
    monkeypatch.setattr(bench, "bench_shapes", lambda *a, **k: [row, ok])
    assert bench.run(p.parse_args(["--dtype", "fp8", "--scaling", "block"])) == 0
    ours["out"] = (ref * 1.5).bfloat16()  # ours wrong: FAILED whatever the peer does
    assert bench_fp8.bench_fp8_shape(1, 256, 512, st, "cpu", timer).status == "FAILED"


# ----------------------------------------------------------------------------- the user's guide


def test_fp8_guide_covers_every_granularity_and_layer_mode():
    """docs/fp8.md names every granularity quantize_fp8 takes, every replace_linear fp8 mode and
    every tuning-table key prefix, and its Python blocks parse."""
    import ast
    from pathlib import Path

    from pingpong.fp8 import LAYER_SCALINGS
    from pingpong.hopper.host.table import fp8_key
    from pingpong.quantize import GRANULARITIES

    text = (Path(__file__).parents[1] / "docs" / "fp8.md").read_text()
    missing = [g for g in GRANULARITIES if f'`"{g}"`' not in text]
    missing += [m for m in LAYER_SCALINGS if f'fp8="{m}"' not in text]
    missing += [k for k in (fp8_key("e4m3", "row", True), fp8_key("e4m3", "row", False), fp8_key("e4m3", "block", True))
                if f"`{k}`" not in text]
    assert not missing, f"docs/fp8.md does not name {missing}"
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        ast.parse(block)


def test_every_rule_pick_is_a_config_the_kernel_runs():
    """Whatever the shape, scaling, accumulation, output size and SM count (a carveout's too),
    the rule's pick passes the kernel's own checks (check_fp8_config with the scale boxes, and
    the workspace bound plan() applies): selection never hands a plan a config it refuses."""
    from hypothesis import example, given, settings, strategies as st  # (the test extra)

    from pingpong.hopper.host.fp8_launch import FP8_BYTES
    from pingpong.hopper.host.launch import workspace_reason

    sizes = st.one_of(st.integers(1, 300), st.integers(1, 70000))
    multiples = st.one_of(st.integers(1, 64), st.integers(1, 4096)).map(lambda n: 16 * n)

    @settings(max_examples=300, derandomize=True, database=None, deadline=None)
    @given(sizes, multiples, multiples, st.sampled_from(["tensor", "row", "block", "block1x128"]), st.booleans(),
           st.sampled_from([2, 4]), st.sampled_from([132, 114, 78, 16]))
    @example(675, 10240, 8192, "row", True, 2, 132)  # the two-piece 128×160 (the draws above may miss it)
    def pick_runs(M, N, K, mode, promote, out_bytes, sms):
        scaling, sb_cols = ("block", 1 if mode == "block1x128" else 128) if mode.startswith("block") else (mode, 128)
        promote = promote or scaling == "block"
        config = rule_fp8(M, N, K, promote, sms, scaling)
        check_fp8_config(config, promote, out_bytes, scale_boxes(scaling, sb_cols, config))
        assert workspace_reason(M, N, K, config, FP8_BYTES, sms) is None, (M, N, K, config)

    pick_runs()


@pytest.mark.parametrize("capability, refused", [((8, 0), True), ((8, 6), True), ((8, 9), False), ((10, 0), False),
                                                 ((12, 0), False)])
def test_quantize_refuses_e4m3_on_a_gpu_without_fp8(monkeypatch, capability, refused):
    """An A100 (sm_80) has no FP8: Triton refuses float8_e4m3fn there at compile time, so quantize_fp8
    says so before any work (a PingpongError naming the GPU and e5m2), where sm_89+ goes on."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from pingpong import quantize
    from pingpong.runtime import device

    device.fp8_e4m3_reason.cache_clear()
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA A100-SXM4-80GB")
    with FakeTensorMode():
        x = torch.empty(64, 256, dtype=torch.bfloat16, device="cuda")
    try:
        if refused:
            with pytest.raises(PingpongError, match=r"^dtype: float8_e4m3fn needs .*sm_89.* is sm_8\d.*float8_e5m2"):
                quantize.check_quantize(x, "row", torch.float8_e4m3fn)
        else:
            quantize.check_quantize(x, "row", torch.float8_e4m3fn)
        quantize.check_quantize(x, "row", torch.float8_e5m2)  # e5m2 converts on every arch
        monkeypatch.setattr(torch.version, "hip", "6.4")  # ROCm: Triton casts to e4m3fn (gfx942 too)
        device.fp8_e4m3_reason.cache_clear()
        quantize.check_quantize(x, "row", torch.float8_e4m3fn)
    finally:
        device.fp8_e4m3_reason.cache_clear()
