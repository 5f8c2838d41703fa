"""GPU correctness of the two-piece tiles of any P1 + P2 (config.column_pieces: 80 = 64 + 16,
96 = 64 + 32, 144 = 128 + 16, 160 = 128 + 32): the first piece loaded as P1/P2 boxes (device/loader.py), the
second at off_n + P1, the epilogue's P1/P2 + 1 sub-tiles (marker `gpu`: skipped where no Hopper
is). Data-parallel cooperative and ping-pong tiles through the TMA epilogue, swap-AB through the
pointer epilogue; odd shapes, per-column and per-row bias, an activation, α and β·C, the output
NaN-poisoned, against float64 (fused_reference.check: closeness.NORM_BOUND and RTOL/ATOL_PER_K)."""

import itertools

import pytest
import torch

from closeness import GEMM_BOUND, rel_err
from fused_reference import check, matrix, new_seed, poisoned, reference
from pingpong import KernelConfig
from pingpong.api import _gemm_into

pytestmark = pytest.mark.gpu

CONFIGS = {
    "cooperative-80": KernelConfig(128, 80, 64, schedule="cooperative"),
    "cooperative-96": KernelConfig(128, 96, 64, schedule="cooperative"),
    "pingpong-80": KernelConfig(64, 80, 64, schedule="pingpong"),
    "cooperative-144": KernelConfig(128, 144, 64, schedule="cooperative"),
    "pingpong-144": KernelConfig(64, 144, 64, schedule="pingpong"),
    "cooperative-160": KernelConfig(128, 160, 64, schedule="cooperative"),
    "pingpong-160": KernelConfig(64, 160, 64, schedule="pingpong"),
    "cooperative-160-sub16": KernelConfig(128, 160, 64, schedule="cooperative", epilogue_n=16),  # 10 sub-tiles, 2 bufs
    "swap-pingpong-160": KernelConfig(64, 160, 64, schedule="pingpong", swap_ab=True),
    "swap-pingpong-144": KernelConfig(64, 144, 64, schedule="pingpong", swap_ab=True),
}
ODD = (1, 17, 255, 1000)


def run_case(m, n, k, config, *, layout="nt", bias_kind="col", activation="gelu_erf", alpha=0.75, beta=-1.25):
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = matrix((), m, k, torch.bfloat16, layout[0] == "t", gen, "cuda")
    b = matrix((), k, n, torch.bfloat16, layout[1] == "t", gen, "cuda")
    c = torch.randn(m, n, generator=gen, device="cuda").to(torch.bfloat16)
    bias = {"col": lambda: torch.randn(n, generator=gen, device="cuda"),
            "row": lambda: torch.randn(m, 1, generator=gen, device="cuda"),
            "none": lambda: None}[bias_kind]()
    bias = None if bias is None else bias.to(torch.bfloat16)
    out = _gemm_into(poisoned((m, n), torch.bfloat16, "cuda"), a, b, c, alpha, beta, config, bias, activation)
    check(out, reference(a, b, alpha=alpha, beta=beta, c=c, bias=bias, activation=activation), k, seed)


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("m,n,k", [(m, n, k) for m, n, k in itertools.product(ODD, (17, 1000, 4097), (17, 1000))])
def test_p1_plus_p2_tiles_fused_on_odd_shapes(name, m, n, k):
    run_case(m, n, k, CONFIGS[name], bias_kind="row" if (m + n) % 2 else "col", activation="silu" if k % 2 else "gelu_erf")


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("layout", ["nn", "tn", "tt"])
def test_p1_plus_p2_tiles_every_operand_layout(name, layout):
    """Both B storages (the first piece's boxes side by side along N: dim 0 K-major, dim 1 MN-major)."""
    run_case(255, 1000, 264, CONFIGS[name], layout=layout, bias_kind="none", activation="none")


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("shape", [(145, 7168, 5120), (800, 3072, 3072), (372, 3072, 8192)])
def test_p1_plus_p2_tiles_on_the_mid_row_shapes(name, shape):
    """The shapes the widths were fitted to, plain product against float64 (GEMM_BOUND)."""
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(new_seed())
    a = matrix((), m, k, torch.bfloat16, False, gen, "cuda")
    b = matrix((), k, n, torch.bfloat16, True, gen, "cuda")
    out = _gemm_into(poisoned((m, n), torch.bfloat16, "cuda"), a, b, None, 1.0, 0.0, CONFIGS[name])
    assert rel_err(out, a.double() @ b.double()) < GEMM_BOUND[torch.bfloat16]


#: shapes whose untuned selection is one of the mid-rows model's whole tiles (select.MID_ROWS_WHOLE_TILES,
#: MID_ROWS_NARROW_SWAP, MID_ROWS_NARROW),
#: or a 128×256 tile with 64-column epilogue sub-tiles (select.epilogue_subtiles: one wave, or a few
#: of a short K loop):
#: (block_m, block_n, swap_ab, epilogue_n)
SELECTED = {(146, 16384, 3072): (128, 160, True, None), (129, 7168, 2048): (64, 144, True, None),
            (672, 2048, 2048): (64, 192, True, None), (633, 7168, 7168): (128, 144, False, None),
            (193, 10240, 8192): (128, 160, False, None), (513, 37888, 3584): (128, 192, True, None),
            (2000, 2048, 8192): (128, 256, False, 64), (1466, 3072, 3072): (128, 144, True, None),
            (2000, 8192, 2048): (128, 256, False, 64), (353, 21888, 2048): (128, 256, False, 64),
            (75, 8192, 3584): (128, 80, True, None), (92, 9216, 7168): (128, 96, True, None),
            (112, 9216, 4096): (128, 96, False, None), (327, 3584, 3584): (128, 96, False, None)}


@pytest.mark.parametrize("shape", SELECTED)
@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
def test_the_selections_whole_tiles_fused(shape, layout):
    """The tile the selection gives these shapes (no tuning table), run with a bias, an
    activation and β·C in each operand layout, NaN-poisoned output, against float64."""
    from pingpong.hopper.host.select import Device, select_config

    m, n, k = shape
    config = select_config(m, n, k, device=Device(None, torch.cuda.get_device_properties(0).multi_processor_count))
    assert (config.block_m, config.block_n, config.swap_ab, config.epilogue_n) == SELECTED[shape], config
    run_case(m, n, k, config, layout=layout, bias_kind="col", activation="silu")
