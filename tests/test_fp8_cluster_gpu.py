"""The FP8 kernel in 2-CTA clusters on a Hopper GPU (KernelConfig.cluster_m=2: the pair takes
two vertically adjacent tiles and the leader multicasts their shared B tile into both CTAs'
ring slot): tensor- and row-wise scales, cooperative and ping-pong tiles, promoted and fast
accumulation, M off the pair's rows (a lone CTA-half at the bottom), N off the tile, K off
128; against a float64 product of the dequantized operands (norm and elementwise bounds) and
no worse than torch._scaled_mm on the same inputs, output poisoned with NaN, bitwise
repeatable, through the plan (JIT, then the direct launch). Row scales differ by up to 2^±4
between rows (test_fp8_gpu.spread), so a row of the partner CTA scaled as this one's fails."""

import zlib

import pytest
import torch

import pingpong
from pingpong.fp8 import scaled_mm_direct

from test_fp8_gpu import check, operands, poisoned_call
from test_fp8_splitk_gpu import bounded

pytestmark = pytest.mark.gpu

KC = pingpong.KernelConfig
CONFIGS = {
    "coop128x128-c2": KC(128, 128, 128, cluster_m=2),
    "coop128x64-c2": KC(128, 64, 128, cluster_m=2),
    "pp64x128-c2": KC(64, 128, 128, schedule="pingpong", cluster_m=2),
}
#: (M, N, K): under one pair, one pair and a lone tile (M = 300: rows 256..299 in CTA 0 of the
#: second pair, its partner's rows all past M), N off the tile, K off the 128-deep k-step
SHAPES = [(77, 528, 1040), (300, 1008, 2048), (1024, 1536, 4096)]
FAST_TOL = 4e-2


def seed_of(*key) -> int:
    return zlib.crc32(repr(key).encode()) % 10000


def run(qa, qb, sa, sb, config, fast, **kw):
    M, N = qa.shape[0], qb.shape[1]
    return poisoned_call(lambda: scaled_mm_direct(qa, qb, sa, sb, use_fast_accum=fast, config=config, **kw), (M, N),
                         kw.get("out_dtype", torch.bfloat16))


@pytest.mark.parametrize("fast", [False, True], ids=["promoted", "fast"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("mode", ["tensor", "row"])
def test_cluster_matches_float64_and_torch(mode, name, fast):
    config = CONFIGS[name]
    for M, N, K in SHAPES:
        seed = seed_of(mode, name, fast, M, N, K)
        print(f"seed {seed}: {mode} {name} fast={fast} {M}x{N}x{K}")
        qa, qb, sa, sb, ref = operands(M, N, K, mode, seed)
        first = run(qa, qb, sa, sb, config, fast)
        bounded(first, ref, seed, FAST_TOL if fast else 1e-2)
        if not fast:
            check(first, torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16), ref, seed)
        for _ in range(2):  # the JIT launch, then the plan's direct launch: bitwise the same
            assert torch.equal(run(qa, qb, sa, sb, config, fast), first), f"seed {seed}: not repeatable"


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("activation", [None, "gelu_erf"])
def test_cluster_bias_activation(out_dtype, activation):
    """The epilogue of the pair (bias per column, activation, cast) on the row-wise product."""
    M, N, K = 300, 1008, 1024
    seed = seed_of("epi", out_dtype, activation)
    qa, qb, sa, sb, ref = operands(M, N, K, "row", seed)
    bias = torch.randn(N, device="cuda").to(out_dtype)
    out = run(qa, qb, sa, sb, CONFIGS["coop128x128-c2"], False, bias=bias, out_dtype=out_dtype, activation=activation)
    want = ref + bias.double()
    if activation == "gelu_erf":
        want = torch.nn.functional.gelu(want)
    bounded(out.to(torch.bfloat16) if out_dtype == torch.float32 else out, want, seed)


def test_cluster_block_scales_are_refused():
    qa, qb, sa, sb, _ = operands(256, 256, 256, "block", 1)
    with pytest.raises(pingpong.ConfigError, match="cluster_m=2 with block-wise scales"):
        scaled_mm_direct(qa, qb, sa, sb, config=CONFIGS["coop128x128-c2"])


def test_public_path_unchanged_by_cluster_support():
    """scaled_mm (the selection's tile) still matches: the rule picks clusters only where stated."""
    M, N, K = 2048, 2048, 2048
    qa, qb, sa, sb, ref = operands(M, N, K, "tensor", 5)
    out = poisoned_call(lambda: pingpong.scaled_mm(qa, qb, sa, sb), (M, N), torch.bfloat16)
    bounded(out, ref, 5)
