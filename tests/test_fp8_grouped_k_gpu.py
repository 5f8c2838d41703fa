"""GPU: the FP8 K-grouped kernel (pingpong.hopper.kernels.fp8_grouped_k, the MoE weight
gradient dW_g = dY_gᵀ·X_g) against float64 products of its fp8 operands and scales (exact
inputs: the bound is the fp32 accumulation and the output's rounding), outputs poisoned with
NaN first: experts of 0, 1, 127, 128, 129 and 300 tokens (empty ones first, last and in a row),
both tiles (cooperative 128×128, ping-pong 64×128), row- and block-wise scales, the columns
past the last expert's run holding NaN (never read), bitwise repeatability, and 128 experts;
then the same product from pingpong.quantize_groups_t's operands."""

import pytest
import torch

from fused_reference import new_seed
from pingpong import KernelConfig, fp8_grouped, quantize_fp8, quantize_groups_t
from pingpong.hopper.host import fp8_grouped_k as host

pytestmark = pytest.mark.gpu
E4M3 = torch.float8_e4m3fn
CONFIGS = {"cooperative": KernelConfig(128, 128, 128, schedule="cooperative"),
           "pingpong": KernelConfig(64, 128, 128, schedule="pingpong")}
SIZES = {"mixed": [0, 1, 127, 0, 0, 128, 129, 300, 0], "one": [300], "empty": [0, 0]}


def padded(sizes):
    runs = [128 * -(-t // 128) for t in sizes]
    return torch.tensor(runs, dtype=torch.int32).cumsum(0, dtype=torch.int32), runs


def operands(M, N, sizes, scaling, gen):
    """a (M, TP), b (N, TP) fp8 with each expert's tokens in its run, zeros after them, NaN in the
    columns past the last run; the scales (row: (G, M), (G, N); block: (TP/128, ·)) in [1/8, 8)."""
    poffs, runs = padded(sizes)
    T = sum(sizes)
    TP = 16 * -(-T // 16) + 128 * len(sizes)
    a = torch.full((M, TP), float("nan"), device="cuda").to(E4M3)
    b = torch.full((N, TP), float("nan"), device="cuda").to(E4M3)
    start = 0
    for t, run in zip(sizes, runs):
        for x in (a, b):
            x[:, start:start + run] = 0
            x[:, start:start + t] = (torch.randn(x.shape[0], t, generator=gen, device="cuda") * 4).to(E4M3)
        start += run
    rows = len(sizes) if scaling == "row" else TP // 128
    sa, sb = (torch.exp2(torch.randint(-3, 3, (rows, n), generator=gen, device="cuda").float()) for n in (M, N))
    return a, b, sa, sb, poffs.cuda()


def reference(a, b, sa, sb, poffs, scaling):
    """(out, mag) in float64 from the operands as the kernel reads them (a run's padding is zero):
    out[g] and |a|·|b| with the same scales (the accumulation bound's scale)."""
    ends = poffs.tolist()
    out, mag = [], []
    for g, end in enumerate(ends):
        start = ends[g - 1] if g else 0
        x, y = a[:, start:end].double(), b[:, start:end].double()
        if scaling == "row":
            x, y = x * sa[g].double()[:, None], y * sb[g].double()[:, None]
        else:  # each 128-token block's scales
            x = x * sa[start // 128:end // 128].double().t().repeat_interleave(128, 1)
            y = y * sb[start // 128:end // 128].double().t().repeat_interleave(128, 1)
        out.append(x @ y.t())
        mag.append(x.abs() @ y.abs().t())
    return torch.stack(out), torch.stack(mag)


def check(out, ref, mag, seed):
    """tests/test_fp8_grouped_gpu.py's bounds: 2^-8 relative (one rounding to bf16; in fp32, the
    fp8 wgmma's reduced-precision sum inside each 128-deep block, relative to its size) plus
    2^-12 of |a|·|b| (the promoted accumulation); the relative norm error within 2^-8; NaN never
    passes."""
    got = out.double()
    assert torch.isfinite(got).all(), f"seed {seed}: non-finite (unwritten) outputs"
    err = (got - ref).abs()
    allowed = 2.0 ** -8 * ref.abs() + 2.0 ** -12 * mag  # (fp32 out too: the fp8 accumulator's truncation)
    bad = err > allowed
    assert not bad.any(), f"seed {seed}: |out - ref| {err[bad].max().item():.3g} above the bound at {bad.nonzero()[0]}"
    rel = (err.square().sum() / ref.square().sum().clamp_min(1e-300)).sqrt().item()
    assert rel <= 2.0 ** -8, f"seed {seed}: relative norm error {rel:.3g}"


def run(a, b, sa, sb, poffs, scaling, out_dtype=torch.bfloat16):
    out = torch.full((poffs.shape[0], a.shape[0], b.shape[0]), float("nan"), dtype=out_dtype, device="cuda")
    return fp8_grouped.scaled_grouped_k_mm_direct(a, b, sa, sb, poffs, scaling, out_dtype, out)


@pytest.mark.parametrize("sizes", list(SIZES))
@pytest.mark.parametrize("scaling", ["row", "block"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_product_against_float64(config, scaling, sizes, monkeypatch):
    monkeypatch.setattr(host, "select_fp8_grouped_k_config", lambda M, N: CONFIGS[config])
    seed = new_seed()
    gen = torch.Generator("cuda").manual_seed(seed)
    M, N = (208, 272) if config == "cooperative" else (48, 144)  # partial tiles in both dimensions
    a, b, sa, sb, poffs = operands(M, N, SIZES[sizes], scaling, gen)
    out = run(a, b, sa, sb, poffs, scaling)
    check(out, *reference(a, b, sa, sb, poffs, scaling), seed)
    again = run(a, b, sa, sb, poffs, scaling)
    assert torch.equal(out.view(torch.int16), again.view(torch.int16)), f"not bitwise repeatable (seed {seed})"


@pytest.mark.parametrize("M", [256, 64])  # cooperative, ping-pong: several units per program, counted
@pytest.mark.parametrize("scaling", ["row", "block"])
def test_many_experts_in_fp32(scaling, M):
    seed = new_seed()
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(0, 400, (128,), generator=gen).tolist()
    sizes[:3] = [0, 0, 0]
    a, b, sa, sb, poffs = operands(M, 384, sizes, scaling, torch.Generator("cuda").manual_seed(seed))
    out = run(a, b, sa, sb, poffs, scaling, torch.float32)
    check(out, *reference(a, b, sa, sb, poffs, scaling), seed)


@pytest.mark.parametrize("granularity", ["row", "block"])
def test_quantize_groups_t_is_quantize_fp8_of_each_expert(granularity):
    """quantize_groups_t on the GPU, bf16 (the interpreter tests run fp16): each expert's run and
    scales bitwise what quantize_fp8 gives its tokens transposed and zero-padded to the run; the
    padding zero; poffs the runs' ends."""
    seed = new_seed()
    gen = torch.Generator("cuda").manual_seed(seed)
    sizes = [0, 1, 127, 128, 129, 300, 0]
    T, C = sum(sizes) + 5, 272
    x = (torch.randn(T, C, generator=gen, device="cuda") * torch.exp2(
        torch.randint(-4, 5, (1, C), generator=gen, device="cuda").float())).to(torch.bfloat16)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    qt, s, poffs = quantize_groups_t(x, offs, E4M3, granularity)
    want_poffs, runs = padded(sizes)
    assert poffs.tolist() == want_poffs.tolist(), f"seed {seed}"
    start = p = 0
    for g, (t, run_) in enumerate(zip(sizes, runs)):
        if t:
            padded_x = torch.zeros(C, run_, dtype=x.dtype, device="cuda")
            padded_x[:, :t] = x[start:start + t].t()
            q, sc = quantize_fp8(padded_x, granularity, E4M3)
            assert torch.equal(qt[:, p:p + run_].view(torch.uint8), q.view(torch.uint8)), f"seed {seed}: expert {g}"
            got = s[g] if granularity == "row" else s[p // 128:(p + run_) // 128].t()
            assert torch.equal(got, sc.view(-1) if granularity == "row" else sc), f"seed {seed}: expert {g}'s scales"
        start, p = start + t, p + run_
