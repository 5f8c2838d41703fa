"""Which kernel ran: each new plan is logged by the `pingpong` logger (off by default,
PINGPONG_LOG=info), and pingpong.explain returns the plan's path, config and reasons."""

import logging
import types

import pytest
import torch

import pingpong
from pingpong.hopper.host import backend as hopper
from pingpong.runtime import plan, spec


def _spec(M=256, N=384, K=512):
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    return spec.build(a, b, None, 0.0, None, None, None)


def _backend(name, why=None, plan_=None):
    return types.SimpleNamespace(NAME=name, can_implement=lambda s: why, plan=plan_)


def test_a_new_plan_is_logged_once_with_backend_config_and_why(caplog):
    """The Hopper backend's decision, made on the CPU (its can_implement stood in for): the line
    names the call, the backend, the config and why (the config's source, who declined)."""
    backends = (_backend("amd", "not an AMD GPU"), _backend("hopper", None, hopper.plan))
    with caplog.at_level(logging.INFO, logger="pingpong"):
        p = plan.plan_for(_spec(), backends)
    (record,) = [r for r in caplog.records if r.name == "pingpong"]
    line = record.getMessage()
    assert line.startswith("gemm 256×384×512 float16->float16 on cpu -> hopper, KernelConfig(")
    why = "the heuristic: launch-bound (under 4 MB moved): a small tile, unsplit"  # the rule's row that chose it
    assert why in line and "not amd: not an AMD GPU" in line
    info = plan.explain(p)
    assert info["path"] == "hopper" and isinstance(info["config"], pingpong.KernelConfig)
    assert info["why"] == f"{why}; not amd: not an AMD GPU"
    assert info["stream_k"].startswith("stream-K (not selected) would run ")


def test_explain_and_the_log_follow_the_cache(interpreted_kernels, caplog):
    """A cache hit creates no plan and logs nothing: the hot path stays free of the log."""
    a, b = torch.randn(16, 32).half(), torch.randn(32, 8).half()
    with caplog.at_level(logging.INFO, logger="pingpong"):
        pingpong.matmul(a, b)
        pingpong.matmul(a, b)
        info = pingpong.explain(a, b)
    assert len([r for r in caplog.records if r.name == "pingpong"]) == 1
    assert info == {"path": "interpreted", "config": None, "why": "", "stream_k": None}
    assert pingpong.explain(a, b)["path"] == pingpong.path_for(a, b)


def test_logging_is_off_by_default(caplog):
    with caplog.at_level(logging.WARNING, logger="pingpong"):
        plan.plan_for(_spec(), (_backend("hopper", None, hopper.plan),))
    assert not [r for r in caplog.records if r.name == "pingpong"]


def test_pingpong_log_environment_variable(monkeypatch, capsys):
    """PINGPONG_LOG=info: a handler on stderr shows each new plan; a level that is not one is
    refused by name."""
    monkeypatch.setattr(plan.LOG, "handlers", [])
    monkeypatch.setattr(plan.LOG, "level", plan.LOG.level)
    monkeypatch.setenv("PINGPONG_LOG", "INFO")
    plan._log_from_env()
    plan.plan_for(_spec(), (_backend("hopper", None, hopper.plan),))
    assert "pingpong: gemm 256×384×512 float16->float16 on cpu -> hopper" in capsys.readouterr().err
    monkeypatch.setenv("PINGPONG_LOG", "loud")
    with pytest.raises(pingpong.PingpongError, match="PINGPONG_LOG: expected one of debug, info"):
        plan._log_from_env()
