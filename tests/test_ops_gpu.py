"""GPU checks of the PyTorch integration (marker `gpu`): gradients against float64 for the four
layouts, α/β/out_dtype, batched and broadcast shapes and every activation; opcheck of each op on
CUDA; torch.compile(fullgraph=True) with inductor; eager inference bypasses the op machinery.

Errors are measured by `closeness.rel_err` (the larger of the norm-wise relative error
and the elementwise error scaled by |ref| + rms(ref)); bf16 bound 1e-2 for one GEMM (its
output is rounded once to bf16: 2^-8 relative). Gradients through an activation have two
roundings (dL/dz is rounded to bf16 before its GEMM), hence 2e-2.
"""

import itertools

import pytest
import torch
import torch.nn.functional as F

import pingpong
from pingpong import PingpongError
from pingpong.integration import ops
from closeness import GEMM_BOUND, rel_err
from test_gemm_gpu import operand

pytestmark = pytest.mark.gpu

bf = torch.bfloat16
ACT_BOUND = 2e-2
TORCH_ACTIVATIONS = {None: lambda z: z, "relu": F.relu, "gelu_erf": F.gelu,
                     "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"), "silu": F.silu}


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    print(f"generator seed {g.seed()}")  # fresh inputs every run; shown with a failure
    return g


def randn(*shape, gen, dtype=bf, scale=1.0):
    return (torch.randn(*shape, device="cuda", generator=gen) * scale).to(dtype)


def grads64(fn, inputs, g):
    xs = [t.detach().double().requires_grad_() for t in inputs]
    y = fn(*xs)
    return y, torch.autograd.grad(y, xs, g.double())


@pytest.mark.parametrize("a_col,b_col", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("out_dtype", (bf, torch.float32))
def test_gemm_gradients_four_layouts(a_col, b_col, out_dtype, gen):
    M, N, K = 384, 520, 264
    a = operand(M, K, bf, a_col, gen).requires_grad_()
    b = operand(K, N, bf, b_col, gen).requires_grad_()
    c = randn(M, N, gen=gen, dtype=out_dtype).requires_grad_()
    y = pingpong.gemm(a, b, c, alpha=1.5, beta=-0.5, out_dtype=out_dtype)
    g = randn(M, N, gen=gen, dtype=out_dtype)
    got = torch.autograd.grad(y, (a, b, c), g)
    ref_y, ref = grads64(lambda a, b, c: 1.5 * a @ b - 0.5 * c, (a, b, c), g.to(bf).to(out_dtype))
    assert rel_err(y, ref_y) < GEMM_BOUND[out_dtype]
    for name, x, r, t in zip("abc", got, ref, (a, b, c)):
        assert x.dtype == t.dtype and x.shape == t.shape, name
        if name != "c":  # dA, dB see the bf16-rounded output gradient (the kernels' inputs)
            assert rel_err(x, r) < GEMM_BOUND[bf], name
        else:
            assert rel_err(x, -0.5 * g.double()) < GEMM_BOUND[out_dtype], name


SHAPES = [
    ((4, 256, 192), (192, 320)),  # a shared weight: folded into M
    ((2, 3, 256, 192), (192, 320)),
    ((4, 256, 192), (4, 192, 320)),  # the batched kernel
    ((256, 192), (4, 192, 320)),  # a broadcast
    ((2, 1, 256, 192), (3, 192, 320)),
]


@pytest.mark.parametrize("a_shape, b_shape", SHAPES)
def test_batched_and_broadcast_forward_and_gradients(a_shape, b_shape, gen):
    a, b = randn(*a_shape, gen=gen).requires_grad_(), randn(*b_shape, gen=gen).requires_grad_()
    with torch.no_grad():
        direct = pingpong.matmul(a, b)
    y = pingpong.matmul(a, b)
    ref_y = a.double() @ b.double()
    assert y.shape == ref_y.shape and direct.shape == ref_y.shape
    assert rel_err(direct, ref_y) < GEMM_BOUND[bf] and rel_err(y, ref_y) < GEMM_BOUND[bf]
    g = randn(*y.shape, gen=gen)
    got = torch.autograd.grad(y, (a, b), g)
    _, ref = grads64(torch.matmul, (a, b), g)
    for name, x, r, t in zip("ab", got, ref, (a, b)):
        assert x.shape == t.shape and x.dtype == t.dtype, name
        assert rel_err(x, r) < GEMM_BOUND[bf], name


@pytest.mark.parametrize("activation", list(TORCH_ACTIVATIONS))
@pytest.mark.parametrize("with_bias", (True, False))
def test_linear_every_activation(activation, with_bias, gen):
    x = randn(2, 300, 256, gen=gen).requires_grad_()
    w = randn(384, 256, gen=gen, scale=0.06).requires_grad_()
    bias = randn(384, gen=gen).requires_grad_() if with_bias else None
    inputs = (x, w, bias) if with_bias else (x, w)
    y = pingpong.linear(x, w, bias, activation)
    with torch.no_grad():
        direct = pingpong.linear(x, w, bias, activation)
    act = TORCH_ACTIVATIONS[activation]
    g = randn(*y.shape, gen=gen)
    ref_y, ref = grads64(lambda x, w, *b: act(F.linear(x, w, *b)), inputs, g)
    assert rel_err(y, ref_y) < GEMM_BOUND[bf] and rel_err(direct, ref_y) < GEMM_BOUND[bf]
    got = torch.autograd.grad(y, inputs, g)
    bound = GEMM_BOUND[bf] if activation is None else ACT_BOUND
    for name, t, r, src in zip(("dx", "dw", "dbias"), got, ref, inputs):
        assert t.shape == src.shape and t.dtype == src.dtype, name
        assert rel_err(t, r) < bound, name


def test_nn_linear_training_matches_torch(gen):
    torch.manual_seed(0)
    ref = torch.nn.Linear(512, 768, device="cuda", dtype=bf)
    ours = pingpong.nn.Linear(512, 768, device="cuda", dtype=bf)
    ours.load_state_dict(ref.state_dict())
    x = randn(4, 128, 512, gen=gen)
    g = randn(4, 128, 768, gen=gen)
    y = ours(x)
    y.backward(g)
    ref64 = torch.nn.Linear(512, 768, device="cuda", dtype=torch.float64)
    ref64.load_state_dict(ref.state_dict())
    y64 = ref64(x.double())
    y64.backward(g.double())
    assert rel_err(y, y64.detach()) < GEMM_BOUND[bf]
    assert rel_err(ours.weight.grad, ref64.weight.grad) < GEMM_BOUND[bf]
    assert rel_err(ours.bias.grad, ref64.bias.grad) < GEMM_BOUND[bf]


def test_opcheck_every_op(gen):
    a, b = randn(2, 64, 96, gen=gen), randn(96, 80, gen=gen)
    c = randn(2, 64, 80, gen=gen)
    w, bias = randn(80, 96, gen=gen), randn(80, gen=gen)
    cases = [
        (ops.mm, (a.requires_grad_(), b.requires_grad_(), None)),
        (ops.mm, (a[0].detach(), w.t(), torch.float32)),
        (ops.gemm, (a, b, c.requires_grad_(), 0.5, 2.0, None)),
        (ops.gemm, (a, b, c, 0.5, 2.0, None, bias.detach().requires_grad_(), "silu")),
        (ops.gemm_, (c[0].detach().clone(), a[0].detach(), b.detach(), 1.0, 0.5)),
        (ops.linear, (a, w.requires_grad_(), bias.requires_grad_(), "gelu_tanh")),
        (ops.linear, (a, w, None, None)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_compile_inductor_fullgraph_matches_eager(gen):
    torch._dynamo.reset()
    x = randn(4, 128, 256, gen=gen).requires_grad_()
    w1, b1 = randn(512, 256, gen=gen, scale=0.06).requires_grad_(), randn(512, gen=gen).requires_grad_()
    w2 = randn(512, 256, gen=gen, scale=0.04).requires_grad_()

    def block(x, w1, b1, w2):
        h = pingpong.linear(x, w1, b1, "gelu_erf")
        y = pingpong.matmul(h, w2)
        return pingpong.gemm(y, w2.t(), h, alpha=0.5, beta=1.0)  # + a residual, fused

    eager = block(x, w1, b1, w2)
    compiled = torch.compile(block, fullgraph=True)(x, w1, b1, w2)  # inductor
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    g = randn(*eager.shape, gen=gen)
    ge = torch.autograd.grad(eager, (x, w1, b1, w2), g)
    gc = torch.autograd.grad(compiled, (x, w1, b1, w2), g)
    for e, c in zip(ge, gc):
        torch.testing.assert_close(c, e, rtol=1e-2, atol=1e-2 * e.abs().max().item())


def test_eager_inference_does_not_touch_the_ops(gen, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the op machinery was used in eager inference")

    for name in ("mm", "gemm", "gemm_", "linear"):
        monkeypatch.setattr(ops, name, refuse)
    a, w = randn(256, 128, gen=gen).requires_grad_(), randn(192, 128, gen=gen)
    with torch.no_grad():
        y = pingpong.matmul(a, w.t())
        pingpong.gemm(a, w.t(), y, beta=1.0)
        pingpong.gemm_(y, a, w.t(), beta=1.0)
        pingpong.linear(a, w, None, "silu")
    assert y.grad_fn is None


def test_gemm_inplace_on_tracked_tensors(gen):
    a, b = randn(128, 64, gen=gen), randn(64, 96, gen=gen)
    p = torch.nn.Parameter(randn(128, 96, gen=gen))
    c = randn(128, 96, gen=gen)
    loss = (p * c).sum()  # autograd saved c
    before = c.clone()
    with pytest.raises(PingpongError, match="c: requires grad"):
        pingpong.gemm_(p, a, b)
    with torch.no_grad():
        pingpong.gemm_(c, a, b, beta=1.0)
    assert rel_err(c, a.double() @ b.double() + before.double()) < GEMM_BOUND[bf]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
