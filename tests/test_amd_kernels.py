"""CPU-only checks of the AMD kernels' machine code (compiled offline for gfx942/gfx950/gfx1151).

Each (kernel, target) is compiled once per session (functools.cache). What is asserted comes
from the derived configs, never from numbers typed here.
"""

import functools
import re

import pytest

from pingpong.runtime import compile as cc
from pingpong.amd.config import TARGETS, CdnaConfig

pytestmark = pytest.mark.slow  # offline compiles

CDNA = ("gfx950", "gfx942")
# the registered CDNA ping-pong builds and their operand type (config.CdnaConfig.dtype)
PINGPONG = {"cdna_pingpong": "bf16", "cdna_pingpong_fp8": "fp8"}


def mfma_mnemonic(d) -> str:
    """The MFMA a derived config asks for: v_mfma_f32_16x16xK_{bf16, fp8_fp8}, or gfx950's
    scaled f8f6f4 one (run with unit scales) for fp8 there."""
    m, n, k = d.mfma_shape
    if d.scaled_mfma:
        return f"v_mfma_scale_f32_{m}x{n}x{k}_f8f6f4"
    return f"v_mfma_f32_{m}x{n}x{k}_{ {'bf16': 'bf16', 'fp8': 'fp8_fp8'}[d.dtype]}"


@functools.cache
def compiled(kernel: str, target: str):
    return cc.compile_kernel(kernel, target)


@functools.cache
def facts(kernel: str, target: str):
    return compiled(kernel, target).facts()


def mfma_sites() -> int:
    """compute-stage call sites in the schedule: 2 in the loop body + 2 in the epilogue."""
    return 4


@pytest.mark.parametrize("kernel", PINGPONG)
@pytest.mark.parametrize("target", CDNA)
def test_pingpong_waves_and_budgets(target, kernel):
    d = CdnaConfig.for_target(target, PINGPONG[kernel]).derive()
    f = facts(kernel, target)
    assert (f.warps, f.threads) == (8, 512) == (d.waves, d.threads)
    assert f.shared_bytes == d.lds_bytes <= TARGETS[target].lds_bytes
    assert f.registers + f.extra["agprs"] <= d.reg_budget
    assert f.extra["agprs"] == d.agprs == 0, "the whole register budget is VGPRs (amdgpu-agpr-alloc)"


@pytest.mark.parametrize("kernel", PINGPONG)
@pytest.mark.parametrize("target", CDNA)
def test_pingpong_no_scratch(target, kernel):
    assert facts(kernel, target).spill_bytes == 0, "scratch spills"


@functools.cache
def variant(target: str, out_dtype: str, has_c: bool):
    """The ping-pong compiled with another output dtype and/or the beta·C input."""
    import torch

    from pingpong.amd import cdna_pingpong

    launch = cdna_pingpong.build(target, getattr(torch, out_dtype), has_c)
    with cc.offline(target):
        ck = launch.fn.warmup(*launch.args, grid=launch.grid, **launch.kwargs)
    return cc.Compiled("cdna_pingpong", target, dict(ck.asm), ck.metadata)


@pytest.mark.parametrize("target", CDNA)
@pytest.mark.parametrize("out_dtype, has_c", [("bfloat16", True), ("float32", True)])
def test_pingpong_epilogue_variants_have_no_scratch(target, out_dtype, has_c):
    """The chunked epilogue (store_tile) keeps the output variants in the register budget
    (unchunked, the beta·C variants spilled over 1 KB on both targets; fp32 without C, the
    lightest, is not compiled here: it did not spill even unchunked)."""
    c = variant(target, out_dtype, has_c)
    f = c.facts()
    assert f.spill_bytes == 0, "scratch spills"
    assert f.registers + f.extra["agprs"] <= CdnaConfig.for_target(target).reg_budget()
    c_loads = re.findall(r"\bbuffer_load_\w+\b(?!.*\blds\b)", c.isa)  # loads into registers: C only
    assert bool(c_loads) == has_c


@pytest.mark.parametrize("target", CDNA)
def test_pingpong_epilogue_split_moves_no_data(target):
    """store_tile's column chunks are register-only: no LDS writes, no layout conversion."""
    c = compiled("cdna_pingpong", target)
    assert not re.search(r"\bds_write|\bds_store", c.isa)
    assert "convert_layout" not in c.asm["ttgir"]
    assert CdnaConfig.for_target(target).derive().epilogue_chunks == 4


@pytest.mark.parametrize("kernel", PINGPONG)
@pytest.mark.parametrize("target", CDNA)
def test_pingpong_mfma_and_direct_to_lds(target, kernel):
    d = CdnaConfig.for_target(target, PINGPONG[kernel]).derive()
    f = facts(kernel, target)
    assert f.counts["mfma"] == mfma_sites() * d.mfma_per_k_step
    mfma = re.findall(r"\bv_mfma_\w+", compiled(kernel, target).isa)
    assert set(mfma) == {mfma_mnemonic(d)}
    # 8 load sites (prologue 2, loop 4, epilogue 2), half A and half B, all direct-to-LDS
    assert f.counts["buffer_load_lds"] == 4 * (d.a_loads + d.b_loads)
    # every other buffer load reads the row-wise scales of the registered fp8 build (epilogue)
    assert (f.counts["buffer_load"] > f.counts["buffer_load_lds"]) == (d.dtype == "fp8")
    width = {16: "dwordx4", 4: "dword"}[TARGETS[target].dma_bytes]
    assert re.search(rf"buffer_load_{width}\s.*\blds\b", compiled(kernel, target).isa)


@pytest.mark.parametrize("kernel", PINGPONG)
@pytest.mark.parametrize("target", CDNA)
def test_pingpong_schedule_in_the_isa(target, kernel):
    d = CdnaConfig.for_target(target, PINGPONG[kernel]).derive()
    f = facts(kernel, target)
    assert f.extra["loop s_barrier"] == d.main_loop_barriers
    # the schedule's waits minus those already satisfied, which LLVM (Triton 3.9) does not emit:
    # (a, 0, 0), the S4 wait being satisfied (config.emitted_waits; tests/test_amd_schedule.py)
    assert tuple(f.extra["loop vmcnt sequence"]) == d.main_loop_vmcnt_isa
    # prologue 1 + stagger 1 + loop + epilogue 3 + re-sync 1
    assert f.counts["s_barrier"] == 1 + 1 + d.main_loop_barriers + 3 + 1
    schedule_waits = set(d.main_loop_vmcnt_isa + d.prologue_vmcnt + d.epilogue_vmcnt)
    if d.dtype == "bf16":
        assert set(f.extra["vmcnt values"]) == schedule_waits
    else:  # the row-wise scale loads of the stores add waits after the last barrier
        assert schedule_waits <= set(f.extra["vmcnt values"])


@pytest.mark.parametrize("target", CDNA)
def test_pingpong_stagger_is_a_per_group_branch(target):
    isa = compiled("cdna_pingpong", target).isa
    d = CdnaConfig.for_target(target).derive()
    group_threads = d.waves_per_group * TARGETS[target].wave_size
    stagger = re.findall(rf"s_cmp_ge_u32 s\d+, {group_threads}\s+s_cbranch_scc(\d) \S+\s+s_barrier", isa)
    assert stagger == ["0", "1"], "group 1 barriers first (scc0 skips group 0), group 0 re-syncs last"


@pytest.mark.parametrize("target", CDNA)
def test_pingpong_swizzle_is_derived_from_the_load_subtile(target):
    d = CdnaConfig.for_target(target).derive()
    bits, base, shift = d.swizzle
    assert d.subtile_rows * (d.subtile_cols // d.load_width) == TARGETS[target].wave_size
    assert (1 << base) == d.subtile_cols // 2 and (1 << shift) == d.subtile_rows
    assert d.smem_per_phase * d.subtile_cols == 1 << (base + shift)
    if target == "gfx950":
        assert d.swizzle == (1, 4, 4) and (d.block_m, d.block_n, d.block_k) == (256, 256, 64)
        assert (d.smem_vec, d.smem_per_phase, d.smem_max_phase) == (16, 8, 2)


def test_gfx942_config_fits_its_lds():
    d = CdnaConfig.for_target("gfx942").derive()
    assert d.block_k == 32 and d.lds_bytes == 64 * 1024
    assert CdnaConfig.for_target("gfx950").derive().block_k == 64


def test_wmma_layout_gives_each_wave_a_contiguous_block():
    """rdna_wmma.wmma_layout (linear bases): wave w of the 4×2 grid owns the 32×32 block at
    (32·(w // 2), 32·(w % 2)), i.e. 2×2 contiguous 16×16 WMMA tiles."""
    from triton._C.libtriton import gluon_ir, ir

    from pingpong.amd.config import WmmaConfig
    from pingpong.amd.rdna_wmma import wmma_layout

    d = WmmaConfig().derive()
    ctx = ir.context()
    ir.load_dialects(ctx)
    builder = gluon_ir.GluonOpBuilder(ctx)
    layout = wmma_layout(*d.warps_per_cta, *d.tiles_per_wave)
    ll = builder.to_linear_layout(layout._to_ir(builder), [d.block_m, d.block_n])

    def span(bases):
        pts = {(0, 0)}
        for b in bases:
            pts |= {(r ^ b[0], c ^ b[1]) for r, c in pts}
        return pts

    inner = span(list(ll.reg_bases) + list(ll.lane_bases))
    assert inner == {(r, c) for r in range(d.wave_m) for c in range(d.wave_n)}
    for w in range(d.waves):
        r0 = c0 = 0
        for bit, b in enumerate(ll.warp_bases):
            if w >> bit & 1:
                r0, c0 = r0 ^ b[0], c0 ^ b[1]
        assert (r0, c0) == (d.wave_m * (w // d.warps_per_cta[1]), d.wave_n * (w % d.warps_per_cta[1]))


def test_wmma_kernel():
    from pingpong.amd.config import WmmaConfig

    d = WmmaConfig().derive()
    f = facts("rdna_wmma", "gfx1151")
    isa = compiled("rdna_wmma", "gfx1151").isa
    assert f.counts["wmma"] == d.wmma_per_k_step  # one K-step in the loop body
    assert set(re.findall(r"\bv_wmma_\w+", isa)) == {"v_wmma_f32_16x16x16_f16"}
    assert f.extra["wave size"] == 32 and f.threads == d.threads == 256
    assert f.shared_bytes <= d.lds_bytes <= TARGETS["gfx1151"].lds_bytes
    assert f.spill_bytes == 0


@pytest.mark.parametrize("target", CDNA)
def test_fp8_config_is_the_bf16_one_in_bytes(target):
    """An fp8 stage holds the same bytes as a bf16 one (twice the K), so the DMA counts per
    wave, and with them the schedule's vmcnt waits and the race model's, are the same."""
    bf16 = CdnaConfig.for_target(target, "bf16").derive()
    fp8 = CdnaConfig.for_target(target, "fp8").derive()
    assert fp8.block_k * fp8.elem_bytes == bf16.block_k * bf16.elem_bytes
    assert fp8.lds_bytes == bf16.lds_bytes and fp8.swizzle[0] == bf16.swizzle[0]
    assert fp8.load_width * fp8.elem_bytes == TARGETS[target].dma_bytes
    assert (fp8.a_loads, fp8.b_loads, fp8.main_loop_vmcnt) == (bf16.a_loads, bf16.b_loads, bf16.main_loop_vmcnt)
    # the fastest fp8 MFMA of the target: CDNA4's f8f6f4 (scaled, 16x16x128), CDNA3's 16x16x32
    assert (fp8.mfma_shape[2], fp8.scaled_mfma) == {"gfx950": (128, True), "gfx942": (32, False)}[target]


@functools.cache
def fp8_variant(target: str, scales: str, has_c: bool):
    import torch

    from pingpong.amd import cdna_pingpong

    launch = cdna_pingpong.build_fp8(target, torch.bfloat16, has_c, scales)
    with cc.offline(target):
        ck = launch.fn.warmup(*launch.args, grid=launch.grid, **launch.kwargs)
    return cc.Compiled("cdna_pingpong_fp8", target, dict(ck.asm), ck.metadata)


@pytest.mark.parametrize("target", CDNA)
@pytest.mark.parametrize("scales, has_c", [("tensor", False), ("row", True)])
def test_fp8_scale_modes_read_their_scales(target, scales, has_c):
    """Tensor-wise scales are two scalar loads; row-wise ones are vector loads into registers
    (one pair per epilogue chunk), besides C's; nothing spills."""
    c = fp8_variant(target, scales, has_c)
    assert c.facts().spill_bytes == 0, "scratch spills"
    ttgir = c.asm["ttgir"]
    chunks = CdnaConfig.for_target(target, "fp8").derive().epilogue_chunks
    vector_loads = len(re.findall(r"amdg\.buffer_load %scale_[ab]\b", ttgir))
    assert vector_loads == (2 * chunks if scales == "row" else 0)
    assert (len(re.findall(r"tt\.load %scale_[ab]\b", ttgir)) > 0) == (scales == "tensor")


def test_fp8_scales_are_checked():
    import torch

    from pingpong.amd.cdna_pingpong import launch_scale_mode
    from pingpong.errors import PingpongError

    one = torch.ones(1)
    assert launch_scale_mode(None, None, 4, 8) == "none"
    assert launch_scale_mode(one, one, 4, 8) == "tensor"
    assert launch_scale_mode(torch.ones(4), torch.ones(8), 4, 8) == "row"
    for sa, sb, what in ((one, None, "both or neither"), (torch.ones(8), torch.ones(4), "row-wise"),
                         (one.double(), one, "float32")):
        with pytest.raises(PingpongError, match=what):
            launch_scale_mode(sa, sb, 4, 8)
