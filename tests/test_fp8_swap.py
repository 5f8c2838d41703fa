"""FP8 swap-AB on the CPU (the GPU side: test_fp8_swap_gpu.py): which configs the FP8 check
takes and refuses, the launch's arguments (operands, sizes and scales exchanged: the kernel
computes Cᵀ = W·Aᵀ), the rule's picks (unchanged: swap-AB is an explicit
config until measured) and the swap kernels' offline compile facts. The plan's pointers under
swap-AB: test_fp8_splitk.test_plan_pointers_follow_the_kernel_slots."""

import re

import pytest
import torch
import triton

import pingpong
from pingpong.errors import ConfigError
from pingpong.hopper.host import fp8_launch
from pingpong import toolchain
from pingpong.hopper.host.config import SMEM_LIMIT, column_pieces
from pingpong.hopper.host.fp8_launch import check_fp8_config, scale_boxes, select_fp8
from pingpong.runtime import compile as cc
from pingpong.runtime.launcher import flat_arguments
from pingpong.runtime.spec import EpilogueArgs

KC = pingpong.KernelConfig

SWAPS = [KC(64, 16, 128, schedule="pingpong", swap_ab=True), KC(64, 32, 128, schedule="pingpong", swap_ab=True),
         KC(128, 16, 128, swap_ab=True), KC(128, 32, 128, swap_ab=True),
         KC(64, 16, 128, schedule="pingpong", split_k=4, swap_ab=True), KC(128, 32, 128, split_k=2, swap_ab=True)]


@pytest.mark.parametrize("config", SWAPS)
@pytest.mark.parametrize("scaling", ["tensor", "row"])
@pytest.mark.parametrize("promote", [True, False])
@pytest.mark.parametrize("out_bytes", [2, 4])
def test_swap_configs_are_accepted_for_tensor_and_row_scales(config, scaling, promote, out_bytes):
    d = check_fp8_config(config, promote, out_bytes, scale_boxes(scaling, 128, config))
    assert d.swap_ab and d.shared_bytes <= SMEM_LIMIT
    if config.schedule == "cooperative" and config.split_k == 1:  # fp8_gemm's TMA store, staged transposed
        assert d.staged_swap and not d.workspace and d.epilogue_bufs > 0
    else:
        assert d.workspace and d.epilogue_bufs == 0, "the split kernel stores through pointers: no TMA staging"


@pytest.mark.parametrize("sb_cols", [128, 1])
@pytest.mark.parametrize("config", [KC(64, 32, 128, schedule="pingpong", swap_ab=True),
                                    KC(128, 128, 128, swap_ab=True)])
def test_swap_with_block_scales_is_refused_with_the_reason(config, sb_cols):
    with pytest.raises(ConfigError, match=r"swap-AB with block-wise scales is not built: the swapped tile's rows"
                                          r" are N.*use swap_ab=False"):
        check_fp8_config(config, True, 2, scale_boxes("block", sb_cols, config))


@pytest.mark.parametrize("config, match", [
    (KC(64, 16, 128, schedule="persistent", swap_ab=True), "warp-specialized"),
    (KC(64, 16, 64, schedule="pingpong", swap_ab=True), "block_k=64"),
    (KC(64, 16, 128, schedule="pingpong", swap_ab=True, cluster_m=2), "cluster_m=2"),
])
def test_other_swap_refusals(config, match):
    with pytest.raises(ConfigError, match=match):
        check_fp8_config(config, True, 2)


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_decode_takes_swap_ab_unsplit(scaling):
    """The measured decode shapes (H100, run 227: swap-AB ping-pong won every one, split 2 lost
    9 of 10) take swap-AB, 16 columns up to 16 rows and 32 up to 32, unsplit."""
    for M, N, K in [(1, 4096, 4096), (16, 6144, 4096), (1, 4096, 14336), (16, 28672, 4096), (32, 8192, 8192)]:
        for promote in (True, False):
            c = select_fp8(M, N, K, promote, 132, scaling=scaling)
            assert c == KC(64, 16 if M <= 16 else 32, 128, schedule="pingpong", swap_ab=True), (M, N, K, c)


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_decode_takes_one_wave_of_128_row_tiles_where_64_row_ones_take_a_thin_second(scaling):
    """select.decode_tile's thin second wave (H200: 32×10240×8192 tensor-wise 0.877 -> 0.958 of
    torch._scaled_mm, 8×9216×3072 0.881 -> 0.951)."""
    for M, N, K in [(32, 10240, 8192), (8, 9216, 3072), (1, 12608, 4096)]:
        c = select_fp8(M, N, K, True, 132, scaling=scaling)
        assert c == KC(128, 16 if M <= 16 else 32, 128, schedule="cooperative", swap_ab=True), (M, N, K, c)
    assert select_fp8(32, 8448, 4096, True, 132, scaling=scaling).block_m == 64  # 132 tiles of 64 rows
    assert select_fp8(7, 16384, 3072, True, 132, scaling=scaling).block_m == 64  # 256: 0.983 vs 1.006


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_33_to_64_rows_take_one_wave_of_128_row_tiles_where_64x64_takes_a_thin_second(scaling):
    """fp8_select's _SWAP_WAVE (H200: 62×9216×7168 tensor-wise 0.823 -> 0.974 of
    torch._scaled_mm, 40×10240×8192 0.814 -> 0.971): 64×64 tiles in a second wave under half
    full, 128-row ones of N in one; not where 64×64 fits a wave, nor where 64×128 tiles fill 3/4
    of one, nor block-wise."""
    for M, N, K in [(62, 9216, 7168), (40, 10240, 8192), (36, 12288, 4096), (40, 10240, 65536)]:  # unsplit
        assert select_fp8(M, N, K, True, 132, scaling=scaling) == KC(128, 64, 128, swap_ab=True), (M, N, K)
    assert not select_fp8(62, 8448, 4096, True, 132, scaling=scaling).swap_ab  # 132 tiles of 64×64
    assert select_fp8(44, 16384, 2048, True, 132, scaling=scaling) == KC(64, 128, 128, schedule="pingpong")
    assert not select_fp8(62, 9216, 7168, True, 132, scaling="block").swap_ab


def test_no_swap_ab_for_block_scales_more_rows_or_few_tiles():
    assert not select_fp8(16, 6144, 4096, True, 132, scaling="block").swap_ab  # block scales cannot swap
    assert not select_fp8(33, 8192, 8192, True, 132, scaling="row").swap_ab  # past DECODE_M


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_decode_with_few_tiles_of_n_swaps_and_splits_k(scaling):
    """Under S/4 64-row tiles of N (H100 run 328: swap-AB won all 6 measured), the swap-AB tile
    with the cost model's split count: 1×1024×65536 is 16 tiles and 512 k-steps, and 8 splits
    (128 units, one wave of 64 + 4 steps) beat 1 (516) and 16 (two waves of 32 + 4: 72);
    2×2048×10944 is 32 tiles of 86 steps, at most 2 splits of ≥ 32 (47 against 90); 16×64×8192
    moves under 4 MiB (16·8192 + 64·8192 + 2·16·64 bytes): launch-bound, unsplit."""
    pp = dict(schedule="pingpong", swap_ab=True)
    assert select_fp8(1, 1024, 65536, True, 132, scaling=scaling) == KC(64, 16, 128, split_k=8, **pp)
    assert select_fp8(2, 2048, 10944, True, 132, scaling=scaling) == KC(64, 16, 128, split_k=2, **pp)
    assert select_fp8(32, 1024, 4096, True, 132, scaling=scaling) == KC(64, 32, 128, **pp)  # 16 tiles, 32 steps
    assert select_fp8(16, 64, 8192, True, 132, scaling=scaling) == KC(64, 16, 128, **pp)  # launch-bound
    assert not select_fp8(1, 1024, 65536, True, 132, scaling="block").swap_ab


def _inputs(M, N, K, scaling):
    """Operands, and scales that are views with distinct strides (a transposed or unexchanged
    stride cannot pass for the right one)."""
    a = torch.empty(M, K, dtype=torch.float8_e4m3fn)
    w = torch.empty(N, K, dtype=torch.float8_e4m3fn)
    if scaling == "tensor":
        sa, sb = torch.ones(()), torch.ones(())
    else:
        sa = torch.ones(M, 3)[:, :1]  # (M, 1), stride(0) = 3
        sb = torch.ones(N, 7).t()[:1]  # (1, N), stride(1) = 7
    return a, w, sa, sb


@pytest.mark.parametrize("scaling", ["tensor", "row"])
@pytest.mark.parametrize("split_k", [1, 4])
def test_swap_launch_exchanges_operands_sizes_and_scales(scaling, split_k):
    """The kernel's product is N × M: its A box rows are W's, its B box rows a's; its sa (one per
    row) is scale_b with scale_b's column stride, its sb (one per column) scale_a with scale_a's
    row stride; the caller's per-column bias is per row; the store is transposed (SWAP)."""
    M, N, K = 7, 320, 4096
    a, w, sa, sb = _inputs(M, N, K, scaling)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    bias = torch.ones(N, dtype=torch.bfloat16)
    config = KC(64, 16, 128, schedule="pingpong", split_k=split_k, swap_ab=True)
    ws = torch.empty(fp8_launch.workspace_shape(M, N, K, config), dtype=torch.float32)
    counters = torch.zeros(fp8_launch.counter_count(M, N, config), dtype=torch.int32)
    kernel, args, kwargs, grid = fp8_launch.prepare(a, w, out, EpilogueArgs(bias=bias, scale_a=sa, scale_b=sb), scaling,
                                                    True, 128, config, 132, "relu", ws, counters)
    assert kernel is fp8_launch.fp8_split_gemm
    got = dict(zip(*flat_arguments(kernel, args)))  # the epilogue operands as ops.<field>
    same = lambda t, u: (t.data_ptr(), t.shape, t.stride()) == (u.data_ptr(), u.shape, u.stride())  # noqa: E731
    assert same(got["a_desc"].base, w) and got["a_desc"].block_shape == [64, 128]
    assert same(got["b_desc"].base, a) and got["b_desc"].block_shape == [16, 128]
    assert (got["M"], got["N"], got["K"]) == (N, M, K)
    assert got["ops.sa"].data_ptr() == sb.data_ptr() and got["ops.sb"].data_ptr() == sa.data_ptr()
    if scaling == "row":
        assert (got["sa_row"], got["sb_col"]) == (7, 3)
    assert got["ops.out"] is out and got["out_ld"] == N
    assert got["splits"] == split_k
    epi = kwargs["CFG"].EPI
    assert epi.SWAP and epi.BIAS == "row" and epi.ACTIVATION == "relu"
    assert grid == (min(132, -(-N // 64) * -(-M // 16) * split_k),)


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_staged_swap_launch_stores_transposed_boxes(scaling):
    """An unsplit cooperative swap-AB tile (config.staged_swap; here the two-piece 128×144) runs
    fp8_gemm, not the split kernel: operands, sizes and scales exchanged as there, the caller's
    per-column bias per row of the kernel's product, and out's TMA box a sub-tile's transpose,
    epilogue_n rows of out by one consumer's 64 columns, written transposed (SWAP)."""
    M, N, K = 300, 1024, 4096
    a, w, sa, sb = _inputs(M, N, K, scaling)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    bias = torch.ones(N, dtype=torch.bfloat16)
    config = KC(128, 144, 128, swap_ab=True)
    kernel, args, kwargs, grid = fp8_launch.prepare(a, w, out, EpilogueArgs(bias=bias, scale_a=sa, scale_b=sb), scaling,
                                                    True, 128, config, 132, "relu")
    assert kernel is fp8_launch.fp8_gemm
    got = dict(zip(*flat_arguments(kernel, args)))
    assert got["a_desc"].base.data_ptr() == w.data_ptr() and got["b_desc"].base.data_ptr() == a.data_ptr()
    assert (got["M"], got["N"], got["K"]) == (N, M, K)
    assert got["ops.sa"].data_ptr() == sb.data_ptr() and got["ops.sb"].data_ptr() == sa.data_ptr()
    if scaling == "row":
        assert (got["sa_row"], got["sb_col"]) == (7, 3)
    d = check_fp8_config(config, True, 2)
    assert got["ops.out"].base is out and list(got["ops.out"].block_shape) == [d.epilogue_n, d.consumer_m]
    epi = kwargs["CFG"].EPI
    assert epi.SWAP and epi.BIAS == "row" and epi.BUFS == d.epilogue_bufs > 0
    assert grid == (-(-N // 128) * -(-M // 144),)


def test_without_swap_the_scales_stay():
    """The control: the same call unswapped runs the TMA kernel on the caller's order."""
    M, N, K = 7, 320, 4096
    a, w, sa, sb = _inputs(M, N, K, "row")
    out = torch.empty(M, N, dtype=torch.bfloat16)
    kernel, args, kwargs, _ = fp8_launch.prepare(a, w, out, EpilogueArgs(scale_a=sa, scale_b=sb), "row", True, 128,
                                                 KC(64, 64, 128, schedule="pingpong"), 132)
    got = dict(zip(*flat_arguments(kernel, args)))  # the epilogue operands as ops.<field>
    assert kernel is fp8_launch.fp8_gemm and got["a_desc"].base is a and (got["M"], got["N"]) == (M, N)
    assert (got["sa_row"], got["sb_col"]) == (3, 7) and not kwargs["CFG"].EPI.SWAP


#: kernel -> its wgmma widths (M on the N side) and its TMA loads per k-step (W; a as one box,
#: or two-piece: 128/P2 boxes of P2 columns, then one)
SWAP_KERNELS = {"fp8-tensor-swap": ({16}, 2), "fp8-row-swap-gelu": ({32}, 2), "fp8-tensor-fast-swap": ({16}, 2),
                "fp8-row-swap-coop": ({32}, 2), "fp8-row-swap-splitk": ({16}, 2), "fp8-tensor-swap-144": ({128, 16}, 10),
                "fp8-row-swap-160": ({128, 32}, 6), "fp8-row-swap-coop-192": ({128, 64}, 4),
                "fp8-tensor-swap-coop-64": ({64}, 2)}
#: Triton 3.9 (CUDA 13's ptxas) keeps four loop-invariant values of the tensor-wise 64×144
#: swapped kernel in local memory: stored at the start, reloaded once per tile, outside the K
#: loop (read off the SASS); the 16-bit swapped 64×160's are larger (tests/test_splitk.py)
SWAP_SPILLS = {("fp8-tensor-swap-144", "3.9"): 16}


@pytest.mark.slow
@pytest.mark.parametrize("kernel", sorted(SWAP_KERNELS))
def test_swap_kernel_compile_facts(kernel):
    c = cc.compile_kernel(kernel, "sm_90a")
    f, ptx = c.facts(), c.asm["ptx"]
    widths, loads = SWAP_KERNELS[kernel]
    allowed = SWAP_SPILLS.get((kernel, toolchain.minor(triton.__version__)), 0)
    assert f.spill_bytes <= allowed and (allowed or f.counts["LDL/STL"] == 0), "local-memory spills"
    assert 0 < f.shared_bytes <= SMEM_LIMIT and f.warps == 12
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k32\.f32\.e4m3\.e4m3", ptx))
    assert shapes == {str(w) for w in widths}, shapes  # M on the wgmma's N side
    config = fp8_launch.OFFLINE_FP8_VARIANTS[kernel][2]
    if config.schedule == "cooperative" and config.split_k == 1:  # config.staged_swap: a transposed stmatrix
        assert f.counts["UTMASTG"] > 0 and "STSM.16.MT88" in c.isa, "staged: the sub-tile's transpose, TMA-stored"
    else:
        assert f.counts["UTMASTG"] == 0, "the transposed tile goes out through pointers, no TMA store"
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global", ptx)) == loads
    waits = set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx))
    # promoted, on ping-pong and 64-column cooperative tiles: the next K block's wgmma in flight
    # (wait(1)); other promoted cooperative tiles: none
    # (two-piece tiles: wait(0) only, one set of parts: fp8_gemm.promoted_pieces)
    paired = (config.schedule == "pingpong" or config.block_n <= 64) and len(column_pieces(config.block_n)) == 1
    assert waits == ({"0", "1"} if "fast" in kernel or paired else {"0"}), waits
    if "tensor" in kernel:  # each consumer loads sa and sb once, before its K loop, not again at its tail
        assert len(re.findall(r"^\s*ld\.global\.b32 ", ptx, re.M)) == 2 * 2
