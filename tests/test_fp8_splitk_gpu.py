"""FP8 split-K on a Hopper GPU (fp8_split_gemm): every scaling × split counts 2..4 × odd shapes
(K not a multiple of split·128 where the scaling allows it) against a float64 product of the
dequantized operands (norm and elementwise bounds), output and workspace poisoned with NaN,
arrival counters back at zero, and the result bitwise the same run after run (the last split
sums the partials in split order, whichever split arrives last)."""

import pytest
import torch

import pingpong
from pingpong.fp8 import scaled_mm_direct
from pingpong.hopper.host import fp8_launch
from pingpong.hopper.host.launch import counter_count, workspace_shape
from pingpong.runtime import spec as spec_mod

from closeness import assert_close
from test_fp8_gpu import check, operands, poisoned_call

pytestmark = pytest.mark.gpu

KC = pingpong.KernelConfig
#: (M, N, K) per scaling: odd M, N a multiple of 16 (scaled_mm's rule); tensor/row K a multiple
#: of 16 only (1040: 9 k-steps, 1552: 13), block-wise of 128 (1408: 11 blocks)
SHAPES = {"tensor": [(77, 144, 1040), (200, 528, 1552)], "row": [(77, 144, 1040), (200, 528, 1552)],
          "block": [(77, 144, 1408), (200, 528, 1408)], "block1x128": [(200, 528, 1408)]}
CASES = [pytest.param(mode, shape, id=f"{mode}-{'x'.join(map(str, shape))}") for mode, shapes in SHAPES.items()
         for shape in shapes]


def configs(mode, splits):
    """The split tiles the FP8 kernel runs: cooperative 128×128, ping-pong 64×128."""
    return [KC(128, 128, 128, split_k=splits), KC(64, 128, 128, schedule="pingpong", split_k=splits)]


def bounded(out, ref, seed, tol=1e-2):
    """Norm and elementwise bounds against the float64 reference (bf16 output: 2^-9 rounding)."""
    ref = ref.double()
    assert_close(out, ref, norm=tol, allowed=8 * tol * ref.abs() + 1e-2 * ref.abs().max(), what=f"seed {seed}")


def launch_poisoned(qa, qb, sa, sb, mode, config, fast=False):
    """The split kernel by hand: output AND workspace full of NaN (every partial the sum reads
    must have been written), counters checked back at zero. An unsplit cooperative swap-AB
    config runs fp8_gemm (its TMA store staged transposed: config.staged_swap) and reads neither."""
    M, K = qa.shape
    N = qb.shape[1]
    scaling = "block" if mode.startswith("block") else mode
    sb_cols = 1 if mode == "block1x128" else 128
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    ws = torch.full(workspace_shape(M, N, K, config), float("nan"), device="cuda")
    counters = torch.zeros(counter_count(M, N, config), dtype=torch.int32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kernel, args, kwargs, grid = fp8_launch.prepare(qa, qb.t(), out, spec_mod.EpilogueArgs(scale_a=sa, scale_b=sb),
                                                    scaling, not fast, sb_cols, config, sms, "none", ws, counters)
    staged = config.swap_ab and config.schedule == "cooperative" and fp8_launch.fp8_splits(K, config) == 1
    assert kernel is (fp8_launch.fp8_gemm if staged else fp8_launch.fp8_split_gemm)
    kernel[grid](*args, **kwargs)
    torch.cuda.synchronize()
    assert not counters.any(), f"arrival counters left at {counters.unique().tolist()}"
    return out


@pytest.mark.parametrize("splits", [2, 3, 4])
@pytest.mark.parametrize("mode, shape", CASES)
def test_split_matches_float64_and_repeats_bitwise(mode, shape, splits):
    M, N, K = shape
    seed = hash((mode, shape, splits)) % 1000
    print(f"seed {seed}")
    qa, qb, sa, sb, ref = operands(M, N, K, mode, seed)
    for config in configs(mode, splits):
        assert fp8_launch.fp8_splits(K, config) > 1
        first = launch_poisoned(qa, qb, sa, sb, mode, config)
        bounded(first, ref, seed)
        for _ in range(3):  # whichever split comes last, the same bits
            assert torch.equal(launch_poisoned(qa, qb, sa, sb, mode, config), first), f"seed {seed}: {config}"
        # through the plan (the stream's counters, a fresh workspace), twice: JIT, then direct launch
        for _ in range(2):
            got = poisoned_call(lambda: scaled_mm_direct(qa, qb, sa, sb, config=config), (M, N), torch.bfloat16)
            assert torch.equal(got, first), f"seed {seed}: the plan's launch differs from the hand launch"


@pytest.mark.parametrize("mode", ["tensor", "row"])
def test_split_fast_accumulation(mode):
    M, N, K = 200, 528, 4096
    qa, qb, sa, sb, ref = operands(M, N, K, mode, 5)
    for config in (KC(128, 256, 128, split_k=2), KC(128, 128, 128, split_k=4)):
        out = launch_poisoned(qa, qb, sa, sb, mode, config, fast=True)
        theirs = torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
        check(out, theirs, ref, 5)
        assert torch.equal(launch_poisoned(qa, qb, sa, sb, mode, config, fast=True), out)


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
def test_split_bias_activation_out_dtype_once(out_dtype):
    """Scales, bias, activation and the cast applied once, to the sum (applied per split, the
    bias would count `splits` times)."""
    M, N, K = 300, 512, 4096
    qa, qb, sa, sb, ref = operands(M, N, K, "row", 3, magnitude=1 / 32)
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16) * ref.abs().mean().item()
    want = torch.nn.functional.gelu(ref + bias.double())
    config = KC(128, 128, 128, split_k=4)
    out = poisoned_call(lambda: scaled_mm_direct(qa, qb, sa, sb, bias=bias, out_dtype=out_dtype,
                                                 activation="gelu_erf", config=config), (M, N), out_dtype)
    assert out.dtype == out_dtype
    bounded(out, want, 3, tol=2e-3)


@pytest.mark.parametrize("mode", ["tensor", "row", "block"])
def test_selected_split_at_the_issue_shapes(mode):
    """select_fp8 splits 512×512×65536 (8) and 1024×1024×16384 (2); the result is right and repeats."""
    for (M, N, K), splits in (((512, 512, 65536), 8), ((1024, 1024, 16384), 2)):
        qa, qb, sa, sb, ref = operands(M, N, K, mode, 1)
        plan = fp8_launch.plan(spec_mod.build(qa, qb, out_dtype=torch.bfloat16, scales=(sa, sb, False)))
        assert plan.config.split_k == splits and plan.counters > 0, plan.config
        out = poisoned_call(lambda: pingpong.scaled_mm(qa, qb, sa, sb), (M, N), torch.bfloat16)
        bounded(out, ref, 1)
        assert torch.equal(pingpong.scaled_mm(qa, qb, sa, sb), out)
