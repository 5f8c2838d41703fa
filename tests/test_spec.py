"""GemmSpec (pingpong.runtime.spec) on the CPU: built once per call, validated once per new
spec, errors under each entry point's argument names; every backend's can_implement refuses
with a reason the user sees; the layer plan (pingpong.integration.direct.LayerPlan) against float64 torch;
the front end's import graph has no cycle."""

import ast
import itertools
from pathlib import Path

import pytest
import torch

import pingpong
from pingpong import PingpongError
from pingpong.integration import direct
from pingpong.hopper.host import backend as hopper_backend
from pingpong.amd import backend as amd_backend
from pingpong import portable
from pingpong.runtime import plan, spec

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # triton interpreter + numpy

f16, bf = torch.float16, torch.bfloat16
SRC = Path(pingpong.__file__).parent


def randn(*shape, dtype=f16):
    return torch.randn(*shape).to(dtype)


@pytest.fixture
def counted(monkeypatch):
    """Counts of spec.build and of the validation paths, per name."""
    counts = dict.fromkeys(("build", "validate", "validate_inplace", "validate_linear"), 0)
    for name in counts:
        real = getattr(spec, name)

        def wrapper(*args, _real=real, _name=name, **kwargs):
            counts[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(spec, name, wrapper)
    return counts


# ----------------------------------------------------------------------------- once per call


def test_the_spec_is_built_once_per_call_and_validated_once_per_new_spec(interpreted_kernels, counted):
    torch.manual_seed(0)
    a, b, c = randn(16, 32), randn(32, 8), randn(16, 8)
    calls = [lambda: pingpong.gemm(a, b, c, beta=0.5), lambda: pingpong.matmul(a, b),
             lambda: pingpong.gemm_(c, a, b, beta=1.0), lambda: pingpong.path_for(a, b, c, beta=0.5)]
    for i, call in enumerate(calls):
        before = dict(counted)
        call()
        assert counted["build"] - before["build"] == 1, f"call {i}: one spec per call"
    # the first gemm's spec was new (validated); path_for's equals it (a hit, not validated again)
    assert counted["validate"] == 2 and counted["validate_inplace"] == 1
    for call in calls:
        call()
    assert counted["build"] == 8 and counted["validate"] == 2 and counted["validate_inplace"] == 1


def test_a_layer_builds_its_specs_once_per_signature(interpreted_kernels, counted):
    torch.manual_seed(1)
    layer = pingpong.nn.Linear(32, 24, dtype=f16)
    x = randn(2, 5, 32).requires_grad_()
    for _ in range(3):
        layer(x).backward(randn(2, 5, 24))
        with torch.no_grad():
            layer(x)
    # the forward spec on the first call, the two backward specs on the first backward; then none
    assert counted["build"] == 3 and counted["validate_linear"] == 1 and counted["validate"] == 0
    assert len(direct.LAYERS) == 1


def test_a_layer_call_does_its_per_call_work_once(interpreted_kernels, counted, monkeypatch):
    """After the first call: a grad-mode forward is one layer-plan lookup, one allocation,
    one launch; its backward two allocations and two launches, no lookup; no spec built, nothing
    validated; every allocation gets its sizes as ints (torch.empty parses a tuple slower)."""
    layer = pingpong.nn.Linear(32, 24, dtype=f16)
    x, g = randn(2, 5, 32).requires_grad_(), randn(2, 5, 24)
    layer(x).backward(g)  # plans the layer: forward, then both gradients
    lookups, launches, allocs = [], [], []
    plan_class = plan.BACKENDS[0].plan_class
    real_lookup, real_empty = direct.layer_plan, torch.empty
    monkeypatch.setattr(direct, "layer_plan", lambda *args: lookups.append(args) or real_lookup(*args))
    monkeypatch.setattr(plan_class, "run_ptrs", lambda self, *args: launches.append(args[:4]))  # recorded, not run
    monkeypatch.setattr(plan_class, "run", lambda self, *args: launches.append(args))
    monkeypatch.setattr(torch, "empty", lambda *args, **kw: allocs.append(args) or real_empty(*args, **kw))
    before = dict(counted)
    y = layer(x)
    assert (len(lookups), len(launches), len(allocs)) == (1, 1, 1)
    y.backward(g)
    assert (len(lookups), len(launches), len(allocs)) == (1, 3, 3)
    assert counted == before
    assert all(type(n) is int for sizes in allocs for n in sizes), allocs


@pytest.mark.parametrize("pointers", [True, False], ids=["base addresses", "views"])
@pytest.mark.parametrize("shape, bias", [((6, 32), True), ((2, 3, 32), True), ((2, 3, 32), False), ((32,), True)])
def test_layer_plan_forward_and_backward_against_float64(interpreted_kernels, monkeypatch, shape, bias, pointers):
    """Both launch forms of a LayerPlan: from base addresses (the views made only for the
    JIT; the fixture's plan checks they sit at those addresses) and through plan.run."""
    if not pointers:
        monkeypatch.setattr(plan.BACKENDS[0].plan_class, "pointer_launch", False)
    seed = 2
    torch.manual_seed(seed)
    ref = torch.nn.Linear(32, 24, bias=bias, dtype=f16)
    ours = pingpong.nn.Linear.from_linear(ref)
    x = randn(*shape).requires_grad_()
    g = randn(*shape[:-1], 24)
    y = ours(x)
    assert type(y.grad_fn).__name__ == "_LayerFunctionBackward"
    y.backward(g)
    got = [y.detach(), x.grad, ref.weight.grad] + ([ref.bias.grad] if bias else [])
    x64, w64 = x.detach().double().requires_grad_(), ref.weight.detach().double().requires_grad_()
    b64 = ref.bias.detach().double().requires_grad_() if bias else None
    y64 = torch.nn.functional.linear(x64, w64, b64)
    y64.backward(g.double())
    want = [y64.detach(), x64.grad, w64.grad] + ([b64.grad] if bias else [])
    for name, o, r in zip(("y", "dx", "dweight", "dbias"), got, want):
        assert o.dtype == f16 and o.shape == r.shape, name
        err = (o.double() - r).abs()
        scale = r.abs().max().item() + 1e-3
        assert err.max().item() <= 2e-3 * scale * 8, f"{name}: elementwise error {err.max().item()} (seed {seed})"
        assert (err.norm() / (r.norm() + 1e-6)).item() <= 2e-3, f"{name}: norm error (seed {seed})"


# ----------------------------------------------------------------------------- names per entry point

NAMES = [  # entry point, call, the name the message must lead with
    ("gemm", lambda: pingpong.gemm(randn(4, 8).int(), randn(8, 4)), "a: dtype"),
    ("gemm b", lambda: pingpong.gemm(randn(4, 8), randn(8, 4).float()), "b: dtype"),
    ("gemm c", lambda: pingpong.gemm(randn(4, 8), randn(8, 4), randn(4, 5), beta=1.0), "c: expected shape"),
    ("gemm_ c", lambda: pingpong.gemm_(randn(4, 5), randn(4, 8), randn(8, 4)), "c: expected shape"),
    ("gemm N-D", lambda: pingpong.gemm(randn(2, 4, 8), randn(3, 8, 4)), "a and b: batch"),
    ("linear x", lambda: pingpong.linear(randn(4, 8).int(), randn(6, 8)), "x: dtype"),
    ("linear weight", lambda: pingpong.linear(randn(4, 8), randn(6, 8).float()), "weight: dtype"),
    ("linear weight 3-D", lambda: pingpong.linear(randn(4, 8), randn(1, 6, 8)), "weight: expected a 2-D"),
    ("linear dtypes", lambda: pingpong.linear(randn(4, 8), randn(6, 8, dtype=bf)), "x and weight must have the same"),
    ("linear bias", lambda: pingpong.linear(randn(4, 8), randn(6, 8), randn(5)), "bias: expected shape \\(6,\\)"),
    ("linear device", lambda: pingpong.linear(randn(4, 8), randn(6, 8)), "x and weight are on cpu"),
    ("nn.Linear", lambda: pingpong.nn.Linear(8, 6, dtype=f16)(randn(4, 7)), "x: expected last dim K"),
    ("ops.linear fake",
     lambda: pingpong.integration.ops.linear(randn(4, 8, dtype=bf).to("meta"), randn(6, 8).to("meta")),
     "x and weight must have the same dtype"),
]


@pytest.mark.parametrize("name, call, needle", NAMES, ids=[n[0] for n in NAMES])
def test_errors_name_the_entry_points_arguments(name, call, needle):
    with pytest.raises(PingpongError, match=f"^{needle}"):
        call()


# ----------------------------------------------------------------------------- backends refuse with a reason


def _spec(a, b, c=None, beta=0.0, bias=None, activation=None, inplace=False, config=None):
    return spec.build(a, b, c, beta, None, bias, activation, inplace=inplace, config=config)


def test_every_backend_refuses_with_a_reason(monkeypatch):
    meta = dict(dtype=bf, device="meta")
    s = _spec(torch.empty(64, 32, **meta), torch.empty(32, 48, **meta))
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda index: False)
    assert "not a Hopper GPU (sm_90)" in hopper_backend.can_implement(s)
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda index: True)
    assert hopper_backend.can_implement(s) is None
    far = torch.empty(2**39 + 64, **meta).as_strided((32, 2), (1, 2**39))
    assert "cannot address" in hopper_backend.can_implement(_spec(torch.empty(64, 32, **meta), far))
    batched = _spec(torch.empty(2, 64, 32, **meta), torch.empty(32, 48, **meta), config=pingpong.KernelConfig(
        128, 128, 64, split_k=2))
    assert "run 2-D products only" in hopper_backend.can_implement(batched)

    assert amd_backend.can_implement(s) == "not a ROCm GPU"
    monkeypatch.setattr(torch.version, "hip", "6.4")
    monkeypatch.setattr(amd_backend.dispatch, "_device_arch", lambda t: "gfx942:sramecc+:xnack-")
    w = torch.empty(48, 32, **meta).t()
    # never run on AMD hardware (docs/amd.md): the portable kernel unless the user opts in
    monkeypatch.delenv("PINGPONG_AMD_KERNELS", raising=False)
    assert "opt-in" in amd_backend.can_implement(_spec(torch.empty(64, 32, **meta), w))
    assert portable.can_implement(_spec(torch.empty(64, 32, **meta), w)) is None
    monkeypatch.setenv("PINGPONG_AMD_KERNELS", "1")
    assert amd_backend.can_implement(_spec(torch.empty(64, 32, **meta), w)) is None
    assert "fused bias or activation" in amd_backend.can_implement(
        _spec(torch.empty(64, 32, **meta), w, activation="relu"))
    assert "batched" in amd_backend.can_implement(_spec(torch.empty(2, 64, 32, **meta), w))
    assert "no AMD Gluon kernel" in amd_backend.can_implement(
        _spec(torch.empty(64, 32, dtype=f16, device="meta"), torch.empty(32, 48, dtype=f16, device="meta")))

    assert "CPU tensors" in portable.can_implement(_spec(randn(4, 8), randn(8, 4)))
    assert portable.can_implement(s) is None


def test_a_refusal_reaches_the_user(monkeypatch):
    """With the device check lifted, CPU tensors reach the backends: every one says why not."""
    monkeypatch.setattr(spec, "check_gpu", lambda device, names=None: None)
    monkeypatch.setattr(plan, "PLANS", type(plan.PLANS)())
    with pytest.raises(PingpongError, match="no backend runs this call: hopper: .*; amd: not a ROCm GPU; portable: "
                                            "CPU tensors"):
        pingpong.matmul(randn(4, 8), randn(8, 4))
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda index: False)
    with pytest.raises(PingpongError, match="^config: .*not a Hopper GPU.*matmul_tiled configures the Hopper"):
        pingpong.matmul_tiled(torch.empty(64, 32, dtype=bf, device="meta"), torch.empty(32, 48, dtype=bf,
                              device="meta"), pingpong.KernelConfig(128, 128, 64))
    assert not plan.PLANS, "a refused call caches nothing"


def test_c_read_is_decided_in_the_spec_only():
    a, b, c = randn(4, 8), randn(8, 4), randn(4, 4)
    assert _spec(a, b, c, beta=0.0).epilogue.reads_c is False
    assert _spec(a, b, c, beta=0.5).epilogue.reads_c is True
    for path in ("hopper/host/launch.py", "portable/__init__.py", "integration/batching.py", "integration/direct.py",
                 "api.py"):
        assert "beta != 0" not in (SRC / path).read_text(), f"{path} re-decides whether C is read"


def test_the_activation_list_is_in_one_place():
    import re

    owners = []
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        if re.search(r"""\(\s*"none",\s*"relu",\s*"gelu_erf",\s*"gelu_tanh",\s*"silu"\s*\)""", text):
            owners.append(path.relative_to(SRC).as_posix())
    assert owners == ["runtime/spec.py"]


def test_fp8_scales_are_part_of_the_spec_and_every_backend_answers_them():
    """An FP8 product's scales travel in the spec's epilogue (the plan-cache key): two calls
    that differ only in a scale's layout or in use_fast_accum are two specs; the mode is
    decided once (spec.scale_mode); the portable and AMD backends refuse scales with a reason."""
    from pingpong import portable
    from pingpong.amd import backend as amd_backend

    f8 = lambda *s: torch.randn(*s).to(torch.float8_e4m3fn)  # noqa: E731
    a, b = f8(8, 256), f8(16, 256).t()
    row = (torch.ones(8, 1), torch.ones(1, 16), False)
    s_row = spec.build(a, b, out_dtype=torch.bfloat16, scales=row)
    assert s_row.epilogue.scales.a.shape == (8, 1) and not s_row.plain
    assert s_row != spec.build(a, b, out_dtype=torch.bfloat16, scales=(row[0], row[1], True))
    assert s_row != spec.build(a, b, out_dtype=torch.bfloat16, scales=(torch.ones(()), torch.ones(()), False))
    assert _spec(randn(4, 8), randn(8, 4)).epilogue.scales is None
    assert spec.scale_mode(a, b, row[0], row[1]) == ("row", 1)
    sc = s_row.epilogue.scales
    assert spec.scale_mode(s_row.a, s_row.b, sc.a, sc.b) == ("row", 1)  # the backend asks with Operands
    blocks = (torch.ones(2, 8).t(), torch.ones(1, 2).t())  # 1×128 for a, 128×128 for b: outer-dim-major
    assert spec.scale_mode(a, b, *blocks) == ("block", 128)
    one = f8(16, 128)  # K = 128, N = 16: b is one 128×128 block, its one scale not tensor-wise where a's are blocks
    assert spec.scale_mode(f8(8, 128), one.t(), torch.ones(1, 8).t(), torch.ones(1, 1)) == ("block", 128)
    assert spec.scale_mode(f8(8, 128), one.t(), torch.ones(()), torch.ones(1, 1)) == ("tensor", 1)
    with pytest.raises(PingpongError, match=r"scale_a: scale_b is row-wise \(1, 16\), so scale_a must be \(8, 1\)"):
        spec.scale_mode(a, b, torch.ones(1, 8), row[1])
    meta = lambda *s, dtype=torch.float8_e4m3fn: torch.empty(*s, dtype=dtype, device="meta")  # noqa: E731
    s_meta = spec.build(meta(8, 256), meta(16, 256).t(), out_dtype=torch.bfloat16,
                        scales=(meta(8, 1, dtype=torch.float32), meta(1, 16, dtype=torch.float32), False))
    assert "scaled (FP8) GEMMs are not implemented by the portable kernel" in portable.can_implement(s_meta)
    assert portable.can_implement(spec.build(meta(8, 256, dtype=torch.bfloat16), meta(256, 16, dtype=torch.bfloat16))) is None
    assert amd_backend.can_implement(s_meta)


# ----------------------------------------------------------------------------- import graph

#: every module at the package root: the front end (and its leaves, errors and toolchain)
FRONT_END = tuple(sorted(p.stem for p in SRC.glob("*.py") if p.stem not in ("__init__", "__main__")))


def _imports(module: str) -> set[str]:
    """The front-end modules `module` imports, anywhere in it (function-local imports too)."""
    tree = ast.parse((SRC / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found |= {a.name for a in node.names}
            else:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pingpong."):
            found.add(node.module.split(".")[1])
    return found & set(FRONT_END)


def test_the_front_end_import_graph_has_no_cycle():
    graph = {m: _imports(m) for m in FRONT_END}
    done, path = set(), []

    def visit(m):
        if m in path:
            raise AssertionError(f"import cycle: {' -> '.join(path[path.index(m):] + [m])}")
        if m in done:
            return
        path.append(m)
        for n in sorted(graph[m]):
            visit(n)
        path.pop()
        done.add(m)

    for m in FRONT_END:
        visit(m)


def test_spec_is_a_leaf():
    tree = ast.parse((SRC / "runtime" / "spec.py").read_text())
    modules = {(n.level, n.module) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {(0, a.name) for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    allowed = {(0, "__future__"), (0, "math"), (0, "numbers"), (0, "typing"), (0, "torch"), (2, "errors"),
               (0, "torch.nn.functional"), (0, "torch._subclasses.fake_tensor"),
               (0, "torch.fx.experimental.symbolic_shapes")}  # torch's own: fake tensors' overlap (traced_overlaps)
    assert modules <= allowed, modules - allowed


def test_a_layer_plan_hit_still_checks_the_weights_device(interpreted_kernels):
    """The layer key holds each tensor's device: a weight moved elsewhere is validated again."""
    x, w = randn(4, 8), randn(6, 8)
    pingpong.linear(x, w)
    with pytest.raises(PingpongError, match="^x and weight must be on the same device"):
        pingpong.linear(x, w.to("meta"))
