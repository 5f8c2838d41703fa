"""GPU checks of the call path (pingpong.runtime.plan + pingpong.runtime.launcher): the cached direct launch
on new addresses and side streams, CUDA-graph capture and replay, misaligned bases through
every path, tensors on a non-current GPU, aliasing refusals. Marker `gpu`."""

import pytest
import torch

import pingpong
from pingpong.runtime import plan

from closeness import rel_err

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    print(f"generator seed {g.seed()}")
    return g


def rand(*shape, gen, dtype=BF16, device="cuda"):
    return torch.randn(*shape, generator=gen, device="cuda").to(device=device, dtype=dtype)


def test_cached_launch_on_new_addresses_and_side_streams(gen):
    """Many calls with one signature: the first JITs, the rest launch directly with new
    base addresses, on the default stream and on side streams."""
    plan.PLANS.clear()
    m, n, k = 1000, 776, 520
    side = torch.cuda.Stream()
    for i in range(6):
        a, w = rand(m, k, gen=gen), rand(n, k, gen=gen)
        c = rand(m, n, gen=gen)
        ref = a.double() @ w.t().double()
        stream = side if i % 2 else torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            out = pingpong.matmul(a, w.t())
            out2 = pingpong.gemm(a, w.t(), c, alpha=0.5 + i, beta=-1.0)
        stream.synchronize()
        assert rel_err(out, ref) < 1e-2, i
        assert rel_err(out2, (0.5 + i) * ref - c.double()) < 1e-2, i
    keys = list(plan.PLANS)
    assert len(keys) == 2, "one plan per signature"
    assert all(p.launch.bound is not None for p in plan.PLANS.values()), "direct launches were bound"


def test_cuda_graph_capture_and_replay_with_new_inputs(gen):
    m, n, k = 512, 384, 256
    a, w = rand(m, k, gen=gen), rand(n, k, gen=gen)
    c = rand(m, n, gen=gen, dtype=torch.float32)
    pingpong.gemm_(c.clone(), a, w.t(), beta=1.0)  # warm-up: compile and bind outside capture
    pingpong.matmul(a, w.t())
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = pingpong.matmul(a, w.t())
        pingpong.gemm_(c, a, w.t(), alpha=2.0, beta=1.0)
    for _ in range(3):
        a.copy_(rand(m, k, gen=gen))
        w.copy_(rand(n, k, gen=gen))
        c0 = rand(m, n, gen=gen, dtype=torch.float32)
        c.copy_(c0)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref = a.double() @ w.t().double()
        assert rel_err(out, ref) < 1e-2
        assert rel_err(c, 2.0 * ref + c0.double()) < 5e-3


def _misaligned(rows, cols, gen, col_major=False, dtype=BF16):
    """A (rows, cols) view whose base is 2 bytes past a 16-byte boundary (x[1:])."""
    if col_major:
        return rand(cols * rows + 1, gen=gen, dtype=dtype)[1:].view(cols, rows).t()
    return rand(rows * cols + 1, gen=gen, dtype=dtype)[1:].view(rows, cols)


@pytest.mark.parametrize("which", ["a", "b", "c", "out"])
@pytest.mark.parametrize("col_major", [False, True])
def test_misaligned_bases_through_every_path(which, col_major, gen):
    m, n, k = 300, 264, 136
    a = _misaligned(m, k, gen, col_major) if which == "a" else rand(m, k, gen=gen)
    b = _misaligned(k, n, gen, col_major) if which == "b" else rand(k, n, gen=gen)
    ref = a.double() @ b.double()
    if which in ("a", "b"):
        assert pingpong.path_for(a, b) == "hopper-padded"
        assert rel_err(pingpong.matmul(a, b), ref) < 1e-2
        return
    c = _misaligned(m, n, gen, col_major)
    c0 = c.double()
    if which == "c":
        assert pingpong.path_for(a, b, c, beta=0.5) == "hopper-padded"
        assert rel_err(pingpong.gemm(a, b, c, beta=0.5), ref + 0.5 * c0) < 1e-2
    else:
        assert pingpong.path_for(a, b, c, beta=0.5, inplace=True) == "hopper-padded"
        pingpong.gemm_(c, a, b, beta=0.5)
        assert rel_err(c, ref + 0.5 * c0) < 1e-2


def test_path_for_is_the_executed_path_for_odd_n(gen):
    a, w = rand(256, 128, gen=gen), rand(45, 128, gen=gen)  # w.t(): N = 45, output rows of 90 bytes
    assert pingpong.path_for(a, w.t()) == "hopper-padded"
    out = pingpong.matmul(a, w.t())
    assert out.is_contiguous() and rel_err(out, a.double() @ w.t().double()) < 1e-2


def test_gemm_refuses_self_overlapping_c_before_any_work(gen):
    a, b = rand(64, 32, gen=gen), rand(32, 48, gen=gen)
    row = rand(1, 48, gen=gen)
    c = row.expand(64, 48)
    before = row.clone()
    with pytest.raises(pingpong.PingpongError, match="overlap"):
        pingpong.gemm_(c, a, b, beta=1.0)
    torch.cuda.synchronize()
    assert torch.equal(row, before)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_the_non_current_gpu(gen):
    """Every op on cuda:1 while cuda:0 is current: runs on cuda:1, on cuda:1's stream."""
    torch.cuda.set_device(0)
    g1 = torch.Generator(device="cuda:1")
    print(f"cuda:1 seed {g1.seed()}")
    r = lambda *s, dtype=BF16: torch.randn(*s, generator=g1, device="cuda:1").to(dtype)  # noqa: E731
    a, w, c = r(1000, 520), r(776, 520), r(1000, 776)
    ref = a.double() @ w.t().double()
    for _ in range(2):  # the JIT call, then the direct launch
        assert rel_err(pingpong.matmul(a, w.t()), ref) < 1e-2
        assert rel_err(pingpong.gemm(a, w.t(), c, beta=2.0), ref + 2.0 * c.double()) < 1e-2
        c2 = c.float().clone()
        pingpong.gemm_(c2, a, w.t(), alpha=-1.0, beta=1.0)
        assert rel_err(c2, c.double() - ref) < 5e-3
        x, y = r(1 << 20, dtype=torch.float32), r(1 << 20, dtype=torch.float32)
        assert torch.equal(pingpong.vector_add(x, y), x + y)
        x, y = r(1 << 25, dtype=torch.float32), r(1 << 25, dtype=torch.float32)  # the TMA kernel
        assert torch.equal(pingpong.vector_add(x, y), x + y)
        d, wd = r(16, 32768), r(1024, 32768)  # decode with a long K: split-K, its counters on cuda:1
        assert rel_err(pingpong.matmul(d, wd.t()), d.double() @ wd.t().double()) < 1e-2
    torch.cuda.synchronize(1)
    assert torch.cuda.current_device() == 0
    assert any(device == 1 for device, _ in plan._COUNTERS), "the decode call took the split kernel on cuda:1"
    assert not any(buf.any() for buf in plan._COUNTERS.values())
