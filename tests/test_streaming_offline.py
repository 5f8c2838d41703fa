"""Offline machine-code facts of the streaming kernels (CPU only: compiled for sm_90a and
gfx942 through pingpong.runtime.compile). The facts table in docs/streaming.md comes from these."""

import re

import pytest

import fake_launcher

from pingpong.runtime import compile as cc
from pingpong.streaming import gfx942, hopper

pytestmark = pytest.mark.slow  # offline compiles


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


@pytest.mark.parametrize("name", ["DEFAULT", "PERSISTENT"])
def test_sm90_default_and_persistent(sm90, name):
    f = _check_hopper_facts(sm90, getattr(hopper, name))
    assert f.registers <= 64


def test_sm90_two_slot_ring_bf16():
    """The gfx942 design's exact ring (2 slots, each refilled 2 steps ahead, right after it is read)."""
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


def test_gfx942_loop_is_the_assembly_kernels(amd):
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


# --------------------------------------------------------------------------- candidates and the direct launch


def _kernel(cfg, dtype="float32", n=(1 << 20) + 3):
    with cc.offline("sm_90a"):
        launch = hopper.build(dtype, cfg, n=n)
        kernel = launch.fn.warmup(*launch.args, grid=launch.grid, **launch.kwargs)
    return launch, kernel


@pytest.mark.parametrize("name, dtype", [("ahead5", "float32"), ("32k", "bfloat16"), ("4k-8cta", "float32"),
                                         ("2d", "float32"), ("2d-ahead3", "bfloat16")])
def test_candidate_compiles(name, dtype):
    """A few CANDIDATES (deepest ring, most shared memory and 8 warps, 8 programs per SM, the
    2-D view in both types): the facts every config must have, shared memory within what
    programs_per_sm programs get of one SM, and for the 2-D view one TMA box per tile."""
    cfg = hopper.CANDIDATES[name]
    n = 1 << 20 if cfg.box == "2d" else (1 << 20) + 3
    launch, kernel = _kernel(cfg, dtype, n)
    c = cc.Compiled("vector_add", "sm_90a", dict(kernel.asm), kernel.metadata)
    f = _check_hopper_facts(c, cfg)
    assert cfg.programs_per_sm * (f.shared_bytes + hopper.BLOCK_RESERVED_BYTES) <= hopper.SM_SHARED_BYTES
    itemsize = 4 if dtype == "float32" else 2
    block = cfg.block_shape(n, itemsize)
    assert [m["block_size"] for m in kernel.metadata.tensordesc_meta] == [block if len(block) == 2 else [256]] * 3
    if cfg.box == "2d":
        assert len(block) == 2
        fills = cfg.ahead + 1  # prologue + the loop's one
        assert f.counts["tma_load"] == 2 * fills and f.counts["tma_store"] == 1


def test_every_candidate_is_valid():
    for name, cfg in hopper.CANDIDATES.items():
        assert cfg.validate() is cfg and hopper.StreamConfig.parse(cfg.spec) == cfg, name
        assert hopper.StreamConfig.parse(name) is cfg


@pytest.mark.parametrize("name, n", [("persistent", (1 << 20) + 3), ("tile-2k", (1 << 20) + 3), ("2d", 1 << 20)])
def test_direct_launch_passes_what_triton_passes(monkeypatch, name, n):
    """The arguments DirectLaunch hands Triton's C launcher equal those Triton's own launch
    path hands it (TensorDescriptors expanded by wrap_handle_tensordesc into CUtensorMap,
    shape, strides), and from_kernel finds the C launch inside Triton's wrapper."""
    from pingpong.runtime.launcher import DirectLaunch

    cfg = hopper.CANDIDATES[name]
    launch, kernel = _kernel(cfg, n=n)
    with cc.offline("sm_90a"):
        from triton.runtime import driver

        calls = fake_launcher.install(driver.active)
        monkeypatch.setattr(kernel, "_run", None)
        monkeypatch.setattr(kernel, "module", None)
        constexprs = [launch.kwargs[n] for n in launch.fn.arg_names[len(launch.args):]]  # not the compile options
        kernel.run(7, 1, 1, 99, kernel.function, kernel.packed_metadata, None, None, None, *launch.args, *constexprs)
        direct = DirectLaunch.from_kernel(kernel)
        assert direct is not None and direct.function == 2
        x = launch.args[0].base
        shape, strides = hopper._view(cfg.block_shape(n, 4), n)
        assert list(shape) == launch.args[0].shape and list(strides) == launch.args[0].strides
        bound = direct.bind([("tma", shape, strides)] * 3, (n, *cfg.constexprs.values()))
        bound((7, 1, 1), 99, (x.data_ptr(), x.data_ptr(), x.data_ptr()))
    assert list(hopper.vector_add_tma_kernel.arg_names) == ["a_desc", "b_desc", "c_desc", "n", *cfg.constexprs]
    theirs, ours = calls
    (head, hooks, tail, args), (t_head, _, t_tail, t_args) = fake_launcher.parts(ours), fake_launcher.parts(theirs)
    assert head == t_head and tail == t_tail  # grid, stream, function, flags, packed metadata, scratch, signature
    assert hooks == (None, None, None)  # no launch metadata and no hooks (hooks_idle)
    assert args == t_args
    assert [len(m) for m in bound.maps] == [1, 1, 1]  # one CUtensorMap per slot for the one address


def test_hooks_idle(monkeypatch):
    from triton import knobs

    from pingpong.runtime.launcher import hooks_idle

    assert hooks_idle()
    knobs.runtime.launch_enter_hook.add(print)
    try:
        assert not hooks_idle()
    finally:
        knobs.runtime.launch_enter_hook.remove(print)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", print)
    assert not hooks_idle()


def test_direct_launch_opt_out(monkeypatch):
    from pingpong.runtime.launcher import DirectLaunch

    monkeypatch.setenv("PINGPONG_DIRECT_LAUNCH", "0")
    assert DirectLaunch.from_kernel(object()) is None
