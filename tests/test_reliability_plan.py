"""gemm_'s per-call overlap check on a plan hit covers b as well as a (CPU; the kernel run is
replaced by a recorder)."""

import pytest
import torch

import pingpong

BF16 = torch.bfloat16


def t(*shape):
    return torch.randn(*shape).to(BF16)


@pytest.mark.parametrize("operand", ["a", "b"])
def test_plan_hit_refuses_c_overlapping_an_operand(portable_runs, operand):
    runs = portable_runs
    a, b, c = t(64, 32), t(32, 48), t(64, 48)
    assert pingpong.gemm_(c, a, b, beta=1.0) is c and len(runs) == 1  # builds and caches the plan
    base = t(64 * 48 + 64 * 48)
    c2 = base[: 64 * 48].view(64, 48)
    shared = base[64 * 48 - 16:]  # its first 16 elements are c2's last 16
    a2 = shared[: 64 * 32].view(64, 32) if operand == "a" else a
    b2 = shared[: 32 * 48].view(32, 48) if operand == "b" else b
    before = c2.clone()
    with pytest.raises(pingpong.PingpongError, match=f"share memory with {operand}"):
        pingpong.gemm_(c2, a2, b2, beta=1.0)  # same signature: a plan hit, the fast check
    assert len(runs) == 1 and torch.equal(c2, before)
