"""Validation on every path (issue 44): a cached plan is only a shortcut for inputs a first call
validated. For every public op, a refused call is refused again, and still refused after its
valid twin (the same call but for the fault; where it can, a twin with the same plan-cache key)
was accepted and cached. CPU tensors: the device checks are lifted and every plan records its
runs instead of launching (`recorded`)."""

import collections
import types

import pytest
import torch

import pingpong
from pingpong import direct, fp8, fp8_grouped, grouped, quantize
from pingpong.errors import PingpongError
from pingpong.runtime import plan, spec
from pingpong.streaming import api as streaming_api

H, F32 = torch.float16, torch.float32
E4 = torch.float8_e4m3fn


class _Recorded(plan.Plan):
    pointer_launch = False

    def __init__(self, runs):
        self.runs, self.path, self.device, self.activation, self.extents = runs, "recorded", -1, "none", None

    def run(self, *args):
        self.runs.append(args)

    run_scaled = run


@pytest.fixture
def recorded(monkeypatch):
    """Every public op plans and 'runs' CPU tensors: the GPU-only checks lifted, one backend
    whose plans record their runs, quantize_fp8's launch recorded; caches of the test's own."""
    runs = []
    backend = types.SimpleNamespace(NAME="recorded", ORDER=0, CONFIGURABLE=True, can_implement=lambda s: None,
                                    plan=lambda s: _Recorded(runs))
    for mod in (spec, grouped):
        monkeypatch.setattr(mod, "check_gpu", lambda *a, **k: None)
    monkeypatch.setattr(fp8, "check_gpu", lambda a, b: None)
    monkeypatch.setattr(fp8_grouped, "check_gpu", lambda device: None)
    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(streaming_api, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(quantize, "launch", lambda *args: runs.append(args))
    monkeypatch.setattr(plan, "BACKENDS", [backend])
    monkeypatch.setattr(plan, "PLANS", collections.OrderedDict())
    monkeypatch.setattr(direct, "LAYERS", collections.OrderedDict())
    return runs


def t(*shape, dtype=H, grad=False):
    return torch.randn(*shape).to(dtype).requires_grad_(grad)


def fp8_operands(m=32, n=32, k=64):
    return torch.randn(m, k).to(E4), torch.randn(n, k).to(E4).t()


def overlapping(shape_c, shape_a):
    """(c, a): a starts inside c's last elements; a disjoint twin of c with c's layout."""
    nc = shape_c[0] * shape_c[1]
    base = t(nc + shape_a[0] * shape_a[1])
    return base[:nc].view(shape_c), base[nc - 8:nc - 8 + shape_a[0] * shape_a[1]].view(shape_a)


def nested():
    return torch.nested.nested_tensor([torch.randn(2, 16), torch.randn(3, 16)]).to(H)


def scaled(scale_a_grad=False, scale_b_grad=False, bias=None, fast=False, a_none=False):
    x, w = fp8_operands()
    one = torch.tensor(1.0)
    sa, sb = one.clone().requires_grad_(scale_a_grad), one.clone().requires_grad_(scale_b_grad)
    return pingpong.scaled_mm(None if a_none else x, w, sa, sb, bias=bias, use_fast_accum=fast)


def scaled_grouped(scale_b_grad=False):
    x = torch.randn(32, 64).to(E4)
    w = torch.randn(2, 32, 64).to(E4).transpose(1, 2)
    sb = torch.ones(2, 32).requires_grad_(scale_b_grad)
    return pingpong.scaled_grouped_mm(x, w, torch.ones(32), sb, torch.tensor([16, 32], dtype=torch.int32))


_LAYER = []


def layer():
    """One Float8Linear for the table (made on first use, under `recorded`)."""
    if not _LAYER:
        _LAYER.append(fp8.Float8Linear(t(32, 64), None))
    return _LAYER[0]


def _gemm_inplace(alias: bool, bias_in_c=False, c_grad=False):
    c, a = overlapping((16, 8), (16, 16))
    if not alias:
        a = t(16, 16)
    if c_grad:
        c = t(16, 8, grad=True)
    return pingpong.gemm_(c, a, t(16, 8), bias=c[0] if bias_in_c else None)


def _path_for_inplace(alias: bool):
    c, a = overlapping((16, 8), (16, 16))
    return pingpong.path_for(a if alias else t(16, 16), t(16, 8), c, beta=1.0, inplace=True)


CASES = [
    # (id, the refused call, its valid twin or None, the message)
    ("matmul out_dtype", lambda: pingpong.matmul(t(16, 16), t(16, 8), out_dtype=torch.int8),
     lambda: pingpong.matmul(t(16, 16), t(16, 8), out_dtype=F32), "out_dtype"),
    ("matmul nested", lambda: pingpong.matmul(nested(), t(16, 8)), None, "a: nested tensors"),
    ("gemm activation", lambda: pingpong.gemm(t(16, 16), t(16, 8), activation="tanh"),
     lambda: pingpong.gemm(t(16, 16), t(16, 8), activation="relu"), "activation"),
    ("gemm bias dtype", lambda: pingpong.gemm(t(16, 16), t(16, 8), bias=torch.ones(8, dtype=torch.int64)),
     lambda: pingpong.gemm(t(16, 16), t(16, 8), bias=torch.ones(8)), "bias: dtype"),
    ("gemm c dtype", lambda: pingpong.gemm(t(16, 16), t(16, 8), t(16, 8, dtype=F32), beta=1.0),
     lambda: pingpong.gemm(t(16, 16), t(16, 8), t(16, 8), beta=1.0), "c: expected dtype"),
    ("gemm_ c overlaps a", lambda: _gemm_inplace(True), lambda: _gemm_inplace(False), "share memory with a"),
    ("gemm_ bias inside c", lambda: _gemm_inplace(False, bias_in_c=True), lambda: _gemm_inplace(False),
     "bias must not share memory with c"),
    ("gemm_ c requires grad", lambda: _gemm_inplace(False, c_grad=True), lambda: _gemm_inplace(False),
     "c: requires grad"),
    ("path_for in place c overlaps a", lambda: _path_for_inplace(True), lambda: _path_for_inplace(False),
     "share memory with a"),
    ("path_for inplace not a bool", lambda: pingpong.path_for(t(16, 16), t(16, 8), t(16, 8), inplace="no"),
     lambda: pingpong.path_for(t(16, 16), t(16, 8), t(16, 8), inplace=False), "inplace: expected a bool"),
    ("matmul_tiled config", lambda: pingpong.matmul_tiled(t(16, 16), t(16, 8), pingpong.KernelConfig(block_m=100)),
     lambda: pingpong.matmul_tiled(t(16, 16), t(16, 8), pingpong.KernelConfig()), "multiple of the wgmma M"),
    ("linear bias dtype", lambda: pingpong.linear(t(4, 16), t(8, 16), torch.ones(8, dtype=torch.int64)),
     lambda: pingpong.linear(t(4, 16), t(8, 16), torch.ones(8)), "bias: dtype"),
    ("linear weight nested", lambda: pingpong.linear(t(4, 16), nested()), None, "weight: nested tensors"),
    ("scaled_mm scale_a requires grad", lambda: scaled(scale_a_grad=True), scaled, "scale_a: requires grad"),
    ("scaled_mm scale_b requires grad", lambda: scaled(scale_b_grad=True), scaled, "scale_b: requires grad"),
    ("scaled_mm bias requires grad", lambda: scaled(bias=torch.ones(32, requires_grad=True)),
     lambda: scaled(bias=torch.ones(32)), "bias: requires grad"),
    ("scaled_mm use_fast_accum 1", lambda: scaled(fast=1), lambda: scaled(fast=True), "use_fast_accum"),
    ("scaled_mm a None", lambda: scaled(a_none=True), scaled, "a: expected a torch.Tensor"),
    ("scaled_grouped_mm scale_b requires grad", lambda: scaled_grouped(scale_b_grad=True), scaled_grouped,
     "scale_b: requires grad"),
    ("quantize_fp8 x requires grad", lambda: pingpong.quantize_fp8(t(8, 16, grad=True)),
     lambda: pingpong.quantize_fp8(t(8, 16)), "x: requires grad"),
    ("quantize_fp8 x nested", lambda: pingpong.quantize_fp8(nested()), None, "x: nested tensors"),
    ("grouped_mm offs dtype", lambda: pingpong.grouped_mm(t(32, 16), t(2, 16, 8), torch.tensor([16, 32])),
     lambda: pingpong.grouped_mm(t(32, 16), t(2, 16, 8), torch.tensor([16, 32], dtype=torch.int32)), "offs: dtype"),
    ("grouped_mm a None", lambda: pingpong.grouped_mm(None, t(2, 16, 8), torch.tensor([16, 32], dtype=torch.int32)),
     None, "a: expected a torch.Tensor"),
    ("vector_add out overlaps a", lambda: (lambda buf: pingpong.vector_add(buf[:8], t(8), buf[4:]))(t(12)), None,
     "out: partially overlaps a"),
    ("vector_add nested", lambda: pingpong.vector_add(nested(), nested()), None, "a: nested tensors"),
    ("Float8Linear x requires grad", lambda: layer()(t(4, 64, grad=True)), lambda: layer()(t(4, 64)),
     "x: Float8Linear is inference-only"),
    ("Float8Linear x None", lambda: layer()(None), None, "x: expected a torch.Tensor"),
]


@pytest.mark.parametrize("name, bad, good, needle", CASES, ids=[c[0] for c in CASES])
def test_a_refused_call_stays_refused_after_its_valid_twin_is_cached(recorded, name, bad, good, needle):
    with pytest.raises(PingpongError, match=needle):
        bad()
    with pytest.raises(PingpongError, match=needle):  # a refusal cached nothing
        bad()
    if good is not None:
        good()
        assert plan.PLANS or recorded, "the valid twin was planned (and ran)"
        runs = len(recorded)
        with pytest.raises(PingpongError, match=needle):  # the twin's plan is no shortcut for it
            bad()
        assert len(recorded) == runs, "nothing ran for the refused call"


def test_scaled_mm_repeat_keeps_the_gradient_refused_not_dropped(recorded):
    """The issue's case: a plan cached by a valid call; the same call with a scale that requires
    grad must not run (it would return an output without a grad_fn: the gradient dropped)."""
    scaled()
    with pytest.raises(PingpongError, match="scale_a: requires grad"):
        scaled(scale_a_grad=True)
    with torch.no_grad():  # nothing records: accepted
        scaled(scale_a_grad=True)
