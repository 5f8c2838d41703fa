"""FP8 swap-AB on a Hopper GPU (Cᵀ = W·Aᵀ: fp8_split_gemm's transposed pointer store, or
unsplit cooperative tiles through fp8_gemm's TMA store, staged transposed): tensor- and row-wise scales, decode batches M ∈ {1, 7, 16, 17, 32}, N and K off the tile
multiples (N a multiple of 16 and K of 16: scaled_mm's rule), ping-pong and cooperative tiles
with 16 and 32 columns of M, one split and three, promoted and fast accumulation; against a
float64 product of the dequantized operands (norm and elementwise bounds), output and
workspace poisoned with NaN, arrival counters back at zero, bitwise repeatable, and through the
plan (JIT, then the direct launch whose pointers are exchanged too). Row scales differ by up to
2^±4 between rows (test_fp8_gpu.spread), so a scale applied to the other operand's index fails."""

import zlib

import pytest
import torch

import pingpong
from pingpong.errors import ConfigError
from pingpong.fp8 import scaled_mm_direct

from test_fp8_gpu import operands, poisoned_call
from test_fp8_splitk_gpu import bounded, launch_poisoned

pytestmark = pytest.mark.gpu

KC = pingpong.KernelConfig
MS = [1, 7, 16, 17, 32]
#: N not a multiple of 64 (the last 64 rows of the swapped tile are partial), K not of 128
#: (TMA zero-fills the last k-step): 4112 = 64·64 + 16, 1040 = 8·128 + 16
SHAPES = [(4112, 1040), (336, 4096)]
CONFIGS = {
    "pp64x16": KC(64, 16, 128, schedule="pingpong", swap_ab=True),
    "pp64x32": KC(64, 32, 128, schedule="pingpong", swap_ab=True),
    "coop128x16": KC(128, 16, 128, swap_ab=True),
    "coop128x32": KC(128, 32, 128, swap_ab=True),  # the decode rule's one-wave tile (select.decode_tile)
    "coop128x64": KC(128, 64, 128, swap_ab=True),  # ... and 33-64 rows' (fp8_select._SWAP_WAVE)
    "pp64x16-split3": KC(64, 16, 128, schedule="pingpong", split_k=3, swap_ab=True),
    "coop128x32-split3": KC(128, 32, 128, split_k=3, swap_ab=True),
}
#: fast accumulation: the fp8 wgmma keeps about 14 bits of its running sum and truncates, a
#: bias that grows with K (DeepSeek-V3 report: up to 2% relative at K = 4096); still far below
#: a scale on the wrong row or column (rows differ by up to 2^±4)
FAST_TOL = 4e-2


def seed_of(*key) -> int:
    return zlib.crc32(repr(key).encode()) % 10000


@pytest.mark.parametrize("fast", [False, True], ids=["promoted", "fast"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("mode", ["tensor", "row"])
def test_swap_matches_float64_and_repeats_bitwise(mode, name, fast):
    config = CONFIGS[name]
    for M in MS + [40, 62] * (config.block_n == 64):  # the 64-column tile serves 33-64 rows too
        for N, K in SHAPES:
            seed = seed_of(mode, name, fast, M, N, K)
            print(f"seed {seed}: {mode} {name} fast={fast} {M}x{N}x{K}")
            qa, qb, sa, sb, ref = operands(M, N, K, mode, seed)
            first = launch_poisoned(qa, qb, sa, sb, mode, config, fast)  # NaN out and workspace, counters at 0
            bounded(first, ref, seed, FAST_TOL if fast else 1e-2)
            for _ in range(2):
                assert torch.equal(launch_poisoned(qa, qb, sa, sb, mode, config, fast), first), f"seed {seed}"
            for _ in range(2):  # the plan: JIT, then the direct launch (its pointers exchanged too)
                got = poisoned_call(lambda: scaled_mm_direct(qa, qb, sa, sb, use_fast_accum=fast, config=config),
                                    (M, N), torch.bfloat16)
                assert torch.equal(got, first), f"seed {seed}: the plan's launch differs from the hand launch"


#: two-piece swapped tiles: 128 + 16 and 128 + 32 columns of M, for the 129-160-row products a
#: 128-row tile leaves a second tile-row almost empty; M ends inside the second piece (137, 153)
#: or at the first's end (128) or one past it (129); the narrow 64 + 16 and 64 + 32 (the mid-rows
#: model's for 65-96 rows) the same way in one tile of M, and 96 over two and more
PIECE_CONFIGS = {"pp64x144": KC(64, 144, 128, schedule="pingpong", swap_ab=True),
                 "pp64x160": KC(64, 160, 128, schedule="pingpong", swap_ab=True),
                 "coop128x144": KC(128, 144, 128, swap_ab=True), "coop128x96": KC(128, 96, 128, swap_ab=True),
                 "coop128x80": KC(128, 80, 128, swap_ab=True)}
PIECE_ROWS = {"coop128x80": (64, 65, 72, 80), "coop128x96": (64, 65, 81, 96, 128, 129, 137, 153)}


@pytest.mark.parametrize("fast", [False, True], ids=["promoted", "fast"])
@pytest.mark.parametrize("name", sorted(PIECE_CONFIGS))
@pytest.mark.parametrize("mode", ["tensor", "row"])
def test_two_piece_swap_matches_float64_and_repeats_bitwise(mode, name, fast):
    config = PIECE_CONFIGS[name]
    for M in PIECE_ROWS.get(name, (128, 129, 137, 153)):
        for N, K in SHAPES:
            seed = seed_of(mode, name, fast, M, N, K)
            print(f"seed {seed}: {mode} {name} fast={fast} {M}x{N}x{K}")
            qa, qb, sa, sb, ref = operands(M, N, K, mode, seed)
            first = launch_poisoned(qa, qb, sa, sb, mode, config, fast)
            bounded(first, ref, seed, FAST_TOL if fast else 1e-2)
            assert torch.equal(launch_poisoned(qa, qb, sa, sb, mode, config, fast), first), f"seed {seed}"
            got = poisoned_call(lambda: scaled_mm_direct(qa, qb, sa, sb, use_fast_accum=fast, config=config),
                                (M, N), torch.bfloat16)
            assert torch.equal(got, first), f"seed {seed}: the plan's launch differs from the hand launch"


@pytest.mark.parametrize("out_dtype, activation", [(torch.bfloat16, "gelu_erf"), (torch.float16, "silu"),
                                                   (torch.float32, None)])
@pytest.mark.parametrize("name", ["pp64x32", "pp64x16-split3", "pp64x144", "coop128x16", "coop128x144", "coop128x80"])
def test_swap_bias_activation_out_dtypes(name, out_dtype, activation):
    """The caller's per-column bias is per row of the swapped product; fp16/fp32 outputs (staged
    transposed too: coop128x*); the two-piece tiles (M in 128 + 16 or 64 + 16 columns) with M in
    their second piece."""
    config = {**CONFIGS, **PIECE_CONFIGS}[name]
    act = {None: lambda z: z, "gelu_erf": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}[activation]
    tol = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-3}[out_dtype]
    for M in (MS if name in CONFIGS else {"coop128x80": (65, 80)}.get(name, (129, 144))):
        N, K = 4112, 1040
        seed = seed_of(name, str(out_dtype), activation, M)
        print(f"seed {seed}: {name} {out_dtype} {activation} {M}x{N}x{K}")
        qa, qb, sa, sb, ref = operands(M, N, K, "row", seed, magnitude=1 / 32)  # results within fp16's range
        gen = torch.Generator(device="cuda").manual_seed(seed)
        bias = (torch.randn(N, generator=gen, device="cuda") * ref.abs().mean().item()).bfloat16()
        want = act(ref + bias.double())
        call = lambda: scaled_mm_direct(qa, qb, sa, sb, bias=bias, out_dtype=out_dtype,  # noqa: E731
                                        activation=activation, config=config)
        out = poisoned_call(call, (M, N), out_dtype)
        assert out.dtype == out_dtype and not out.isnan().any(), f"seed {seed}: NaN in the output"
        assert ((out.double() - want).norm() / want.norm()).item() < tol, f"seed {seed}"
        assert ((out.double() - want).abs() <= 8 * tol * want.abs() + 1e-2 * want.abs().max()).all(), f"seed {seed}"
        assert torch.equal(poisoned_call(call, (M, N), out_dtype), out), f"seed {seed}: not bitwise repeatable"


@pytest.mark.parametrize("mode", ["tensor", "row"])
def test_swap_agrees_with_the_unswapped_kernel(mode):
    """The same product by the rule's tile and by swap-AB: both within the float64 bounds, and
    close to each other (a transposed store or scale would move whole rows or columns)."""
    M, N, K = 17, 4112, 4096
    seed = seed_of("agree", mode)
    qa, qb, sa, sb, ref = operands(M, N, K, mode, seed)
    plain = poisoned_call(lambda: scaled_mm_direct(qa, qb, sa, sb), (M, N), torch.bfloat16)
    swapped = poisoned_call(lambda: scaled_mm_direct(qa, qb, sa, sb, config=CONFIGS["pp64x32"]), (M, N),
                            torch.bfloat16)
    bounded(plain, ref, seed)
    bounded(swapped, ref, seed)
    d = (swapped.double() - plain.double()).abs()
    assert (d <= 2e-2 * ref.abs() + 1e-2 * ref.abs().max()).all(), f"seed {seed}"


@pytest.mark.parametrize("mode", ["block", "block1x128"])
def test_swap_with_block_scales_is_refused(mode):
    qa, qb, sa, sb, _ = operands(16, 256, 1024, mode, 1)
    with pytest.raises(ConfigError, match="swap-AB with block-wise scales is not built"):
        scaled_mm_direct(qa, qb, sa, sb, config=CONFIGS["pp64x32"])


@pytest.mark.parametrize("mode", ["tensor", "row"])
def test_rule_swaps_and_splits_few_tiles_of_n(mode):
    """Decode batches over fewer than S/4 64-row tiles of N: the rule's swap-AB tile with K
    split (fp8_select.rule_fp8), through the public call, into NaN-poisoned outputs."""
    from pingpong.hopper.host.fp8_select import rule_fp8

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for M, N, K in [(2, 2048, 10944), (4, 1040, 14336), (1, 1024, 65536)]:
        config = rule_fp8(M, N, K, True, sms, mode)
        assert config.swap_ab and config.split_k > 1, config
        seed = seed_of("rule", mode, M, N, K)
        qa, qb, sa, sb, ref = operands(M, N, K, mode, seed)
        out = poisoned_call(lambda: pingpong.scaled_mm(qa, qb, sa, sb), (M, N), torch.bfloat16)
        bounded(out, ref, seed, 1e-2)


@pytest.mark.parametrize("mode", ["tensor", "row"])
def test_rule_takes_staged_swaps_above_the_mid_rows(mode):
    """Above 960 rows the rule's staged cooperative swap-AB tiles (fp8_select.STAGED_SWAP_EFFICIENCY:
    128×144 at 1041×2048×10944 and 1577×3072×8192, 128×160 at 1029×28672×3584 row-wise), through
    the public call, into NaN-poisoned outputs, against float64."""
    from pingpong.hopper.host.fp8_select import rule_fp8

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = [(1041, 2048, 10944), (1577, 3072, 8192)] + ([(1029, 28672, 3584)] if mode == "row" else [])
    for M, N, K in shapes:
        config = rule_fp8(M, N, K, True, sms, mode)
        assert config.swap_ab and config.schedule == "cooperative" and config.block_n in (144, 160), config
        seed = seed_of("staged-rule", mode, M, N, K)
        qa, qb, sa, sb, ref = operands(M, N, K, mode, seed)
        out = poisoned_call(lambda: pingpong.scaled_mm(qa, qb, sa, sb), (M, N), torch.bfloat16)
        bounded(out, ref, seed, 1e-2)

