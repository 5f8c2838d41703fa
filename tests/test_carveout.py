"""torch's SM carveout (torch._C._set_sm_carveout_experimental) on the CPU: every persistent grid
spans the GPU's SMs less the carveout, the carveout is in every key that caches a plan or a
grid, and a carveout that leaves no SM is refused naming torch's setting.

The launches are observed through Triton's own launch path with the C launcher replaced by
a recorder (tests/fake_launcher.py): the kernels compile for sm_90a offline, the CPU stands
for a 132-SM H100 (no GPU: select.Device's default facts)."""

import collections

import pytest
import torch

import fake_launcher
import pingpong
from pingpong.integration import direct, inductor
from pingpong.errors import PingpongError
from pingpong.hopper.host import backend as hopper_backend
from pingpong.hopper.host import fp8_grouped, fp8_launch
from pingpong.hopper.host import table as tables
from pingpong.hopper.host.config import KernelConfig
from pingpong.hopper.host.select import Device, choose
from pingpong.runtime import compile as cc
from pingpong.runtime import device, plan, spec
from pingpong.streaming import api as streaming_api

BF16 = torch.bfloat16
E4M3 = torch.float8_e4m3fn
SETTER = "torch._C._set_sm_carveout_experimental"


@pytest.fixture
def carveout():
    """Sets torch's SM carveout for the test (`carveout(n)`); unset again afterwards."""
    yield torch._C._set_sm_carveout_experimental
    torch._C._set_sm_carveout_experimental(None)


@pytest.fixture
def hopper_launches(monkeypatch, carveout):
    """Every call planned as on a Hopper GPU (CPU tensors, caches of the test's own) and launched
    through Triton's JIT, then directly, into a recorder of the C launcher's arguments: the list
    of recorded calls (grid first)."""
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda index: True)
    monkeypatch.setattr(spec, "check_gpu", lambda device, names=None: None)
    monkeypatch.setattr(plan, "PLANS", collections.OrderedDict())
    monkeypatch.setattr(direct, "LAYERS", collections.OrderedDict())
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: -1, raising=False)  # the plans' device: -1, the CPU
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0, raising=False)
    with cc.offline("sm_90a"):
        from triton.runtime import driver

        yield fake_launcher.install(driver.active)


def _bf16(*shape):
    return torch.randn(*shape).to(BF16)


A, W = _bf16(2048, 64), _bf16(2048, 64)  # 16 × 16 tiles of 128 × 128: more than any grid
PATHS = {  # each way a call reaches a Hopper plan, on the CPU
    "matmul_tiled": lambda: pingpong.matmul_tiled(A, W.t(), KernelConfig(128, 128, 64)),
    "matmul (selection)": lambda: pingpong.matmul(A, W.t()),
    "linear (a layer plan)": lambda: pingpong.linear(A, W),
    "inductor's mm call": lambda: inductor.mm_out(A, W.t(), out=torch.empty(2048, 2048, dtype=BF16)),
    "inductor's linear call": lambda: inductor.linear_out(A, W, bias=False, activation=None,
                                                           out=torch.empty(2048, 2048, dtype=BF16)),
}


@pytest.mark.slow  # one offline compile (Triton's cache keeps it for the other paths)
@pytest.mark.parametrize("path", PATHS)
def test_the_launched_grid_follows_the_carveout_and_never_reuses_a_plan(hopper_launches, carveout, path):
    """Set, unset, set again: the grid is 132 programs, then 124 under a carveout of 8, then 132
    and 124 again from the plans kept for each (no new plan: the carveout is in their keys)."""
    call = PATHS[path]
    grids = []
    with torch.no_grad():
        for n in (None, 8):
            carveout(n)
            call()
            grids.append(hopper_launches[-1][:3])
        planned = (len(plan.PLANS), len(direct.LAYERS))
        for n in (None, 8, 8):
            carveout(n)
            call()
            grids.append(hopper_launches[-1][:3])
    assert grids == [(132, 1, 1), (124, 1, 1), (132, 1, 1), (124, 1, 1), (124, 1, 1)]
    assert (len(plan.PLANS), len(direct.LAYERS)) == planned  # the second round: cache hits only
    assert len(hopper_launches) == 5


@pytest.mark.parametrize("n", [-1, 132, 500])
def test_a_carveout_that_leaves_no_sm_is_refused_naming_torchs_setting(hopper_launches, carveout, n):
    """Before any launch, on the dense, layer and FP8 paths; nothing is cached, and the next
    call with a carveout that leaves an SM runs."""
    carveout(n)
    fp8 = fp8_spec(2048, 2048, 128)
    for call in (PATHS["matmul (selection)"], PATHS["linear (a layer plan)"], lambda: plan.plan_for(fp8)):
        with pytest.raises(PingpongError, match=rf"SM carveout \({SETTER}\): {n} must be at least 0 and below"
                                                rf" the GPU's 132 SMs"):
            with torch.no_grad():
                call()
    assert not plan.PLANS and not direct.LAYERS and not hopper_launches
    with pytest.raises(PingpongError, match=rf"SM carveout \({SETTER}\): {n} must"):
        device.carveout_sms(132, n)


def test_the_carveout_is_in_every_plan_key(carveout):
    """GemmSpec (dense, grouped, FP8), the layer key and the FP8 layer's signature: equal
    calls under one carveout share a key, under another they do not."""
    a, w = _bf16(64, 32), _bf16(48, 32)
    offs = torch.tensor([16, 64], dtype=torch.int32)

    def keys():
        dense = spec.build(a, w.t(), None, 0.0, BF16, None, None)
        grouped = spec.build_grouped(a, _bf16(2, 32, 48), offs, BF16)
        return dense, grouped, fp8_spec(64, 48, 128), pingpong.fp8.Float8Linear.signature(a)

    unset = keys()
    assert keys() == unset
    carveout(8)
    eight = keys()
    assert keys() == eight and all(x != y for x, y in zip(unset, eight))
    assert eight[0].carveout == 8 and unset[0].carveout is None
    carveout(0)  # a carveout of 0 spans every SM, but is torch's setting as given: its own key
    assert all(x != y for x, y in zip(keys(), unset))


def fp8_spec(M, N, K):
    a, w = torch.zeros(M, K, dtype=E4M3), torch.zeros(N, K, dtype=E4M3)
    return spec.build(a, w.t(), out_dtype=BF16, scales=(torch.ones(M, 1), torch.ones(N, 1).t(), False))


def _grid_of(p, run, monkeypatch) -> int:
    """The grid `p`'s next launch would have: run(p) with its CachedLaunch recording, then the
    recorded JIT arguments prepared (offline)."""
    calls = []
    monkeypatch.setattr(p, "launch", lambda device, ptrs, dyn, prep, *inputs: calls.append((prep, inputs)))
    run(p)
    ((prep, inputs),) = calls
    with cc.offline("sm_90a"):
        return prep(*inputs)[3][0]


def test_fp8_and_grouped_plans_span_the_sms_the_carveout_leaves(monkeypatch, carveout):
    """scaled_mm's, grouped_mm's and scaled_grouped_mm's plans (planned under a carveout of 8)
    launch at most 124 programs, and fewer than the same plan without it."""
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda index: True)
    M = N = K = 4096
    a, w = torch.zeros(M, K, dtype=E4M3), torch.zeros(N, K, dtype=E4M3)
    sa, sb = torch.ones(M, 1), torch.ones(N, 1)
    T, G = 8192, 4
    ga, gw = torch.zeros(T, 256, dtype=E4M3), torch.zeros(G, N, 256, dtype=E4M3)
    goffs = torch.tensor([2048, 4096, 6144, 8192], dtype=torch.int32)
    ba, bw = _bf16(T, 256), _bf16(G, N, 256)
    cases = {
        "scaled_mm": (lambda: fp8_spec(M, N, K),
                      lambda p: p.run(a, w.t(), torch.empty(M, N, dtype=BF16), spec.EpilogueArgs(scale_a=sa, scale_b=sb.t()))),
        "scaled_grouped_mm": (
            lambda: spec.build_grouped(ga, gw.transpose(1, 2), goffs, BF16, (torch.ones(T), torch.ones(G, N), False)),
            lambda p: p.run(ga, gw.transpose(1, 2), torch.empty(T, N, dtype=BF16),
                            spec.EpilogueArgs(scale_a=torch.ones(T), scale_b=torch.ones(G, N), offs=goffs))),
        "grouped_mm": (lambda: spec.build_grouped(ba, bw.transpose(1, 2), goffs, BF16),
                       lambda p: p.run(ba, bw.transpose(1, 2), torch.empty(T, N, dtype=BF16), spec.EpilogueArgs(offs=goffs))),
    }
    kinds = {"scaled_mm": fp8_launch.Fp8Plan, "scaled_grouped_mm": fp8_grouped.Fp8GroupedPlan,
             "grouped_mm": hopper_backend.GroupedHopperPlan}
    for name, (make, run) in cases.items():
        grids = []
        for n in (None, 8):
            carveout(n)
            p = plan.plan_for(make())
            assert isinstance(p, kinds[name]), name
            grids.append(_grid_of(p, run, monkeypatch))
        assert grids[1] <= 124 and grids[1] < grids[0], (name, grids)


def test_the_streaming_add_spans_the_sms_the_carveout_leaves(monkeypatch, carveout):
    """vector_add's persistent Hopper kernel: its launch gets the SMs less the carveout (its
    plans are keyed by that count: pingpong.streaming.hopper.launch)."""
    monkeypatch.setattr(streaming_api, "is_hopper", lambda index: True)
    monkeypatch.setattr(device, "sm_count", lambda index: 132)
    device.launch_sms.cache_clear()
    launched = []
    monkeypatch.setattr(streaming_api.hopper, "launch", lambda a, b, out, sms, cfg, index: launched.append(sms))
    x = torch.empty(streaming_api.TMA_MIN_ELEMENTS, dtype=BF16)  # the least the TMA kernel takes
    try:
        for n in (None, 8, None):
            carveout(n)
            streaming_api._launch(0, x, x, x)
    finally:
        device.launch_sms.cache_clear()
    assert launched == [132, 124, 132]


def test_tables_stay_the_gpus_and_an_exact_entry_is_near_under_a_carveout(tuning_cache):
    """The GPU's table (keyed by its 132 SMs) answers under a carveout of 8; an exact entry is
    then held to the near rule on the 124 SMs left (it was measured on all 132): the 128×256 tile
    tuned at 1024×4500×4096 (144 tiles, 2 waves either way) yields to the heuristic there, a
    128×128 one at 4096×4096×4096 (1024 tiles, 9 waves of 124) still answers."""
    h100 = Device("NVIDIA H100 80GB HBM3", 132)
    carved = Device(h100.name, 124, 8)
    t = tables.Table(tables.TableKey.current(h100.name, h100.sms))
    ahead = dict(us=1.0, heuristic_us=1.2)  # well ahead of the heuristic's config (select.NEAR_GAIN)
    t.add(1024, 4500, 4096, "bf16", "bf16", "nt", KernelConfig(128, 256, 64), **ahead)
    t.add(4096, 4096, 4096, "bf16", "bf16", "nt", KernelConfig(128, 128, 64, group_m=4), **ahead)
    path = str(tables.write(t, tables.user_table_path(t.key)))
    assert choose(1024, 4500, 4096, device=h100) == (KernelConfig(128, 256, 64), path)
    assert choose(1024, 4500, 4096, device=carved)[1] == "heuristic"
    assert choose(4096, 4096, 4096, device=carved) == (KernelConfig(128, 128, 64, group_m=4), path)


def test_device_facts_under_a_carveout(carveout):
    """Without a GPU the default facts (132 SMs) less the carveout, refused when none is left."""
    assert Device.of(0, None) == Device(None, 132, 0)
    assert Device.of(0, 8) == Device(None, 124, 8)
    assert Device.of(0, 131).sms == 1
    with pytest.raises(PingpongError, match=rf"SM carveout \({SETTER}\): 132 must"):
        Device.of(0, 132)


@pytest.mark.slow  # offline compiles: the backward's two products
def test_a_backward_under_another_carveout_plans_its_products_anew(hopper_launches, carveout):
    """A layer's forward under no carveout, its backward under 8: dx's and dweight's launches
    span 124 SMs (the layer's gradient plans are keyed by the carveout too), and 132 again for
    a backward without it."""
    x = _bf16(2048, 2048).requires_grad_()
    w = _bf16(2048, 2048).requires_grad_()
    g = _bf16(2048, 2048)
    for n, want in ((8, 124), (None, 132)):
        carveout(None)
        y = pingpong.linear(x, w)
        assert hopper_launches[-1][:3] == (132, 1, 1)
        carveout(n)
        y.backward(g)
        assert [c[:3] for c in hopper_launches[-2:]] == [(want, 1, 1)] * 2
