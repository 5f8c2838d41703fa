"""The FP8 K-grouped product (the MoE weight gradient) on the CPU: pingpong.scaled_grouped_k_mm's
validation, its op's fake implementation, and the kernel compiled offline for sm_90a
(pingpong.hopper.kernels.fp8_grouped_k). Its values on a GPU: tests/test_fp8_grouped_k_gpu.py."""

import re

import pytest
import torch

from pingpong import PingpongError
from pingpong import fp8_grouped
from pingpong.hopper.host import fp8_grouped_k as host
from pingpong.runtime import compile as cc

E4M3 = torch.float8_e4m3fn
SMEM_LIMIT = 232448


def operands(M=32, N=48, G=3, TP=512, scaling="row"):
    a = torch.zeros(M, TP, dtype=E4M3)
    b = torch.zeros(N, TP, dtype=E4M3)
    rows = G if scaling == "row" else TP // 128
    return a, b, torch.ones(rows, M), torch.ones(rows, N), torch.tensor([128, 128, 384][:G], dtype=torch.int32)


@pytest.mark.parametrize("scaling", ["row", "block"])
def test_the_fake_gives_one_matrix_per_expert(scaling):
    a, b, sa, sb, poffs = operands(scaling=scaling)
    with torch._subclasses.FakeTensorMode() as mode:
        fa, fb, fsa, fsb, fp = (mode.from_tensor(t) for t in (a, b, sa, sb, poffs))
        out = torch.ops.pingpong.scaled_grouped_k_mm(fa, fb, fsa, fsb, fp, scaling, torch.bfloat16)
    assert tuple(out.shape) == (3, 32, 48) and out.dtype == torch.bfloat16


def _bad(i):
    """The i-th bad call: (arguments as (a, b, scale_a, scale_b, poffs, scaling, out_dtype), the
    argument its error must name)."""
    a, b, sa, sb, poffs = operands()
    ok = [a, b, sa, sb, poffs, "row", torch.bfloat16]
    cases = [
        (0, a.to(torch.bfloat16), "a"), (1, b[:, :256], "b"), (0, a[:, :500], "a"), (1, b.t(), "b"),
        (2, sa[:2], "scale_a"), (3, sb.double(), "scale_b"), (3, torch.ones(3, 47), "scale_b"),
        (4, poffs.long(), "poffs"), (4, poffs[:0], "poffs"), (5, "tensor", "scaling"), (6, torch.int8, "out_dtype"),
        (2, torch.ones(512 // 128, 32), "scale_a"),  # block-shaped scales for a row-wise call
        (0, torch.zeros(40, 512, dtype=E4M3), "a"),  # M not a multiple of 16
        (1, [1.0], "b"),
        (0, torch.zeros(32, 1, dtype=E4M3).expand(32, 512), "a"),  # a zero row stride (broadcast rows)
        (3, torch.ones(1, 48).expand(3, 48), "scale_b"),
    ]
    at, value, name = cases[i]
    ok[at] = value
    return ok, name


@pytest.mark.parametrize("i", range(16))
def test_bad_arguments_are_named_before_any_work(i, monkeypatch):
    monkeypatch.setattr(fp8_grouped, "_launch_grouped_k", lambda *a: pytest.fail("launched"))
    args, name = _bad(i)
    with pytest.raises(PingpongError, match=rf"^{name}:"):
        fp8_grouped.scaled_grouped_k_mm(*args[:5], scaling=args[5], out_dtype=args[6])


@pytest.mark.parametrize("TP", [0, 112])
def test_no_run_fits_gives_zeros_without_a_launch(monkeypatch, TP):
    """A padded length under 128 holds no run: every expert's dW is zero, nothing launched (and
    block-wise there is no scale row)."""
    monkeypatch.setattr(fp8_grouped, "_launch_grouped_k", lambda *a: pytest.fail("launched"))
    monkeypatch.setattr(fp8_grouped, "check_gpu", lambda device: None)
    monkeypatch.setattr(fp8_grouped, "check_hopper", lambda device: None)
    a, b = torch.zeros(32, TP, dtype=E4M3), torch.zeros(48, TP, dtype=E4M3)
    poffs = torch.zeros(3, dtype=torch.int32)
    for scaling, rows in (("row", 3), ("block", TP // 128)):
        out = fp8_grouped.scaled_grouped_k_mm(a, b, torch.ones(rows, 32), torch.ones(rows, 48), poffs, scaling=scaling)
        assert out.shape == (3, 32, 48) and not out.any()


def test_a_cpu_tensor_is_refused_after_the_argument_checks(monkeypatch):
    monkeypatch.setattr(fp8_grouped, "_launch_grouped_k", lambda *a: pytest.fail("launched"))
    with pytest.raises(PingpongError, match="Hopper"):
        fp8_grouped.scaled_grouped_k_mm(*operands())


def test_the_tile_follows_the_rows():
    assert host.select_fp8_grouped_k_config(64, 1024).schedule == "pingpong"
    assert host.select_fp8_grouped_k_config(65, 1024).schedule == "cooperative"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(host.OFFLINE_VARIANTS))
def test_kernel_compiles_offline_without_spills(name):
    """sm_90a, no GPU: e4m3 wgmma of the tile's width, promoted (every wgmma group waited to 0),
    no local memory, TMA loads (block-wise: the scales' boxes too) and TMA stores."""
    config, scaling = host.OFFLINE_VARIANTS[name]
    c = cc.compile_kernel(name, "sm_90a")
    f = c.facts()
    ptx = c.asm["ptx"]
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k32\.f32\.e4m3\.e4m3", ptx)) == \
        {str(config.block_n)}
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"
    assert 0 < f.shared_bytes <= SMEM_LIMIT and f.warps == 12
    assert f.counts["UTMALDG"] == (4 if scaling == "block" else 2) and f.counts["UTMASTG"] > 0
    assert "0" in set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx))
