"""Offline machine-code facts of the streaming kernels (CPU only: compiled for sm_90a and
gfx942 through pingpong.compile). The facts table in docs/streaming.md comes from these."""

import re

import pytest

from pingpong import compile as cc
from pingpong.streaming import gfx942, hopper


def _compile(build, target):
    with cc.offline(target):
        launch = build()
        kernel = launch.fn.warmup(*launch.args, grid=launch.grid, **launch.kwargs)
    return cc.Compiled("vector_add", target, dict(kernel.asm), kernel.metadata)


@pytest.fixture(scope="module")
def sm90():
    return cc.compile_kernel("vector_add", "sm_90a")


@pytest.fixture(scope="module")
def amd():
    return cc.compile_kernel("vector_add", "gfx942")


def test_registered_for_both_targets():
    assert cc.kernels()["vector_add"][0] == ("sm_90a", "gfx942")


# --------------------------------------------------------------------------- sm_90a


def _check_hopper_facts(c, cfg):
    f = c.facts()
    assert f.warps == cfg.num_warps
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0
    assert cfg.shared_bytes <= f.shared_bytes <= f.shared_limit
    # every global byte moves by TMA: bulk tensor loads and stores, nothing else
    assert f.counts["tma_load"] > 0 and f.counts["UTMALDG"] > 0
    assert f.counts["tma_store"] > 0 and f.counts["UTMASTG"] > 0
    assert f.counts["mbarrier_wait"] >= 1
    ptx = c.asm["ptx"]
    assert not re.search(r"\b(ld|st)\.global", ptx), "a global load/store outside TMA (mask arithmetic path)"
    assert re.search(r"cp\.async\.bulk\.wait_group\.read\s+%d;" % (cfg.out_bufs - 1), ptx), "store window"
    assert "fence.proxy.async.shared::cta" in ptx
    return f


def test_sm90_default(sm90):
    f = _check_hopper_facts(sm90, hopper.DEFAULT)
    assert f.registers <= 64


def test_sm90_seed_shape_bf16():
    """The seed's exact ring (2 slots, each refilled 2 steps ahead, right after it is read)."""
    cfg = hopper.StreamConfig(stages=2)
    c = _compile(lambda: hopper.build("bfloat16", cfg), "sm_90a")
    _check_hopper_facts(c, cfg)


# --------------------------------------------------------------------------- gfx942


def _loop_body(amdgcn: str) -> list[str]:
    """The instructions of the kernel's (only) loop, from its header label to its back-branch."""
    lines = amdgcn.splitlines()
    start = next(i for i, ln in enumerate(lines) if "Loop Header" in ln)
    label = lines[start].split(":")[0].strip()
    body = []
    for ln in lines[start + 1:]:
        ln = ln.split(";")[0].strip()
        if ln and not ln.startswith("."):
            body.append(ln)
            if ln.startswith("s_cbranch") and ln.endswith(label):
                return body
    raise AssertionError("loop back-branch not found")


def test_gfx942_facts(amd):
    f = amd.facts()
    assert f.warps == gfx942.WAVES and f.extra["wave size"] == 64
    assert f.spill_bytes == 0, "scratch"
    assert f.shared_bytes == 2 * 2 * 256 * 4  # 2 slots x (a, b) x 256 fp32
    assert f.counts["buffer_load_lds"] == 3 * gfx942.LOADS_PER_STEP  # prologue 2 fills + the loop's refill
    assert f.extra["vmcnt values"] == sorted({0, gfx942.PROLOGUE_VMCNT, gfx942.LOOP_VMCNT}) == [0, 2, 3]


def test_gfx942_loop_is_the_seeds(amd):
    """ds_read -> lgkmcnt(0) -> 2 refills into the slot just read -> store -> vmcnt(3)."""
    body = _loop_body(amd.asm["amdgcn"])
    first = lambda pattern: next(i for i, ln in enumerate(body) if re.search(pattern, ln))  # noqa: E731
    read, lgkm = first(r"^ds_read"), first(r"lgkmcnt\(0\)")
    refills = [i for i, ln in enumerate(body) if re.search(r"^buffer_load_dword .*\blds\b", ln)]
    store, wait = first(r"^buffer_store"), first(r"vmcnt\(")
    assert len(refills) == gfx942.LOADS_PER_STEP
    assert read < lgkm < refills[0], "the refill of a slot must follow its ds_read and lgkmcnt(0)"
    assert refills[-1] < store < wait
    assert [ln for ln in body if "vmcnt(" in ln] == [f"s_waitcnt vmcnt({gfx942.LOOP_VMCNT})"]
