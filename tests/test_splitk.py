"""Split-K / swap-AB on the CPU: the work decomposition covers every (tile, k-step) exactly
once, the configs validate, and every new kernel variant compiles offline for sm_90a with
the facts its design promises."""

import functools
import itertools

import pytest

from pingpong import ConfigError, KernelConfig
from pingpong import compile as cc
from pingpong.config import SCHEDULE_FACTS, SMEM_LIMIT
from pingpong.hopper.launch import OFFLINE_SPLIT_VARIANTS, prepare_split, workspace_shape
from pingpong.hopper.scheduler import effective_splits, split_work, tile_coords, tiles_of_program


def cdiv(a, b):
    return -(-a // b)


@pytest.mark.parametrize("k_steps, split_k", list(itertools.product((1, 2, 3, 10, 17, 64, 1024), (1, 2, 3, 4, 8, 64))))
def test_effective_splits_leave_no_split_empty(k_steps, split_k):
    splits = effective_splits(k_steps * 64, 64, split_k)
    per = cdiv(k_steps, splits)  # what the kernel's SplitKScheduler computes
    assert 1 <= splits <= min(split_k, k_steps)
    assert (splits - 1) * per < k_steps <= splits * per, "the last split has k-steps, none is left over"


@pytest.mark.parametrize("pid_m, pid_n, splits, programs",
                         [(1, 1, 8, 132), (4, 4, 8, 132), (3, 5, 4, 7), (64, 1, 2, 132)])
def test_split_units_cover_each_tile_and_split_once(pid_m, pid_n, splits, programs):
    tiles = pid_m * pid_n
    seen = []
    for pid in range(programs):
        for t in range(tiles_of_program.fn(tiles * splits, pid, programs)):
            tile, split = split_work.fn(pid + t * programs, tiles)
            seen.append((tile_coords.fn(tile, pid_m, pid_n, 8), split))
    assert sorted(seen) == sorted(((m, n), s) for m in range(pid_m) for n in range(pid_n) for s in range(splits))


def test_workspace_rows_per_split_are_whole_tiles():
    cfg = KernelConfig(128, 128, 64, split_k=8)
    assert workspace_shape(500, 1001, 65536, cfg) == (8 * 512, 1004)  # 4 row tiles per split; rows of 16 bytes
    swap = KernelConfig(128, 16, 64, split_k=2, swap_ab=True)
    assert workspace_shape(3, 4097, 8192, swap) == (2 * 4224, 4)  # Cᵀ: N on the rows


def test_split_configs_store_fp32_partials():
    d = KernelConfig(128, 16, 64, swap_ab=True).derive(out_bytes=2)
    assert d.workspace and d.epilogue_bytes == 2 * 64 * 16 * 4  # fp32 staging whatever the output type
    assert KernelConfig(128, 128, 64, split_k=4).derive().releasers == SCHEDULE_FACTS["cooperative"].releasers


@pytest.mark.parametrize("kwargs, needle", [
    (dict(split_k=0), "split_k must be an int in 1..64"),
    (dict(split_k=65), "split_k must be an int in 1..64"),
    (dict(split_k=True), "split_k must be an int"),
    (dict(swap_ab=1), "swap_ab must be a bool"),
    (dict(split_k=2, schedule="persistent"), "warp-specialized"),
    (dict(swap_ab=True, schedule="persistent"), "warp-specialized"),
    (dict(block_m=64, block_n=16, swap_ab=True), "multiple of the wgmma M"),  # cooperative halves 64 rows
])
def test_validate_names_split_constraints(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        KernelConfig(**kwargs).validate()


@pytest.mark.parametrize("block_n", [16, 32, 64])
def test_small_tiles_validate(block_n):
    for schedule, block_m in (("cooperative", 128), ("pingpong", 64), ("pingpong", 128)):
        KernelConfig(block_m, block_n, 64, schedule=schedule, swap_ab=True).validate()


@functools.lru_cache(maxsize=None)
def facts(kernel):
    return cc.compile_kernel(kernel, "sm_90a").facts()


GEMM_VARIANTS = [name for name, v in OFFLINE_SPLIT_VARIANTS.items() if v[2] == 0]
REDUCE_VARIANTS = [name for name, v in OFFLINE_SPLIT_VARIANTS.items() if v[2] == 1]


@pytest.mark.parametrize("kernel", GEMM_VARIANTS)
def test_split_gemm_variants_compile_with_their_facts(kernel):
    f = facts(kernel)
    assert f.counts["HGMMA"] > 0 and f.counts["wgmma"] > 0, "tensor-core wgmma missing"
    assert f.counts["UTMALDG"] > 0 and f.counts["UTMASTG"] > 0, "TMA loads / TMA-store of the partials missing"
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"
    assert 0 < f.shared_bytes <= SMEM_LIMIT
    config = OFFLINE_SPLIT_VARIANTS[kernel][0]
    assert f.shared_bytes >= config.derive().shared_bytes - 1024, "the derived shared memory is what the kernel uses"
    assert f.counts["setmaxnreg"] > 0 and f.warps == 12, "producer warp + two consumer warpgroups"


@pytest.mark.parametrize("kernel", REDUCE_VARIANTS)
def test_reduction_compiles_without_spills(kernel):
    f = facts(kernel)
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0
    assert f.counts["HGMMA"] == 0 and f.shared_bytes <= SMEM_LIMIT


@pytest.mark.parametrize("layout", ["nn", "tn", "tt"])
def test_swap_ab_compiles_for_every_operand_layout(layout):
    """Swap-AB turns A into the kernel's B: the MN-major (transposed) operand paths compile too."""
    import torch

    from pingpong.hopper.launch import prepare_split

    M, N, K = 64, 1024, 1024
    config = KernelConfig(128, 32, 64, split_k=2, swap_ab=True)
    store = lambda r, c, t: (torch.empty(c, r).t() if t else torch.empty(r, c)).to(torch.bfloat16)  # noqa: E731
    a, b = store(M, K, layout[0] == "t"), store(K, N, layout[1] == "t")
    out = torch.empty(M, N, dtype=torch.bfloat16)
    ws = torch.empty(workspace_shape(M, N, K, config), dtype=torch.float32)
    with cc.offline("sm_90a"):
        kernel, args, kwargs, grid = prepare_split(a, b, out, None, 1.0, 0.0, config, 132, ws)[0]
        assert kwargs["A_KMAJOR"] == (layout[1] == "t") and kwargs["B_KMAJOR"] == (layout[0] == "n")
        ck = kernel.warmup(*args, grid=grid, **kwargs)
    assert "wgmma.mma_async" in ck.asm["ptx"] and ck.metadata.shared <= SMEM_LIMIT


# ----------------------------------------------------------------------------- the plan


@pytest.fixture
def launches(monkeypatch):
    """Plans built as on a Hopper GPU; each CachedLaunch call is recorded, not run."""
    from pingpong import plan

    monkeypatch.setattr(plan, "is_hopper", lambda device: True)
    monkeypatch.setattr("pingpong.device.sm_count", lambda device: 132)
    calls = []
    monkeypatch.setattr(plan.CachedLaunch, "__call__",
                        lambda self, device, ptrs, dyn, prep, *inputs: calls.append((self, ptrs, dyn, prep, inputs)))
    return calls


def _bf16(*shape):
    import torch

    return torch.randn(*shape).to(torch.bfloat16)


@pytest.mark.parametrize("case", ["decode nt", "decode nn odd N", "large K", "in place, column-major c"])
def test_split_plan_launches_gemm_then_reduction_on_the_right_pointers(launches, case):
    """The plan's per-call pointers are the bases of the very descriptors / tensors the JIT
    launch was prepared with (swap-AB: the kernel's A is b), so a direct launch reads and
    writes what the JIT launch did."""
    import torch

    from pingpong import plan

    a, b, c, inplace, beta = {
        "decode nt": lambda: (_bf16(16, 1024), _bf16(4096, 1024).t(), None, False, 0.0),
        "decode nn odd N": lambda: (_bf16(3, 1024), _bf16(1024, 4095), None, False, 0.0),
        "large K": lambda: (_bf16(256, 8192), _bf16(256, 8192).t(), _bf16(256, 256), False, 0.5),
        "in place, column-major c": lambda: (_bf16(16, 1024), _bf16(4096, 1024).t(), _bf16(4096, 16).t(), True, 1.0),
    }[case]()
    p = plan.build(a, b, c, beta, torch.bfloat16, inplace, None)
    assert isinstance(p, plan.SplitPlan) and (p.config.swap_ab or p.config.split_k > 1)
    out = c if inplace else torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16)
    p.run(a, b, out, c, 1.0, beta)
    (gemm, gptrs, gdyn, gprep, ginputs), (red, rptrs, rdyn, rprep, rinputs) = launches
    assert gemm is p.launch and red is p.reduce and gdyn == () and rdyn == (1.0, beta)
    # b with 4095-element rows and a column-major c need aligned copies; the output never
    # does (the reduction writes through pointers), unless in place on a column-major c
    assert p.path == ("hopper-padded" if case in ("decode nn odd N", "in place, column-major c") else "hopper")
    with cc.offline("sm_90a"):
        fn, args, kwargs, grid = gprep(*ginputs)
        assert [d.base.data_ptr() for d in args[:4]] == list(gptrs)
        assert kwargs["SPLIT_K"] and grid[0] <= 132
        fn, args, kwargs, grid = rprep(*rinputs)
        assert [t.data_ptr() for t in args[:3]] == list(rptrs)
        assert kwargs["SWAP"] == p.config.swap_ab and kwargs["HAS_C"] == (c is not None and beta != 0)
    ws = ginputs[6]
    assert tuple(ws.shape) == workspace_shape(a.shape[0], b.shape[1], a.shape[1], p.config)
    first = ginputs[1] if p.config.swap_ab else ginputs[0]
    assert gptrs[0] == first.data_ptr() and gptrs[2] == gptrs[3] == ws.data_ptr()


# ----------------------------------------------------------------------------- host geometry, simulated


def _simulate(a, b, out, c, alpha, beta, config):
    """Run prepare_split's two launches as a CPU model of the kernels: every program's work
    units (SplitKScheduler: split-major units, k-steps [split·S, (split+1)·S), TMA zero fill
    outside the operands, partial stored at row split·num_pid_m·BM + off_m and clipped to
    the descriptor), then the reduction's pointer arithmetic on the flat workspace."""
    import torch

    ws = torch.full(workspace_shape(a.shape[0], b.shape[1], a.shape[1], config), float("nan"))
    (fn, args, kw, grid), (_, rargs, rkw, rgrid) = prepare_split(a, b, out, c, alpha, beta, config, 132, ws)
    a_desc, b_desc, c_desc = args[:3]
    M, N, K = args[4:7]
    BM, BN, BK, splits = kw["BM"], kw["BN"], kw["BK"], kw["splits"]
    A = (a_desc.base if kw["A_KMAJOR"] else a_desc.base.t()).float()  # (M, K) as the kernel sees it
    B = (b_desc.base.t() if kw["B_KMAJOR"] else b_desc.base).float()  # (K, N)
    target = c_desc.base  # the workspace view the epilogue stores into
    pid_m, pid_n = cdiv(M, BM), cdiv(N, BN)
    tiles, per = pid_m * pid_n, cdiv(cdiv(K, BK), splits)
    for p in range(grid[0]):
        for t in range(tiles_of_program.fn(tiles * splits, p, grid[0])):
            tile, split = split_work.fn(p + t * grid[0], tiles)
            tm, tn = tile_coords.fn(tile, pid_m, pid_n, kw["GROUP_M"])
            k0, k1 = split * per * BK, (split + 1) * per * BK
            part = A[tm * BM:(tm + 1) * BM, k0:k1] @ B[k0:k1, tn * BN:(tn + 1) * BN]
            row = split * pid_m * BM + tm * BM
            rows = min(BM, target.shape[0] - row, part.shape[0])
            cols = min(BN, target.shape[1] - tn * BN)
            target[row:row + rows, tn * BN:tn * BN + cols] = part[:rows, :cols]
    ws_flat, c_t, out_t, m, n, s, split_stride, ws_ld, c_ld, out_ld, al, be = rargs
    i = torch.arange(m).view(-1, 1)
    j = torch.arange(n).view(1, -1)
    offs = j * ws_ld + i if rkw["SWAP"] else i * ws_ld + j
    acc = sum(ws_flat.view(-1)[split * split_stride + offs] for split in range(s))
    acc = al * acc
    if rkw["HAS_C"]:
        acc = acc + be * torch.as_strided(c_t, (m, n), (c_ld, 1)).float()
    torch.as_strided(out_t, (m, n), (out_ld, 1)).copy_(acc)
    return out


MODELLED = [KernelConfig(128, 128, 64, split_k=3),
            KernelConfig(64, 64, 64, schedule="pingpong", split_k=5, swap_ab=True),
            KernelConfig(128, 16, 64, split_k=2, swap_ab=True)]


@pytest.mark.parametrize("config", MODELLED, ids=lambda c: f"{c.block_m}x{c.block_n}-s{c.split_k}-swap{int(c.swap_ab)}")
@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("M, N, K", [(1, 200, 1000), (17, 255, 1000), (130, 72, 520), (40, 1000, 64)])
def test_split_geometry_reproduces_the_product(config, layout, M, N, K):
    """Workspace shape, split rows, strides and the swap transposition agree end to end: a
    CPU model of both kernels on prepare_split's own arguments gives α·a@b + β·c."""
    import torch

    from pingpong.plan import tma_copy, tma_orientation

    torch.manual_seed(0)
    store = lambda r, c_, t: (torch.randn(c_, r).t() if t else torch.randn(r, c_)).to(torch.bfloat16)  # noqa: E731
    a, b = store(M, K, layout[0] == "t"), store(K, N, layout[1] == "t")
    a, b = (x if tma_orientation(x) else tma_copy(x) for x in (a, b))  # as the plan does
    c = torch.randn(M, N)
    out = torch.full((M, N), float("nan"))
    _simulate(a, b, out, c, 1.5, -0.5, config)
    torch.testing.assert_close(out, 1.5 * a.float() @ b.float() - 0.5 * c, rtol=1e-4, atol=1e-3)
