"""Shared test setup: the `gpu` marker skips, with a visible reason, where no Hopper GPU is."""

import pytest


def hopper_skip_reason():
    """None when a Hopper (sm_90) GPU is present, else why GPU tests are skipped."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU here (GPU tests need a Hopper GPU: bash scripts/gpu_check.sh)"
    cap = torch.cuda.get_device_capability()
    if cap[0] != 9:
        return f"GPU is sm_{cap[0]}{cap[1]}, these tests need Hopper (sm_90)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = hopper_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def interpret_plans(setattr) -> None:
    """Every plan runs the portable kernel under Triton's interpreter (the only backend in
    the registry), and the API's GPU-only check is lifted; `setattr(obj, name, value)` applies
    each patch (monkeypatch.setattr, or the plain setattr in a process of its own:
    tests/test_distributed.py's ranks)."""
    import collections
    import types

    from pingpong.integration import direct, inductor
    from pingpong.runtime import plan, spec
    from pingpong.portable import portable_gemm

    class InterpretedPlan(plan.Plan):
        __slots__ = ("reads_c", "extents", "activation")

        def __init__(self, read, activation):
            self.device, self.path, self.reads_c, self.activation, self.extents = -1, "interpreted", read, activation, None

        pointer_launch = True  # as a Hopper plan without copies: LayerPlan launches from base addresses

        def run(self, a, b, out, args=spec.NO_ARGS):
            c, alpha, beta, bias = args.c, args.alpha, args.beta, args.bias
            epilogue = {} if bias is None and self.activation == "none" else dict(bias=bias, activation=self.activation)
            portable_gemm(a, b, out, alpha=alpha, beta=beta, c=c if self.reads_c else None, interpret=True, **epilogue)

        def run_ptrs(self, a_ptr, b_ptr, out_ptr, bias_ptr, views, *inputs):
            a, b, out, bias = views(*inputs)  # the views a JIT launch would get: at the given addresses
            assert (a.data_ptr(), b.data_ptr(), out.data_ptr()) == (a_ptr, b_ptr, out_ptr)
            assert (bias.data_ptr() if bias is not None else 0) == bias_ptr
            self.run(a, b, out, spec.EpilogueArgs(bias=bias))

    interpreted = types.SimpleNamespace(
        NAME="interpreted", can_implement=lambda s: None,
        plan=lambda s: InterpretedPlan(s.epilogue.reads_c, s.epilogue.activation), plan_class=InterpretedPlan)
    setattr(spec, "check_gpu", lambda device, names=None: None)
    setattr(plan, "PLANS", collections.OrderedDict())
    setattr(direct, "LAYERS", collections.OrderedDict())
    setattr(inductor, "SITES", {})  # compiled code's kept plans (code from inductor's cache names the same sites)
    setattr(plan, "BACKENDS", [interpreted])


@pytest.fixture(scope="module")
def mesh():
    """torch's fake process group (world size 2, rank 0: collectives do nothing) and its 1-D
    CPU mesh, for a module's tests."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    assert not dist.is_initialized()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield init_device_mesh("cpu", (2,))
    finally:
        dist.destroy_process_group()


@pytest.fixture
def interpreted_kernels(monkeypatch):
    """Every plan runs the portable kernel under Triton's interpreter, and the API's GPU-only
    check is lifted: the whole call path (validation, batching, torch.library ops, autograd)
    then runs on CPU tensors, in plan caches of its own. fp16/fp32 only (Triton's interpreter
    is wrong for bf16)."""
    interpret_plans(monkeypatch.setattr)


@pytest.fixture
def tuning_cache(tmp_path, monkeypatch):
    """A user cache directory of the test's own (PINGPONG_CACHE_DIR), tables re-read."""
    from pingpong.hopper.host import table as tables

    monkeypatch.setenv("PINGPONG_CACHE_DIR", str(tmp_path / "cache"))
    tables.clear_cache()
    yield tmp_path / "cache"
    tables.clear_cache()


@pytest.fixture
def portable_runs(monkeypatch):
    """Plans built as on a non-Hopper GPU for CPU tensors; each portable plan's run is
    recorded (its arguments) instead of launched. Returns the list of runs."""
    import collections

    from pingpong.integration import direct, inductor
    from pingpong import portable
    from pingpong.runtime import plan, spec

    monkeypatch.setattr(spec, "check_gpu", lambda device, names=None: None)
    monkeypatch.setattr(plan, "BACKENDS", [portable])
    monkeypatch.setattr(portable, "can_implement", lambda s: None)  # CPU tensors, as on a GPU
    runs = []
    monkeypatch.setattr(portable.PortablePlan, "run", lambda self, *args: runs.append(args))
    monkeypatch.setattr(plan, "PLANS", collections.OrderedDict())
    monkeypatch.setattr(direct, "LAYERS", collections.OrderedDict())
    monkeypatch.setattr(inductor, "SITES", {})
    yield runs


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test stopped by a missing CUDA binary tool (pingpong.errors.ToolMissing: a Triton without
    cuobjdump) is reported as skipped, with the error's message as the reason, not as failed."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and report.failed:
        from pingpong.errors import ToolMissing

        if call.excinfo.errisinstance(ToolMissing):
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {call.excinfo.value}")


def pytest_configure(config):
    from pingpong.toolchain import silence_exit_report

    silence_exit_report()  # no nanobind leak report from libtriton after the test summary
