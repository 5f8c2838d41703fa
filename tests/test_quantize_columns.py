"""quantize_fp8_columns (pingpong.quantize): stacked matrices quantized along N, written transposed;
and quantize_stacked_direct, their rows quantized along K with the columns' maxima beside.

The contracts are bitwise: (q, s) = quantize_fp8(x.transpose(1, 2).reshape(G·K, N), "row") viewed
(G, K, N) and (G, K), the transposed copy FP8 training's data gradient made before, with or
without the columns' maxima given (the one-read cast); quantize_stacked_direct's (q, s) =
quantize_fp8(x.reshape(G·N, K), "row") viewed (G, N, K) and (G, N), its amax each column's max
|x| along N, exactly. Checked on the CPU under Triton's interpreter against quantize_fp8 under
the same interpreter (odd N and K, a zero column, outputs NaN-poisoned, both fp8 kinds, more
rows per group than one program takes), offline for sm_90a (no spills), and on a GPU (marked
gpu) in bf16."""

import textwrap

import pytest
import torch

from pingpong import PingpongError, quantize
from pingpong.quantize import quantize_fp8_columns
from interpreted import check_interpreted

E4M3 = torch.float8_e4m3fn

_CHECK = textwrap.dedent("""
    import sys, torch
    from pingpong import quantize as Q

    def check(x, dtype):
        G, N, K = x.shape
        qs, ss, amax = Q.quantize_stacked_direct(x, dtype)
        qr, sr = Q.quantize_fp8(x.reshape(G * N, K), "row", dtype)
        assert torch.equal(qs.view(torch.uint8), qr.view(G, N, K).view(torch.uint8)), (tuple(x.shape), dtype)
        assert torch.equal(ss, sr.view(G, N)), (tuple(x.shape), dtype)
        assert torch.equal(amax, x.float().abs().amax(dim=1)), (tuple(x.shape), dtype)  # max is exact
        qr, sr = Q.quantize_fp8(x.transpose(1, 2).reshape(G * K, N), "row", dtype)
        for given in (None, amax):
            q, s = Q.columns_like(x, dtype)
            q.view(torch.uint8).fill_(0x7F)  # NaN bytes: every element must be written
            s.fill_(float("nan"))
            Q.quantize_columns_direct(x, dtype, given, (q, s))
            what = (tuple(x.shape), dtype, given is None)
            assert torch.equal(q.view(torch.uint8), qr.view(G, K, N).view(torch.uint8)), what
            assert torch.equal(s, sr.view(G, K)), what
            assert torch.equal(s, amax.clamp_min(1e-12) / Q.FP8_MAX[dtype]), what  # along N, per group and column
        s = Q.quantize_columns_direct(x, dtype, amax * 2)[1]  # the given maxima are read, not x's recomputed
        assert torch.equal(s, (amax * 2).clamp_min(1e-12) / Q.FP8_MAX[dtype]), (tuple(x.shape), dtype)

    gen = torch.Generator().manual_seed(int(sys.argv[1]))
    for G, N, K in [(3, 200, 70), (2, 128, 64), (1, 1, 5), (4, 17, 130), (2, 80, 1024)]:
        x = torch.randn(G, N, K, generator=gen) * torch.exp2(torch.randint(-4, 5, (G, 1, K), generator=gen).float())
        x[:, :, K // 2] = 0  # a zero column
        for src in (x, x.half()):
            check(src, torch.float8_e4m3fn)
        check(x.half(), torch.float8_e5m2)
    print("OK")
""")


@pytest.mark.slow
def test_columns_under_the_interpreter_equal_quantize_fp8_of_the_transposed_copy():
    check_interpreted(_CHECK)


_X = torch.randn(2, 4, 8).half()


@pytest.mark.parametrize("x, dtype, amax, needle", [
    (torch.randn(4, 8).half(), E4M3, None, "x: expected a contiguous 3-D"),
    (torch.randn(2, 8, 4).half().transpose(1, 2), E4M3, None, "x: expected a contiguous 3-D"),
    (_X, torch.float16, None, "dtype: expected one of"),
    (torch.randn(2, 4, 8).to(torch.int8), E4M3, None, "x: dtype torch.int8 is not supported"),
    (_X, E4M3, torch.zeros(2, 4), r"amax: expected the columns' maxima, a contiguous float32 \(G, K\) = \(2, 8\)"),
    (_X, E4M3, torch.zeros(2, 8, dtype=torch.float64), "amax: expected the columns' maxima"),
    (_X, E4M3, torch.zeros(8, 2).t(), "amax: expected the columns' maxima"),
    (_X, E4M3, torch.zeros(2, 8, device="meta"), "amax: on meta"),
    (_X, E4M3, [0.0] * 16, "amax: expected a torch.Tensor"),
])
def test_columns_name_the_bad_argument_before_any_work(monkeypatch, x, dtype, amax, needle):
    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(quantize, "launch_columns", lambda *a: pytest.fail("launched"))
    with pytest.raises(PingpongError, match=needle):
        quantize_fp8_columns(x, dtype, amax)


def test_stacked_names_what_it_cannot_quantize(monkeypatch):
    """The one-read row kernel holds a whole row: K past MAX_ROW is refused naming x; so is what
    quantize_fp8_columns refuses."""
    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(quantize, "launch_stacked", lambda *a: pytest.fail("launched"))
    with pytest.raises(PingpongError, match=f"x: rows of K = {quantize.MAX_ROW + 16} > {quantize.MAX_ROW}"):
        quantize.quantize_stacked_direct(torch.empty(1, 2, quantize.MAX_ROW + 16, dtype=torch.float16))
    with pytest.raises(PingpongError, match="x: expected a contiguous 3-D"):
        quantize.quantize_stacked_direct(_X[0])


def test_columns_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 48, 64, dtype=torch.bfloat16)
        for amax in (None, torch.empty(3, 64)):
            q, s = torch.ops.pingpong.quantize_fp8_columns(x, E4M3, amax)
            assert q.shape == (3, 64, 48) and q.is_contiguous() and q.dtype == E4M3
            assert s.shape == (3, 64) and s.is_contiguous() and s.dtype == torch.float32
        with pytest.raises(PingpongError, match="amax: expected the columns' maxima"):
            torch.ops.pingpong.quantize_fp8_columns(x, E4M3, torch.empty(3, 48))


@pytest.mark.slow
def test_columns_kernels_compile_for_sm90_without_spills():
    """The columns kernel (both passes; the cast from given maxima) and the stacked row kernel
    at Qwen3-30B-A3B's and DeepSeek-V3's expert shapes."""
    from pingpong.runtime import compile as cc
    from pingpong.toolchain import KERNEL_OPTIONS

    bn, bk = quantize.COLUMNS_TILE
    for N, K in ((1536, 2048), (2048, 768), (4096, 7168)):
        x = torch.empty(4, N, K, dtype=torch.bfloat16)
        q, s = quantize.columns_like(x, E4M3)
        amax = torch.empty(4, K)
        _, rbk, rbm, warps = quantize._row_tile(K)
        with cc.offline("sm_90a"):
            kernels = {f"columns amax={given}": quantize._columns_kernel.warmup(
                x, q, s, amax, N, K, x.stride(0), x.stride(1), FP8_MAX=448.0, BLOCK_N=bn, BLOCK_K=bk, AMAX=given,
                num_warps=quantize.COLUMNS_WARPS, grid=(1,), **KERNEL_OPTIONS) for given in (False, True)}
            kernels["stacked rows"] = quantize._stacked_row_kernel.warmup(
                x, x.to(E4M3), s, amax, N, K, K, K, FP8_MAX=448.0, BLOCK_M=rbm, BLOCK_K=rbk,
                STEPS=quantize.STACKED_ROWS // rbm, num_warps=warps, grid=(1,), **KERNEL_OPTIONS)
        for name, ck in kernels.items():
            facts = cc.Compiled(name, "sm_90a", dict(ck.asm), ck.metadata).facts()
            assert facts.spill_bytes == 0, (name, N, K, facts.table())


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(128, 1536, 2048), (128, 2048, 768), (3, 17, 200), (1, 1, 16)])
def test_columns_on_the_gpu_equal_quantize_fp8_of_the_transposed_copy(shape):
    """Both routes of quantize_fp8_columns, and quantize_stacked_direct's rows and maxima (the
    atomics of many programs into one column), bitwise."""
    G, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = (torch.randn(shape, device="cuda", generator=gen) * 4).to(torch.bfloat16)
    x[:, :, K // 2] = 0
    qs, ss, amax = quantize.quantize_stacked_direct(x)
    qr, sr = quantize.quantize_fp8(x.reshape(G * N, K), "row")
    assert torch.equal(qs.view(torch.uint8), qr.view(G, N, K).view(torch.uint8)), f"seed 7, {shape}"
    assert torch.equal(ss, sr.view(G, N)), f"seed 7, {shape}"
    assert torch.equal(amax, x.float().abs().amax(1)), f"seed 7, {shape}"
    qr, sr = quantize.quantize_fp8(x.transpose(1, 2).reshape(G * K, N), "row")
    for given in (None, amax):
        q, s = quantize_fp8_columns(x, amax=given)
        assert torch.equal(q.view(torch.uint8), qr.view(G, K, N).view(torch.uint8)), f"seed 7, {shape}, {given is None}"
        assert torch.equal(s, sr.view(G, K)), f"seed 7, {shape}, {given is None}"
