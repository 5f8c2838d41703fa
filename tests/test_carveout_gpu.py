"""torch's SM carveout on a Hopper GPU: the products are right under it, every launch's
persistent grid spans the SMs it leaves (the plans' bound grids), changing it plans anew and
changing it back finds the earlier plans, and a carveout that leaves no SM is refused on the
GPU path too (pingpong.runtime.plan.plan_for). Marker `gpu`. The CPU tests
(tests/test_carveout.py) observe the launched grids through Triton's launch path."""

import pytest
import torch

import pingpong
from pingpong.runtime import plan
from pingpong.runtime.device import sm_count

from closeness import GEMM_BOUND, RTOL, ATOL_PER_K, assert_close

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


@pytest.fixture
def carveout():
    yield torch._C._set_sm_carveout_experimental
    torch._C._set_sm_carveout_experimental(None)


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    print(f"generator seed {g.seed()}")
    return g


def rand(*shape, gen):
    return torch.randn(*shape, generator=gen, device="cuda").to(BF16)


SHAPES = [(4096, 4096, 4096), (8192, 1024, 4096), (16, 4096, 4096), (512, 6144, 4096)]  # wide, tall, decode, mid


@pytest.mark.parametrize("M, N, K", SHAPES)
def test_products_are_right_and_grids_span_the_sms_left(carveout, gen, M, N, K):
    """matmul and linear (forward and backward) under carveouts of 0, 8 and 32 SMs: within
    the GEMM bounds of the float64 product, and every plan's bound grid at most SMs − carveout."""
    sms = sm_count(torch.cuda.current_device())
    for n in (None, 8, 32):
        carveout(n)
        a, w = rand(M, K, gen=gen), rand(N, K, gen=gen)
        ref = a.double() @ w.double().t()
        allowed = RTOL[BF16] * ref.abs() + ATOL_PER_K * (K + 1)
        what = f"carveout {n}, {M}×{N}×{K}"
        assert_close(pingpong.matmul(a, w.t()), ref, norm=GEMM_BOUND[BF16], allowed=allowed, what=what)
        x, wt = a.clone().requires_grad_(), w.clone().requires_grad_()
        y = pingpong.linear(x, wt)
        g = rand(M, N, gen=gen)
        y.backward(g)
        torch.cuda.synchronize()
        assert_close(y, ref, norm=GEMM_BOUND[BF16], allowed=allowed, what=what + " linear")
        dref = g.double() @ w.double()
        assert_close(x.grad, dref, norm=GEMM_BOUND[BF16], allowed=RTOL[BF16] * dref.abs() + ATOL_PER_K * (N + 1),
                     what=what + " dx")
        for key, p in plan.PLANS.items():
            if key.carveout == n and getattr(p, "launch", None) is not None and p.launch.grid is not None:
                cluster = getattr(p.config, "cluster_m", 1)
                assert p.launch.grid[0] * cluster <= sms - (n or 0), (what, p.config, p.launch.grid)


def test_changing_the_carveout_plans_anew_and_back_finds_the_plans(carveout, gen):
    a, w = rand(4096, 4096, gen=gen), rand(4096, 4096, gen=gen)
    plan.PLANS.clear()
    pingpong.matmul(a, w.t())
    carveout(16)
    pingpong.matmul(a, w.t())
    assert len(plan.PLANS) == 2
    grids = {key.carveout: p.launch.grid for key, p in plan.PLANS.items()}
    assert grids[16][0] < grids[None][0]
    carveout(None)
    pingpong.matmul(a, w.t())
    carveout(16)
    pingpong.matmul(a, w.t())
    assert len(plan.PLANS) == 2


@pytest.mark.parametrize("extra", [0, 10])
def test_a_carveout_that_leaves_no_sm_is_refused_on_the_gpu(carveout, gen, extra):
    sms = sm_count(torch.cuda.current_device())
    a, w = rand(256, 256, gen=gen), rand(256, 256, gen=gen)
    carveout(sms + extra)
    with pytest.raises(pingpong.PingpongError, match=r"SM carveout \(torch\._C\._set_sm_carveout_experimental\)"):
        pingpong.matmul(a, w.t())
    carveout(-1)
    with pytest.raises(pingpong.PingpongError, match=r"SM carveout .*: -1 must be at least 0"):
        pingpong.matmul(a, w.t())
