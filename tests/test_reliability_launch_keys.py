"""Launch-cache keys and guards that only the GPU path uses, tested as functions on the CPU
(issue 44): a wrong key reuses a kernel compiled for another dtype or alignment (wrong
numbers); a wrong guard skips a profiler's hook or a tuned entry's shape rule."""

import pytest
import torch

from pingpong import quantize
from pingpong.errors import ConfigError, PingpongError
from pingpong.fp8 import Float8Linear
from pingpong.fp8_grouped import check_scaled_grouped_mm
from pingpong.hopper import table as tables
from pingpong.hopper.config import KernelConfig
from pingpong.hopper.select import choose
from pingpong.runtime.launcher import hooks_idle, launch_key, launch_ready

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
BF, H = torch.bfloat16, torch.float16


def _quant_args(x_dtype=BF, q_dtype=E4, offset=0, granularity="row"):
    buf = torch.zeros(64 * 256 + 8, dtype=x_dtype)
    x = buf[offset:offset + 64 * 256].view(64, 256)
    q = torch.empty(64, 256, dtype=q_dtype)
    return x, q, quantize.scale_like(x, granularity), granularity


def test_quantize_bound_launch_is_keyed_by_every_dtype_and_alignment():
    """One CachedLaunch per compiled kernel: x bf16 vs fp16 (the load), q e4m3 vs e5m2 (FP8_MAX
    and the cast), an x base off 16 bytes (Triton specializes pointers on alignment)."""
    quantize._LAUNCHES.clear()
    try:
        base = quantize.bound_launch(*_quant_args())
        assert quantize.bound_launch(*_quant_args()) is base  # the same signature: the same launch
        for other in (_quant_args(x_dtype=H), _quant_args(q_dtype=E5), _quant_args(offset=1),
                      _quant_args(granularity="block")):
            assert quantize.bound_launch(*other) is not base, other[0].dtype
        keys = {quantize.launch_key(*args) for args in (_quant_args(), _quant_args(x_dtype=H), _quant_args(q_dtype=E5),
                                                       _quant_args(offset=1))}
        assert len(keys) == 4
    finally:
        quantize._LAUNCHES.clear()


def test_float8_linear_keeps_runs_per_dtype_and_alignment():
    buf = torch.zeros(4 * 64 + 8, dtype=BF)
    x = buf[:256].view(4, 64)
    sig = Float8Linear.signature(x)
    assert Float8Linear.signature(buf[:256].view(4, 64)) == sig
    assert Float8Linear.signature(x.to(H)) != sig  # another input dtype: another quantize kernel
    assert Float8Linear.signature(buf[1:257].view(4, 64)) != sig  # a base off 16 bytes
    assert Float8Linear.signature(x.t().contiguous().t()) != sig  # strides


@pytest.mark.parametrize("which", ["launch_enter_hook", "launch_exit_hook"])
def test_launch_ready_declines_with_any_hook(monkeypatch, which):
    """A profiler's hook, in a HookChain or set as a plain function, enter or exit: every launch
    goes through Triton's JIT so the hook sees it."""
    from triton import knobs

    key = launch_key()
    assert hooks_idle() and launch_ready(key)
    getattr(knobs.runtime, which).add(print)
    try:
        assert not hooks_idle() and not launch_ready(key)
    finally:
        getattr(knobs.runtime, which).remove(print)
    assert launch_ready(key)
    monkeypatch.setattr(knobs.runtime, which, print)  # not a HookChain: still a hook
    assert not hooks_idle() and not launch_ready(key)


def test_tuned_entry_answers_its_exact_shape_and_near_ones_only_by_the_rule(tuning_cache):
    """A 128×256 tile tuned at 1024×4500×4096 idles more of the last wave there than the
    heuristic (1.83 vs 1.38 of the units' time): the exact shape still takes it (it was
    measured there), a shape of the same buckets differing only in K does not (the near rule,
    pingpong.hopper.select.tabled)."""
    from pingpong.hopper.select import Device

    h100 = Device("NVIDIA H100 80GB HBM3", 132)
    tuned = KernelConfig(128, 256, 64)
    t = tables.Table(tables.TableKey.current(h100.name, h100.sms))
    t.add(1024, 4500, 4096, "bf16", "bf16", "nt", tuned, us=1.0)
    path = tables.write(t, tables.user_table_path(t.key))
    assert choose(1024, 4500, 4096, device=h100) == (tuned, str(path))
    assert choose(1024, 4500, 4000, device=h100)[1] == "heuristic"
    assert choose(1024, 4500, 4096, ("fp16", "fp16"), device=h100)[1] == "heuristic"  # another dtype


@pytest.mark.parametrize("epilogue_n, out_bytes, ok", [
    (8, 2, True),  # 16 bytes: one TMA box row, the narrowest legal
    (4, 4, True),  # fp32 out: 16 bytes
    (8, 4, True),
    (4, 2, False),  # 8 bytes
    (2, 4, False),
    (128, 2, True),
])
def test_epilogue_subtile_width_is_checked_in_bytes_of_the_output(epilogue_n, out_bytes, ok):
    cfg = KernelConfig(128, 128, 64, epilogue_n=epilogue_n)
    if ok:
        cfg.validate(2, out_bytes)
    else:
        with pytest.raises(ConfigError, match=f"epilogue_n={epilogue_n}"):
            cfg.validate(2, out_bytes)


def test_fp8_grouped_refuses_expanded_expert_weights():
    """b = one weight expanded over G groups (stride 0): TMA cannot read a zero stride, and a copy
    per call is refused, not made; one group (G = 1) has no group stride to read."""
    T, K, N, G = 64, 256, 128, 4
    a = torch.zeros(T, K).to(E4)
    w = torch.zeros(1, N, K).to(E4)
    sa, offs = torch.ones(T), torch.tensor([16, 32, 48, 64], dtype=torch.int32)
    with pytest.raises(PingpongError, match="b: expected K-major"):
        check_scaled_grouped_mm(a, w.expand(G, N, K).transpose(1, 2), sa, torch.ones(G, N), offs, torch.bfloat16,
                                False, device_checks=False)
    assert check_scaled_grouped_mm(a, w.transpose(1, 2), sa, torch.ones(1, N), offs[-1:], torch.bfloat16, False,
                                   device_checks=False) == ("row", "row")
