"""Shared test setup: the `gpu` marker skips, with a visible reason, where no Hopper GPU is."""

import pytest


def hopper_skip_reason():
    """None when a Hopper (sm_90) GPU is present, else why GPU tests are skipped."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine (GPU tests run on Hopper via scripts/gpu_check.sh)"
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
    """Every plan runs the portable kernel under Triton's interpreter, and the API's GPU-only
    check is lifted; `setattr(obj, name, value)` applies each patch (monkeypatch.setattr, or
    the plain setattr in a process of its own: tests/test_distributed.py's ranks)."""
    import collections

    from pingpong import api
    from pingpong.runtime import plan
    from pingpong.portable import portable_gemm

    class InterpretedPlan(plan.Plan):
        __slots__ = ("reads_c", "extents", "activation")

        def __init__(self, read, activation):
            self.device, self.path, self.reads_c, self.activation, self.extents = -1, "interpreted", read, activation, None

        def run(self, a, b, out, c, alpha, beta, bias=None):
            epilogue = {} if bias is None and self.activation == "none" else dict(bias=bias, activation=self.activation)
            portable_gemm(a, b, out, alpha=alpha, beta=beta, c=c if self.reads_c else None, interpret=True, **epilogue)

    def build(a, b, c, beta, out_dtype, inplace, config, bias=None, activation="none"):
        return InterpretedPlan(plan.reads_c(c, beta), activation)

    setattr(api, "_check_gpu", lambda a: None)
    setattr(plan, "PLANS", collections.OrderedDict())
    setattr(plan, "build", build)


@pytest.fixture
def interpreted_kernels(monkeypatch):
    """Every plan runs the portable kernel under Triton's interpreter, and the API's GPU-only
    check is lifted: the whole call path (validation, batching, torch.library ops, autograd)
    then runs on CPU tensors, in a plan cache of its own. fp16/fp32 only (the triton 3.6
    interpreter is wrong for bf16)."""
    interpret_plans(monkeypatch.setattr)


@pytest.fixture
def tuning_cache(tmp_path, monkeypatch):
    """A user cache directory of the test's own (PINGPONG_CACHE_DIR), tables re-read."""
    from pingpong.hopper import table as tables

    monkeypatch.setenv("PINGPONG_CACHE_DIR", str(tmp_path / "cache"))
    tables.clear_cache()
    yield tmp_path / "cache"
    tables.clear_cache()


@pytest.fixture
def portable_runs(monkeypatch):
    """Plans built as on a non-Hopper GPU for CPU tensors; each portable plan's run is
    recorded (its arguments) instead of launched. Returns the list of runs."""
    from pingpong import api
    from pingpong.runtime import plan

    monkeypatch.setattr(api, "_check_gpu", lambda a: None)
    monkeypatch.setattr(plan, "is_hopper", lambda device: False)
    runs = []
    monkeypatch.setattr(plan.PortablePlan, "run", lambda self, *args: runs.append(args))
    plan.PLANS.clear()
    yield runs
    plan.PLANS.clear()
