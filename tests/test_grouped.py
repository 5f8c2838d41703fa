"""grouped_mm on the CPU: validation, fake shapes, the Hopper scheduler's (group, tile)
enumeration through the kernel's own helpers, the portable kernel under Triton's interpreter
(fp16/fp32: bf16 is wrong there), and the autograd formulas (fake-traced)."""

import itertools

import pytest
import torch
from fused_reference import offsets
from torch._subclasses.fake_tensor import FakeTensorMode

import pingpong
from pingpong import KernelConfig
from pingpong import grouped as gm
from pingpong.errors import PingpongError
from pingpong.hopper.host import grouped as hg
from pingpong.hopper.kernels import grouped as kg
from pingpong.hopper.device.scheduler import tile_coords, tiles_of_program




# ----------------------------------------------------------------------------- scheduler enumeration


def enumerate_units(sizes, N, BM, BN, GROUP_M, programs):
    """Every program's units as the kernel computes them: tile_coords over the virtual M axis,
    the group found from the cumulative tile counts (the vector compare of `locate`), the row
    from `group_tile_row`; returns {(group, row, col): program}."""
    starts = [sum(sizes[:g]) for g in range(len(sizes))]
    tiles = [kg.tiles_of_rows.fn(max(s, 0), BM) for s in sizes]
    ends = list(itertools.accumulate(tiles))
    total_m, num_pid_n = sum(tiles), -(-N // BN)
    seen = {}
    for p in range(programs):
        for t in range(tiles_of_program.fn(total_m * num_pid_n, p, programs)):
            vm, pid_n = tile_coords.fn(p + t * programs, total_m, num_pid_n, GROUP_M)
            g = sum(1 for e in ends if e <= vm)
            row = kg.group_tile_row.fn(vm, ends[g] - tiles[g], starts[g], BM)
            key = (g, row, pid_n * BN)
            assert key not in seen, f"unit {key} taken twice"
            seen[key] = p
    return seen


@pytest.mark.parametrize("sizes", [[0, 1, 17, 255, 1000], [0, 0, 0], [1] * 9, [300], [0, 129, 0, 128, 0],
                                   [64, 64, 1, 0, 200]])
@pytest.mark.parametrize("BM,GROUP_M,programs", [(128, 8, 132), (64, 2, 5), (128, 1, 1)])
def test_scheduler_covers_every_row_once(sizes, BM, GROUP_M, programs):
    N, BN = 300, 128
    seen = enumerate_units(sizes, N, BM, BN, GROUP_M, programs)
    want = {(g, sum(sizes[:g]) + i * BM, n) for g, s in enumerate(sizes) for i in range(-(-s // BM))
            for n in range(0, N, BN)}
    assert set(seen) == want  # empty groups own no unit; every row of every group in one tile
    for g, row, _ in seen:
        assert sum(sizes[:g]) <= row < sum(sizes[:g + 1])


def test_group_pad():
    assert [hg.group_pad(g) for g in (0, 1, 8, 32, 33, 128, 256)] == [32, 32, 32, 32, 64, 128, 256]


def test_select_config_by_mean_group():
    assert hg.select_grouped_config(4096 * 2, 8, 14336) == KernelConfig(128, 256, 64, schedule="cooperative")
    assert hg.select_grouped_config(4096 * 8, 256, 2048) == KernelConfig(64, 256, 64, schedule="pingpong")
    assert hg.select_grouped_config(128 * 8, 128, 128).block_n == 128


# ----------------------------------------------------------------------------- validation


def _ab(T=32, K=16, N=24, G=4, dtype=torch.bfloat16):
    return torch.randn(T, K, dtype=dtype), torch.randn(G, K, N, dtype=dtype), offsets([8] * G)


@pytest.mark.parametrize("change,match", [
    (lambda a, b, o: (a, b, o.to(torch.int64)), "offs: dtype"),
    (lambda a, b, o: (a, b, o[:3]), "b: group count"),
    (lambda a, b, o: (a, b, o.view(2, 2)), "offs: expected a 1-D"),
    (lambda a, b, o: (a, b, o.to("meta")), "offs: on meta"),
    (lambda a, b, o: (a, b, None), "offs: required"),
    (lambda a, b, o: (a[:, :8], b, o), "b: its K"),
    (lambda a, b, o: (a, b.float(), o), "b: dtype"),
    (lambda a, b, o: (a.half(), b, o), "a and b must have the same dtype"),
    (lambda a, b, o: (a[None, None], b, o), "a: expected a 2-D or 3-D"),
    (lambda a, b, o: (a, b, [8, 16]), "offs: expected a 1-D int32 tensor"),
    (lambda a, b, o: (torch.randn(4, 3, 16, dtype=torch.bfloat16), torch.randn(5, 16, 2, dtype=torch.bfloat16),
                      None), "b: group count 5"),
    (lambda a, b, o: (torch.randn(4, 3, 16, dtype=torch.bfloat16), b, o), "offs: must be None"),
    (lambda a, b, o: (torch.randn(3, 3, 16, dtype=torch.bfloat16), torch.randn(16, 9, dtype=torch.bfloat16), o),
     "a: group count 3"),
])
def test_bad_input_names_the_argument(change, match):
    a, b, o = change(*_ab())
    with pytest.raises(PingpongError, match=match):
        pingpong.grouped_mm(a, b, o)


def test_bad_out_dtype_and_cpu():
    a, b, o = _ab()
    with pytest.raises(PingpongError, match="out_dtype"):
        pingpong.grouped_mm(a, b, o, out_dtype=torch.float16)
    with pytest.raises(PingpongError, match="pingpong runs on CUDA"):
        pingpong.grouped_mm(a, b, o)


def test_check_offsets_syncs_and_refuses_bad_values():
    gm.check_offsets(offsets([0, 3, 0, 5]), 8)
    for bad in ([3, 2], [-1, 4], [4, 9]):
        with pytest.raises(PingpongError, match="offs: expected non-decreasing"):
            gm.check_offsets(torch.tensor(bad, dtype=torch.int32), 8)


# ----------------------------------------------------------------------------- fake shapes


@pytest.mark.parametrize("shapes,want", [
    (((1000, 64), (8, 64, 96), 8), (1000, 96)),  # 2-D x 3-D
    (((8, 50, 64), (64, 700), 8), (50, 700)),  # 3-D x 2-D
    (((64, 1000), (1000, 96), 8), (8, 64, 96)),  # 2-D x 2-D
    (((8, 50, 64), (8, 64, 96), None), (8, 50, 96)),  # 3-D x 3-D
])
def test_fake_shapes(shapes, want):
    (sa, sb, g) = shapes
    with FakeTensorMode():
        a = torch.empty(sa, dtype=torch.bfloat16, device="cuda")
        b = torch.empty(sb, dtype=torch.bfloat16, device="cuda")
        offs = torch.empty(g, dtype=torch.int32, device="cuda") if g else None
        out = gm.grouped_mm_op(a, b, offs, torch.float32)
    assert tuple(out.shape) == want and out.dtype == torch.float32


# ----------------------------------------------------------------------------- the portable kernel (interpreter)


def _reference(a, b, offs, mode):
    a, b = a.double(), b.double()
    if mode == gm.BATCHED:
        return a @ b
    ends = offs.tolist()
    starts = [0] + ends[:-1]
    if mode == gm.ROWS:
        out = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float64)
        for g, (s, e) in enumerate(zip(starts, ends)):
            out[s:e] = a[s:e] @ b[g]
    elif mode == gm.COLS:
        out = torch.zeros(a.shape[1], b.shape[1], dtype=torch.float64)
        for g, (s, e) in enumerate(zip(starts, ends)):
            out[:, s:e] = a[g] @ b[:, s:e]
    else:
        out = torch.stack([a[:, s:e] @ b[s:e] for s, e in zip(starts, ends)])
    return out


@pytest.mark.parametrize("mode", [gm.ROWS, gm.COLS, gm.RAGGED_K])
@pytest.mark.parametrize("transposed", [False, True])
def test_portable_kernel_interpreted(mode, transposed):
    torch.manual_seed(0)
    sizes = [0, 1, 17, 0, 21]
    offs = offsets(sizes)
    total, K, N, G = sum(sizes), 24, 20, len(sizes)
    if mode == gm.ROWS:
        a, b = torch.randn(total + 3, K), torch.randn(G, K, N)
    elif mode == gm.COLS:
        a, b = torch.randn(G, 9, K), torch.randn(K, total + 3)
    else:
        a, b = torch.randn(9, total + 3), torch.randn(total + 3, N)
    a, b = a.half(), b.half()
    if transposed:  # the other storage order of each operand (same values)
        a, b = a.mT.contiguous().mT, b.mT.contiguous().mT
    out = torch.full(gm.check(a, b, offs, None)[1], float("nan"), dtype=torch.float32)
    gm._compute(a, b, offs, torch.float32, zero_tail=True, out=out, interpret=True)
    want = _reference(a, b, offs, mode)
    assert not out.isnan().any(), "every element written (the tail zeroed)"
    err = (out.double() - want).abs()
    assert err.max() <= 1e-4 * (1 + want.abs().max()), f"elementwise {err.max()}"
    assert err.norm() <= 1e-5 * (1 + want.norm())


def test_portable_bad_offsets_stay_inside():
    """A decreasing offset (empty group) and an end past T: clipped, nothing outside out."""
    a, b = torch.randn(10, 8).half(), torch.randn(3, 8, 8).half()
    offs = torch.tensor([6, 4, 50], dtype=torch.int32)
    out = torch.full((10, 8), float("nan"))
    gm._compute(a, b, offs, torch.float32, out=out, interpret=True)
    want = torch.cat([a[:6].float() @ b[0].float(), a[4:10].float() @ b[2].float()])
    torch.testing.assert_close(out[:4], want[:4], atol=1e-2, rtol=1e-2)  # group 2's rows start at 4
    assert not out.isnan().any()


def test_portable_negative_offsets_write_nothing_before_out():
    """A negative offset (device data, unchecked) is clipped to 0: no group starts, and no
    store lands, before out's first row (guard rows just before it stay as they were)."""
    a, b = torch.randn(12, 16).half(), torch.randn(3, 16, 8).half()
    buf = torch.full((20, 8), 7.0)  # rows 0-7 guard, out = rows 8-19
    gm._compute(a, b, torch.tensor([-5, 8, 12], dtype=torch.int32), torch.float32, out=buf[8:], interpret=True)
    assert (buf[:8] == 7.0).all(), "a store landed before out"
    want = torch.cat([a[:8].float() @ b[1].float(), a[8:].float() @ b[2].float()])  # group 0 empty
    torch.testing.assert_close(buf[8:], want, atol=1e-2, rtol=1e-2)


# ----------------------------------------------------------------------------- autograd formulas


@pytest.fixture
def interpreted(monkeypatch):
    """grouped_mm's kernels under Triton's interpreter (CPU tensors)."""
    compute = gm._compute
    monkeypatch.setattr(gm, "_compute", lambda *args, **kw: compute(*args, **dict(kw, interpret=True)))


def _stored(shape, transposed):
    """A random fp16 leaf of `shape`; `transposed`: a 3-D one stored with its last two dims
    swapped (w.transpose(1, 2) of (G, N, K) expert weights)."""
    if transposed and len(shape) == 3:
        return torch.randn(shape[0], shape[2], shape[1]).half().transpose(1, 2).requires_grad_()
    return torch.randn(shape).half().requires_grad_()


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("mode", [gm.ROWS, gm.COLS, gm.RAGGED_K, gm.BATCHED])
def test_gradients_interpreted(interpreted, mode, transposed):
    """The op's autograd: dA and dB (themselves grouped products, the tails zeroed) against
    float64 autograd of the per-group reference; the last group ends before the extent. A 3-D
    input stored transposed gets its gradient in its own strides (no copy to accumulate it)."""
    torch.manual_seed(1)
    sizes = [5, 0, 18, 1]
    offs, G, total, K, N = offsets(sizes), len(sizes), sum(sizes), 16, 12
    shapes = {gm.ROWS: ((total + 2, K), (G, K, N)), gm.COLS: ((G, 9, K), (K, total + 2)),
              gm.RAGGED_K: ((9, total + 2), (total + 2, N)), gm.BATCHED: ((G, 9, K), (G, K, N))}[mode]
    if mode == gm.BATCHED:
        offs = None
    a, b = _stored(shapes[0], transposed), _stored(shapes[1], transposed)
    out = pingpong.grouped_mm(a, b, offs, out_dtype=torch.float32)
    g = torch.randn(out.shape)
    if mode in (gm.ROWS, gm.COLS):  # rows past the end are unset: keep them out of the gradient
        rows = torch.arange(out.shape[0 if mode == gm.ROWS else 1]) < total
        g = g * (rows[:, None] if mode == gm.ROWS else rows[None, :])
    da, db = torch.autograd.grad(out, (a, b), g)
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    ra, rb = torch.autograd.grad(_reference(a64, b64, offs, mode), (a64, b64), g.half().double())
    for got, want, x in ((da, ra, a), (db, rb, b)):
        assert got.shape == want.shape and got.dtype == torch.float16
        assert x.dim() == 2 or got.stride() == x.stride(), f"{mode}: gradient strides {got.stride()} vs {x.stride()}"
        err = (got.double() - want).abs()
        assert err.max() <= 2e-3 * (1 + want.abs().max()), f"{mode}: elementwise {err.max()}"


@pytest.mark.slow
def test_op_schema_fake_and_fullgraph_compile(interpreted):
    """opcheck (schema, fake tensors, autograd registration) and torch.compile(fullgraph=True):
    one graph node, the output shape from the shapes only."""
    a, b, offs = torch.randn(40, 16).half(), torch.randn(4, 16, 8).half(), offsets([10, 0, 20, 10])
    torch.library.opcheck(gm.grouped_mm_op, (a, b, offs), test_utils=("test_schema", "test_faketensor",
                                                                       "test_autograd_registration"))
    f = torch.compile(lambda a, b, offs: pingpong.grouped_mm(a, b, offs) * 2, fullgraph=True, backend="eager")
    torch.testing.assert_close(f(a, b, offs), 2 * pingpong.grouped_mm(a, b, offs))


# ----------------------------------------------------------------------------- the MoE suites


@pytest.mark.parametrize("tokens", [128, 4096, 16384])
def test_moe_group_sizes(tokens):
    from pingpong.tools.suites import MOE_MODELS, moe_group_sizes

    for experts, top_k, _, _ in MOE_MODELS.values():
        for routing in ("balanced", "zipf"):
            sizes = moe_group_sizes(tokens, experts, top_k, routing)
            assert len(sizes) == experts and sum(sizes) == tokens * top_k and max(sizes) <= tokens
            assert sizes == sorted(sizes, reverse=True) or routing == "balanced"
    with pytest.raises(PingpongError, match="routing"):
        moe_group_sizes(128, 8, 2, "uniform")


def test_bench_grouped_refuses_unknown_model():
    import argparse

    from pingpong.tools import bench

    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    with pytest.raises(PingpongError, match="--models"):
        bench.settings_from_args(p.parse_args(["--op", "grouped", "--models", "gpt-4"]))
    assert bench.settings_from_args(p.parse_args(["--op", "grouped", "--models", "deepseek-v3"])).op == "grouped"


@pytest.mark.slow
def test_grouped_kernels_compile_offline():
    """sm_90a, no GPU: both registered grouped kernels compile without spills, in the shared
    memory budget, with TMA loads and the TMA store of full tiles."""
    from pingpong.hopper.host.config import SMEM_LIMIT
    from pingpong.runtime import compile as cc

    for name in ("grouped-cooperative", "grouped-pingpong"):
        facts = cc.compile_kernel(name, "sm_90a").facts()
        assert facts.spill_bytes == 0 and facts.counts["LDL/STL"] == 0, name
        assert facts.shared_bytes <= SMEM_LIMIT, name
        assert facts.counts["tma_load"] >= 2 and facts.counts["tma_store"] >= 1 and facts.counts["wgmma"] > 0, name


@pytest.mark.parametrize("config", [KernelConfig(128, 128, 64, schedule="cooperative", cluster_m=2),
                                    KernelConfig(128, 128, 64, schedule="persistent"),
                                    KernelConfig(128, 192, 64, schedule="cooperative")])
def test_grouped_launches_take_one_piece_tiles_of_one_cta(config):
    """Both grouped kernels' launches (ragged rows, ragged K) refuse, through their one shared
    derivation (`derived`), a tile neither kernel runs: a 2-CTA cluster, the persistent
    schedule, a two-piece tile."""
    from pingpong.hopper.host import grouped_k as hk

    T, G, M, N, K = 512, 4, 128, 384, 128
    empty = lambda *shape: torch.empty(*shape, dtype=torch.bfloat16)  # noqa: E731
    offs = torch.empty(G, dtype=torch.int32)
    with pytest.raises(AssertionError, match="one-piece warp-specialized tiles, one CTA each"):
        hg.prepare(empty(T, K), empty(G, K, N), empty(T, N), offs, config, 132)
    with pytest.raises(AssertionError, match="one-piece warp-specialized tiles, one CTA each"):
        hk.prepare(empty(T, M), empty(T, N), empty(G, M, N), offs, config, 132)


# ----------------------------------------------------------------------------- the Hopper ragged-K kernel


def ragged_rows(start, rows, k, BK, stride):
    """Rows of the token matrix that the ragged box of k-step row `k` of a group [start,
    start + rows) reads, and the box rows TMA zero-fills: the kernel's own coordinates
    (`ragged_coords`), the descriptor's strides and extents, 64-bit address wrap-around."""
    from pingpong.hopper.host import grouped_k as hk
    from pingpong.hopper.kernels import grouped_k as kk

    c0, c1, c2 = (int(getattr(c, "value", c)) for c in kk.ragged_coords.fn(start, rows, k))
    extents = [hk._LEAD_EXTENT, hk._LEAD_EXTENT, hk.RAGGED_ROWS.value]
    strides = [hk._WRAP - stride, stride, stride]
    read, zero = [], []
    for i in range(BK):
        coords = (c0, c1, c2 + i)
        if all(0 <= c < e for c, e in zip(coords, extents)):
            offset = sum(c * s for c, s in zip(coords, strides)) % 2**64
            assert offset % stride == 0
            read.append(offset // stride)
        else:
            zero.append(i)
    return read, zero


@pytest.mark.parametrize("start,rows", [(0, 1), (0, 64), (5, 17), (1000, 255), (3, 0), (7, 1000), (2**20 + 3, 130)])
@pytest.mark.parametrize("stride", [8, 4096, 14336])
def test_ragged_box_reads_only_its_group(start, rows, stride):
    """Every k-step's box reads rows start + k .. of the group only, in order; the rows past
    the group's end (the last k-step's tail) are out of bounds (TMA writes zeros)."""
    from pingpong.hopper.kernels import grouped_k as kk

    BK = 64
    steps = kk.k_steps_of.fn(rows, BK)
    assert steps == -(-rows // BK)
    seen = []
    for j in range(steps):
        read, zero = ragged_rows(start, rows, j * BK, BK, stride)
        assert read == list(range(start + j * BK, start + j * BK + len(read)))
        assert zero == list(range(len(read), BK))
        seen += read
    assert seen == list(range(start, start + rows))


def test_ragged_k_descriptors_and_legality():
    """The host side on CPU tensors: which layouts the kernel reads as stored, the ragged
    descriptors' extents and strides, the grid from the shapes alone."""
    from pingpong.hopper.host import grouped_k as hk

    T, M, N, G = 1000, 136, 328, 5
    x = torch.empty(T, M, dtype=torch.bfloat16)
    y = torch.empty(T, N, dtype=torch.bfloat16)
    assert hk.legal_operand(x) and hk.legal_operand(y)
    assert not hk.legal_operand(torch.empty(M, T, dtype=torch.bfloat16).t())  # T contiguous: copied by the caller
    assert not hk.legal_operand(torch.empty(T, 13, dtype=torch.bfloat16))  # 26-byte rows
    out = torch.empty(G, M, N, dtype=torch.bfloat16)
    assert hk.legal_out(out) and not hk.legal_out(torch.empty(G, M, 13, dtype=torch.bfloat16))
    kernel, args, kwargs, grid = hk.prepare(x, y, out, torch.empty(G, dtype=torch.int32),
                                            KernelConfig(128, 256, 64, schedule="cooperative"), 132)
    a_desc, b_desc = args[:2]
    assert a_desc.shape == [hk._LEAD_EXTENT, hk._LEAD_EXTENT, 2**30, M] and a_desc.strides == [2**34 - M, M, M, 1]
    assert b_desc.block_shape == [1, 1, 64, 256] and b_desc.strides == [2**34 - N, N, N, 1]
    assert grid == (min(132, G * 2 * 2),)


def test_ragged_k_interpreted_asks_no_registered_backend(monkeypatch):
    """The interpreter is an explicit opt-in: the ragged-K product runs the portable kernel
    (interpreted) without asking the registry's backends (Hopper's can_implement)."""
    from pingpong.hopper.host import backend as hopper_backend

    calls = []
    monkeypatch.setattr(hopper_backend, "can_implement", lambda s: calls.append(s))
    a, b = torch.randn(8, 40).half(), torch.randn(40, 16).half()
    offs = offsets([10, 0, 30])
    out = gm._compute(a, b, offs, torch.float32, interpret=True)
    assert not calls, "the interpreter path never asks the Hopper backend"
    assert torch.allclose(out[0], a[:, :10].float() @ b[:10].float(), atol=1e-2) and (out[1] == 0).all()
    assert torch.allclose(out[2], a[:, 10:].float() @ b[10:].float(), atol=1e-2)


@pytest.mark.slow
def test_grouped_k_kernels_compile_offline():
    """sm_90a, no GPU: the ragged-K kernels compile without spills, in the shared memory
    budget, with rank-4 (ragged) TMA loads, MN-major wgmma operands and the TMA store."""
    import re

    from pingpong.hopper.host.config import SMEM_LIMIT
    from pingpong.runtime import compile as cc

    for name in ("grouped-k-cooperative", "grouped-k-pingpong"):
        compiled = cc.compile_kernel(name, "sm_90a")
        facts = compiled.facts()
        assert facts.spill_bytes == 0 and facts.counts["LDL/STL"] == 0, name
        assert facts.shared_bytes <= SMEM_LIMIT, name
        assert facts.counts["tma_store"] >= 1 and facts.counts["wgmma"] > 0, name
        loads = set(re.findall(r"cp\.async\.bulk\.tensor\.(\d)d\.shared::cta\.global", compiled.asm["ptx"]))
        assert loads == {"4"}, f"{name}: operand loads of ranks {loads}, expected the rank-4 ragged boxes only"


def test_ragged_k_tile_rule():
    """Cooperative 128×256 above 128 rows per group on average; 128×128 at ≤ 128 (a unit of
    one or two k-steps: the store dominates) and for N < 256."""
    from pingpong.hopper.host import grouped_k as hk

    pick = lambda M, N, T, G: (lambda c: (c.schedule, c.block_m, c.block_n))(hk.select_ragged_k_config(M, N, T, G))  # noqa: E731
    assert pick(4096, 14336, 16384 * 2, 8) == ("cooperative", 128, 256)
    assert pick(7168, 2048, 8192 * 8, 256) == ("cooperative", 128, 256)
    assert pick(2048, 768, 2048 * 8, 128) == ("cooperative", 128, 128)
    assert pick(7168, 2048, 128 * 8, 256) == ("cooperative", 128, 128)
    assert pick(2048, 768, 129 * 128, 128) == ("cooperative", 128, 256)
    assert pick(512, 128, 10**5, 4) == ("cooperative", 128, 128)


# ----------------------------------------------------------------------------- copies of a training step


def test_experts_training_step_copies_nothing(monkeypatch):
    """grouped_mm's forward and backward of the experts (b = w.transpose(1, 2) of the stored
    weights), planned as on a GPU: no aten copy at all — in particular the weight gradients
    come out in the weights' own layout, so autograd accumulates them without a transposing
    copy (a weight-sized copy each)."""
    from copies import CopiedBytes, experts_step, experts_tensors, hopper_layouts

    hopper_layouts(monkeypatch.setattr)
    seed = torch.seed()
    x, w1, w2, g, offs = experts_tensors(E=4, H=64, inter=32, T=64, gen=torch.Generator().manual_seed(seed))
    with CopiedBytes() as copied:
        experts_step(lambda a, w, offs: pingpong.grouped_mm(a, w.transpose(1, 2), offs), x, w1, w2, g, offs)
    assert copied.copies == [], f"seed {seed}: copies {copied.copies}"
    assert w1.grad.stride() == w1.stride() and w2.grad.stride() == w2.stride() and x.grad is not None
