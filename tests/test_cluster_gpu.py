"""GPU correctness of the 2-CTA cluster kernels (KernelConfig.cluster_m=2: the pair shares B
through TMA multicast). Same method as test_gemm_gpu / test_epilogue_gpu: fresh seeded random
inputs (seed printed), NaN-poisoned outputs, a float64 reference with a norm and an
elementwise bound; every call runs twice (the JIT launch, then the direct launch)."""

import itertools

import pytest
import torch

from pingpong import KernelConfig
from test_epilogue_gpu import run_case
from closeness import GEMM_BOUND, rel_err
from test_gemm_gpu import operand, run

pytestmark = pytest.mark.gpu

CLUSTERS = {
    "pingpong-128x128": KernelConfig(128, 128, 64, schedule="pingpong", cluster_m=2),
    "pingpong-64x128": KernelConfig(64, 128, 64, schedule="pingpong", cluster_m=2),
    "pingpong-64x256": KernelConfig(64, 256, 64, schedule="pingpong", cluster_m=2),
    "pingpong-64x64x128": KernelConfig(64, 64, 128, schedule="pingpong", cluster_m=2),
    # cooperative pairs: consumer-major rows, one A box per consumer (pipeline.Ring.allocate)
    "cooperative-128x256": KernelConfig(128, 256, 64, cluster_m=2),
    "cooperative-128x128": KernelConfig(128, 128, 64, cluster_m=2),
}
# M: 1 row, under one tile, one pair and a row, not a multiple of the pair's rows, large odd.
ODD_M = (1, 17, 129, 255, 1000, 4097)


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    print(f"generator seed {g.seed()}")
    return g


def twice(a, b, config, **kw):
    """The JIT launch and the direct launch of the same plan: both must be right."""
    return run(a, b, config, **kw), run(a, b, config, **kw)


@pytest.mark.parametrize("name", CLUSTERS)
@pytest.mark.parametrize("m,n,k", list(itertools.product(ODD_M, (17, 1000, 4097), (17, 4097))))
def test_odd_shapes(name, m, n, k, gen):
    a = operand(m, k, torch.bfloat16, False, gen)
    b = operand(k, n, torch.bfloat16, True, gen)
    ref = a.double() @ b.double()
    for out in twice(a, b, CLUSTERS[name]):
        assert rel_err(out, ref) < GEMM_BOUND[torch.bfloat16], (name, m, n, k)


@pytest.mark.parametrize("name", CLUSTERS)
@pytest.mark.parametrize("a_col,b_col", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_layouts(name, a_col, b_col, dtype, gen):
    a = operand(1000, 1500, dtype, a_col, gen)
    b = operand(1500, 700, dtype, b_col, gen)
    ref = a.double() @ b.double()
    for out in twice(a, b, CLUSTERS[name]):
        assert rel_err(out, ref) < GEMM_BOUND[dtype], (name, a_col, b_col, dtype)


@pytest.mark.parametrize("name", ["pingpong-128x128", "pingpong-64x256", "cooperative-128x256"])
@pytest.mark.parametrize("layout", ("nn", "nt", "tn", "tt"))
@pytest.mark.parametrize("bias_kind,activation", [("col", "gelu_erf"), ("row", "silu"), ("none", "none")])
def test_epilogue(name, layout, bias_kind, activation):
    """α, β·C, bias (per column or row) and the activation, on an odd shape."""
    run_case(1000, 777, 1001, layout=layout, bias_kind=bias_kind, activation=activation, config=CLUSTERS[name])


@pytest.mark.parametrize("name", CLUSTERS)
def test_fp32_out_and_alpha_beta(name, gen):
    a = operand(777, 512, torch.bfloat16, False, gen)
    b = operand(512, 999, torch.bfloat16, True, gen)
    c = torch.randn(777, 999, device="cuda", generator=gen)
    ref = 0.5 * (a.double() @ b.double()) + 2.0 * c.double()
    out = run(a, b, CLUSTERS[name], out_dtype=torch.float32, c=c, alpha=0.5, beta=2.0)
    assert rel_err(out, ref) < 1e-2


@pytest.mark.parametrize("name", CLUSTERS)
def test_repeatable_bitwise(name, gen):
    """A race (a slot refilled before both CTAs released it) shows as a moving result."""
    a = operand(4096, 4096, torch.bfloat16, False, gen)
    b = operand(4096, 4096, torch.bfloat16, True, gen)
    first = run(a, b, CLUSTERS[name])
    assert rel_err(first, a.double() @ b.double()) < 1e-2
    for _ in range(19):
        assert torch.equal(run(a, b, CLUSTERS[name]), first)
