"""GPU: the fused epilogue, act(α·a@b + bias) + β·c, on the Hopper kernel (every schedule)
and on the portable kernel compiled for the GPU, against a float64 reference with a norm and
an elementwise bound (tests/fused_reference.py). Outputs are NaN-poisoned before each run;
inputs are fresh random normals; the seed is in every failure message."""

import itertools

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
    # 64-column sub-tiles: the bias slice of each sub-tile starts at off_n + 64·i
    "cooperative-subtiled": KernelConfig(128, 256, 64, schedule="cooperative", epilogue_n=64),
}
ACTS = ("none", "relu", "gelu_erf", "gelu_tanh", "silu")
ODD = (1, 17, 255, 1000)
BF16 = torch.bfloat16


def make_bias(kind, m, n, dtype, gen):
    if kind == "col":
        return torch.randn(n, generator=gen, device="cuda").to(dtype)
    if kind == "row":
        return torch.randn(m, 1, generator=gen, device="cuda").to(dtype)
    return None


def run_case(m, n, k, *, layout="nt", dtype=BF16, out_dtype=None, bias_kind="col", bias_dtype=None, activation="gelu_erf",
             with_c=True, alpha=0.75, beta=-1.25, config=None, seed=None):
    seed = new_seed() if seed is None else seed
    gen = torch.Generator(device="cuda").manual_seed(seed)
    out_dtype = out_dtype or dtype
    a = matrix((), m, k, dtype, layout[0] == "t", gen, "cuda")
    b = matrix((), k, n, dtype, layout[1] == "t", gen, "cuda")
    c = torch.randn(m, n, generator=gen, device="cuda").to(out_dtype) if with_c else None
    beta = beta if with_c else 0.0  # β without c is refused
    bias = make_bias(bias_kind, m, n, bias_dtype or dtype, gen)
    out = _gemm_into(poisoned((m, n), out_dtype, "cuda"), a, b, c, alpha, beta, config, bias, activation)
    check(out, reference(a, b, alpha=alpha, beta=beta, c=c, bias=bias, activation=activation), k, seed)


# Every combination on the default schedule; on the others, the two transcendental activations
# with each bias kind and a residual (each case is a separate kernel compile).
COMBOS = [("cooperative", act, bias, c) for act, bias, c in itertools.product(ACTS, ("none", "col", "row"), (False, True))]
COMBOS += [(s, act, bias, True) for s in SCHEDULES if s != "cooperative"
           for act, bias in itertools.product(("gelu_erf", "silu"), ("col", "row"))]


@pytest.mark.parametrize("schedule, activation, bias_kind, with_c", COMBOS)
def test_every_activation_bias_and_residual(schedule, activation, bias_kind, with_c):
    run_case(1000, 1032, 520, bias_kind=bias_kind, activation=activation, with_c=with_c, config=SCHEDULES[schedule])


SPLIT = {  # the two-kernel path: fp32 partials, then the reduction applies α, bias, act, β·C
    "swap-ab+split2": (KernelConfig(128, 16, 64, split_k=2, swap_ab=True), (16, 1000, 4096)),
    "split4": (KernelConfig(128, 128, 64, split_k=4), (255, 1000, 8192)),
}


@pytest.mark.parametrize("split", SPLIT)
@pytest.mark.parametrize("activation", ("gelu_erf", "silu"))
@pytest.mark.parametrize("bias_kind", ("col", "row"))
def test_split_k_and_swap_ab_reduction_applies_the_epilogue(split, activation, bias_kind):
    config, (m, n, k) = SPLIT[split]
    run_case(m, n, k, bias_kind=bias_kind, activation=activation, config=config)


@pytest.mark.parametrize("m,n,k", list(itertools.product(ODD, ODD, ODD)))
@pytest.mark.parametrize("bias_kind", ("col", "row"))
def test_odd_shapes(m, n, k, bias_kind):
    """Default configs (M ≤ 64: swap-AB, the fused reduction); ragged tiles mask the bias
    loads; odd N takes the padded output path."""
    run_case(m, n, k, bias_kind=bias_kind, activation="gelu_tanh")


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("layout", ("nn", "nt", "tn", "tt"))
def test_layouts(schedule, layout):
    run_case(255, 1000, 264, layout=layout, activation="silu", config=SCHEDULES[schedule])


@pytest.mark.parametrize("layout", ("nn", "nt", "tn", "tt"))
def test_layouts_fp16(layout):
    run_case(255, 1000, 264, layout=layout, dtype=torch.float16, activation="gelu_tanh", bias_kind="row")


@pytest.mark.parametrize("out_dtype, bias_dtype", [(torch.float32, BF16), (BF16, torch.float32), (torch.float16, torch.float16)])
def test_output_and_bias_dtypes(out_dtype, bias_dtype):
    run_case(512, 384, 256, out_dtype=out_dtype, bias_dtype=bias_dtype, activation="relu")


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("activation", ACTS)
def test_activation_formula_at_fp32_precision(schedule, activation):
    """K = 1 and b = 1: the accumulator is exactly z on a grid over [-8, 8] (fp16-exact
    steps of 1/64), so act(z) is checked in fp32 (gelu_erf and gelu_tanh differ by ~5e-4)."""
    z = torch.arange(-512, 513, device="cuda", dtype=torch.float32).div(64).to(torch.float16).reshape(-1, 1)
    ones = torch.ones(1, 256, device="cuda", dtype=torch.float16)
    out = _gemm_into(poisoned((z.shape[0], 256), torch.float32, "cuda"), z, ones, None, 1.0, 0.0,
                     SCHEDULES[schedule], None, activation)
    check(out, reference(z, ones, activation=activation), 1, 0)
    for other in ACTS:
        if other != activation:
            assert (out.double() - reference(z, ones, activation=other)).abs().max() > 1e-4, other


def test_public_gemm_and_in_place():
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, w = matrix((), 300, 200, BF16, False, gen, "cuda"), matrix((), 520, 200, BF16, False, gen, "cuda")
    bias = torch.randn(520, generator=gen, device="cuda").to(BF16)
    y = pingpong.gemm(a, w.t(), bias=bias, activation="gelu_tanh")
    check(y, reference(a, w.t(), bias=bias, activation="gelu_tanh"), 200, seed)
    c = torch.randn(300, 520, generator=gen, device="cuda").to(torch.float32)
    c0 = c.clone()
    pingpong.gemm_(c, a, w.t(), alpha=0.5, beta=1.0, bias=bias, activation="relu")
    check(c, reference(a, w.t(), alpha=0.5, beta=1.0, c=c0, bias=bias, activation="relu"), 200, seed)


@pytest.mark.parametrize("activation", ACTS)
@pytest.mark.parametrize("bias_kind", ("none", "col", "row"))
def test_portable_kernel_on_gpu(activation, bias_kind):
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    m, n, k = 255, 1000, 17
    a, b = matrix((), m, k, BF16, True, gen, "cuda"), matrix((), k, n, BF16, False, gen, "cuda")
    c = torch.randn(m, n, generator=gen, device="cuda").to(BF16)
    bias = make_bias(bias_kind, m, n, BF16, gen)
    out = portable_gemm(a, b, poisoned((m, n), BF16, "cuda"), alpha=1.5, beta=0.5, c=c, bias=bias,
                        activation=activation)
    check(out, reference(a, b, alpha=1.5, beta=0.5, c=c, bias=bias, activation=activation), k, seed)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("activation", ACTS)
def test_nan_and_inf_pass_the_activation_as_in_torch(schedule, activation):
    """A NaN or ±inf pre-activation (from the bias) comes out of the Hopper epilogue as torch's
    activation gives it: relu(NaN) is NaN (torch.relu), not the 0 of a max that drops NaNs."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    m, n, k = 200, 384, 128
    a = torch.randn(m, k, generator=gen, device="cuda").to(BF16)
    b = torch.randn(k, n, generator=gen, device="cuda").to(BF16)
    bias = torch.randn(n, generator=gen, device="cuda").to(BF16)
    bias[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -1e4, 1e4])
    # poisoned with a finite value: a NaN expected in the result must come from the kernel
    out = _gemm_into(torch.full((m, n), 12345.0, dtype=BF16, device="cuda"), a, b, None, 1.0, 0.0,
                     SCHEDULES[schedule], bias, activation)
    act = {"none": lambda z: z, "relu": torch.relu, "silu": torch.nn.functional.silu,
           "gelu_erf": torch.nn.functional.gelu,
           "gelu_tanh": lambda z: torch.nn.functional.gelu(z, approximate="tanh")}[activation]
    want = act(a.double() @ b.double() + bias.double()).to(BF16)
    torch.testing.assert_close(out.double(), want.double(), rtol=2e-2, atol=0.5, equal_nan=True,
                               msg=lambda s: f"{s} (seed {seed})")
