"""The FP8 grouped product as a GemmSpec (spec.build_grouped with scales), on the CPU: what
each backend answers for it (Hopper runs it on a Hopper GPU with 16-byte-aligned a and b,
portable and AMD refuse it naming the missing kernel), its key apart from the bf16 grouped
and the dense FP8 specs, one validation and one plan per spec (a cache hit skips both; the
requires-grad refusal still runs), and the fake implementation validating through the same
function."""

import collections
import types

import pytest
import torch

import pingpong
from pingpong import PingpongError
from pingpong import fp8_grouped as fg
from pingpong import portable
from pingpong.amd import backend as amd_backend
from pingpong.hopper.host import backend as hopper_backend
from pingpong.hopper.host import fp8_grouped as kernel
from pingpong.runtime import fp8_spec, plan, spec

E4M3 = torch.float8_e4m3fn
T, K, N, G = 300, 256, 512, 4


def operands(t=T, device="cpu"):
    """(a, b, scale_a, scale_b, offs): row-wise scales, b = w.transpose(1, 2)."""
    a = torch.empty(t, K, dtype=E4M3, device=device)
    w = torch.empty(G, N, K, dtype=E4M3, device=device)
    return (a, w.transpose(1, 2), torch.ones(t, device=device), torch.ones(G, N, device=device),
            torch.arange(1, G + 1, dtype=torch.int32, device=device))


def block_operands():
    a, b, _, _, offs = operands()
    return a, b, torch.ones(K // 128, T).t(), torch.ones(G, N // 128, K // 128), offs


def fp8_spec_of(a, b, sa, sb, offs, out_dtype=torch.bfloat16, fast=False):
    return spec.build_grouped(a, b, offs, out_dtype, (sa, sb, fast))


def misaligned_a():
    """a (T, K) whose base is 8 bytes past a 16-byte boundary (a row stride of K stays legal)."""
    return torch.empty(T * K + 8, dtype=E4M3)[8:].view(T, K)


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda index: True)


# ----------------------------------------------------------------------------- the backends' answers


@pytest.mark.parametrize("fast", [False, True])
def test_hopper_plans_an_fp8_grouped_spec(hopper, fast):
    """Runs: the FP8 grouped kernel's plan, its tile from the kernel's rule and the promotion
    decided from the scale kinds (block-wise always promotes)."""
    for x, promote in ((operands(), not fast), (block_operands(), True)):
        s = fp8_spec_of(*x, fast=fast)
        assert hopper_backend.can_implement(s) is None
        p = plan.plan_for(s)
        assert isinstance(p, kernel.Fp8GroupedPlan) and p.path == "hopper" and p.promote is promote
        assert p.config == kernel.select_fp8_grouped_config(T, G, N, promote)


def test_hopper_refuses_another_gpu_and_unaligned_bases(hopper, monkeypatch):
    a, b, sa, sb, offs = operands()
    why = hopper_backend.can_implement(fp8_spec_of(misaligned_a(), b, sa, sb, offs))
    assert why is not None and why.startswith("a: base address must be 16-byte aligned"), why
    w = torch.empty(G * N * K + 8, dtype=E4M3)[8:].view(G, N, K)
    why = hopper_backend.can_implement(fp8_spec_of(a, w.transpose(1, 2), sa, sb, offs))
    assert why is not None and why.startswith("b: base address must be 16-byte aligned"), why
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda index: False)
    assert "not a Hopper GPU (sm_90)" in hopper_backend.can_implement(fp8_spec_of(a, b, sa, sb, offs))


def test_portable_and_amd_refuse_an_fp8_grouped_spec_naming_the_kernel(monkeypatch):
    s = fp8_spec_of(*operands(device="meta"))
    assert portable.can_implement(s) == "no portable FP8 grouped kernel (scaled_grouped_mm runs on Hopper only)"
    assert portable.can_implement(fp8_spec_of(*operands())) == portable.can_implement(s)  # the kernel, not the CPU
    assert amd_backend.can_implement(s) == "not a ROCm GPU"
    monkeypatch.setattr(torch.version, "hip", "6.4")
    assert amd_backend.can_implement(s) == "no AMD FP8 grouped kernel (scaled_grouped_mm runs on Hopper only)"
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda index: False)
    with pytest.raises(PingpongError, match=r"no backend runs this call: hopper: meta is not a Hopper GPU \(sm_90\); "
                                            r"amd: no AMD FP8 grouped kernel.*; portable: no portable FP8 grouped"):
        plan.plan_for(s)


def test_nothing_to_compute_is_the_registrys_empty_plan(hopper):
    a, b, sa, sb, offs = operands(t=0)
    assert plan.plan_for(fp8_spec_of(a, b, sa, sb, offs)).path == "empty"


# ----------------------------------------------------------------------------- keys and the cache


def test_fp8_grouped_bf16_grouped_and_dense_specs_are_different_keys():
    a, b, sa, sb, offs = operands()
    base = fp8_spec_of(a, b, sa, sb, offs)
    assert fp8_spec_of(*operands()) == base  # fresh tensors, same properties: one plan
    assert base.groups.mode == spec.ROWS and base.epilogue.scales.fast_accum is False
    variants = {
        "bf16 grouped": spec.build_grouped(a.bfloat16(), b.bfloat16(), offs, torch.bfloat16),
        "the same fp8 tensors without scales": spec.build_grouped(a, b, offs, torch.bfloat16),
        "dense fp8 of a and b[0]": spec.build(a, b[0], out_dtype=torch.bfloat16, scales=(sa, sb, False)),
        "dense of a and b[0]": spec.build(a, b[0], out_dtype=torch.bfloat16),
        "fast accumulation": fp8_spec_of(a, b, sa, sb, offs, fast=True),
        "fp32 out": fp8_spec_of(a, b, sa, sb, offs, torch.float32),
        "tensor-wise scales": fp8_spec_of(a, b, torch.ones(1), torch.ones(1), offs),
        "block-wise scales": fp8_spec_of(*block_operands()),
        "scale_b strides": fp8_spec_of(a, b, sa, torch.ones(G, 2 * N)[:, ::2], offs),
        "a unaligned": fp8_spec_of(misaligned_a(), b, sa, sb, offs),
        "e5m2": fp8_spec_of(a.to(torch.float8_e5m2), b.to(torch.float8_e5m2), sa, sb, offs),
    }
    assert base not in variants.values() and len(set(variants.values())) == len(variants)
    assert fp8_spec_of(a, b, "1", sb, offs) is None  # not a tensor: validation names it
    assert fp8_spec_of(a, b, sa, sb, offs, fast=1) is None  # equal to True, not a bool: validation names it
    assert spec.build(a, b[0], out_dtype=torch.bfloat16, scales=(sa, sb, 1)) is None  # scaled_mm's alike


@pytest.fixture
def fp8_runs(monkeypatch, hopper):
    """The Hopper backend planning CPU tensors (as on a Hopper GPU), each run recorded instead
    of launched; fresh caches; counts of the validation and of the backends' answers."""
    monkeypatch.setattr(fg, "check_gpu", lambda device: None)
    monkeypatch.setattr(plan, "PLANS", collections.OrderedDict())
    runs = types.SimpleNamespace(runs=[], validated=0, asked=0)
    monkeypatch.setattr(kernel.Fp8GroupedPlan, "run", lambda self, *args: runs.runs.append(args))
    validate, can_implement = fp8_spec.validate_scaled_grouped, hopper_backend.can_implement

    def counted(*args):
        runs.validated += 1
        return validate(*args)

    def asked(s):
        runs.asked += 1
        return can_implement(s)

    monkeypatch.setattr(fp8_spec, "validate_scaled_grouped", counted)
    monkeypatch.setattr(hopper_backend, "can_implement", asked)
    return runs


def test_an_fp8_grouped_spec_is_validated_and_planned_once(fp8_runs):
    a, b, sa, sb, _ = operands()
    with torch.no_grad():
        for ends in ([10, 10, 200, 300], [0, 0, 0, 0], [75, 150, 225, 300]):  # offs's values are not in the key
            out = pingpong.scaled_grouped_mm(a, b, sa, sb, torch.tensor(ends, dtype=torch.int32))
            assert out.shape == (T, N) and out.dtype == torch.bfloat16
    assert fp8_runs.validated == 1 and fp8_runs.asked == 1 and len(fp8_runs.runs) == 3
    ra, rb, rout, args = fp8_runs.runs[0]
    assert ra is a and rb is b and args.scale_a is sa and args.scale_b is sb
    assert args.offs.tolist() == [10, 10, 200, 300] and rout.shape == (T, N)
    (key,) = plan.PLANS
    assert key.groups.mode == spec.ROWS and key.epilogue.scales is not None
    with pytest.raises(PingpongError, match="requires grad.*inference only"):  # a hit still refuses grad
        pingpong.scaled_grouped_mm(a, b, sa.clone().requires_grad_(), sb, operands()[4])
    assert fp8_runs.validated == 1
    pingpong.scaled_grouped_mm(a, b, sa, sb, operands()[4], use_fast_accum=True)  # a new spec: validated
    assert fp8_runs.validated == 2 and len(plan.PLANS) == 2
    with pytest.raises(PingpongError, match="use_fast_accum: expected a bool, got 1"):  # 1 == True: no hit
        pingpong.scaled_grouped_mm(a, b, sa, sb, operands()[4], use_fast_accum=1)


def test_a_refused_spec_caches_nothing(fp8_runs):
    """Valid arguments on a base TMA cannot read: every backend's reason, no plan kept."""
    _, b, sa, sb, offs = operands()
    for _ in range(2):
        with pytest.raises(PingpongError, match="no backend runs this call: hopper: a: base address must be 16-byte"
                                                " aligned .*portable: no portable FP8 grouped kernel"):
            pingpong.scaled_grouped_mm(misaligned_a(), b, sa, sb, offs)
    assert fp8_runs.validated == 2 and not plan.PLANS and not fp8_runs.runs


def test_the_fake_implementation_runs_the_same_validation(monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    seen = []
    validate = fp8_spec.validate_scaled_grouped
    monkeypatch.setattr(fp8_spec, "validate_scaled_grouped", lambda *args: seen.append(args) or validate(*args))
    with FakeTensorMode():
        a, b, sa, sb, offs = operands()
        out = torch.ops.pingpong.scaled_grouped_mm(a, b, sa, sb, offs, torch.float16, False)
        with pytest.raises(PingpongError, match="offs: length 3 must equal b's group count 4"):
            torch.ops.pingpong.scaled_grouped_mm(a, b, sa, sb, offs[:3], torch.float16, False)
    assert out.shape == (T, N) and out.dtype == torch.float16 and len(seen) == 2


def test_fp8_spec_is_a_leaf_beside_spec():
    """fp8_spec imports torch, pingpong.errors and spec only (the layers above validate
    through it; it asks none of them)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(fp8_spec.__file__).read_text())
    modules = {(n.level, n.module) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {(0, a.name) for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert modules <= {(0, "__future__"), (0, "torch"), (2, "errors"), (1, "spec")}, modules
