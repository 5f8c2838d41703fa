"""Issue 23's refusals: each bad call raises PingpongError naming the argument, before any work,
and leaves in-place outputs untouched (CPU and meta tensors; kernel runs are recorded)."""

import collections

import pytest
import torch

import pingpong
from pingpong import api, batching
from pingpong.runtime import plan, spec
from pingpong.errors import PingpongError

F16, BF16 = torch.float16, torch.bfloat16


def t(*shape, dtype=BF16):
    return torch.randn(*shape).to(dtype)


# ----------------------------------------------------------------------------- 1: path_for and the plan cache


def test_path_for_inplace_does_not_cache_a_plan_that_skips_the_self_overlap_check(portable_runs):
    a, b = t(8, 16), t(16, 4)
    c = t(1, 4).expand(8, 4)  # every row is the same memory
    before = c.clone()
    with pytest.raises(PingpongError, match="c: its elements overlap"):
        pingpong.path_for(a, b, c, beta=1.0, inplace=True)
    with pytest.raises(PingpongError, match="c: its elements overlap"):
        pingpong.gemm_(c, a, b, beta=1.0)
    assert portable_runs == [] and torch.equal(c, before)


def test_path_for_inplace_validates_as_gemm_does(portable_runs):
    buf = t(8, 8)
    with pytest.raises(PingpongError, match="c must not share memory with a"):
        pingpong.path_for(buf, t(8, 4), buf[:, 4:], inplace=True)


# ----------------------------------------------------------------------------- 2: a bias that requires grad


def test_gemm_inplace_refuses_a_bias_that_requires_grad():
    c, bias = t(8, 4), torch.randn(4, requires_grad=True)
    before = c.clone()
    with pytest.raises(PingpongError, match="bias: requires grad"):
        pingpong.gemm_(c, t(8, 8), t(8, 4), bias=bias)
    assert torch.equal(c, before)
    with torch.no_grad():  # then nothing is recorded: refused only for the device
        with pytest.raises(PingpongError, match="pingpong runs on CUDA"):
            pingpong.gemm_(c, t(8, 8), t(8, 4), bias=bias)


# ----------------------------------------------------------------------------- 3: sparse operands


def _sparse(kind, x):
    return x.to_sparse() if kind == "coo" else x.to_sparse_csr()


@pytest.mark.parametrize("kind, layout", [("coo", "torch.sparse_coo"), ("csr", "torch.sparse_csr")])
@pytest.mark.parametrize("where", ["a", "b", "c", "bias"])
def test_sparse_tensors_are_refused_early(kind, layout, where):
    x = {"a": t(8, 16, dtype=F16), "b": t(16, 4, dtype=F16), "c": t(8, 4, dtype=F16), "bias": t(4, dtype=F16)}
    if where == "bias" and kind == "csr":
        x[where] = _sparse("coo", x[where])  # CSR is 2-D only
        layout = "torch.sparse_coo"
    else:
        x[where] = _sparse(kind, x[where])
    needle = f"{where}: sparse tensors are not supported \\(layout {layout}\\); pass a dense tensor"
    with pytest.raises(PingpongError, match=needle):
        pingpong.gemm(x["a"], x["b"], x["c"], beta=1.0, bias=x["bias"])
    if where != "c":
        with pytest.raises(PingpongError, match=needle):
            pingpong.gemm_(t(8, 4, dtype=F16), x["a"], x["b"], bias=x["bias"])
    with pytest.raises(PingpongError, match=needle):
        pingpong.path_for(x["a"], x["b"], x["c"], beta=1.0, bias=x["bias"])


def test_sparse_batched_and_linear_are_refused():
    with pytest.raises(PingpongError, match="a: sparse tensors are not supported"):
        pingpong.gemm(t(2, 3, 8, 16, dtype=F16).to_sparse(), t(16, 4, dtype=F16))
    with pytest.raises(PingpongError, match="weight: sparse tensors are not supported"):
        pingpong.linear(t(8, 16, dtype=F16), t(4, 16, dtype=F16).to_sparse())
    with pytest.raises(PingpongError, match="bias: sparse tensors are not supported"):
        pingpong.linear(t(8, 16, dtype=F16), t(4, 16, dtype=F16), t(4, dtype=F16).to_sparse())


# ----------------------------------------------------------------------------- 4: the device error first


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_gemm_inplace_off_gpu_reports_the_device_not_aliasing(device):
    a = torch.empty(8, 8, dtype=BF16, device=device)
    b, c = torch.empty(8, 4, dtype=BF16, device=device), torch.empty(8, 4, dtype=BF16, device=device)
    if device == "cpu":  # c inside a: aliasing, but the device is what is wrong first
        base = torch.zeros(8 * 8, dtype=BF16)
        a, c = base.view(8, 8), base[:32].view(8, 4)
    before = c.clone() if device == "cpu" else None
    with pytest.raises(PingpongError, match="pingpong runs on CUDA"):
        pingpong.gemm_(c, a, b)
    if device == "cpu":
        assert torch.equal(c, before)


# ----------------------------------------------------------------------------- 5: nn


def test_replace_linear_include_must_be_a_predicate():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(PingpongError, match="include: expected None or a callable"):
        pingpong.nn.replace_linear(m, include="fc")
    assert type(m[0]) is torch.nn.Linear


def test_from_linear_needs_a_linear():
    with pytest.raises(PingpongError, match="layer: expected a torch.nn.Linear, got Conv2d"):
        pingpong.nn.Linear.from_linear(torch.nn.Conv2d(3, 3, 1))


# ----------------------------------------------------------------------------- 6: batched, off the GPU


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_batched_off_gpu_is_refused_before_any_broadcast_or_copy(device, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("batched operands were expanded/copied before the refusal")

    monkeypatch.setattr(batching, "run", no_work)
    monkeypatch.setattr(batching, "operand_view", no_work)
    a = torch.empty(8, 1, 512, 1024, dtype=BF16, device=device)
    b = torch.empty(4, 1024, 64, dtype=BF16, device=device)
    with pytest.raises(PingpongError, match="pingpong runs on CUDA"):
        pingpong.gemm(a, b)
    with pytest.raises(PingpongError, match="pingpong runs on CUDA"):
        pingpong.matmul(a, b)


# ----------------------------------------------------------------------------- 10: LRU


def test_plan_cache_evicts_the_least_recently_used(portable_runs, monkeypatch):
    monkeypatch.setattr(plan, "PLAN_CACHE_SIZE", 3)
    shapes = [(8, 16, n) for n in (4, 8, 12)]
    ops = [(t(m, k), t(k, n)) for m, k, n in shapes]
    keys = []
    for a, b in ops:
        pingpong.path_for(a, b)
        keys.append(spec.build(a, b))
    assert list(plan.PLANS) == keys
    pingpong.path_for(*ops[0])  # a hit: now the most recent
    pingpong.path_for(t(8, 16), t(16, 16))  # evicts ops[1], the least recently used
    assert keys[0] in plan.PLANS and keys[1] not in plan.PLANS and keys[2] in plan.PLANS


# ----------------------------------------------------------------------------- mutation guards


def test_overlap_span_counts_the_last_element_and_only_it():
    buf = torch.zeros(40, dtype=BF16)
    x = buf[:10]
    assert spec.overlaps(x, buf[9:19])  # shares x's last element: an off-by-one span misses it
    assert not spec.overlaps(x, buf[10:20])  # adjacent: a span of s·stride would see overlap
    m = buf[:20].view(4, 5)[:, :2]  # last element at offset 3·5 + 1 = 16
    assert spec.overlaps(m, buf[16:17]) and not spec.overlaps(m, buf[17:18])


def test_cached_plan_checks_overlap_and_bias_in_c_per_call(portable_runs):
    a, b = t(8, 16), t(16, 4)
    c, bias = t(8, 4), t(4)
    pingpong.gemm_(c, a, b, bias=bias)  # builds the plan
    assert len(portable_runs) == 1
    c2 = t(8, 4)
    before = c2.clone()
    inside = c2[2]  # 16-byte aligned as bias was: the same signature, a plan hit
    assert plan.get(spec.build(a, b, c2, 0.0, c2.dtype, inside, inplace=True)) is not None
    with pytest.raises(PingpongError, match="bias must not share memory with c"):
        pingpong.gemm_(c2, a, b, bias=inside)
    base = torch.zeros(8 * 4 + 8 * 16 - 1, dtype=BF16)
    c3, a3 = base[:32].view(8, 4), base[31:].view(8, 16)  # one element shared
    with pytest.raises(PingpongError, match="c must not share memory with a"):
        pingpong.gemm_(c3, a3, b, bias=bias)
    base4 = torch.zeros(8 * 4 + 8 * 16, dtype=BF16)
    c4, a4 = base4[:32].view(8, 4), base4[32:].view(8, 16)  # adjacent: allowed
    pingpong.gemm_(c4, a4, b, bias=bias)
    assert len(portable_runs) == 2 and torch.equal(c2, before)
