"""GPU correctness of the stream-K kernels, bf16/fp16 and FP8 (marker `gpu`).

Every check: random normal inputs, the output and the fp32 workspace poisoned with NaN before
the run, compared with a float64 reference (tests/fused_reference.py's bounds); the arrival
counters must come back to zero. The launches are built by hand on the real SM count and on
small grids (7, 20 programs), so that the same shapes run all-streamed, hybrid (whole
data-parallel waves + a streamed remainder) and data-parallel decompositions.
"""

import itertools

import pytest
import torch

from fused_reference import check, new_seed, reference
from pingpong import KernelConfig
from pingpong.api import _gemm_into
from pingpong.hopper.host.launch import counter_count, prepare_split, workspace_shape
from pingpong.hopper.host.splits import stream_k_split
from pingpong.runtime.spec import EpilogueArgs

pytestmark = pytest.mark.gpu

VARIANTS = {
    "coop128x128": KernelConfig(128, 128, 64, stream_k=True),
    "coop128x256": KernelConfig(128, 256, 64, stream_k=True),
    "pingpong64x128": KernelConfig(64, 128, 64, schedule="pingpong", stream_k=True),
    "coop128x192": KernelConfig(128, 192, 64, stream_k=True),  # two column pieces (128 + 64)
    # whole tiles through 64-column epilogue sub-tiles (2 staging buffers): the ring's 4th stage
    "coop128x256e64": KernelConfig(128, 256, 64, epilogue_n=64, stream_k=True),
}
ROWS = (1, 17, 255, 777, 4097)
#: (N, K): K never a multiple of 64 (but of 8: these launches are built by hand, on TMA-legal
#: operands; K = 4097 goes through the API's padded copies in test_all_layouts_through_the_api)
NK = ((1000, 1000), (256, 4104), (4000, 776))


def sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def operand(rows, cols, dtype, col_major):
    if col_major:
        return torch.randn(cols, rows, device="cuda").to(dtype).t()
    return torch.randn(rows, cols, device="cuda").to(dtype)


def launch(a, b, config, programs, out_dtype=None, c=None, alpha=1.0, beta=0.0, bias=None, activation="none"):
    """The stream-K launch by hand on `programs` SMs: out and workspace NaN, counters zero and
    back to zero."""
    M, K = a.shape
    N = b.shape[1]
    out = torch.full((M, N), float("nan"), dtype=out_dtype or a.dtype, device="cuda")
    ws = torch.full(workspace_shape(M, N, K, config, sms=programs), float("nan"), device="cuda")
    counters = torch.zeros(counter_count(M, N, config), dtype=torch.int32, device="cuda")
    kernel, args, kwargs, grid = prepare_split(a, b, out, EpilogueArgs(c, alpha, beta, bias), config, programs, ws,
                                               counters, activation)
    kernel[grid](*args, **kwargs)
    assert not counters.any(), f"arrival counters left at {counters.unique().tolist()}"
    return out


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m", ROWS)
def test_odd_shapes_every_decomposition(variant, m):
    config = VARIANTS[variant]
    for (n, k), programs in itertools.product(NK, (sms(), 7, 20)):
        seed = new_seed()
        torch.manual_seed(seed)
        a, b = operand(m, k, torch.bfloat16, False), operand(k, n, torch.bfloat16, True)
        out = launch(a, b, config, programs)
        check(out, reference(a, b), k, f"{seed} ({m}×{n}×{k} on {programs} programs)")


def test_the_rows_streamed_are_hybrid_somewhere():
    """The shapes above do run every kind of decomposition (guards the test's own coverage)."""
    kinds = set()
    for cfg, m, (n, k), p in itertools.product(VARIANTS.values(), ROWS, NK, (sms(), 7, 20)):
        tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
        programs, dp, streamers = stream_k_split(tiles, -(-k // 64), p)
        kinds.add("dp" if dp == tiles else ("hybrid" if dp else "streamed"))
    assert kinds == {"dp", "hybrid", "streamed"}


@pytest.mark.parametrize("a_col,b_col", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("m,n,k", [(17, 4000, 777), (777, 1000, 4097)])
def test_all_layouts_through_the_api(a_col, b_col, m, n, k):
    seed = new_seed()
    torch.manual_seed(seed)
    a, b = operand(m, k, torch.bfloat16, a_col), operand(k, n, torch.bfloat16, b_col)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    _gemm_into(out, a, b, None, 1.0, 0.0, VARIANTS["coop128x128"])
    check(out, reference(a, b), k, seed)


@pytest.mark.parametrize("variant", ["coop128x128", "pingpong64x128"])
@pytest.mark.parametrize("dtype, out_dtype, bias_kind, activation", [
    (torch.bfloat16, torch.bfloat16, "col", "gelu_erf"), (torch.bfloat16, torch.float32, "row", "relu"),
    (torch.float16, torch.float16, None, "silu")])
def test_alpha_beta_bias_activation(variant, dtype, out_dtype, bias_kind, activation):
    seed = new_seed()
    torch.manual_seed(seed)
    m, n, k = 255, 4000, 776  # K: a multiple of 8 (TMA-legal rows for the hand-built launch), not of 64
    a, b = operand(m, k, dtype, False), operand(k, n, dtype, True)
    c = torch.randn(m, n, device="cuda").to(out_dtype)
    bias = None if bias_kind is None else torch.randn(n if bias_kind == "col" else m, device="cuda").to(out_dtype)
    if bias_kind == "row":
        bias = bias.view(m, 1)
    for programs in (sms(), 20):
        out = launch(a, b, VARIANTS[variant], programs, out_dtype, c, 1.5, -0.75, bias, activation)
        ref = reference(a, b, alpha=1.5, beta=-0.75, c=c, bias=bias, activation=activation)
        check(out, ref, k, seed)


@pytest.mark.parametrize("variant", ["coop128x256", "pingpong64x128"])
def test_bitwise_repeatable(variant):
    """The fix-up sums partials in K order whichever program arrives last: 20 runs agree bit for bit."""
    seed = new_seed()
    torch.manual_seed(seed)
    m, n, k = 589, 3072, 3000
    a, b = operand(m, k, torch.bfloat16, False), operand(k, n, torch.bfloat16, True)
    first = launch(a, b, VARIANTS[variant], sms())
    check(first, reference(a, b), k, seed)
    for _ in range(19):
        assert torch.equal(launch(a, b, VARIANTS[variant], sms()), first), f"seed {seed}"


def wave_stream_shape(sms):
    """A product the untuned selection streams on `sms` SMs (select.wave_stream): 10 rows of
    128×256 tiles over columns that fill three whole waves and a few tiles of a fourth; odd M
    and N (the last row and column of tiles partial), K not a multiple of 64 (49 k-steps)."""
    from pingpong.hopper.host.select import wave_stream

    cols = next(c for c in range(1, 200) if wave_stream(1279, 256 * c - 24, 49, sms))
    return 1279, 256 * cols - 24, 3080


@pytest.mark.parametrize("layout", ["nt", "tn"])
def test_the_selection_streams_where_the_wave_rule_says(layout):
    """The heuristic's stream-K pick (select.wave_stream: the only place the untuned selection
    streams), run with β·C, a bias and an activation, NaN-poisoned output, against float64; and
    the public call of the same shape is planned on that config where no tuning table answers it."""
    from pingpong.hopper.host.select import Device, select_config

    m, n, k = wave_stream_shape(sms())
    config = select_config(m, n, k, device=Device(None, sms()))
    assert config == KernelConfig(128, 256, 64, stream_k=True), config
    seed = new_seed()
    torch.manual_seed(seed)
    a, b = operand(m, k, torch.bfloat16, layout[0] == "t"), operand(k, n, torch.bfloat16, layout[1] == "t")
    c = torch.randn(m, n, device="cuda").bfloat16()
    bias = torch.randn(n, device="cuda").bfloat16()
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    _gemm_into(out, a, b, None if layout == "tn" else c, 0.5, 0.0 if layout == "tn" else -1.5, config,
               bias, "silu")
    ref = reference(a, b, alpha=0.5, beta=0.0 if layout == "tn" else -1.5, c=None if layout == "tn" else c,
                    bias=bias, activation="silu")
    check(out, ref, k, seed)
    import pingpong

    plan = pingpong.explain(a, b)
    assert plan["config"].stream_k or "table" in plan["why"], plan


# ----------------------------------------------------------------------------- the TMA epilogue of whole units


@pytest.mark.parametrize("variant", ["coop128x256", "pingpong64x128", "coop128x192"])
def test_whole_units_and_fixups_in_one_launch_with_beta_c(variant):
    """Few tiles of few k-steps on 7 programs: shares hold whole tiles (TMA stores, β·C read
    through TMA, the C barrier's parity counted per consumer) between shared ones (fix-ups)."""
    seed = new_seed()
    torch.manual_seed(seed)
    config = VARIANTS[variant]
    m, n, k = 777, 1000, 520  # 9 k-steps a tile
    a, b = operand(m, k, torch.bfloat16, False), operand(k, n, torch.bfloat16, True)
    c = torch.randn(m, n, device="cuda").bfloat16()
    for programs in (7, 20, sms()):
        out = launch(a, b, config, programs, None, c, 0.5, 2.0)
        check(out, reference(a, b, alpha=0.5, beta=2.0, c=c), k, f"{seed} on {programs} programs")


# ----------------------------------------------------------------------------- FP8 stream-K

FP8_VARIANTS = {
    "coop128x128": KernelConfig(128, 128, 128, stream_k=True),
    "pingpong64x128": KernelConfig(64, 128, 128, schedule="pingpong", stream_k=True),
}
#: N a multiple of 16; K a multiple of 16 not of 128 (tensor/row: the last k-step zero-filled),
#: of 128 for block-wise scales (a k-step is one scale block)
FP8_NK = {"tensor": (1040, 1552), "row": (1040, 1552), "block": (528, 1408), "block1x128": (528, 1408)}


def fp8_launch_poisoned(qa, qb, sa, sb, mode, config, programs, fast=False, bias=None, activation="none"):
    """fp8_stream_gemm by hand on `programs` SMs: output and workspace NaN, counters back at zero."""
    from pingpong.hopper.host import fp8_launch

    M, K = qa.shape
    N = qb.shape[1]
    scaling = "block" if mode.startswith("block") else mode
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    ws = torch.full(workspace_shape(M, N, K, config, 1, programs), float("nan"), device="cuda")
    counters = torch.zeros(counter_count(M, N, config, 1), dtype=torch.int32, device="cuda")
    kernel, args, kwargs, grid = fp8_launch.prepare(qa, qb.t(), out, EpilogueArgs(bias=bias, scale_a=sa, scale_b=sb),
                                                    scaling, not fast, 1 if mode == "block1x128" else 128, config,
                                                    programs, activation, ws, counters)
    assert kernel is fp8_launch.fp8_stream_gemm
    kernel[grid](*args, **kwargs)
    torch.cuda.synchronize()
    assert not counters.any(), f"arrival counters left at {counters.unique().tolist()}"
    return out


def fp8_bounded(out, ref, seed, tol=1e-2):
    from closeness import assert_close

    ref = ref.double()
    assert not out.isnan().any(), f"seed {seed}: NaN left (a tile never stored)"
    assert_close(out, ref, norm=tol, allowed=8 * tol * ref.abs() + 1e-2 * ref.abs().max(), what=f"seed {seed}")


@pytest.mark.parametrize("variant", FP8_VARIANTS)
@pytest.mark.parametrize("mode", ["tensor", "row", "block", "block1x128"])
@pytest.mark.parametrize("m", ROWS)
def test_fp8_every_scaling_odd_rows_every_decomposition(variant, mode, m):
    from test_fp8_gpu import operands

    n, k = FP8_NK[mode]
    seed = new_seed()
    qa, qb, sa, sb, ref = operands(m, n, k, mode, seed)
    for programs in (sms(), 7, 20):
        out = fp8_launch_poisoned(qa, qb, sa, sb, mode, FP8_VARIANTS[variant], programs)
        fp8_bounded(out, ref, f"{seed} ({m}×{n}×{k} {mode} on {programs} programs)")


@pytest.mark.parametrize("mode", ["tensor", "row"])
def test_fp8_fast_accumulation(mode):
    from test_fp8_gpu import operands

    seed = new_seed()
    qa, qb, sa, sb, ref = operands(255, 1040, 1552, mode, seed)
    for programs in (sms(), 20):
        out = fp8_launch_poisoned(qa, qb, sa, sb, mode, KernelConfig(128, 256, 128, stream_k=True), programs, True)
        fp8_bounded(out, ref, seed)


@pytest.mark.parametrize("mode", ["tensor", "row", "block"])
def test_fp8_bias_activation(mode):
    """The outer scales, then the bias and the activation, on whole units and on fix-ups alike."""
    from test_fp8_gpu import operands

    seed = new_seed()
    m, (n, k) = 777, FP8_NK[mode]
    qa, qb, sa, sb, ref = operands(m, n, k, mode, seed)
    bias = torch.randn(n, device="cuda").bfloat16()
    want = torch.nn.functional.gelu(ref.double() + bias.double())
    for programs in (sms(), 7):
        out = fp8_launch_poisoned(qa, qb, sa, sb, mode, FP8_VARIANTS["coop128x128"], programs, bias=bias,
                                  activation="gelu_erf")
        fp8_bounded(out, want, seed)


@pytest.mark.parametrize("variant", FP8_VARIANTS)
@pytest.mark.parametrize("mode", ["tensor", "row", "block", "block1x128"])
def test_fp8_bitwise_repeatable_and_through_the_plan(variant, mode):
    """20 runs agree bit for bit (the fix-up's sum in K order whoever is last, its own partial
    in registers or not); the plan's launch (JIT, then direct) gives the same bits."""
    from pingpong.fp8 import scaled_mm_direct
    from test_fp8_gpu import operands, poisoned_call

    seed = new_seed()
    m, (n, k) = 589, FP8_NK[mode]
    qa, qb, sa, sb, ref = operands(m, n, k, mode, seed)
    config = FP8_VARIANTS[variant]
    first = fp8_launch_poisoned(qa, qb, sa, sb, mode, config, sms())
    fp8_bounded(first, ref, seed)
    for _ in range(19):
        assert torch.equal(fp8_launch_poisoned(qa, qb, sa, sb, mode, config, sms()), first), f"seed {seed}"
    for _ in range(2):
        got = poisoned_call(lambda: scaled_mm_direct(qa, qb, sa, sb, config=config), (m, n), torch.bfloat16)
        assert torch.equal(got, first), f"seed {seed}: the plan's launch differs from the hand launch"
