"""Split-K / swap-AB on the CPU: the work decomposition covers every (tile, k-step) exactly
once, the configs validate, and every new kernel variant compiles offline for sm_90a with
the facts its design promises."""

import functools
import itertools
import re

import pytest
import triton

from pingpong import ConfigError, KernelConfig
from pingpong.runtime import compile as cc
from pingpong.runtime.spec import EpilogueArgs
from pingpong.runtime.launcher import flat_arguments
from pingpong import toolchain
from pingpong.hopper.host.config import SCHEDULE_FACTS, SMEM_LIMIT
from pingpong.hopper.host.launch import OFFLINE_SPLIT_VARIANTS, counter_count, prepare_split, workspace_shape
from pingpong.hopper.host.splits import effective_splits
from pingpong.hopper.device.scheduler import split_work, tile_coords, tiles_of_program


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


def test_split_configs_take_no_epilogue_staging():
    """The pointer epilogue stages nothing, split swap-AB's and ping-pong's swap-AB included (they
    store from the accumulator's registers): the ring takes the shared memory. An unsplit
    cooperative swap-AB config, 16-bit or FP8, runs the one-kernel path, its sub-tiles staged
    transposed."""
    for d in (KernelConfig(128, 16, 64, split_k=2, swap_ab=True).derive(out_bytes=2),
              KernelConfig(64, 16, 64, schedule="pingpong", swap_ab=True).derive(out_bytes=2),
              KernelConfig(64, 16, 128, schedule="pingpong", swap_ab=True).derive(in_bytes=1, out_bytes=2)):
        assert d.workspace and d.epilogue_bytes == 0 and not d.staged_swap
    for staged in (KernelConfig(128, 144, 64, swap_ab=True).derive(out_bytes=2),
                   KernelConfig(128, 16, 128, swap_ab=True).derive(in_bytes=1, out_bytes=2)):
        assert staged.staged_swap and not staged.workspace and staged.epilogue_bytes > 0
    split = KernelConfig(128, 128, 64, split_k=4).derive()
    assert split.epilogue_bytes == 0 and split.stages > KernelConfig(128, 128, 64).derive().stages - 1
    assert split.releasers == SCHEDULE_FACTS["cooperative"].releasers


def test_counters_cover_every_16_rows_of_tiles():
    """One arrival counter per 16 rows of tiles and column of tiles: a tile half's is its first
    row's, which a moved last row of tiles starts at (fixup.SplitEpilogue.tile_counter)."""
    assert counter_count(500, 1001, KernelConfig(128, 128, 64, split_k=8)) == 4 * 8 * 8  # 4 tile-rows of 128
    assert counter_count(500, 1001, KernelConfig(64, 128, 64, schedule="pingpong", split_k=8)) == 8 * 4 * 8
    assert counter_count(3, 4097, KernelConfig(128, 16, 64, split_k=2, swap_ab=True)) == 33 * 8 * 1  # Cᵀ


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


#: Spills a compiler is known to add, in bytes, by (kernel, Triton minor); the stream-K
#: kernels' too (loop-invariant values stored at the partition's start, reloaded by the
#: fix-up's sums after the arrival atomics: read off the SASS, not yet checked by a test). Triton 3.9 assembles
#: sm_90a with CUDA 13's ptxas, which keeps six loop-invariant values of the two-piece split
#: kernel's consumers (tile coordinates, epilogue addresses) in local memory: 24 bytes, stored
#: once per kernel and reloaded once per tile, outside the mainloop (none under 3.8's ptxas).
#: The stream-K fix-up's sum into the staging buffer (StreamKEpilogue.finish) added 8 bytes to the
#: 128×256 and ping-pong 64×128 kernels; the one-thread arrival (fixup.arrive: its predicate
#: lives on to release_counter) 8 more to those two and the 64×160 swap-AB kernel. Anything
#: beyond the bound fails.
KNOWN_SPILLS = {("splitk_192", "3.9"): 24, ("streamk", "3.9"): 24, ("streamk_pingpong", "3.9"): 40, ("streamk_192", "3.9"): 8, ("streamk_256", "3.9"): 64,
                # the swapped 64-row ping-pong tiles' pointer epilogue past 128 columns (64×192: 192 B alike)
                ("swapab_160", "3.9"): 168}



@pytest.mark.slow
@pytest.mark.parametrize("kernel", list(OFFLINE_SPLIT_VARIANTS))
def test_split_gemm_variants_compile_with_their_facts(kernel):
    f = facts(kernel)
    stream = OFFLINE_SPLIT_VARIANTS[kernel][0].stream_k
    assert f.counts["HGMMA"] > 0 and f.counts["wgmma"] > 0, "tensor-core wgmma missing"
    d = OFFLINE_SPLIT_VARIANTS[kernel][0].derive()
    if d.staged_swap:  # the one-kernel path: the transposed sub-tiles through the TMA epilogue
        assert f.counts["UTMASTG"] > 0 and f.counts["atom_acq_rel"] == 0, "TMA stores, no arrival counting"
        assert re.search(r"STSM\.16\.MT88", cc.compile_kernel(kernel, "sm_90a").isa), "transposed stmatrix"
        assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"
        assert d.shared_bytes - d.epilogue_bytes <= f.shared_bytes <= d.shared_bytes
        return
    if stream:  # whole tiles and (without β·C) the fix-up's sums through the TMA epilogue
        assert f.counts["UTMALDG"] > 0 and f.counts["UTMASTG"] > 0, "TMA loads and the whole tiles' TMA stores"
    else:
        assert f.counts["UTMALDG"] > 0 and f.counts["UTMASTG"] == 0, "TMA loads; the result goes out through pointers"
        assert f.counts["ld_v4"] > 0, "vectorized workspace reads (16-byte rows)"
    assert f.counts["atom_acq_rel"] > 0, "arrival counting: a release-acquire add"
    assert f.counts["st_v2"] > 0, "vectorized workspace stores"
    allowed = KNOWN_SPILLS.get((kernel, toolchain.minor(triton.__version__)), 0)
    assert f.spill_bytes <= allowed and (allowed or f.counts["LDL/STL"] == 0), "local-memory spills"
    assert 0 < f.shared_bytes <= SMEM_LIMIT
    d = OFFLINE_SPLIT_VARIANTS[kernel][0].derive()
    assert d.shared_bytes - d.epilogue_bytes - 1024 <= f.shared_bytes <= d.shared_bytes, \
        "the ring is what derive() says, and the derived budget covers the compiler's scratch"
    assert f.counts["setmaxnreg"] > 0 and f.warps == 12, "producer warp + two consumer warpgroups"


@pytest.mark.slow
def test_stream_k_kernel_keeps_the_data_parallel_ring():
    """The compiled stream-K kernel takes the shared memory of the data-parallel kernel of the
    same tile (cooperative 128×256×64, the offline builds): the same ring stages and TMA
    staging, the fix-up no buffer of its own (a few bytes of barriers and scratch). A stage
    fewer would be 48 KB less."""
    sk, dp = facts("streamk_256"), facts("cooperative")
    d = KernelConfig(128, 256, 64).derive()
    ring_and_staging = d.stages * d.stage_bytes + d.epilogue_bytes
    assert ring_and_staging <= dp.shared_bytes < ring_and_staging + d.stage_bytes
    assert 0 <= sk.shared_bytes - dp.shared_bytes < 1024, (sk.shared_bytes, dp.shared_bytes)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["nn", "tn", "tt"])
def test_swap_ab_compiles_for_every_operand_layout(layout):
    """Swap-AB turns A into the kernel's B: the MN-major (transposed) operand paths compile too."""
    import torch

    from pingpong.hopper.host.launch import prepare_split

    M, N, K = 64, 1024, 1024
    config = KernelConfig(128, 32, 64, split_k=2, swap_ab=True)
    store = lambda r, c, t: (torch.empty(c, r).t() if t else torch.empty(r, c)).to(torch.bfloat16)  # noqa: E731
    a, b = store(M, K, layout[0] == "t"), store(K, N, layout[1] == "t")
    out = torch.empty(M, N, dtype=torch.bfloat16)
    ws = torch.empty(workspace_shape(M, N, K, config), dtype=torch.float32)
    counters = torch.zeros(counter_count(M, N, config), dtype=torch.int32)
    with cc.offline("sm_90a"):
        kernel, args, kwargs, grid = prepare_split(a, b, out, EpilogueArgs(), config, 132, ws, counters)
        assert kwargs["CFG"].A_KMAJOR == (layout[1] == "t") and kwargs["CFG"].B_KMAJOR == (layout[0] == "n")
        ck = kernel.warmup(*args, grid=grid, **kwargs)
    assert "wgmma.mma_async" in ck.asm["ptx"] and ck.metadata.shared <= SMEM_LIMIT


# ----------------------------------------------------------------------------- the plan


@pytest.fixture
def launches(monkeypatch):
    """Plans built as on a Hopper GPU; each CachedLaunch call is recorded, not run."""
    from pingpong.hopper.host import backend as hopper_backend

    monkeypatch.setattr(hopper_backend, "is_hopper", lambda device: True)
    calls = []
    monkeypatch.setattr(hopper_backend.CachedLaunch, "__call__",
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

    from pingpong.runtime import plan

    a, b, c, inplace, beta = {
        "decode nt": lambda: (_bf16(16, 8192), _bf16(4096, 8192).t(), None, False, 0.0),
        "decode nn odd N": lambda: (_bf16(3, 8192), _bf16(8192, 4095), None, False, 0.0),
        "large K": lambda: (_bf16(256, 8192), _bf16(256, 8192).t(), _bf16(256, 256), False, 0.5),
        "in place, column-major c": lambda: (_bf16(16, 8192), _bf16(4096, 8192).t(), _bf16(4096, 16).t(), True, 1.0),
    }[case]()
    from pingpong.hopper.host import backend
    from pingpong.runtime import spec

    p = plan.plan_for(spec.build(a, b, c, beta, torch.bfloat16, inplace=inplace))
    assert isinstance(p, backend.SplitPlan) and (p.config.swap_ab or p.config.split_k > 1)
    out = c if inplace else torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16)
    p.run(a, b, out, EpilogueArgs(c, 1.0, beta))
    ((gemm, ptrs, dyn, prep, inputs),) = launches  # one launch: the last split of each tile finishes it
    assert gemm is p.launch and dyn == (1.0, beta)
    # b with 4095-element rows and a column-major c need aligned copies; the output never
    # does (the kernel writes it through pointers), unless in place on a column-major c
    assert p.path == ("hopper-padded" if case in ("decode nn odd N", "in place, column-major c") else "hopper")
    with cc.offline("sm_90a"):
        fn, args, kwargs, grid = prep(*inputs)
        args = flat_arguments(fn, args)[1]  # the epilogue operands' fields where they stand
        assert [d.base.data_ptr() for d in args[:2]] + [t.data_ptr() for t in args[2:7]] == list(ptrs)
        assert kwargs["CFG"].EPI.SWAP == p.config.swap_ab and kwargs["CFG"].EPI.HAS_C == (c is not None and beta != 0)
        assert grid[0] <= 132
    ws, counters = inputs[5], inputs[6]
    splits = args[12]
    rows, cols = workspace_shape(a.shape[0], b.shape[1], a.shape[1], p.config)
    assert ws.dtype == torch.float32 and (ws.numel() >= rows * cols if splits > 1 else ws.numel() == 0)  # flat: the stream's
    assert counters.dtype == torch.int32 and (counters.numel() >= p.counters if splits > 1 else counters.numel() == 0)
    assert not counters.any(), "arrival counters start at zero"
    first = inputs[1] if p.config.swap_ab else inputs[0]
    target = inputs[2]
    assert ptrs[0] == first.data_ptr() and ptrs[4] == target.data_ptr() and ptrs[6] == target.data_ptr()  # bias unread


@pytest.mark.parametrize("x_shape, w_shape, bias", [((16, 8192), (4096, 8192), True), ((2, 8, 8192), (1024, 8192), False)])
def test_layer_pointer_launch_launches_what_the_plan_run_does(launches, monkeypatch, x_shape, w_shape, bias):
    """A layer on a split-K / swap-AB plan launches from base addresses (SplitPlan.run_ptrs):
    the same pointers, scalars and JIT arguments as the plan's general run."""
    import torch

    from pingpong.integration import direct
    from pingpong.hopper.host import backend
    from pingpong.runtime import plan, spec

    monkeypatch.setattr(spec, "check_gpu", lambda device, names=None: None)
    x, w = _bf16(*x_shape), _bf16(*w_shape)
    b = _bf16(w_shape[0]) if bias else None
    lp = direct.LayerPlan(x, w, b, "none")
    assert isinstance(lp.fwd, backend.SplitPlan) and lp.fwd_ptrs
    out = lp.forward(x, w, b)
    lp.fwd.run(x.view(lp.x2_shape), w.t(), out.view(lp.out2), EpilogueArgs(bias=b))
    (_, ptrs, dyn, prep, inputs), (_, want_ptrs, want_dyn, want_prep, want_inputs) = launches
    assert dyn == want_dyn == (1.0, 0.0)
    assert ptrs[:2] + ptrs[4:] == want_ptrs[:2] + want_ptrs[4:]  # workspace and counters: fresh per call
    with cc.offline("sm_90a"):
        (fn, args, kwargs, grid), (want_fn, want_args, want_kwargs, want_grid) = prep(*inputs), want_prep(*want_inputs)
        args, want_args = flat_arguments(fn, args)[1], flat_arguments(want_fn, want_args)[1]
    assert fn is want_fn and grid == want_grid and kwargs == want_kwargs
    tensors = lambda xs: [a.data_ptr() if isinstance(a, torch.Tensor) else a.base.data_ptr()  # noqa: E731
                          if hasattr(a, "base") else a for a in xs]
    assert tensors(args[:2]) + tensors(args[4:7]) == tensors(want_args[:2]) + tensors(want_args[4:7])
    assert [d.base.data_ptr() for d in args[:2]] + [t.data_ptr() for t in args[2:7]] == list(ptrs)


def test_staged_swap_plan_launches_the_kernels_operands_in_its_order(launches, monkeypatch):
    """An unsplit 16-bit cooperative swap-AB plan (the wave rule's 128×144 at 1466 rows) is a
    HopperPlan (the staged transposed store): its run and its pointer launch (run_ptrs, a
    layer's) pass the kernel's A = the weight and B = x, the bases of the very descriptors the
    JIT launch was prepared with, and the same scalars."""
    import torch

    from pingpong.integration import direct
    from pingpong.hopper.host import backend
    from pingpong.runtime import spec

    monkeypatch.setattr(spec, "check_gpu", lambda device, names=None: None)
    x, w, b = _bf16(1466, 3072), _bf16(3072, 3072), _bf16(3072)
    lp = direct.LayerPlan(x, w, b, "none")
    assert type(lp.fwd) is backend.HopperPlan and lp.fwd.config.swap_ab and lp.fwd_ptrs
    out = lp.forward(x, w, b)
    lp.fwd.run(x, w.t(), out, EpilogueArgs(bias=b))
    (_, ptrs, dyn, prep, inputs), (_, want_ptrs, want_dyn, want_prep, want_inputs) = launches
    assert ptrs == want_ptrs and dyn == want_dyn == (1.0, 0.0)
    assert ptrs[:2] == (w.data_ptr(), x.data_ptr()), "the kernel's A is the weight (Cᵀ = W·xᵀ)"
    with cc.offline("sm_90a"):
        fn, args, kwargs, grid = prep(*inputs)
        args = flat_arguments(fn, args)[1]
    assert kwargs["CFG"].EPI.SWAP and kwargs["CFG"].EPI.BIAS == "row"  # the bias runs along the kernel's rows
    bases = [a.base.data_ptr() if hasattr(a, "base") else a.data_ptr() for a in args[:5]]
    assert bases == list(ptrs)
    assert tuple(args[5:8]) == (3072, 1466, 3072), "the kernel's product is Cᵀ: N × M"
    d = lp.fwd.config.derive()
    assert list(args[2].block_shape) == [d.epilogue_n, d.consumer_m], "out's box: a sub-tile's transpose"


# ----------------------------------------------------------------------------- host geometry, simulated


def _simulate(a, b, out, c, alpha, beta, config, order):
    """Run prepare_split's launch as a CPU model of the kernel on its own arguments: every
    work unit (SplitKScheduler: split-major units, k-steps [split·S, (split+1)·S), TMA zero
    fill outside the operands), each consumer half of its tile taken in the given `order` of
    arrival: partial into the workspace (columns < ws_ld), one arrival per consumer half, and the
    half whose arrivals complete the count sums the splits in order 0, 1, ... and stores
    act(α·Σ + bias) + β·C through out's pointers (transposed under SWAP). Returns the
    arrival counters after the run."""
    import torch

    M, N, K = a.shape[0], b.shape[1], a.shape[1]
    ws = torch.full(workspace_shape(M, N, K, config), float("nan")).view(-1)
    counters = torch.zeros(counter_count(M, N, config), dtype=torch.int32)
    fn, args, kw, grid = prepare_split(a, b, out, EpilogueArgs(c, alpha, beta), config, 132, ws, counters)
    args = flat_arguments(fn, args)[1]
    a_desc, b_desc, ws_t, cnt, out_t, c_t, _ = args[:7]  # _: the bias slot (no bias here)
    R, C, K, al, be, splits, stride16, ld16, out_ld, c_ld = args[7:17]
    stride, ld = stride16 * 4, ld16 * 4
    cfg = kw["CFG"]  # the kernel's constexprs (KernelConstants)
    BM, BN, BK = cfg.BM, cfg.BN, cfg.BK
    ROWS = BM // 2 if not cfg.PINGPONG else BM  # rows of one consumer half (SCHEDULE_FACTS)
    A = (a_desc.base if cfg.A_KMAJOR else a_desc.base.t()).float()  # (R, K) as the kernel sees it
    B = (b_desc.base.t() if cfg.B_KMAJOR else b_desc.base).float()  # (K, C)
    pid_m, pid_n = cdiv(R, BM), cdiv(C, BN)
    tiles, per = pid_m * pid_n, cdiv(cdiv(K, BK), splits)
    halves = []
    for p in range(grid[0]):
        for t in range(tiles_of_program.fn(tiles * splits, p, grid[0])):
            tile, split = split_work.fn(p + t * grid[0], tiles)
            tm, tn = tile_coords.fn(tile, pid_m, pid_n, cfg.GROUP_M)
            k0, k1 = split * per * BK, (split + 1) * per * BK
            for h in range(BM // ROWS):
                halves.append((tm * BM + h * ROWS, tn * BN, split, k0, k1))
    halves = [halves[i] for i in order(len(halves))]
    out_view = out_t.view(-1)
    c_view = c_t.view(-1)
    i = torch.arange(ROWS).view(-1, 1)
    j = torch.arange(BN).view(1, -1)
    for off_r, off_c, split, k0, k1 in halves:
        Ap, Bp = torch.zeros(ROWS, K), torch.zeros(K, BN)
        Ap[:max(0, min(ROWS, R - off_r))] = A[off_r:off_r + ROWS]
        Bp[:, :min(BN, C - off_c)] = B[:, off_c:off_c + BN]
        part = Ap[:, k0:k1] @ Bp[k0:k1]  # TMA's zero fill past R, C and K
        in_ws = (off_c + j < ld).expand(ROWS, BN)  # _workspace_indices: every row, columns < ws_ld
        ws_offs = ((off_r + i) * ld + off_c + j)[in_ws]
        if splits == 1:
            total = part
        else:
            ws_t[split * stride + ws_offs] = part[in_ws]
            index = (off_r // ROWS) * cdiv(C, BN) + off_c // BN
            old = cnt[index].item()  # the half's one arrival (its first thread's)
            cnt[index] += 1
            if old != splits - 1:
                continue
            cnt[index] -= splits  # release_counter: the first thread takes `splits` back
            total = torch.zeros(ROWS, BN)
            for s_ in range(splits):  # fixed order
                total[in_ws] += ws_t[s_ * stride + ws_offs]
        inside = ((off_r + i < R) & (off_c + j < C))
        r, col = (off_r + i).expand(ROWS, BN)[inside], (off_c + j).expand(ROWS, BN)[inside]
        y = al * total[inside]
        if cfg.EPI.HAS_C:
            y = y + be * c_view[col * c_ld + r if cfg.EPI.SWAP else r * c_ld + col].float()
        out_view[col * out_ld + r if cfg.EPI.SWAP else r * out_ld + col] = y.to(out_view.dtype)
    return cnt


MODELLED = [KernelConfig(128, 128, 64, split_k=3),
            KernelConfig(64, 64, 64, schedule="pingpong", split_k=5, swap_ab=True),
            KernelConfig(128, 16, 64, split_k=2, swap_ab=True)]


ORDERS = {"in order": lambda n: range(n), "reversed": lambda n: range(n - 1, -1, -1),
          "shuffled": lambda n: __import__("random").Random(n).sample(range(n), n)}


@pytest.mark.parametrize("config", MODELLED, ids=lambda c: f"{c.block_m}x{c.block_n}-s{c.split_k}-swap{int(c.swap_ab)}")
@pytest.mark.parametrize("layout", ["nt"] + [pytest.param(x, marks=pytest.mark.slow) for x in ("nn", "tn", "tt")])
@pytest.mark.parametrize("M, N, K", [(1, 200, 1000), (17, 255, 1000), (130, 72, 520), (40, 1000, 64)])
def test_split_geometry_reproduces_the_product(config, layout, M, N, K):
    """Workspace shape, split rows, strides, counters and the swap transposition agree end to
    end: a CPU model of the kernel on prepare_split's own arguments gives α·a@b + β·c, the
    same bits whatever order the splits arrive in, and leaves every counter at zero."""
    import torch

    from pingpong.hopper.host.backend import tma_copy
    from pingpong.hopper.host.launch import tma_orientation

    torch.manual_seed(0)
    store = lambda r, c_, t: (torch.randn(c_, r).t() if t else torch.randn(r, c_)).to(torch.bfloat16)  # noqa: E731
    a, b = store(M, K, layout[0] == "t"), store(K, N, layout[1] == "t")
    a, b = (x if tma_orientation(x) else tma_copy(x) for x in (a, b))  # as the plan does
    c = torch.randn(M, N)
    results = []
    for order in ORDERS.values():
        out = torch.full((M, N), float("nan"))
        assert not _simulate(a, b, out, c, 1.5, -0.5, config, order).any(), "counters back to zero"
        results.append(out)
    torch.testing.assert_close(results[0], 1.5 * a.float() @ b.float() - 0.5 * c, rtol=1e-4, atol=1e-3)
    for other in results[1:]:
        assert torch.equal(other, results[0]), "the sum must not depend on which split arrives last"
