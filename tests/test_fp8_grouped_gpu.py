"""GPU: scaled_grouped_mm (FP8 grouped GEMM) against a float64 per-group product of the
dequantized operands: ragged groups of 0, 1, 17, 255 and 1000 rows on every tile variant
(promoted and fast accumulation), per-row and per-(group, column) scales spread over 2^±4
(a scale of the wrong row, group or column fails), outputs poisoned with NaN (rows past the
last end stay unwritten), norm and elementwise bounds no worse than torch._scaled_grouped_mm's
own error on the same inputs (where torch has the op), tensor-wise scales, 256 and 300 groups,
CUDA-graph replay with offsets changed between replays, torch.compile, bitwise repeatability.
Block-wise (DeepSeek-V3's 1×128 a scales, 128×128 b scales per group): the same ragged
groups with every scale element different (2^±4), so a scale of the wrong row, K block,
column block or group fails the elementwise bound; use_fast_accum ignored (promoted)."""

import math

import pytest
import torch

import pingpong
from fused_reference import new_seed, offsets as group_ends
from pingpong import KernelConfig
from pingpong import fp8_grouped as fg
from pingpong.hopper.host import fp8_grouped as kernel
from pingpong.runtime import plan as plan_mod
from pingpong.runtime.spec import EpilogueArgs

pytestmark = pytest.mark.gpu
E4M3 = torch.float8_e4m3fn
SIZES = [0, 1, 17, 255, 1000]
#: name -> (config, use_fast_accum)
CONFIGS = {
    "cooperative_128x128": (KernelConfig(128, 128, 128, schedule="cooperative"), False),
    "pingpong_64x128": (KernelConfig(64, 128, 128, schedule="pingpong"), False),
    "cooperative_128x256_fast": (KernelConfig(128, 256, 128, schedule="cooperative"), True),
    "pingpong_64x256_fast": (KernelConfig(64, 256, 128, schedule="pingpong"), True),
}


@pytest.fixture(autouse=True)
def fresh_plans():
    """Plans are cached by signature, not by the (monkeypatched) tile: start each test empty."""
    plan_mod.PLANS.clear()
    yield
    plan_mod.PLANS.clear()


def use_config(monkeypatch, name):
    config, _ = CONFIGS[name]
    monkeypatch.setattr(kernel, "select_fp8_grouped_config", lambda T, G, N, promote: config)


def offsets(sizes):
    return group_ends(sizes, "cuda")


def spread_scales(shape, gen):
    """fp32 scales whose values differ by up to 2^±4 (times a uniform factor in [0.5, 1))."""
    e = torch.randint(-4, 5, shape, generator=gen, device="cuda").float()
    return (torch.exp2(e) * (0.5 + 0.5 * torch.rand(shape, generator=gen, device="cuda"))).contiguous()


def case(sizes, K, N, seed, extra=7, tensor_wise=False):
    """(a, b, scale_a, scale_b, offs): fp8 operands of random normal values, b the K-major view
    of (G, N, K) weights, T = sum(sizes) + extra rows past the last end."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    G, T = len(sizes), sum(sizes) + extra
    a = torch.randn(T, K, generator=gen, device="cuda").to(E4M3)
    w = torch.randn(G, N, K, generator=gen, device="cuda").to(E4M3)
    if tensor_wise:
        sa, sb = spread_scales((1,), gen), spread_scales((G,), gen)
    else:
        sa, sb = spread_scales((T,), gen), spread_scales((G, N), gen)
    return a, w.transpose(1, 2), sa, sb, offsets(sizes)


def block_case(sizes, K, N, seed, extra=7):
    """(a, b, scale_a, scale_b, offs) with block scales: scale_a (T, K/128) outer-dim-major
    (quantize_fp8(x, "block")'s layout), scale_b (G, N/128, K/128), every element its own."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    G, T = len(sizes), sum(sizes) + extra
    a = torch.randn(T, K, generator=gen, device="cuda").to(E4M3)
    w = torch.randn(G, N, K, generator=gen, device="cuda").to(E4M3)
    sa = spread_scales((K // 128, T), gen).t()
    sb = spread_scales((G, N // 128, K // 128), gen)
    return a, w.transpose(1, 2), sa, sb, offsets(sizes)


def dequantized(a, b, sa, sb, g, s, e):
    """Group g's rows s..e-1 of a and its b[g], dequantized in float64."""
    if sb.dim() == 3:  # block-wise: scale_a per (row, 128-deep K block), scale_b per 128×128 block of w[g]
        x = a[s:e].double() * sa[s:e].double().repeat_interleave(128, 1)
        return x, b[g].double() * sb[g].double().repeat_interleave(128, 0).repeat_interleave(128, 1).t()
    sa_g = (sa if sa.numel() == 1 else sa[s:e]).double().reshape(-1, 1)
    sb_g = (sb if sb.numel() == 1 else sb[g]).double().reshape(1, -1)
    return a[s:e].double() * sa_g, b[g].double() * sb_g


def reference(a, b, sa, sb, offs):
    """[(rows, float64 product of the dequantized operands)] per group; and |a|·|b| (the
    elementwise accumulation bound's scale)."""
    ends = offs.tolist()
    out = []
    for g, (s, e) in enumerate(zip([0] + ends[:-1], ends)):
        if e <= s:
            continue
        x, w = dequantized(a, b, sa, sb, g, s, e)
        out.append((slice(s, e), x @ w, x.abs() @ w.abs()))
    return out


def torch_result(a, b, sa, sb, offs, fast):
    """torch._scaled_grouped_mm on the same inputs, or None where this torch lacks it (or
    refuses these scales: block-wise ones)."""
    if not hasattr(torch, "_scaled_grouped_mm") or sb.dim() == 3:
        return None
    try:
        return torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=fast)
    except (RuntimeError, ValueError, TypeError):
        return None


def check(out, a, b, sa, sb, offs, fast, seed, tail_poisoned=True):
    """Both bounds per group; NaN never passes; rows past the last end are still NaN."""
    theirs = torch_result(a, b, sa, sb, offs, fast)
    end = int(offs[-1])
    assert not tail_poisoned or out[end:].isnan().all(), f"seed {seed}: rows past offs[-1] were written"
    num = den = num_t = 0.0
    worst = worst_t = 0.0
    for rows, ref, mag in reference(a, b, sa, sb, offs):
        got = out[rows].double()
        assert torch.isfinite(got).all(), f"seed {seed}: non-finite (unwritten) rows in {rows}"
        err = (got - ref).abs()
        # one rounding to bf16 (2^-8 relative) + the accumulation: promoted, fp32 across 128-deep
        # blocks; fast, the fp8 wgmma's reduced-precision accumulator over all of K (block-wise
        # scales always promote)
        fast = fast and sb.dim() != 3
        allowed = 2.0 ** -8 * ref.abs() + 2.0 ** (-10 if fast else -12) * mag
        bad = (err > allowed)
        assert not bad.any(), (f"seed {seed}: rows {rows}: |out - ref| {err[bad].max().item():.3g} above the bound at"
                               f" {bad.nonzero()[0].tolist()}")
        num, den = num + err.square().sum().item(), den + ref.square().sum().item()
        worst = max(worst, (err / (ref.abs() + mag * 2.0 ** -4)).max().item())
        if theirs is not None:
            e_t = (theirs[rows].double() - ref).abs()
            num_t = num_t + e_t.square().sum().item()
            worst_t = max(worst_t, (e_t / (ref.abs() + mag * 2.0 ** -4)).max().item())
    rel = math.sqrt(num / max(den, 1e-300))
    assert rel < 1e-2, f"seed {seed}: relative norm error {rel:.3g}"
    if theirs is not None:
        rel_t = math.sqrt(num_t / max(den, 1e-300))
        assert rel <= 1.25 * rel_t + 1e-5, f"seed {seed}: norm error {rel:.3e} vs torch._scaled_grouped_mm {rel_t:.3e}"
        assert worst <= 1.25 * worst_t + 1e-6, f"seed {seed}: worst scaled error {worst:.3e} vs torch's {worst_t:.3e}"


def run_into(out, a, b, sa, sb, offs, fast):
    """The kernel into a given (poisoned) out, through the front end's plan."""
    fg._plan(a, b, sa, sb, offs, out.dtype, fast).run(a, b, out, EpilogueArgs(scale_a=sa, scale_b=sb, offs=offs))
    return out


def poisoned(T, N, dtype=torch.bfloat16):
    return torch.full((T, N), float("nan"), dtype=dtype, device="cuda")


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("order", ["up", "down"])
def test_ragged_groups_every_tile(monkeypatch, config, order):
    """Groups of 0, 1, 17, 255, 1000 rows (or the reverse: the last group empty), 7 rows past
    the last end left unwritten; K = 640 (5 promotions), N = 528 (a cut column tile)."""
    use_config(monkeypatch, config)
    fast = CONFIGS[config][1]
    seed = new_seed()
    sizes = SIZES[::-1] if order == "down" else SIZES
    a, b, sa, sb, offs = case(sizes, 640, 528, seed)
    out = run_into(poisoned(a.shape[0], 528), a, b, sa, sb, offs, fast)
    check(out, a, b, sa, sb, offs, fast, seed)


@pytest.mark.parametrize("fast", [False, True])
def test_public_call_tensor_wise_and_per_group_scales(fast):
    """The public function (its own out, the allocator's next block poisoned first), one scale
    for a and one per group of b; and fp32 output."""
    seed = new_seed()
    a, b, sa, sb, offs = case([40, 0, 300, 129], 256, 384, seed, tensor_wise=True)
    p = poisoned(a.shape[0], 384)
    del p
    out = pingpong.scaled_grouped_mm(a, b, sa, sb, offs, use_fast_accum=fast)
    assert out.dtype == torch.bfloat16 and out.shape == (a.shape[0], 384)
    check(out, a, b, sa, sb, offs, fast, seed)
    out32 = pingpong.scaled_grouped_mm(a, b, sa, sb, offs, out_dtype=torch.float32, use_fast_accum=fast)
    assert out32.dtype == torch.float32
    check(out32, a, b, sa, sb, offs, fast, seed, tail_poisoned=False)


@pytest.mark.parametrize("make", ["row", "block"])
@pytest.mark.parametrize("groups", [256, 300])
def test_many_groups(groups, make):
    """DeepSeek-V3's 256 experts (and 300: a 512-entry group table, fewer consumer registers)
    with random sizes, a quarter of them empty, row-wise and block-wise scales: the producer's
    registers grow with the table (no spills)."""
    seed = new_seed()
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(0, 40, (groups,), generator=gen)
    sizes[torch.randperm(groups, generator=gen)[: groups // 4]] = 0
    a, b, sa, sb, offs = (case if make == "row" else block_case)(sizes.tolist(), 512, 256, seed)
    out = run_into(poisoned(a.shape[0], 256), a, b, sa, sb, offs, False)
    check(out, a, b, sa, sb, offs, False, seed)


def test_cuda_graph_replays_with_new_offsets():
    """Captured once; the offsets (device data) change between replays, the results follow."""
    seed = new_seed()
    first, second = [100, 0, 500, 33], [1, 400, 200, 0]
    a, b, sa, sb, offs = case(first, 384, 256, seed, extra=sum(second) - sum(first) + 50)
    out = poisoned(a.shape[0], 256)
    run_into(out, a, b, sa, sb, offs, False)  # compile + bind outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_into(out, a, b, sa, sb, offs, False)
    for sizes in (first, second, first):
        out.fill_(float("nan"))
        offs.copy_(offsets(sizes))
        graph.replay()
        torch.cuda.synchronize()
        check(out, a, b, sa, sb, offs, False, seed)


def test_compiled_call_matches_eager():
    """torch.compile(fullgraph=True) traces the op (fake implementation) and runs the kernel."""
    seed = new_seed()
    a, b, sa, sb, offs = case([64, 300, 0, 17], 256, 256, seed)
    fn = torch.compile(lambda *x: pingpong.scaled_grouped_mm(*x), fullgraph=True, backend="aot_eager")
    end = int(offs[-1])
    assert torch.equal(fn(a, b, sa, sb, offs)[:end], pingpong.scaled_grouped_mm(a, b, sa, sb, offs)[:end])


@pytest.mark.parametrize("fast", [False, True])
def test_bitwise_repeatable(fast):
    seed = new_seed()
    a, b, sa, sb, offs = case([500, 3, 0, 1200, 77], 1024, 768, seed)
    end = int(offs[-1])
    first = pingpong.scaled_grouped_mm(a, b, sa, sb, offs, use_fast_accum=fast)[:end]
    for _ in range(10):
        assert torch.equal(pingpong.scaled_grouped_mm(a, b, sa, sb, offs, use_fast_accum=fast)[:end], first), \
            f"seed {seed}: results differ between runs"


def test_grad_is_refused_on_a_cached_signature():
    a, b, sa, sb, offs = case([10, 20], 128, 128, 0)
    pingpong.scaled_grouped_mm(a, b, sa, sb, offs)
    with pytest.raises(pingpong.PingpongError, match="requires grad"):
        pingpong.scaled_grouped_mm(a, b, sa.clone().requires_grad_(), sb, offs)


# ----------------------------------------------------------------------------- block-wise scales

PROMOTED = [name for name, (_, fast) in CONFIGS.items() if not fast]


@pytest.mark.parametrize("config", PROMOTED)
@pytest.mark.parametrize("order", ["up", "down"])
@pytest.mark.parametrize("fast", [False, True])
def test_block_ragged_groups_every_tile(monkeypatch, config, order, fast):
    """Block scales over groups of 0, 1, 17, 255, 1000 rows (starts at every row phase mod 4:
    the sa box's gather), K = 640 (5 K blocks: the promoted loop's odd tail), N = 384 (3
    column blocks); use_fast_accum=True promotes all the same (the promoted bound holds)."""
    use_config(monkeypatch, config)
    seed = new_seed()
    sizes = SIZES[::-1] if order == "down" else SIZES
    a, b, sa, sb, offs = block_case(sizes, 640, 384, seed)
    out = run_into(poisoned(a.shape[0], 384), a, b, sa, sb, offs, fast)
    check(out, a, b, sa, sb, offs, fast, seed)


def test_block_public_call_from_quantize_fp8():
    """The user's path: bf16 x and (G, N, K) weights quantized by pingpong.quantize_fp8 ("block",
    "block128x128"), T % 4 ≠ 0 (scale_a's rows copied to a padded buffer for TMA), bf16 and fp32
    out; against float64 of the dequantized operands."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sizes, K, N = [130, 0, 77, 301], 384, 256
    G, T = len(sizes), sum(sizes) + 5
    x = torch.randn(T, K, generator=gen, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(G * N, K, generator=gen, device="cuda", dtype=torch.bfloat16)
    a, sa = pingpong.quantize_fp8(x, "block")
    q, sb = pingpong.quantize_fp8(w, "block128x128")
    b, sb = q.view(G, N, K).transpose(1, 2), sb.view(G, N // 128, K // 128)
    offs = offsets(sizes)
    p = poisoned(T, N)
    del p
    out = pingpong.scaled_grouped_mm(a, b, sa, sb, offs)
    assert out.shape == (T, N) and out.dtype == torch.bfloat16
    check(out, a, b, sa, sb, offs, False, seed)
    out32 = pingpong.scaled_grouped_mm(a, b, sa, sb, offs, out_dtype=torch.float32)
    check(out32, a, b, sa, sb, offs, False, seed, tail_poisoned=False)


def test_block_bitwise_repeatable():
    seed = new_seed()
    a, b, sa, sb, offs = block_case([500, 3, 0, 1200, 77], 1024, 768, seed)
    end = int(offs[-1])
    first = pingpong.scaled_grouped_mm(a, b, sa, sb, offs)[:end]
    for _ in range(10):
        assert torch.equal(pingpong.scaled_grouped_mm(a, b, sa, sb, offs)[:end], first), \
            f"seed {seed}: results differ between runs"
