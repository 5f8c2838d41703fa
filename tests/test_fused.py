"""The fused epilogue and batched products on the CPU: validation of the epilogue's
arguments, the portable kernel under Triton's interpreter against a float64 reference
(fp16/fp32: the triton 3.6 interpreter is wrong for bf16), and the Hopper variants'
machine code compiled offline for sm_90a."""

import functools
import re
import zlib

import pytest
import torch

from fused_reference import check, matrix, poisoned, reference
from pingpong import PingpongError
from pingpong.runtime import plan as runtime_plan, spec as runtime_spec
from pingpong.runtime import compile as cc
from pingpong.hopper.host.config import SMEM_LIMIT
from pingpong.portable import portable_gemm

# triton 3.6 interpreter: range() over a 1-element array warns in numpy >= 1.25, and numpy's
# exp overflows to inf for very negative silu/gelu arguments (the result, 0, is right)
pytestmark = [
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning"),
]

ACTS = ("none", "relu", "gelu_erf", "gelu_tanh", "silu")
BLOCK = (16, 16, 16)  # several tiles and ragged edges on small problems


def bias_of(kind, m, n, dtype, gen):
    if kind == "col":
        return torch.randn(n, generator=gen).to(dtype)
    if kind == "row":
        return torch.randn(m, 1, generator=gen).to(dtype)
    return None


# ----------------------------------------------------------------------------- validation


def test_activation_names():
    assert runtime_spec.check_activation(None) == "none"
    for name in ACTS:
        assert runtime_spec.check_activation(name) == name
    for bad in ("gelu", "tanh", "RELU", 1, ""):
        with pytest.raises(PingpongError, match="activation"):
            runtime_spec.check_activation(bad)


def test_bias_shapes_and_kinds():
    m, n, dev = 5, 7, torch.device("cpu")
    for shape, kind in (((n,), "col"), ((1, n), "col"), ((m, 1), "row")):
        b = torch.zeros(shape)
        runtime_spec.check_bias(b, m, n, dev)
        assert runtime_spec.bias_kind(b, m) == kind
    assert runtime_spec.bias_kind(torch.zeros(1), m) == "col" and runtime_spec.bias_kind(None, m) == "none"
    # a (1, 1) bias: per row of a 1-row result (any n), per column of a 1-column one (any m)
    runtime_spec.check_bias(torch.zeros(1, 1), 1, n, dev)
    assert runtime_spec.bias_kind(torch.zeros(1, 1), 1) == "row"
    runtime_spec.check_bias(torch.zeros(1, 1), m, 1, dev)
    assert runtime_spec.bias_kind(torch.zeros(1, 1), m) == "col"
    assert runtime_spec.bias_kind(torch.zeros(m, 1), m) == "row"  # also when n = 1
    for bad in (torch.zeros(m), torch.zeros(n + 1), torch.zeros(m, n), torch.zeros(1, 1, n), torch.zeros(n, 1)):
        with pytest.raises(PingpongError, match="bias: expected shape"):
            runtime_spec.check_bias(bad, m, n, dev)
    with pytest.raises(PingpongError, match="bias: dtype"):
        runtime_spec.check_bias(torch.zeros(n, dtype=torch.int32), m, n, dev)
    with pytest.raises(PingpongError, match="bias: expected a torch.Tensor"):
        runtime_spec.check_bias([0.0] * n, m, n, dev)
    with pytest.raises(PingpongError, match="bias must be on"):
        runtime_spec.check_bias(torch.zeros(n, device="meta"), m, n, dev)


def test_bias_vector_is_a_view_when_contiguous():
    col = torch.randn(1, 9)
    assert runtime_plan.bias_vector(col).data_ptr() == col.data_ptr() and runtime_plan.bias_vector(col).shape == (9,)
    strided = torch.randn(9, 2)[:, :1]  # (9, 1) with stride 2: copied to unit stride
    v = runtime_plan.bias_vector(strided)
    assert v.stride() == (1,) and torch.equal(v, strided.reshape(-1))


# ----------------------------------------------------------------------------- portable kernel


@pytest.mark.parametrize("activation", ACTS)
@pytest.mark.parametrize("bias_kind", ("none", "col", "row"))
@pytest.mark.parametrize("with_c", (False, True), ids=("noC", "C"))
def test_portable_fused_epilogue(activation, bias_kind, with_c):
    seed = zlib.crc32(f"{activation} {bias_kind} {with_c}".encode())
    gen = torch.Generator().manual_seed(seed)
    m, n, k = 33, 17, 40
    a = matrix((), m, k, torch.float16, False, gen)
    b = matrix((), k, n, torch.float16, True, gen)
    c = torch.randn(m, n, generator=gen) if with_c else None
    bias = bias_of(bias_kind, m, n, torch.float16, gen)
    out = poisoned((m, n), torch.float32)
    beta = -1.5 if with_c else 0.0  # β without c is refused
    portable_gemm(a, b, out, alpha=0.75, beta=beta, c=c, bias=bias, activation=activation, block=BLOCK,
                  interpret=True)
    check(out, reference(a, b, alpha=0.75, beta=beta, c=c, bias=bias, activation=activation), k, seed)


@pytest.mark.parametrize("activation", ACTS)
def test_portable_activation_formulas_on_a_grid(activation):
    """K = 1, b = 1: the accumulator is exactly z on a grid over [-8, 8], so act(z) is checked
    at fp32 precision (gelu_erf and gelu_tanh differ by up to ~5e-4 there)."""
    z = torch.linspace(-8, 8, 1601).reshape(-1, 1)
    ones = torch.ones(1, 16)
    out = portable_gemm(z, ones, poisoned((1601, 16), torch.float32), activation=activation, block=(64, 16, 16),
                        interpret=True)
    check(out, reference(z, ones, activation=activation), 1, 0)
    for other in ACTS:
        if other != activation:
            assert (out.double() - reference(z, ones, activation=other)).abs().max() > 1e-4, other


@pytest.mark.parametrize("bias_dtype", (torch.float16, torch.float32))
def test_portable_bias_dtypes_fp16_out(bias_dtype):
    gen = torch.Generator().manual_seed(11)
    m, n, k = 20, 24, 16
    a, b = matrix((), m, k, torch.float16, False, gen), matrix((), k, n, torch.float16, False, gen)
    bias = torch.randn(1, n, generator=gen).to(bias_dtype)
    out = portable_gemm(a, b, poisoned((m, n), torch.float16), bias=bias, activation="silu", block=BLOCK,
                        interpret=True)
    check(out, reference(a, b, bias=bias, activation="silu"), k, 11)


BATCHED = {  # a's batch, b's batch, c's batch (None: no C) -> the result's batch is 3
    "both": ((3,), (3,), (3,)),
    "shared_b": ((3,), (), (3,)),
    "shared_a": ((), (3,), None),
    "stride0_b": ((3,), "stride0", (3,)),
    "shared_c": ((3,), (3,), ()),
    "size1_a": ((1,), (3,), (3,)),
}


@pytest.mark.parametrize("case", BATCHED)
@pytest.mark.parametrize("layout", ("nn", "nt", "tn", "tt"))
def test_portable_batched(case, layout):
    seed = zlib.crc32(f"{case} {layout}".encode())
    gen = torch.Generator().manual_seed(seed)
    m, n, k = 17, 33, 24
    a_batch, b_batch, c_batch = BATCHED[case]
    a = matrix(a_batch, m, k, torch.float16, layout[0] == "t", gen)
    if b_batch == "stride0":  # one weight seen through a batch stride of 0
        b = matrix((), k, n, torch.float16, layout[1] == "t", gen).expand(3, k, n)
        assert b.stride(0) == 0
    else:
        b = matrix(b_batch, k, n, torch.float16, layout[1] == "t", gen)
    c = None if c_batch is None else torch.randn(*c_batch, m, n, generator=gen)
    bias = torch.randn(n, generator=gen)
    out = poisoned((3, m, n), torch.float32)
    beta = 0.0 if c is None else 0.5  # β without c is refused
    portable_gemm(a, b, out, alpha=1.25, beta=beta, c=c, bias=bias, activation="relu", block=BLOCK, interpret=True)
    check(out, reference(a, b, alpha=1.25, beta=beta, c=c, bias=bias, activation="relu"), k, seed)


# ----------------------------------------------------------------------------- public API


@pytest.fixture
def api_on_interpreter(monkeypatch):
    """The public functions end to end (validation, plan) on the portable kernel under the
    interpreter: as on a non-Hopper GPU, with CPU tensors allowed; the portable plan's
    arguments go to portable_gemm(interpret=True) instead of the compiled launch."""
    import collections

    import pingpong.portable as portable
    from pingpong.integration import direct
    from pingpong.runtime import plan, spec

    def run(self, a, b, out, args=spec.NO_ARGS):
        portable.portable_gemm(a, b, out, alpha=args.alpha, beta=args.beta, c=args.c if self.reads_c else None,
                               bias=args.bias, activation=self.activation, interpret=True)

    monkeypatch.setattr(spec, "check_gpu", lambda device, names=None: None)
    monkeypatch.setattr(plan, "BACKENDS", [portable])
    monkeypatch.setattr(portable, "can_implement", lambda s: None)  # CPU tensors, as on a GPU
    monkeypatch.setattr(portable.PortablePlan, "run", run)
    monkeypatch.setattr(plan, "PLANS", collections.OrderedDict())
    monkeypatch.setattr(direct, "LAYERS", collections.OrderedDict())
    yield


def test_api_fused_and_batched_end_to_end(api_on_interpreter):
    import pingpong

    gen = torch.Generator().manual_seed(5)
    x = matrix((3,), 20, 32, torch.float16, False, gen)
    w = matrix((), 24, 32, torch.float16, False, gen)  # an (N, K) weight, shared by the batches
    bias = torch.randn(24, generator=gen).to(torch.float16)
    for _ in range(2):  # the second call takes the cached plan
        y = pingpong.gemm(x, w.t(), bias=bias, activation="gelu_tanh", out_dtype=torch.float32)
        check(y, reference(x, w.t(), bias=bias, activation="gelu_tanh"), 32, 5)
    c = torch.randn(3, 20, 24, generator=gen)
    c0 = c.clone()
    pingpong.gemm_(c, x, w.t(), alpha=2.0, beta=0.5, bias=bias.reshape(1, 24), activation="silu")
    check(c, reference(x, w.t(), alpha=2.0, beta=0.5, c=c0, bias=bias, activation="silu"), 32, 5)
    row_bias = torch.randn(20, 1, generator=gen)
    z = pingpong.gemm(x, w.t(), c0[0].half(), beta=1.0, bias=row_bias, activation="relu")  # a shared (M, N) c
    assert z.shape == (3, 20, 24) and z.dtype == torch.float16
    check(z, reference(x, w.t(), beta=1.0, c=c0[0].half(), bias=row_bias, activation="relu"), 32, 5)


# ----------------------------------------------------------------------------- Hopper scheduler


@pytest.mark.parametrize("pid_m, pid_n, batches, programs, group_m", [(3, 5, 4, 7, 2), (1, 1, 9, 4, 8), (5, 2, 1, 3, 8)])
def test_batched_raster_covers_every_tile_of_every_batch_once(pid_m, pid_n, batches, programs, group_m):
    """The persistent programs' tile ids, split by batch_and_tile and tile_coords (the
    scheduler's own arithmetic, run in Python), visit each (batch, pid_m, pid_n) exactly once."""
    from pingpong.hopper.device.scheduler import batch_and_tile, tile_coords, tiles_of_program

    per_batch = pid_m * pid_n
    seen = []
    for p in range(programs):
        for i in range(tiles_of_program.fn(per_batch * batches, p, programs)):
            batch, t = batch_and_tile.fn(p + i * programs, per_batch)
            seen.append((batch, *tile_coords.fn(t, pid_m, pid_n, group_m)))
    want = [(b, m, n) for b in range(batches) for m in range(pid_m) for n in range(pid_n)]
    assert sorted(seen) == want


@pytest.mark.parametrize("BM", (64, 96, 128, 256))
def test_clamped_tile_rows_cover_every_row_and_stay_inside(BM):
    """tile_offset with CLAMP (the data-parallel kernels' last row of tiles moved back to end
    at row M, and their last column at N): over every M, the tiles cover rows 0..M-1, start at
    row ≥ 0, a moved one at a multiple of 16 (a TMA box's innermost coordinate is 16-byte
    aligned) with at most 15 of its rows past M; without CLAMP, tile-row p starts at p·BM."""
    from pingpong.hopper.device.scheduler import tile_offset

    for M in range(1, 3 * BM + 2):
        offs = [tile_offset.fn(p, BM, M, True) for p in range(-(-M // BM))]
        covered = set()
        for off in offs:
            assert off >= 0 and (M < BM or off + BM - M < 16), (M, BM, off)
            covered.update(range(off, min(off + BM, M)))
        assert covered == set(range(M)), (M, BM)
        assert offs[:-1] == [p * BM for p in range(len(offs) - 1)], "only the last row of tiles moves"
        assert offs[-1] % 16 == 0, (M, BM, offs[-1])
        assert [tile_offset.fn(p, BM, M, False) for p in range(len(offs))] == [p * BM for p in range(len(offs))]


@pytest.mark.parametrize("BM, ROWS", [(64, 64), (128, 128), (128, 64)])  # ping-pong; cooperative: two halves
def test_split_tile_rows_never_start_a_half_where_another_does(BM, ROWS, monkeypatch):
    """split_tile_offset (the 16-bit split-K kernels' last row of tiles moved back to end at
    M): the tiles cover rows 0..M-1 from row ≥ 0, a moved one starts at a multiple of 16 with
    at most 31 of its rows past M, and no two tile halves of ROWS rows start at one row (the
    fix-up's arrival counter is a half's first row's: 320 rows of 128-row tiles would move the
    last by 64, onto the second half of the one before; it moves by 48)."""
    from pingpong.hopper.device import scheduler

    monkeypatch.setattr(scheduler, "tile_offset", scheduler.tile_offset.fn)  # called inside split_tile_offset.fn
    for M in range(1, 5 * BM + 2):
        offs = [int(getattr(o, "value", o)) for o in  # (.fn gives constexprs, which hash by identity)
                (scheduler.split_tile_offset.fn(p, BM, M, True) for p in range(-(-M // BM)))]
        covered = set()
        for off in offs:
            assert off >= 0 and (M < BM or off + BM - M < 32), (M, BM, off)
            covered.update(range(off, min(off + BM, M)))
        assert covered == set(range(M)), (M, BM)
        assert offs[:-1] == [p * BM for p in range(len(offs) - 1)] and offs[-1] % 16 == 0, (M, BM, offs)
        firsts = [off + h for off in offs for h in range(0, BM, ROWS)]
        assert len(set(firsts)) == len(firsts), (M, BM, ROWS, offs)


# ----------------------------------------------------------------------------- Hopper, offline


@functools.lru_cache(maxsize=None)
def compiled(kernel):
    return cc.compile_kernel(kernel, "sm_90a")


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ("cooperative-gelu", "pingpong-batched"))
def test_hopper_variants_compile_without_spills(kernel):
    f = compiled(kernel).facts()
    assert f.counts["wgmma"] > 0 and f.counts["UTMALDG"] > 0 and f.counts["UTMASTG"] > 0
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"
    assert 0 < f.shared_bytes <= SMEM_LIMIT


@pytest.mark.slow
def test_hopper_fused_epilogue_reads_bias_and_computes_gelu():
    fused_ptx = compiled("cooperative-gelu").asm["ptx"]
    plain_ptx = compiled("cooperative").asm["ptx"]
    loads = lambda ptx: len(re.findall(r"\bld\.global", ptx))  # noqa: E731
    assert loads(fused_ptx) > 0 and loads(plain_ptx) == 0, "the bias is the only plain global load"
    assert "ex2.approx" in fused_ptx and "ex2.approx" not in plain_ptx, "gelu's exp"


@pytest.mark.slow
def test_hopper_batched_uses_rank3_tma():
    ptx = compiled("pingpong-batched").asm["ptx"]
    assert re.search(r"cp\.async\.bulk\.tensor\.3d\.shared::(?:cluster|cta)\.global", ptx), "rank-3 TMA loads"
    assert re.search(r"cp\.async\.bulk\.tensor\.3d\.global\.shared", ptx), "rank-3 TMA stores"
    assert "tensor.3d" not in compiled("pingpong").asm["ptx"]


def test_hopper_kernel_refuses_an_unknown_activation_at_compile_time():
    from triton.compiler.errors import CompilationError

    from pingpong.hopper.host.config import KernelConfig
    from pingpong.hopper.host.launch import prepare

    a = torch.empty(256, 256, dtype=torch.bfloat16)
    fn, args, kwargs, grid = prepare(a, a, a.clone(), runtime_spec.EpilogueArgs(),
                                     KernelConfig(128, 128, 64, schedule="pingpong"), 132, "tanh")
    with cc.offline("sm_90a"), pytest.raises(CompilationError) as info:
        fn.warmup(*args, grid=grid, **kwargs)
    chain, e = [], info.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any("unknown activation" in text for text in chain)


def test_one_row_result_with_a_per_row_bias_on_the_interpreter():
    """M = 1 with a (1, 1) per-row bias and N = 17: the bias is one value for the one row
    (read as a 17-long column vector it reads past its end)."""
    from pingpong.portable import portable_gemm

    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(1, 32, generator=g).half(), torch.randn(32, 17, generator=g).half()
    bias = torch.randn(1, 1, generator=g)
    out = torch.full((1, 17), float("nan"), dtype=torch.float32)
    portable_gemm(a, b, out, bias=bias, activation="relu", interpret=True)
    ref = torch.relu(a.double() @ b.double() + bias.double())
    assert torch.allclose(out.double(), ref, rtol=1e-3, atol=1e-3)
