"""FP8 split-K on the CPU: the FP8 check takes split configs (swap-AB: test_fp8_swap.py); the rule's
split counts (select.split_count with K in 128-deep FP8 k-steps); the split kernel's offline
compile facts (no spills, shared memory in budget, pointer epilogue with arrival atomics)."""

import re

import pytest

import pingpong
from pingpong.errors import ConfigError
from pingpong.hopper.host.config import SMEM_LIMIT
from pingpong.hopper.host import fp8_launch
from pingpong.hopper.host.fp8_launch import check_fp8_config, fp8_splits, scale_boxes
from pingpong.hopper.host.fp8_select import rule_fp8
from pingpong.runtime import compile as cc
from pingpong.runtime.spec import EpilogueArgs

KC = pingpong.KernelConfig


@pytest.mark.parametrize("config", [KC(128, 128, 128, split_k=2), KC(128, 128, 128, split_k=8),
                                    KC(64, 128, 128, schedule="pingpong", split_k=4), KC(128, 256, 128, split_k=3)])
def test_split_configs_are_accepted(config):
    promote = config.block_n == 128  # 128×256 holds one accumulator: fast accumulation only
    for scaling in ("tensor", "row", "block") if promote else ("tensor", "row"):
        d = check_fp8_config(config, promote, 2, scale_boxes(scaling, 128, config))
        assert d.split_k == config.split_k and d.shared_bytes <= SMEM_LIMIT
        assert d.epilogue_bytes == 0, "the split epilogue stores through pointers: no staging"


@pytest.mark.parametrize("config, match", [
    (KC(128, 128, 128, schedule="persistent", split_k=2), "warp-specialized"),
    (KC(128, 192, 128, split_k=2), "two column pieces"),
    (KC(128, 128, 64, split_k=2), "block_k=64"),
])
def test_split_refusals(config, match):
    with pytest.raises(ConfigError, match=match):
        check_fp8_config(config, False, 2)


def test_workspace_of_a_config_that_fits_only_fp8_operands():
    """4 stages of 128×128×128 fit in shared memory with 1-byte operands (32 KB a stage), not
    with 2-byte ones: the split plan's workspace and counters are sized for the FP8 kernel."""
    from pingpong import KernelConfig
    from pingpong.hopper.host.launch import counter_count, workspace_reason, workspace_shape

    config = KernelConfig(128, 128, 128, stages=4, split_k=2)
    with pytest.raises(ConfigError, match="shared memory"):
        workspace_shape(512, 512, 65536, config)  # as a bf16 config
    assert workspace_shape(512, 512, 65536, config, 1) == (1024, 512)
    assert counter_count(512, 512, config, 1) == 4 * 8 * 4  # tile-rows × 16-row counters × tile-columns
    assert workspace_reason(512, 512, 65536, config, 1) is None


def test_rule_splits_large_k_few_tile_shapes():
    # 512×512×65536: 16 tiles of 128×128, K = 512 steps of 128; one wave holds 132 units:
    # 8 splits (128 units, 64 + 4 steps each) beat 1 (512 + 4), 9..16 take two waves
    assert rule_fp8(512, 512, 65536, True, 132) == KC(128, 128, 128, split_k=8)
    # 1024×1024×16384: 64 tiles, 128 steps: 2 splits (128 units, 64 + 4) vs 3 (two waves)
    assert rule_fp8(1024, 1024, 16384, True, 132) == KC(128, 128, 128, split_k=2)
    # 64×4096×65536: 64 ping-pong tiles of 64×64 (64×128 fills less than 3/4 of a wave), 2 splits;
    # K long enough for 2 splits of ≥ 128 steps keeps 64×64 (not 64×32, which fits one wave)
    assert rule_fp8(64, 4096, 65536, True, 132) == KC(64, 64, 128, schedule="pingpong", split_k=2)
    assert rule_fp8(64, 4096, 65536, True, 132, "block") == KC(64, 64, 128, schedule="pingpong", split_k=2)
    # 64×4096×14336: 112 steps, too few for 2 such splits: 128 tiles of 64×32, unsplit (one wave)
    assert rule_fp8(64, 4096, 14336, True, 132) == KC(64, 32, 128, schedule="pingpong")
    assert rule_fp8(64, 4096, 32768, True, 132) == KC(64, 64, 128, schedule="pingpong", split_k=2)
    # fast accumulation splits with the 128×128 tile (the 128×256 split kernel spills, row-wise)
    assert rule_fp8(512, 512, 65536, False, 132) == KC(128, 128, 128, split_k=8)
    # the tiles fill the GPU, or K is short: no split
    assert rule_fp8(16384, 16384, 16384, True, 132).split_k == 1
    assert rule_fp8(8192, 8192, 8192, False, 132) == KC(128, 256, 128)
    assert rule_fp8(1024, 1024, 2048, True, 132).split_k == 1  # 16 steps: under 32 a split
    # launch-bound (under 4 MiB moved: 16·8192 + 64·8192 + 2·16·64 bytes): no workspace, though
    # the cost model alone would split its 64 k-steps in 2 (tensor-wise: the swap-AB decode
    # tile; block-wise: 64×64)
    assert rule_fp8(16, 64, 8192, True, 132) == KC(64, 16, 128, schedule="pingpong", swap_ab=True)
    assert rule_fp8(16, 64, 8192, True, 132, "block") == KC(64, 64, 128, schedule="pingpong")
    assert rule_fp8(16, 64, 65536, True, 132).split_k > 1  # 5.2 MB: splits
    assert rule_fp8(16, 64, 65536, True, 132, "block").split_k > 1


def test_splits_that_run():
    """K not a multiple of split·128: every split gets ⌈steps / split⌉ steps, so fewer may run."""
    assert fp8_splits(65536, KC(128, 128, 128, split_k=8)) == 8
    assert fp8_splits(128 * 10, KC(128, 128, 128, split_k=4)) == 4  # 3 + 3 + 3 + 1 steps
    assert fp8_splits(128 * 10, KC(128, 128, 128, split_k=8)) == 5  # 2 steps each
    assert fp8_splits(100, KC(128, 128, 128, split_k=4)) == 1


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["fp8-tensor-splitk", "fp8-row-splitk-gelu", "fp8-tensor-fast-splitk",
                                    "fp8-block-splitk", "fp8-block-1x128-splitk", "fp8-block-pingpong-splitk"])
def test_split_kernel_compile_facts(kernel):
    c = cc.compile_kernel(kernel, "sm_90a")
    f, ptx = c.facts(), c.asm["ptx"]
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"
    assert 0 < f.shared_bytes <= SMEM_LIMIT and f.warps == 12
    assert len(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.f32\.e4m3\.e4m3", ptx))) == 1
    assert f.counts["UTMASTG"] == 0, "the split epilogue stores through pointers, no TMA store"
    assert "atom.global" in ptx and "acq_rel" in ptx, "arrival counters (release by the splits, acquire by the last)"
    tma_loads = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global", ptx))
    assert tma_loads == (4 if kernel.startswith("fp8-block") else 2), tma_loads
    waits = set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx))
    # promoted, on ping-pong and 64-column cooperative tiles: the next K block's wgmma in flight
    # (wait(1)); other promoted cooperative tiles: none
    config = fp8_launch.OFFLINE_FP8_VARIANTS[kernel][2]
    paired = config.schedule == "pingpong" or config.block_n <= 64
    assert waits == ({"0", "1"} if "fast" in kernel or paired else {"0"}), waits


@pytest.mark.parametrize("mode, swap", [("tensor", False), ("row", False), ("block", False), ("block1x128", False),
                                        ("tensor", True), ("row", True), ("tensor", "staged"), ("row", "staged")])
@pytest.mark.parametrize("split_k", [1, 4])
def test_plan_pointers_follow_the_kernel_slots(monkeypatch, mode, swap, split_k):
    """The direct launch binds base addresses by position to the kernel's leading descriptors
    and pointers (runtime.launcher.bind_jit_args): Fp8Plan.run's pointers must be those
    of the arguments prepare gives that kernel, in order, split (workspace, counters) or not.
    Swap-AB: W, a, ..., scale_b, scale_a; ping-pong's through the split kernel (empty workspace
    and counters with one split), an unsplit cooperative one (`staged`) through fp8_gemm's
    transposed TMA store."""
    import torch

    from fake_launcher import pointer_slots

    M, N, K = 200, 256, 4096
    scaling, sb_cols = ("block", 1 if mode == "block1x128" else 128) if mode.startswith("block") else (mode, 128)
    a = torch.empty(M, K, dtype=torch.float8_e4m3fn)
    w = torch.empty(N, K, dtype=torch.float8_e4m3fn)
    if scaling == "tensor":
        sa, sb = torch.ones(()), torch.ones(())
    elif scaling == "row":
        sa, sb = torch.ones(M, 1), torch.ones(N, 3).t()[:1]  # sb a strided (1, N) view
    else:
        sa = torch.ones(K // 128, M).t()
        sb = torch.ones(N // 128, K // 128).t() if sb_cols == 128 else torch.ones(K // 128, N)
    bias = torch.ones(N, dtype=torch.bfloat16)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    if swap == "staged":
        config = KC(128, 144, 128, swap_ab=True) if split_k == 1 else KC(128, 32, 128, split_k=split_k, swap_ab=True)
    else:
        config = KC(64 if swap else 128, 16 if swap else 128, 128, schedule="pingpong" if swap else "cooperative",
                    split_k=split_k, swap_ab=swap)
    split = fp8_launch.fp8_splits(K, config) > 1
    staged = swap == "staged" and not split
    plan = fp8_launch.Fp8Plan(0, scaling, sb_cols, True, config, "none",
                              *((fp8_launch.workspace_shape(M, N, K, config),
                                 fp8_launch.counter_count(M, N, config)) if split else ()), sms=132)
    calls = []
    monkeypatch.setattr(plan, "launch", lambda device, ptrs, dyn, prep, *inputs: calls.append((ptrs, prep, inputs)),
                        raising=False)
    plan.run(a, w.t(), out, EpilogueArgs(bias=bias, scale_a=sa, scale_b=sb))
    (ptrs, prep, inputs), = calls
    kernel, args, kwargs, grid = prep(*inputs)
    pointer_kernel = split or (swap and not staged)
    assert kernel is (fp8_launch.fp8_split_gemm if pointer_kernel else fp8_launch.fp8_gemm)
    slots = pointer_slots(kernel, args)
    assert tuple(slots) == tuple(ptrs), (slots, ptrs)
    assert len(slots) == (8 if pointer_kernel else 6)
    operands = (w, a) if swap else (a, w)
    scales = (sb, sa) if swap else (sa, sb)
    assert (slots[0], slots[1]) == tuple(t.data_ptr() for t in operands)
    if not scaling == "block":
        assert (slots[-2], slots[-1]) == tuple(t.data_ptr() for t in scales)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [k for k, v in fp8_launch.OFFLINE_FP8_VARIANTS.items() if v[2].stream_k])
def test_stream_kernel_compile_facts(kernel):
    """FP8 stream-K: whole tiles through the TMA epilogue, shared ones through the arrival
    counters; spills bounded, the shared memory the derived budget."""
    c = cc.compile_kernel(kernel, "sm_90a")
    f = c.facts()
    allowed = {"fp8-tensor-fast-streamk": 8}.get(kernel, 0)  # 128×256: loop-invariant values, outside the K loop
    assert f.spill_bytes <= allowed, "local-memory spills"
    assert 0 < f.shared_bytes <= SMEM_LIMIT and f.warps == 12
    assert f.counts["UTMASTG"] > 0, "whole tiles: the TMA store"
    assert f.counts["atom_acq_rel"] > 0, "arrival counting: a release-acquire add"
    scaling, promote, config, sb_cols, _ = fp8_launch.OFFLINE_FP8_VARIANTS[kernel]
    d = fp8_launch.check_fp8_config(config, promote, 2, fp8_launch.scale_boxes(scaling, sb_cols, config))
    assert d.shared_bytes - 1024 <= f.shared_bytes <= d.shared_bytes + sum(fp8_launch.scale_boxes(
        scaling, sb_cols, config)) * d.stages
