"""The portable kernel: Triton's interpreter against a float64 torch reference (CPU), and its
machine code for every offline target (no GPU needed)."""

import ast
import inspect
import itertools
import textwrap

import pytest
import torch

import triton.language as tl
from triton.runtime.jit import JITFunction

from closeness import NORM_BOUND, rel_norm
from pingpong import portable
from pingpong.portable import default_block, default_stages, portable_gemm
from pingpong.errors import PingpongError

# triton 3.6 interpreter: range() over a 1-element array warns in numpy >= 1.25 (harmless)
pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")

SIZES = (1, 17, 33)
LAYOUTS = ("nn", "nt", "tn", "tt")  # first letter A, second B: n = row-major, t = transposed view


def operand(rows, cols, dtype, transposed, gen):
    """A (rows, cols) matrix; `transposed` gives it as the .t() view of a (cols, rows) tensor."""
    if transposed:
        return torch.randn(cols, rows, generator=gen).to(dtype).t()
    return torch.randn(rows, cols, generator=gen).to(dtype)


def run_case(M, N, K, dtype, layout, *, alpha=1.0, beta=0.0, with_c=False, out_dtype=None, block=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = operand(M, K, dtype, layout[0] == "t", gen)
    b = operand(K, N, dtype, layout[1] == "t", gen)
    c = torch.randn(M, N, generator=gen).to(out_dtype or dtype) if with_c else None
    out = torch.full((M, N), float("nan"), dtype=out_dtype or dtype)  # poisoned: unwritten fails
    portable_gemm(a, b, out, alpha=alpha, beta=beta, c=c, block=block, interpret=True)
    ref = alpha * (a.double() @ b.double())
    if with_c:
        ref = ref + beta * c.double()
    return out, ref


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_interpreter_matches_torch_all_layouts(dtype, layout):
    for M, N, K in itertools.product(SIZES, SIZES, SIZES):
        out, ref = run_case(M, N, K, dtype, layout, seed=M * 10000 + N * 100 + K)
        assert not out.isnan().any(), f"{layout} {M}x{N}x{K}: unwritten elements"
        assert rel_norm(out, ref) < NORM_BOUND[dtype], f"{layout} {M}x{N}x{K}"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_alpha_beta_with_c(layout):
    out, ref = run_case(33, 17, 33, torch.float32, layout, alpha=2.5, beta=-0.75, with_c=True)
    assert rel_norm(out, ref) < 1e-5


def test_beta_zero_never_reads_c():
    """BLAS semantics: beta == 0 means C is not read, so NaN in C does not propagate."""
    a, b = torch.randn(17, 33), torch.randn(33, 17)
    c = torch.full((17, 17), float("nan"))
    out = torch.full((17, 17), float("nan"))
    portable_gemm(a, b, out, alpha=1.0, beta=0.0, c=c, interpret=True)
    assert rel_norm(out, a.double() @ b.double()) < 1e-5


def test_out_may_be_c_in_place():
    gen = torch.Generator().manual_seed(1)
    a, b, c = (torch.randn(s, generator=gen) for s in ((33, 17), (17, 33), (33, 33)))
    ref = 0.5 * (a.double() @ b.double()) + 2.0 * c.double()
    portable_gemm(a, b, c, alpha=0.5, beta=2.0, c=c, interpret=True)
    assert rel_norm(c, ref) < 1e-5


@pytest.mark.parametrize("with_c", [False, True])
def test_k_zero(with_c):
    out, ref = run_case(17, 33, 0, torch.float16, "nt", alpha=3.0, beta=0.5 if with_c else 0.0, with_c=with_c)
    assert not out.isnan().any()
    assert torch.equal(out.double(), ref)  # exactly beta * c, or zeros


def test_many_tiles_grouped_raster_and_strided_out():
    """Small blocks make a 5x4 tile grid (GROUP_M = 8 leaves a partial group); out is a
    column-major view, c a non-contiguous slice."""
    gen = torch.Generator().manual_seed(2)
    M, N, K = 70, 50, 40
    a = torch.randn(M, K, generator=gen)
    b = torch.randn(N, K, generator=gen).t()
    c = torch.randn(M, 2 * N, generator=gen)[:, ::2]
    out = torch.full((N, M), float("nan")).t()
    portable_gemm(a, b, out, alpha=1.0, beta=1.0, c=c, block=(16, 16, 16), interpret=True)
    assert rel_norm(out, a.double() @ b.double() + c.double()) < 1e-5


def test_fp16_inputs_fp32_output():
    out, ref = run_case(33, 33, 33, torch.float16, "tn", out_dtype=torch.float32)
    assert out.dtype == torch.float32 and rel_norm(out, ref) < 1e-3


def test_kernel_calls_no_jit_helpers():
    """The interpreted copy runs without TRITON_INTERPRET, so the kernel must not call
    triton.language functions that are themselves @triton.jit (tl.cdiv, tl.zeros, ...)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(portable._gemm_kernel)))
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "tl"}
    jitted = {name for name in used if isinstance(getattr(tl, name, None), JITFunction)}
    assert not jitted, f"kernel calls jit helpers {jitted}: the interpreter path would fail"


def test_interpreter_opt_in_leaves_gpu_kernel_alone():
    """interpret=True uses a separate InterpretedFunction; the GPU kernel stays a JITFunction
    (unless the whole process asked for the interpreter with TRITON_INTERPRET=1)."""
    import triton

    from triton.runtime.interpreter import InterpretedFunction

    assert isinstance(portable.interpreted_kernel(), InterpretedFunction)
    if not triton.knobs.runtime.interpret:
        assert isinstance(portable.gemm_kernel, JITFunction)


def test_default_block_rule():
    assert default_block(4096, 4096, 4096, torch.bfloat16) == (128, 128, 64)  # 128-byte K rows
    assert default_block(4096, 4096, 4096, torch.float32) == (128, 128, 32)
    assert default_block(1, 17, 0, torch.float16) == (16, 32, 16)
    assert default_stages((128, 128, 64), 2, 227 * 1024) == 4
    assert default_stages((128, 128, 64), 2, 64 * 1024, amd=True) == 2
    assert default_stages((128, 128, 64), 2, 16 * 1024) == 1


# --------------------------------------------------------------------------- offline machine code


@pytest.fixture(scope="module")
def facts():
    from pingpong.runtime.compile import compile_kernel

    cache = {}

    def get(target):
        if target not in cache:
            cache[target] = compile_kernel("portable", target).facts()
        return cache[target]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_compiles_for_cdna_with_mfma(facts, target):
    f = facts(target)
    assert f.counts["mfma"] > 0
    assert f.spill_bytes == 0 and f.shared_bytes <= f.shared_limit


@pytest.mark.slow
def test_compiles_for_rdna_with_wmma(facts):
    f = facts("gfx1151")
    assert f.counts["wmma"] > 0 and f.counts["mfma"] == 0
    assert f.spill_bytes == 0 and f.shared_bytes <= f.shared_limit


@pytest.mark.slow
def test_compiles_for_hopper_without_spills(facts):
    f = facts("sm_90a")
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0
    assert f.shared_bytes <= f.shared_limit
    assert f.counts["wgmma"] > 0  # Triton lowers tl.dot to wgmma on sm_90a


# --------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_compiled_kernel_on_gpu_bf16(layout):
    gen = torch.Generator(device="cuda").manual_seed(5)

    def op(rows, cols, t):
        x = torch.randn((cols, rows) if t else (rows, cols), generator=gen, device="cuda").to(torch.bfloat16)
        return x.t() if t else x

    M, N, K = 300, 200, 170  # no dimension a multiple of the tile
    a, b, c = op(M, K, layout[0] == "t"), op(K, N, layout[1] == "t"), op(M, N, False)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    portable_gemm(a, b, out, alpha=1.5, beta=0.5, c=c)
    assert rel_norm(out, 1.5 * (a.double() @ b.double()) + 0.5 * c.double()) < 1e-2


# ----------------------------------------------------------------------------- portable validation
# portable_gemm (the CPU opt-in, interpret=True) validates its arguments with the API's checks.

F16 = torch.float16


def t(*shape, dtype=F16):
    return torch.randn(*shape).to(dtype)


# ----------------------------------------------------------------------------- 7: portable_gemm validates


def _p(m=8, n=4, k=16, dtype=F16):
    return t(m, k, dtype=dtype), t(k, n, dtype=dtype), torch.full((m, n), float("nan"))


@pytest.mark.parametrize(
    "change, needle",
    [
        (dict(a=None), "a: expected a torch.Tensor, got NoneType"),
        (dict(out=None), "out: expected a torch.Tensor, got NoneType"),
        (dict(a=t(8, 15, dtype=F16)), "shape mismatch"),
        (dict(b=t(16, 4, dtype=torch.int32)), "b: dtype torch.int32 is not supported"),
        (dict(a=t(8, 16, dtype=torch.float64), b=t(16, 4, dtype=torch.float64)), "a: dtype torch.float64"),
        (dict(out=torch.empty(8, 5)), "out: expected shape \\(8, 4\\)"),
        (dict(out=torch.empty(8, 4, dtype=torch.int32)), "out: dtype torch.int32 is not supported"),
        (dict(bias=t(5, dtype=F16)), "bias: expected shape"),
        (dict(c=t(8, 5), beta=1.0), "c: expected shape"),
        (dict(activation="tanh"), "activation: expected None or one of"),
        (dict(alpha=float("nan")), "alpha: expected a finite"),
        (dict(beta=1.0), "beta: 1.0 scales c, but no c was given"),
    ],
    ids=lambda x: str(x)[:40] if isinstance(x, str) else None,
)
def test_portable_gemm_validates_its_arguments(change, needle):
    a, b, out = _p()
    args = {**dict(a=a, b=b, out=out), **change}
    with pytest.raises(PingpongError, match=needle):
        portable_gemm(args.pop("a"), args.pop("b"), args.pop("out"), interpret=True, **args)
    assert out.isnan().all()  # untouched


def test_portable_gemm_refuses_an_out_aliasing_a():
    buf = torch.randn(8, 20).half()
    a, b = buf[:, :16], t(16, 4, dtype=F16)
    out = buf[:, 12:16]  # inside a
    before = buf.clone()
    with pytest.raises(PingpongError, match="out must not share memory with a"):
        portable_gemm(a, b, out, interpret=True)
    assert torch.equal(buf, before)


def test_portable_gemm_refuses_a_self_overlapping_out_and_accepts_out_is_c():
    a, b = t(8, 16, dtype=F16), t(16, 4, dtype=F16)
    with pytest.raises(PingpongError, match="out: its elements overlap"):
        portable_gemm(a, b, torch.zeros(1, 4, dtype=F16).expand(8, 4), interpret=True)
    c = torch.randn(8, 4).half()
    ref = a.double() @ b.double() + c.double()
    portable_gemm(a, b, c, c=c, beta=1.0, interpret=True)  # in place on c: allowed
    assert torch.allclose(c.double(), ref, atol=1e-2, rtol=1e-2)
