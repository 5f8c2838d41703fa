"""Offline compile facts of the Hopper GEMM schedules (CPU, no GPU): the machine code has
what the design says it has."""

import functools
import subprocess
import sys

import pytest

from pingpong.runtime import compile as cc
from pingpong.hopper.host.config import SMEM_LIMIT

pytestmark = pytest.mark.slow  # offline compiles


@functools.lru_cache(maxsize=None)
def facts(kernel):
    return cc.compile_kernel(kernel, "sm_90a").facts()


@pytest.mark.parametrize("kernel", ["persistent", "cooperative", "pingpong", "cooperative-192", "cooperative-160",
                                    "cooperative-144", "cooperative-96", "pingpong-96", "pingpong-64x32x128",
                                    "pingpong-96x128", "pingpong-batched-64x32x128"])
def test_common_facts(kernel):
    f = facts(kernel)
    assert f.counts["wgmma"] > 0 and f.counts["HGMMA"] > 0, "tensor-core wgmma missing"
    assert f.counts["tma_load"] > 0 and f.counts["UTMALDG"] > 0, "TMA loads missing"
    assert f.counts["tma_store"] > 0 and f.counts["UTMASTG"] > 0, "TMA-store epilogue missing"
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"
    assert 0 < f.shared_bytes <= SMEM_LIMIT


@pytest.mark.parametrize("kernel", ["cooperative", "pingpong", "cooperative-192", "cooperative-160", "cooperative-144",
                                    "cooperative-96", "pingpong-96", "pingpong-64x32x128", "pingpong-96x128",
                                    "pingpong-batched-64x32x128"])
def test_warp_specialized_facts(kernel):
    f = facts(kernel)
    assert f.counts["setmaxnreg"] > 0, "register budgets (setmaxnreg) not applied"
    assert f.warps == 12, "producer warp (padded to a warpgroup) + two consumer warpgroups"


def test_two_piece_tile_issues_both_widths_and_keeps_one_k_step_in_flight():
    """128×192: per k-step an m64n128 and an m64n64 wgmma group; the mainloop waits until
    two groups (one k-step) are left in flight."""
    import re

    ptx = cc.compile_kernel("cooperative-192", "sm_90a").asm["ptx"]
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx))
    assert shapes == {"m64n128k16", "m64n64k16"}, shapes
    waits = set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx))
    assert waits == {"0", "2"}, f"wgmma.wait_group counts {waits}: the mainloop must keep 2 groups (one k-step)"


@pytest.mark.parametrize("kernel, consumer_c_loads", [("cooperative-160", 5), ("swapab_160", 0)])
def test_p1_plus_p2_tile_loads_p1_over_p2_boxes_then_the_second_piece(kernel, consumer_c_loads):
    """128×160 (TMA epilogue) and swap-AB 64×160 (pointer epilogue): 128 + 32 columns, an m64n128
    and an m64n32 wgmma per k-step; the producer loads A and 128/32 + 1 = 5 B boxes per slot and
    expects all their bytes (one ring stage) on the ready barrier; β·C comes in per epilogue
    sub-tile (5 of 32 columns per consumer) through TMA where the epilogue is TMA's."""
    import re

    from pingpong import KernelConfig
    from pingpong.hopper.host.launch import OFFLINE_SPLIT_VARIANTS

    config = OFFLINE_SPLIT_VARIANTS[kernel][0] if kernel in OFFLINE_SPLIT_VARIANTS else KernelConfig(128, 160, 64)
    d = config.derive()
    c = cc.compile_kernel(kernel, "sm_90a")
    ptx, f = c.asm["ptx"], c.facts()
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx))
    assert d.pieces == (128, 32) and shapes == {"m64n128k16", "m64n32k16"}, shapes
    loads = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global", ptx))
    assert loads == 1 + d.pieces[0] // d.block_n2 + 1 + d.consumers * consumer_c_loads
    expected = {int(b) for b in re.findall(r"mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\], (\d+);", ptx)}
    assert d.stage_bytes in expected, f"the ready barrier expects {expected}, not the stage's {d.stage_bytes} bytes"
    assert d.shared_bytes - d.epilogue_bytes - 1024 <= f.shared_bytes <= d.shared_bytes <= SMEM_LIMIT
    if not d.swap_ab:  # the swapped pointer epilogue's spills: tests/test_splitk.py KNOWN_SPILLS
        assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"


def test_mid_size_tile_rings_ten_stages_within_budget():
    """Ping-pong 64×96: derive() gives the ring 10 stages (MAX_STAGES 12 lets it), and the
    compiler's shared memory stays within what derive() budgeted."""
    from pingpong import KernelConfig

    d = KernelConfig(64, 96, 64, schedule="pingpong").derive()
    assert d.stages == 10 and d.pieces == (64, 32)
    assert d.shared_bytes - 1024 <= facts("pingpong-96").shared_bytes <= d.shared_bytes <= SMEM_LIMIT


def test_two_k_steps_per_slot_halve_the_ring_barriers():
    """select's small tiles: a 128-wide K slot (two 64-element k-steps) needs one ready/empty
    pair, so the 64×32 ring initializes 2·9 barriers for 9·128 of K in flight where block_k 64
    would take 2·12 for 12·64 (RESULTS.md runs 87 and 89); plus the epilogue's and turns' 4."""
    from pingpong import KernelConfig

    wide, narrow = KernelConfig(64, 32, 128, schedule="pingpong"), KernelConfig(64, 32, 64, schedule="pingpong")
    assert (wide.derive().stages, narrow.derive().stages) == (9, 12)
    ptx = cc.compile_kernel("pingpong-64x32x128", "sm_90a").asm["ptx"]
    assert ptx.count("mbarrier.init") == 2 * 9 + 4


def test_baseline_is_not_warp_specialized():
    f = facts("persistent")
    assert f.counts["setmaxnreg"] == 0 and f.warps == 8


def test_cli_isa_prints_facts_and_lists_names(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "pingpong", "isa", *a], capture_output=True, text=True)  # noqa: E731
    listing = run("--list")
    assert listing.returncode == 0 and "pingpong" in listing.stdout and "cooperative" in listing.stdout
    bad = run("--kernel", "nope")
    assert bad.returncode == 2 and "valid kernels" in bad.stderr
    bad_target = run("--kernel", "pingpong", "--target", "sm_80")
    assert bad_target.returncode == 2 and "valid targets" in bad_target.stderr
    dump = tmp_path / "pp.sass"
    ok = run("--kernel", "pingpong", "--dump", str(dump))
    assert ok.returncode == 0 and "count setmaxnreg" in ok.stdout and "HGMMA" in dump.read_text()


CLUSTER_KERNELS = ["pingpong-cluster", "pingpong-cluster-64", "pingpong-cluster-gelu", "cooperative-cluster",
                   "fp8-tensor-cluster", "fp8-row-cluster-gelu", "fp8-row-pingpong-cluster"]


@pytest.mark.parametrize("kernel", CLUSTER_KERNELS)
def test_cluster_facts(kernel):
    """KernelConfig.cluster_m=2: a 2-CTA cluster kernel whose leader multicasts B (one
    `.multicast::cluster` TMA load per k-step, besides each CTA's own A load), whose consumers
    release each slot on the leader's pair barrier too (a remote `mbarrier.arrive` at cluster
    scope), with the pair synchronized after the barrier inits; no spills, shared memory in budget."""
    f = facts(kernel)
    ptx = cc.compile_kernel(kernel, "sm_90a").asm["ptx"]
    assert ".reqnctapercluster 2" in ptx
    loads = [line for line in ptx.splitlines() if "cp.async.bulk.tensor" in line and "global.mbarrier" in line]
    multicast = [line for line in loads if ".multicast::cluster" in line]
    assert len(multicast) == 1, "one multicast load: B, the operand the pair shares"
    assert len(loads) - len(multicast) >= 1, "each CTA loads its own rows of A (and C) itself"
    assert "mbarrier.arrive.shared::cluster" in ptx, "no release on the leader's pair barrier"
    inits, sync = ptx.find("mbarrier.init"), ptx.find("barrier.cluster.wait")
    assert 0 <= inits < sync < ptx.find("cp.async.bulk.tensor"), "the pair must sync after the inits, before any load"
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"
    assert f.counts["setmaxnreg"] > 0 and f.warps == 12
    assert 0 < f.shared_bytes <= SMEM_LIMIT


def test_one_cta_kernels_are_not_clusters():
    ptx = cc.compile_kernel("pingpong", "sm_90a").asm["ptx"]
    assert ".reqnctapercluster" not in ptx and ".multicast::cluster" not in ptx
    assert "barrier.cluster" not in ptx and "mbarrier.arrive.shared::cluster" not in ptx


#: one registered kernel per Hopper kernel entry (the jit function a launch calls)
PDL_ENTRIES = {"warp_specialized_gemm": "cooperative", "split_k_gemm": "splitk", "stream_k_gemm": "streamk",
               "persistent_gemm": "persistent", "fp8_gemm": "fp8-block", "fp8_split_gemm": "fp8-block-splitk",
               "fp8_stream_gemm": "fp8-block-streamk", "grouped_gemm": "grouped-cooperative",
               "grouped_k_gemm": "grouped-k-cooperative", "fp8_grouped_gemm": "fp8-grouped-cooperative",
               "fp8_grouped_k_gemm": "fp8-grouped-k-cooperative"}


def test_every_pdl_launch_is_an_entry_checked_below():
    """Each registered kernel launched with programmatic dependent launch calls one of the
    entries whose machine code the next test reads (a new entry must be added there)."""
    entries = set()
    for name, (targets, _) in cc.kernels().items():
        if "sm_90a" not in targets:
            continue
        with cc.offline("sm_90a"):
            launch = cc._REGISTRY[name][0]("sm_90a")
        if launch.kwargs.get("launch_pdl"):
            entries.add(launch.fn.fn.__name__)
    assert entries == set(PDL_ENTRIES), entries ^ set(PDL_ENTRIES)


@pytest.mark.parametrize("entry", sorted(PDL_ENTRIES))
def test_pdl_kernels_wait_for_the_previous_grid_before_touching_memory(entry):
    """A kernel launched with PDL may start while the kernel before it still runs: its PTX
    waits (griddepcontrol.wait) before its first global load, store, atomic or TMA copy, and
    then lets its dependents launch."""
    import re

    c = cc.compile_kernel(PDL_ENTRIES[entry], "sm_90a")
    assert c.metadata.launch_pdl, "launched without PDL"
    ptx = c.asm["ptx"].splitlines()
    memory = re.compile(r"^\s*(@!?%p\d+\s+)?((ld|st|atom|red)\.(?!shared|param|local)|cp\.(reduce\.)?async\.bulk)")
    wait = next((i for i, line in enumerate(ptx) if "griddepcontrol.wait" in line), None)
    first = next((i for i, line in enumerate(ptx) if memory.match(line)), None)
    assert wait is not None and first is not None and wait < first, (wait, first and ptx[first])
    assert any("griddepcontrol.launch_dependents" in line for line in ptx[wait:first])
