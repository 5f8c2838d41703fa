"""quantize_fp8_columns (pingpong.quantize): stacked matrices quantized along N, written transposed.

The contract is bitwise: (q, s) = quantize_fp8(x.transpose(1, 2).reshape(G·K, N), "row") viewed
(G, K, N) and (G, K), the transposed copy FP8 training's data gradient made before. Checked on
the CPU under Triton's interpreter against quantize_fp8 under the same interpreter (odd N and K,
a zero column, outputs NaN-poisoned, both fp8 kinds), offline for sm_90a (no spills), and on a
GPU (marked gpu) in bf16."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pingpong import PingpongError, quantize
from pingpong.quantize import quantize_fp8_columns

E4M3 = torch.float8_e4m3fn

_CHECK = textwrap.dedent("""
    import sys, torch
    from pingpong import quantize as Q

    def check(x, dtype):
        G, N, K = x.shape
        q, s = Q.columns_like(x, dtype)
        q.view(torch.uint8).fill_(0x7F)  # NaN bytes: every element must be written
        s.fill_(float("nan"))
        Q.quantize_columns_direct(x, dtype, (q, s))
        qr, sr = Q.quantize_fp8(x.transpose(1, 2).reshape(G * K, N), "row", dtype)
        assert torch.equal(q.view(torch.uint8), qr.view(G, K, N).view(torch.uint8)), (tuple(x.shape), dtype)
        assert torch.equal(s, sr.view(G, K)), (tuple(x.shape), dtype)
        amax = x.float().abs().amax(dim=1).clamp_min(1e-12)
        assert torch.equal(s, amax / Q.FP8_MAX[dtype])  # along N, per group and column

    gen = torch.Generator().manual_seed(int(sys.argv[1]))
    for G, N, K in [(3, 200, 70), (2, 128, 64), (1, 1, 5), (4, 17, 130)]:
        x = torch.randn(G, N, K, generator=gen) * torch.exp2(torch.randint(-4, 5, (G, 1, K), generator=gen).float())
        x[:, :, K // 2] = 0  # a zero column
        for src in (x, x.half()):
            check(src, torch.float8_e4m3fn)
        check(x.half(), torch.float8_e5m2)
    print("OK")
""")


def test_columns_under_the_interpreter_equal_quantize_fp8_of_the_transposed_copy():
    seed = int(torch.randint(0, 2**31, ()).item())
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", _CHECK, str(seed)], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "OK" in r.stdout, f"seed {seed}: {r.stderr[-3000:]}"


@pytest.mark.parametrize("x, dtype, needle", [
    (torch.randn(4, 8).half(), E4M3, "x: expected a contiguous 3-D"),
    (torch.randn(2, 8, 4).half().transpose(1, 2), E4M3, "x: expected a contiguous 3-D"),
    (torch.randn(2, 4, 8).half(), torch.float16, "dtype: expected one of"),
    (torch.randn(2, 4, 8).to(torch.int8), E4M3, "x: dtype torch.int8 is not supported"),
])
def test_columns_name_the_bad_argument_before_any_work(monkeypatch, x, dtype, needle):
    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(quantize, "launch_columns", lambda *a: pytest.fail("launched"))
    with pytest.raises(PingpongError, match=needle):
        quantize_fp8_columns(x, dtype)


def test_columns_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, s = torch.ops.pingpong.quantize_fp8_columns(torch.empty(3, 48, 64, dtype=torch.bfloat16), E4M3)
        assert q.shape == (3, 64, 48) and q.is_contiguous() and q.dtype == E4M3
        assert s.shape == (3, 64) and s.is_contiguous() and s.dtype == torch.float32


@pytest.mark.slow
def test_columns_kernel_compiles_for_sm90_without_spills():
    from pingpong.runtime import compile as cc
    from pingpong.toolchain import KERNEL_OPTIONS

    x = torch.empty(4, 1536, 2048, dtype=torch.bfloat16)
    q, s = quantize.columns_like(x, E4M3)
    bn, bk = quantize.COLUMNS_TILE
    with cc.offline("sm_90a"):
        ck = quantize._columns_kernel.warmup(x, q, s, 1536, 2048, x.stride(0), x.stride(1), FP8_MAX=448.0,
                                             BLOCK_N=bn, BLOCK_K=bk, num_warps=quantize.COLUMNS_WARPS, grid=(1,),
                                             **KERNEL_OPTIONS)
    facts = cc.Compiled("columns", "sm_90a", dict(ck.asm), ck.metadata).facts()
    assert facts.spill_bytes == 0, facts.table()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(128, 1536, 2048), (128, 2048, 768), (3, 17, 200), (1, 1, 16)])
def test_columns_on_the_gpu_equal_quantize_fp8_of_the_transposed_copy(shape):
    G, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = (torch.randn(shape, device="cuda", generator=gen) * 4).to(torch.bfloat16)
    x[:, :, K // 2] = 0
    q, s = quantize_fp8_columns(x)
    qr, sr = quantize.quantize_fp8(x.transpose(1, 2).reshape(G * K, N), "row")
    assert torch.equal(q.view(torch.uint8), qr.view(G, K, N).view(torch.uint8)), f"seed 7, {shape}"
    assert torch.equal(s, sr.view(G, K)), f"seed 7, {shape}"
