"""The grouped product as a GemmSpec (pingpong.runtime.spec.build_grouped), on the CPU: what
each backend answers for a grouped spec (the Hopper ragged-rows and ragged-K kernels, AMD,
portable) and why it refuses, the registry's own decisions (empty, 3-D × 3-D), grouped and
dense specs apart in the plan cache, a spec validated once, and grouped.py asking the
registry instead of deciding a backend itself."""

import ast
import collections
import types
from pathlib import Path

import pytest
import torch
from fused_reference import offsets

import pingpong
from pingpong import PingpongError
from pingpong import grouped as gm
from pingpong import portable
from pingpong.amd import backend as amd_backend
from pingpong.hopper.host import backend as hopper_backend
from pingpong.hopper.host import grouped as hg
from pingpong.hopper.host import grouped_k as hk
from pingpong.portable import grouped as portable_grouped
from pingpong.runtime import plan, spec

BF16 = torch.bfloat16
META = dict(dtype=BF16, device="meta")


def m(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def offs(G, device="meta"):
    return torch.empty(G, dtype=torch.int32, device=device)


def gs(a, b, o, out_dtype=None):
    return spec.build_grouped(a, b, o, out_dtype)


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda index: True)


T, K, N, G, M = 1000, 256, 384, 8, 136
CASES = {  # name: (spec, Hopper's answer: a path, or a phrase of its refusal)
    "rows, b = w.transpose(1, 2)": (lambda: gs(m(T, K), m(G, N, K).transpose(1, 2), offs(G)), "hopper"),
    "rows, b row-major, fp32 out": (lambda: gs(m(T, K), m(G, K, N), offs(G), torch.float32), "hopper"),
    "rows, a column-major": (lambda: gs(m(K, T).t(), m(G, K, N), offs(G)), "hopper-padded"),
    "rows, b of 16-byte-odd group stride": (
        lambda: gs(m(T, K), m(G * K * N + 8).as_strided((G, K, N), (K * N + 4, N, 1)), offs(G)), "hopper-padded"),
    "rows, K = 17": (lambda: gs(m(T, 17), m(G, 17, N), offs(G)), "cannot read a (shape (1000, 17)"),
    "rows, odd N": (lambda: gs(m(T, K), m(G, 47, K).transpose(1, 2), offs(G)), "cannot write the (1000, 47)"),
    "rows, odd N in b's rows": (lambda: gs(m(T, K), m(G, K, 47), offs(G)), "cannot read b (shape (8, 256, 47)"),
    "columns, b = y.t()": (lambda: gs(m(G, M, K), m(T, K).t(), offs(G)), "hopper"),
    "columns, b row-major": (lambda: gs(m(G, M, K), m(K, T), offs(G)), "hopper-padded"),
    "columns, K = 17": (lambda: gs(m(G, M, 17), m(17, T), offs(G)), "cannot read b (shape (17, 1000)"),
    "columns, odd total N": (lambda: gs(m(G, M, K), m(K, 1001), offs(G)), "cannot write the (1001, 136)"),
    "ragged K, a = x.t()": (lambda: gs(m(T, M).t(), m(T, N), offs(G)), "hopper"),
    "ragged K, a row-major": (lambda: gs(m(M, T), m(T, N), offs(G)), "hopper-padded"),
    "ragged K, odd M": (lambda: gs(m(T, 13).t(), m(T, N), offs(G)), "cannot read a (shape (13, 1000)"),
    "ragged K, odd N": (lambda: gs(m(T, M).t(), m(T, 13), offs(G)), "cannot read b (shape (1000, 13)"),
    "ragged K, T past 2**30 rows": (lambda: gs(m(2**30 + 8, M).t(), m(2**30 + 8, N), offs(G)), "ragged-K kernel"),
}


@pytest.mark.parametrize("case", CASES)
def test_hopper_answers_for_grouped_specs(hopper, case):
    """Runs (and which path: operands copied first or not), or a refusal naming the user's
    argument (ragged columns: the kernel's a is bᵀ, so b is named) or the output."""
    make, want = CASES[case]
    s = make()
    why = hopper_backend.can_implement(s)
    if want.startswith("hopper"):
        assert why is None, why
        assert hopper_backend.plan(s).path == want
        assert plan.plan_for(s).path == want  # the registry asks Hopper first
    else:
        assert why is not None and want in why, why
        assert plan.plan_for(s).path == "portable"  # refused: the portable kernel runs it


def test_hopper_grouped_plans_take_the_kernels_tiles(hopper):
    """The tile is chosen once, when planning, from the kernel's view (ragged columns: T is
    b's columns, N is a's rows)."""
    assert hopper_backend.plan(gs(m(T, K), m(G, K, N), offs(G))).config == hg.select_grouped_config(T, G, N)
    assert hopper_backend.plan(gs(m(G, M, K), m(K, T), offs(G))).config == hg.select_grouped_config(T, G, M)
    assert hopper_backend.plan(gs(m(T, M).t(), m(T, N), offs(G))).config == hk.select_ragged_k_config(M, N, T, G)


def test_every_backend_refuses_a_grouped_spec_with_a_reason(monkeypatch):
    s = gs(m(T, K), m(G, K, N), offs(G))
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda index: False)
    assert "not a Hopper GPU (sm_90)" in hopper_backend.can_implement(s)
    assert amd_backend.can_implement(s) == "not a ROCm GPU"
    monkeypatch.setattr(torch.version, "hip", "6.4")
    for mode_spec in (s, gs(m(T, M).t(), m(T, N), offs(G))):  # 2-D × 2-D too: not a dense 2-D GEMM
        assert "no AMD grouped kernel" in amd_backend.can_implement(mode_spec)
    assert portable.can_implement(s) is None
    cpu = gs(torch.empty(8, 16, dtype=BF16), torch.empty(2, 16, 8, dtype=BF16), offs(2, "cpu"))
    assert "CPU tensors" in portable.can_implement(cpu)
    with pytest.raises(PingpongError, match="no backend runs this call: hopper: .*not a Hopper.*; amd: .*; "
                                            "portable: CPU tensors"):
        plan.plan_for(cpu)


def test_the_registry_decides_empty_and_batched(hopper):
    """No groups, an empty output: no kernel (and nothing written); ragged K with K = 0:
    zeros; 3-D × 3-D: the dense batched product's own plan."""
    e = torch.empty
    for a, b, o in ((e(T, K), e(0, K, N), e(0)), (e(0, K), e(G, K, N), e(G)), (e(G, M, K), e(K, 0), e(G)),
                    (e(M, T), e(T, N), e(0)), (e(M, 0), e(0, N), e(G))):
        p = plan.plan_for(gs(a, b, o))
        out = torch.full(spec.grouped_shape(spec.grouped_mode(a, b), a, b, o.shape[0]), float("nan"))
        p.run(a, b, out, spec.EpilogueArgs(offs=o))
        assert p.path == "empty"
        assert (out == 0).all() if a.shape[1] == 0 else out.isnan().all()  # ragged K of K = 0: zeros
    batched = gs(m(G, M, K), m(G, N, K).transpose(1, 2), None)
    p = plan.plan_for(batched)
    assert isinstance(p, plan.BatchedPlan) and isinstance(p.dense, hopper_backend.HopperPlan)
    assert p.path == plan.plan_for(spec.build(m(G, M, K), m(G, N, K).transpose(1, 2))).path == "hopper"


# ----------------------------------------------------------------------------- keys and the cache


def test_grouped_and_dense_specs_never_share_a_key():
    a, b = m(G, M, K), m(G, K, N)
    dense, grouped = spec.build(a, b), gs(a, b, None)
    assert grouped != dense and grouped._replace(groups=None) == dense and dense.groups is None
    base = gs(m(T, K), m(G, K, N), offs(G))
    assert gs(m(T, K), m(G, K, N), offs(G)) == base  # fresh tensors, same properties: one plan
    variants = {
        "tokens": gs(m(T + 1, K), m(G, K, N), offs(G)),
        "groups": gs(m(T, K), m(G + 1, K, N), offs(G + 1)),
        "b transposed": gs(m(T, K), m(G, N, K).transpose(1, 2), offs(G)),
        "out dtype": gs(m(T, K), m(G, K, N), offs(G), torch.float32),
        "offs strides": gs(m(T, K), m(G, K, N), offs(2 * G)[::2]),
        "ragged K": gs(m(K, T), m(T, N), offs(G)),
        "dense of the same a, b": spec.build(m(K, T), m(T, N)),
    }
    assert base not in variants.values() and len(set(variants.values())) == len(variants)
    assert gs([1, 2], m(G, K, N), offs(G)) is None and gs(m(T, K), m(G, K, N), None) is None  # validation names them


@pytest.fixture
def grouped_runs(monkeypatch):
    """Plans built as on a non-Hopper GPU for CPU tensors (both kinds), each run recorded
    instead of launched; fresh caches; counts of the grouped validation."""
    monkeypatch.setattr(spec, "check_gpu", lambda device, names=None: None)
    monkeypatch.setattr(gm, "check_gpu", lambda device: None)
    monkeypatch.setattr(plan, "BACKENDS", [portable])
    monkeypatch.setattr(portable, "can_implement", lambda s: None)
    monkeypatch.setattr(plan, "PLANS", collections.OrderedDict())
    runs = types.SimpleNamespace(dense=[], grouped=[], validated=0)
    monkeypatch.setattr(portable.PortablePlan, "run", lambda self, *args: runs.dense.append(args))
    monkeypatch.setattr(portable_grouped.GroupedPortablePlan, "compute", lambda self, *args: runs.grouped.append(args))
    validate = spec.validate_grouped

    def counted(*args):
        runs.validated += 1
        return validate(*args)

    monkeypatch.setattr(spec, "validate_grouped", counted)
    return runs




def test_one_cache_holds_grouped_and_dense_plans_apart(grouped_runs):
    a, b = torch.randn(4, 8, 16).half(), torch.randn(4, 16, 8).half()
    assert gm.path_for(a, b) == "portable" and pingpong.path_for(a, b) == "portable"
    assert len(plan.PLANS) == 2 and sorted(k.groups is None for k in plan.PLANS) == [False, True]
    gm.grouped_mm(a, b)  # 3-D × 3-D: the grouped plan's dense plan runs, into the new output
    (args,) = grouped_runs.dense
    assert args[0] is a and args[1] is b and args[2].shape == (4, 8, 8) and args[3:] == ()  # no epilogue operand


def test_a_grouped_spec_is_validated_and_planned_once(grouped_runs, monkeypatch):
    asked = []
    can_implement = portable.can_implement
    monkeypatch.setattr(portable, "can_implement", lambda s: asked.append(s) or can_implement(s))
    x, w = torch.randn(30, 16).half(), torch.randn(3, 8, 16).half()
    for sizes in ([10, 0, 20], [5, 5, 5], [0, 0, 30]):  # the offsets' values are not in the key
        gm.grouped_mm(x, w.transpose(1, 2), offsets(sizes))
    assert grouped_runs.validated == 1 and len(asked) == 1 and asked[0].groups.mode == gm.ROWS
    assert len(grouped_runs.grouped) == 3
    a, b, out, o = grouped_runs.grouped[0]
    assert a is x and b.shape == (3, 16, 8) and out.shape == (30, 8) and o.tolist() == [10, 10, 30]
    gm.grouped_mm(torch.randn(3, 5, 16).half(), torch.randn(16, 30).half(), offsets([10, 0, 20]))  # ragged columns
    a, b, out, o = grouped_runs.grouped[-1]  # the plan runs ragged rows on the transposed views
    assert a.shape == (30, 16) and b.shape == (3, 16, 5) and out.shape == (30, 5) and out.stride() == (1, 30)
    assert grouped_runs.validated == 2


def test_grouped_py_decides_no_backend():
    """grouped.py names no kernel module nor device query: the backends decide (one decision,
    in the backend); it reaches them only through the plan registry."""
    tree = ast.parse(Path(gm.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not any("hopper" in x for x in imported | modules), imported | modules
    assert not names & {"is_hopper", "legal", "legal_operand", "legal_out", "select_grouped_config",
                        "select_ragged_k_config", "CachedLaunch", "sm_count"}
    assert {"get", "cached_plan", "plan_for"} <= names


def test_the_interpreter_is_a_backend_given_explicitly():
    """_compute(interpret=True) plans with pingpong.portable.Interpreter alone (not the
    registry): 3-D × 3-D runs portable_gemm interpreted, the ragged forms the grouped kernel."""
    torch.manual_seed(3)
    a, b = torch.randn(3, 9, 16).half(), torch.randn(3, 16, 5).half()
    out = gm._compute(a, b, None, torch.float32, interpret=True)
    torch.testing.assert_close(out, torch.bmm(a.float(), b.float()), atol=1e-3, rtol=1e-3)
    s, p = gm._plan(a, b, None, torch.float32, interpret=True)
    assert p.path == "interpreted" and s not in plan.PLANS
