"""GPU: batched products, (B, M, K) @ (B, K, N) in one launch (rank-3 TMA descriptors, the
batch index in the tile scheduler), with shared (2-D, batch size 1, batch stride 0) operands,
all four layouts, odd shapes whose tiles straddle matrix edges, and the fused epilogue;
against a float64 reference with a norm and an elementwise bound (tests/fused_reference.py)."""

import pytest
import torch

import pingpong
from fused_reference import check, matrix, new_seed, poisoned, reference
from pingpong import KernelConfig
from pingpong.api import _gemm_into
from pingpong.portable import portable_gemm

pytestmark = pytest.mark.gpu

SCHEDULES = {
    "persistent": KernelConfig(128, 256, 64, schedule="persistent"),
    "cooperative": KernelConfig(128, 256, 64, schedule="cooperative"),
    "pingpong": KernelConfig(128, 128, 64, schedule="pingpong"),
    # two 64-element k-steps per ring slot (select's small tiles): two rank-3 boxes per operand
    "pingpong_k128": KernelConfig(64, 64, 128, schedule="pingpong"),
    "pingpong_64x32_k128": KernelConfig(64, 32, 128, schedule="pingpong"),  # a launch-bound product of few rows
    "cooperative_k128": KernelConfig(128, 128, 128, schedule="cooperative"),
}
BF16 = torch.bfloat16
B = 3


def operands(kind, m, n, k, layout, gen, dtype=BF16):
    """(a, b) of a batched product: "both" batched, "shared_a"/"shared_b" 2-D, "stride0_b" an
    expanded weight (batch stride 0), "size1_b" a (1, K, N) weight."""
    a = matrix(() if kind == "shared_a" else (B,), m, k, dtype, layout[0] == "t", gen, "cuda")
    if kind in ("shared_b", "stride0_b"):
        b = matrix((), k, n, dtype, layout[1] == "t", gen, "cuda")
        b = b.expand(B, k, n) if kind == "stride0_b" else b
    else:
        b = matrix((1,) if kind == "size1_b" else (B,), k, n, dtype, layout[1] == "t", gen, "cuda")
    return a, b


KINDS = ("both", "shared_a", "shared_b", "stride0_b", "size1_b")


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", ("nn", "nt", "tn", "tt"))
def test_batched_layouts_and_sharing(schedule, kind, layout):
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    m, n, k = 255, 1000, 264  # 255 rows: the last row tile of each matrix ends inside it
    a, b = operands(kind, m, n, k, layout, gen)
    out = _gemm_into(poisoned((B, m, n), BF16, "cuda"), a, b, None, 1.0, 0.0, SCHEDULES[schedule])
    check(out, reference(a, b), k, seed)


@pytest.mark.parametrize("m,n,k", [(1, 17, 255), (17, 255, 1000), (255, 1, 17), (1000, 17, 1), (17, 1000, 255)])
@pytest.mark.parametrize("kind", ("both", "shared_b"))
def test_batched_odd_shapes_padded_paths(m, n, k, kind):
    """Odd K / N: 3-D operands and outputs take the 16-byte-padded copies."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, b = operands(kind, m, n, k, "nt", gen)
    out = pingpong.matmul(a, b)
    assert out.shape == (B, m, n)
    check(out, reference(a, b), k, seed)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("shared_c", (False, True), ids=("c", "shared_c"))
def test_batched_fused_epilogue(schedule, shared_c):
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    m, n, k = 300, 520, 200
    a, b = operands("both", m, n, k, "nt", gen)
    c = torch.randn(*(() if shared_c else (B,)), m, n, generator=gen, device="cuda").to(BF16)
    bias = torch.randn(n, generator=gen, device="cuda").to(BF16)
    out = _gemm_into(poisoned((B, m, n), BF16, "cuda"), a, b, c, 0.5, 2.0, SCHEDULES[schedule], bias, "gelu_erf")
    check(out, reference(a, b, alpha=0.5, beta=2.0, c=c, bias=bias, activation="gelu_erf"), k, seed)


def test_many_small_batches_in_place():
    """120 matrices of one tile each, column-major a, in place into an fp32 c, per-row bias."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = matrix((120,), 40, 64, BF16, True, gen, "cuda")
    b = matrix((120,), 64, 72, BF16, False, gen, "cuda")
    bias = torch.randn(40, 1, generator=gen, device="cuda")
    c = torch.randn(120, 40, 72, generator=gen, device="cuda")
    c0 = c.clone()
    pingpong.gemm_(c, a, b, alpha=1.0, beta=-1.0, bias=bias, activation="relu")
    check(c, reference(a, b, beta=-1.0, c=c0, bias=bias, activation="relu"), 64, seed)


def test_headline_shape_against_bmm():
    """(16, 2048, 2048) @ (16, 2048, 2048), the benchmark shape."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(16, 2048, 2048, generator=gen, device="cuda").to(BF16)
    b = torch.randn(16, 2048, 2048, generator=gen, device="cuda").to(BF16)
    out = pingpong.matmul(a, b)
    check(out, reference(a, b), 2048, seed)
    torch.testing.assert_close(out, torch.bmm(a, b), rtol=2e-2, atol=2e-1)


@pytest.mark.parametrize("kind", KINDS)
def test_portable_kernel_batched_on_gpu(kind):
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    m, n, k = 255, 1000, 17
    a, b = operands(kind, m, n, k, "tn", gen)
    bias = torch.randn(n, generator=gen, device="cuda")
    out = portable_gemm(a, b, poisoned((B, m, n), BF16, "cuda"), bias=bias, activation="silu")
    check(out, reference(a, b, bias=bias, activation="silu"), k, seed)
