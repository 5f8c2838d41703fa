"""quantize_fp8_blocks_t (pingpong.quantize): stacked matrices quantized in 128×128 blocks and
written transposed, the block recipe's data-gradient operand of an experts' weights.

The contract is bitwise: (qt, st) = quantize_fp8(x.view(G·N, K), "block128x128") with each
matrix of q transposed and the scale grid of each transposed, as the fp8 transposed copy made
them before. Checked on the CPU under Triton's interpreter against quantize_fp8 under the same
interpreter (fp16 and fp32, both fp8 kinds, a zero block, outputs NaN-poisoned), its fake's
shapes, and bad input named before any work."""

import textwrap

import pytest
import torch

from pingpong import PingpongError, quantize
from interpreted import check_interpreted

_CHECK = textwrap.dedent("""
    import sys, torch
    from pingpong import quantize as Q

    def check(x, dtype):
        G, N, K = x.shape
        q, s = Q.quantize_fp8(x.reshape(G * N, K), "block128x128", dtype)
        want_q = q.view(G, N, K).transpose(1, 2)
        want_s = s.view(G, N // 128, K // 128).transpose(1, 2)
        qt, st = Q.blocks_t_like(x, dtype)
        qt.view(torch.uint8).fill_(0x7F)  # NaN bytes: every element must be written
        st.fill_(float("nan"))
        Q.quantize_blocks_t_direct(x, dtype, (qt, st))
        what = (tuple(x.shape), x.dtype, dtype)
        assert torch.equal(qt.view(torch.uint8), want_q.contiguous().view(torch.uint8)), what
        assert torch.equal(st, want_s.contiguous()), what

    gen = torch.Generator().manual_seed(int(sys.argv[1]))
    for G, N, K in [(3, 256, 128), (1, 128, 384), (2, 384, 256)]:
        x = torch.randn(G, N, K, generator=gen) * torch.exp2(torch.randint(-4, 5, (G, N, 1), generator=gen).float())
        x[0, :128, :128] = 0  # a zero block
        for src in (x, x.half()):
            check(src, torch.float8_e4m3fn)
        check(x.half(), torch.float8_e5m2)
    print("OK")
""")


@pytest.mark.slow
def test_blocks_t_under_the_interpreter_equal_quantize_fp8_transposed():
    check_interpreted(_CHECK)


def test_the_fake_gives_the_transposed_shapes():
    with torch._subclasses.FakeTensorMode():
        x = torch.empty(3, 256, 384, dtype=torch.bfloat16)
        qt, st = torch.ops.pingpong.quantize_fp8_blocks_t(x, torch.float8_e4m3fn)
    assert tuple(qt.shape) == (3, 384, 256) and qt.dtype == torch.float8_e4m3fn
    assert tuple(st.shape) == (3, 3, 2) and st.dtype == torch.float32


@pytest.mark.parametrize("x, needle", [
    (torch.zeros(2, 200, 128, dtype=torch.bfloat16), "x: expected a contiguous 3-D"),
    (torch.zeros(2, 128, 256, dtype=torch.bfloat16).transpose(1, 2), "x: expected a contiguous 3-D"),
    (torch.zeros(256, 128, dtype=torch.bfloat16), "x: expected a contiguous 3-D"),
    ([1.0], "x: expected a torch.Tensor"),
])
def test_bad_input_is_named_before_any_work(monkeypatch, x, needle):
    monkeypatch.setattr(quantize, "launch_blocks_t", lambda *a: pytest.fail("launched"))
    with pytest.raises(PingpongError, match=needle):
        quantize.quantize_fp8_blocks_t(x)


@pytest.mark.gpu
def test_blocks_t_on_the_gpu_equal_quantize_fp8_transposed():
    """bf16 on the GPU (the interpreter runs fp16/fp32): bitwise quantize_fp8's 128×128 blocks of
    the (G·N, K) view, each matrix and scale grid transposed; a Qwen3-30B-A3B-sized gate-up
    weight among the shapes (int64 offsets, many programs)."""
    gen = torch.Generator("cuda").manual_seed(3)
    for G, N, K in [(3, 256, 384), (128, 1536, 2048)]:
        x = (torch.randn(G, N, K, generator=gen, device="cuda") * 3).to(torch.bfloat16)
        q, s = quantize.quantize_fp8(x.view(G * N, K), "block128x128")
        qt, st = quantize.quantize_fp8_blocks_t(x)
        assert torch.equal(qt.view(torch.uint8), q.view(G, N, K).transpose(1, 2).contiguous().view(torch.uint8)), (G, N, K)
        assert torch.equal(st, s.view(G, N // 128, K // 128).transpose(1, 2).contiguous()), (G, N, K)
