"""The torch.library ops on CPU: fake-tensor propagation (shapes, dtypes, strides of the eager
contract), bad input through the fake implementations, the routing rule, and — with the
kernel launch replaced by the portable kernel under Triton's interpreter (fp16) — autograd
against float64 torch, opcheck, and torch.compile(fullgraph=True) tracing."""

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import pingpong
from closeness import AUTOGRAD, assert_close, assert_close64
from pingpong import PingpongError
from pingpong.integration import ops

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # triton 3.6 interpreter + numpy

f16, bf = torch.float16, torch.bfloat16


def randn(*shape, dtype=f16, seed=None):
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


# ----------------------------------------------------------------------------- fake tensors

SHAPES = [  # a shape, b shape (b given as (K, N) unless transposed below)
    ((64, 32), (32, 48)),
    ((3, 64, 32), (32, 48)),
    ((2, 3, 64, 32), (3, 32, 48)),
    ((64, 32), (4, 32, 48)),
    ((1, 64, 32), (4, 32, 48)),
]


@pytest.mark.parametrize("a_shape, b_shape", SHAPES)
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_fake_propagation_matches_torch_matmul(a_shape, b_shape, out_dtype):
    want = torch.matmul(torch.empty(a_shape, device="meta"), torch.empty(b_shape, device="meta")).shape
    with FakeTensorMode():
        a = torch.empty(a_shape, dtype=bf, device="cuda")
        b = torch.empty(b_shape, dtype=bf, device="cuda")
        for out in (ops.mm(a, b, out_dtype), ops.gemm(a, b, None, 2.0, 0.0, out_dtype)):
            assert out.shape == want and out.device == a.device
            assert out.dtype == (out_dtype or bf)
            assert out.is_contiguous()
        c = torch.empty(want, dtype=out_dtype or bf, device="cuda")
        b_t = torch.empty(b_shape[:-2] + b_shape[-2:][::-1], dtype=bf, device="cuda").mT  # column-major
        assert ops.gemm(a, b_t, c, 1.0, 0.5, out_dtype).shape == want
        if len(a_shape) == 2 and len(b_shape) == 2:
            ops.gemm_(c, a, b, 1.0, 1.0)  # returns nothing; checks pass


@pytest.mark.parametrize("x_shape", [(32,), (64, 32), (2, 3, 32)])
def test_fake_linear_matches_f_linear(x_shape):
    want = F.linear(torch.empty(x_shape, device="meta"), torch.empty(48, 32, device="meta")).shape
    with FakeTensorMode():
        x = torch.empty(x_shape, dtype=bf, device="cuda")
        w = torch.empty(48, 32, dtype=bf, device="cuda")
        y = ops.linear(x, w, torch.empty(48, dtype=bf, device="cuda"), "gelu_tanh")
    assert y.shape == want and y.dtype == bf and y.is_contiguous()


FAKE_REFUSALS = [
    ("batch", lambda e: ops.mm(e(2, 8, 4), e(3, 4, 8)), "a and b: batch dimensions"),
    ("inner", lambda e: ops.mm(e(8, 4), e(5, 8)), "a.shape\\[-1\\] must equal b.shape\\[-2\\]"),
    ("dtype", lambda e: ops.mm(e(8, 4), e(4, 8, dtype=f16)), "same dtype"),
    ("fp32", lambda e: ops.mm(e(8, 4, dtype=torch.float32), e(4, 8, dtype=torch.float32)), "a: dtype torch.float32"),
    ("c shape", lambda e: ops.gemm(e(8, 4), e(4, 8), e(8, 9), 1.0, 1.0, None), "c: expected shape \\(8, 8\\)"),
    ("bias length", lambda e: ops.linear(e(8, 4), e(6, 4), e(5), None), "bias: expected shape \\(6,\\)"),
    ("bias dtype", lambda e: ops.linear(e(8, 4), e(6, 4), e(6, dtype=torch.int32), None), "bias: dtype torch.int32"),
    ("bias 2-D", lambda e: ops.linear(e(8, 4), e(6, 4), e(1, 6), None), "bias: expected shape \\(6,\\) \\(weight.shape\\[0\\]"),
    ("gemm bias", lambda e: ops.gemm(e(8, 4), e(4, 6), None, 1.0, 0.0, None, e(8), None),
     "bias: expected shape \\(6,\\) or \\(1, 6\\) \\(per output column\\) or \\(8, 1\\)"),
    ("gemm activation", lambda e: ops.gemm(e(8, 4), e(4, 6), None, 1.0, 0.0, None, None, "gelu"), "activation: expected"),
    ("activation", lambda e: ops.linear(e(8, 4), e(6, 4), None, "tanh"), "activation: expected None or one of"),
    ("x width", lambda e: ops.linear(e(8, 5), e(6, 4), None, None), "x: expected last dim K = weight.shape\\[1\\] = 4"),
]


@pytest.mark.parametrize("name, call, needle", FAKE_REFUSALS, ids=[c[0] for c in FAKE_REFUSALS])
def test_fake_implementations_refuse_bad_input(name, call, needle):
    with FakeTensorMode():
        def e(*shape, dtype=bf):
            return torch.empty(shape, dtype=dtype, device="cuda")

        with pytest.raises(PingpongError, match=needle):
            call(e)


# ----------------------------------------------------------------------------- routing


def test_needs_op_only_for_autograd_tracing_and_subclasses():
    x, w = randn(4, 4), randn(4, 4)
    assert not ops.needs_op(x, w, None)
    p = torch.nn.Parameter(randn(4, 4))
    assert ops.needs_op(x, p)
    with torch.no_grad():
        assert not ops.needs_op(x, p)
    with FakeTensorMode():
        assert ops.needs_op(torch.empty(4, 4), torch.empty(4, 4))
    assert not ops.needs_op([[1.0]], x)  # not a tensor: the direct path's validation reports it


# ----------------------------------------------------------------------------- autograd (interpreter)


def grads64(fn, inputs, g):
    """Gradients of fn at float64 copies of the inputs (the reference)."""
    xs = [t.detach().double().requires_grad_() if t is not None else None for t in inputs]
    y = fn(*xs)
    return y, torch.autograd.grad(y, [t for t in xs if t is not None], g.double())



LAYOUTS = {  # (M, K) a and (K, N) b in the four orientations
    "nn": (lambda M, K: randn(M, K), lambda K, N: randn(K, N)),
    "nt": (lambda M, K: randn(M, K), lambda K, N: randn(N, K).t()),
    "tn": (lambda M, K: randn(K, M).t(), lambda K, N: randn(K, N)),
    "tt": (lambda M, K: randn(K, M).t(), lambda K, N: randn(N, K).t()),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gemm_gradients_all_layouts(interpreted_kernels, layout):
    seed = 1
    torch.manual_seed(seed)
    make_a, make_b = LAYOUTS[layout]
    a, b = make_a(32, 48).requires_grad_(), make_b(48, 40).requires_grad_()
    c = randn(32, 40).requires_grad_()
    y = pingpong.gemm(a, b, c, alpha=0.75, beta=-1.5)
    g = randn(*y.shape)
    got = torch.autograd.grad(y, (a, b, c), g)
    ref_y, ref = grads64(lambda a, b, c: 0.75 * a @ b - 1.5 * c, (a, b, c), g)
    assert_close64(y, ref_y, f"forward (seed {seed})", AUTOGRAD)
    for name, x, r, t in zip("abc", got, ref, (a, b, c)):
        assert x.dtype == t.dtype and x.shape == t.shape
        assert_close64(x, r, f"d{name} (seed {seed})", AUTOGRAD)


@pytest.mark.parametrize("a_shape, b_shape", SHAPES)
def test_matmul_gradients_batched_and_broadcast(interpreted_kernels, a_shape, b_shape):
    seed = 2
    torch.manual_seed(seed)
    a, b = randn(*a_shape).requires_grad_(), randn(*b_shape).requires_grad_()
    y = pingpong.matmul(a, b, out_dtype=torch.float32)
    assert y.dtype == torch.float32 and y.grad_fn is not None
    g = randn(*y.shape, dtype=torch.float32)
    got = torch.autograd.grad(y, (a, b), g)
    ref_y, ref = grads64(torch.matmul, (a, b), g.to(f16))  # gradients flow in the input dtype
    assert_close64(y, ref_y, f"forward (seed {seed})", AUTOGRAD)
    for name, x, r, t in zip("ab", got, ref, (a, b)):
        assert x.dtype == t.dtype and x.shape == t.shape
        assert_close64(x, r, f"d{name} (seed {seed})", AUTOGRAD)


TORCH_ACTIVATIONS = {None: lambda z: z, "relu": F.relu, "gelu_erf": F.gelu,
                     "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"), "silu": F.silu}


@pytest.mark.parametrize("activation", [None, "relu", "gelu_erf", "gelu_tanh", "silu"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_gradients_every_activation(interpreted_kernels, activation, with_bias):
    seed = 3
    torch.manual_seed(seed)
    x, w = randn(2, 24, 32).requires_grad_(), (randn(40, 32) * 0.3).requires_grad_()
    bias = randn(40).requires_grad_() if with_bias else None
    y = pingpong.linear(x, w, bias, activation)
    g = randn(*y.shape)
    inputs = (x, w, bias) if with_bias else (x, w)
    got = torch.autograd.grad(y, inputs, g)
    act = TORCH_ACTIVATIONS[activation]
    ref_y, ref = grads64(lambda x, w, *b: act(F.linear(x, w, *b)), inputs, g)
    assert_close64(y, ref_y, f"forward (seed {seed})", AUTOGRAD)
    for name, t, r, src in zip(("dx", "dw", "dbias"), got, ref, inputs):
        assert t.dtype == src.dtype and t.shape == src.shape
        assert_close64(t, r, f"{name} (seed {seed})", AUTOGRAD)


@pytest.mark.parametrize("backend", [None, "aot_eager"])
def test_linear_takes_a_strided_one_dim_x_as_f_linear(interpreted_kernels, backend):
    """A 1-D x is one row whatever its stride (F.linear takes x[::2]); the fake implementation
    accepts it, so the eager call, its gradients and the compiled op must too."""
    torch._dynamo.reset()
    torch.manual_seed(8)
    base, w, bias = randn(64).requires_grad_(), randn(24, 32).requires_grad_(), randn(24).requires_grad_()
    f = (lambda x, w, b: pingpong.linear(x, w, b, "silu"))
    if backend is not None:
        f = torch.compile(f, fullgraph=True, backend=backend)
    y = f(base[::2], w, bias)
    g = randn(24)
    got = torch.autograd.grad(y, (base, w, bias), g)
    ref_y, ref = grads64(lambda x, w, b: F.silu(F.linear(x[::2], w, b)), (base, w, bias), g)
    assert y.shape == (24,) and y.is_contiguous()
    assert_close64(y, ref_y, "forward", AUTOGRAD)
    for name, t, r in zip(("dx", "dw", "dbias"), got, ref):
        assert_close64(t, r, name, AUTOGRAD)


def test_gemm_inplace_bumps_the_version_so_autograd_notices(interpreted_kernels):
    a, b, c = randn(16, 16), randn(16, 16), randn(16, 16)
    p = torch.nn.Parameter(randn(16, 16))
    loss = (p * c).sum()  # autograd saves c for p's gradient
    for gemm_ in (pingpong.gemm_, lambda c, a, b, beta: ops.gemm_(c, a, b, 1.0, beta)):  # direct path, op
        before = c._version
        with torch.no_grad():
            gemm_(c, a, b, beta=1.0)
        assert c._version > before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


# ----------------------------------------------------------------------------- opcheck, compile


OPCHECK = [
    ("mm", lambda: (ops.mm, (randn(16, 32), randn(24, 32).t()), {})),
    ("mm batched", lambda: (ops.mm, (randn(2, 16, 32).requires_grad_(), randn(32, 16).requires_grad_()), {})),
    ("gemm", lambda: (ops.gemm, (randn(16, 32).requires_grad_(), randn(32, 16).requires_grad_(),
                                 randn(16, 16).requires_grad_(), 0.5, 2.0, None), {})),
    ("gemm_", lambda: (ops.gemm_, (randn(16, 16), randn(16, 32), randn(32, 16), 1.0, 0.5), {})),
    ("gemm epilogue", lambda: (ops.gemm, (randn(2, 16, 32).requires_grad_(), randn(32, 16).requires_grad_(), None, 0.5,
                                          0.0, None, randn(16, 1).requires_grad_(), "gelu_tanh"), {})),
    ("linear", lambda: (ops.linear, (randn(2, 16, 32).requires_grad_(), randn(24, 32).requires_grad_(),
                                     randn(24).requires_grad_(), "silu"), {})),
]


@pytest.mark.parametrize("name, make", OPCHECK, ids=[c[0] for c in OPCHECK])
def test_opcheck_on_the_interpreter(interpreted_kernels, name, make):
    torch.manual_seed(4)
    op, args, kwargs = make()
    torch.library.opcheck(op, args, kwargs)


def public_calls(a, b, c, w, bias):
    y = pingpong.matmul(a, b)
    z = pingpong.gemm(a, b, y, alpha=0.5, beta=2.0)
    return pingpong.linear(z, w, bias, "gelu_tanh")


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_fullgraph_traces_the_public_functions(interpreted_kernels, backend):
    torch._dynamo.reset()
    torch.manual_seed(5)
    a, b, w, bias = randn(2, 16, 32), randn(32, 16), randn(24, 16), randn(24)
    want = public_calls(a, b, None, w, bias)  # eager: the direct path (on the interpreter)
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(public_calls, fullgraph=True, backend=backend if backend != "eager" else recording)
    got = compiled(a, b, None, w, bias)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    if graphs:
        targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
        assert targets.count("pingpong.mm.default") == 1 and targets.count("pingpong.gemm.default") == 1
        assert targets.count("pingpong.linear.default") == 1


def test_compile_backward_through_the_ops(interpreted_kernels):
    torch._dynamo.reset()
    torch.manual_seed(6)
    x, w, bias = randn(2, 16, 32).requires_grad_(), randn(24, 32).requires_grad_(), randn(24).requires_grad_()

    def step(x, w, bias):
        return pingpong.linear(x, w, bias, "silu").float().square().sum()

    eager = torch.autograd.grad(step(x, w, bias), (x, w, bias))
    compiled = torch.autograd.grad(torch.compile(step, fullgraph=True, backend="aot_eager")(x, w, bias), (x, w, bias))
    for e, c in zip(eager, compiled):
        torch.testing.assert_close(c, e, rtol=0, atol=0)


@pytest.mark.parametrize(
    "which, needle",
    [("c", "c: requires grad"), ("c view", "c: requires grad"), ("a", "a: requires grad"), ("b", "b: requires grad")],
)
def test_gemm_inplace_refuses_what_autograd_tracks_and_writes_nothing(interpreted_kernels, which, needle):
    torch.manual_seed(7)
    a, b = randn(16, 16), randn(16, 16)
    leaf = randn(16, 32).requires_grad_()
    if which == "c":
        c = leaf[:, :16].detach().clone().requires_grad_()
    elif which == "c view":
        c = leaf.clone()[:, :16]  # not a leaf: a view of a tensor that requires grad
    else:
        c = randn(16, 16)
        (a if which == "a" else b).requires_grad_()
    before = c.detach().clone()
    with pytest.raises(PingpongError, match=needle):
        pingpong.gemm_(c, a, b, beta=1.0)
    assert torch.equal(c.detach(), before)
    with torch.no_grad():  # outside grad mode it is an ordinary in-place update
        pingpong.gemm_(c, a.detach(), b.detach(), beta=1.0)
    torch.testing.assert_close(c.detach().double(), a.double() @ b.double() + before.double(), rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("name", ["relu", "gelu_erf", "gelu_tanh", "silu"])
def test_activation_backward_is_the_derivative_of_the_forward(name):
    """dL/dz of every activation against autograd through its float64 forward (tight: the
    tanh and erf forms of GELU differ by ~1e-3 in their derivatives)."""
    from pingpong.functional import activation_backward

    torch.manual_seed(8)
    z = (torch.randn(4096, dtype=torch.float64) * 3).requires_grad_()
    g = torch.randn(4096, dtype=torch.float64)
    (want,) = torch.autograd.grad(TORCH_ACTIVATIONS[name](z), z, g)
    saved = F.relu(z).detach() if name == "relu" else z.detach()
    got = activation_backward(name, g.float(), saved.float()).double()
    assert_close64(got, want, f"{name} (seed 8)", (1e-6, 1e-5))  # float32 math against float64


BIAS_KINDS = {"column": lambda M, N: randn(N), "column 2-D": lambda M, N: randn(1, N), "row": lambda M, N: randn(M, 1)}


@pytest.mark.parametrize("activation", ["relu", "gelu_erf", "silu"])
@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
@pytest.mark.parametrize("batched", [False, True])
def test_gemm_epilogue_gradients(interpreted_kernels, activation, bias_kind, batched):
    """act(α·a@b + bias) + β·c: every input's gradient against float64 torch (the bias is
    shared by the batches; a per-row bias keeps the batch out of M)."""
    seed = 9
    torch.manual_seed(seed)
    M, K, N = 24, 32, 40
    a = randn(*((2, M, K) if batched else (M, K))).requires_grad_()
    b = (randn(N, K) * 0.3).t().requires_grad_()
    c = randn(M, N).requires_grad_() if batched and bias_kind == "row" else randn(*a.shape[:-1], N).requires_grad_()
    bias = BIAS_KINDS[bias_kind](M, N).requires_grad_()  # (a batched "row" case also shares c)
    y = ops.gemm(a, b, c, 0.5, 0.75, None, bias, activation)
    g = randn(*y.shape)
    got = torch.autograd.grad(y, (a, b, c, bias), g)
    act = TORCH_ACTIVATIONS[activation]
    ref_y, ref = grads64(lambda a, b, c, bias: act(0.5 * (a @ b) + bias) + 0.75 * c, (a, b, c, bias), g)
    assert_close64(y, ref_y, f"forward (seed {seed})", AUTOGRAD)
    for name, t, r, src in zip(("da", "db", "dc", "dbias"), got, ref, (a, b, c, bias)):
        assert t.dtype == src.dtype and t.shape == src.shape, name
        assert_close64(t, r, f"{name} (seed {seed})", AUTOGRAD)


@pytest.mark.parametrize("activation", [None, "relu", "gelu_erf", "gelu_tanh", "silu"])
def test_epilogue_carries_nan_and_inf_as_torch(interpreted_kernels, activation):
    """A NaN or ±inf pre-activation (here from the bias) comes out of the fused epilogue as it
    does from torch's activation: relu(NaN) is NaN (torch.relu), not the 0 of a max that drops
    NaNs. The reference is float64 torch (torch's vectorized fp32 CPU gelu gives NaN at +inf)."""
    torch.manual_seed(5)
    a, b = randn(4, 16), randn(16, 6)
    bias = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -100.0, 3.0])
    y = pingpong.gemm(a, b, bias=bias, activation=activation)
    want = TORCH_ACTIVATIONS[activation](a.double() @ b.double() + bias.double()).half()
    torch.testing.assert_close(y, want, rtol=2e-3, atol=2e-3, equal_nan=True)


@pytest.mark.parametrize("shared_c", [False, True])
def test_c_gets_a_zero_gradient_at_beta_zero_as_in_addmm(interpreted_kernels, shared_c):
    """β = 0: c is not read, and its gradient is zeros of c's shape (torch.addmm's), not None."""
    torch.manual_seed(3)
    a, b = randn(2, 8, 16).requires_grad_(), randn(16, 12)
    c = randn(*((8, 12) if shared_c else (2, 8, 12))).requires_grad_()
    ops.gemm(a, b, c, 1.0, 0.0, None, None, None).sum().backward()
    assert c.grad is not None and c.grad.shape == c.shape and not c.grad.any()
    assert a.grad is not None and a.grad.abs().sum() > 0


def test_c_gradient_at_beta_zero_is_g_times_zero_as_in_addmm(interpreted_kernels):
    """β = 0: dc = β·g as torch.addmm's backward computes it, so a non-finite g gives NaN there
    (0·inf), not the zeros a shortcut gave."""
    a, b = randn(4, 16), randn(16, 6)
    c = randn(4, 6).requires_grad_()
    g = torch.zeros(4, 6, dtype=f16)
    g[0, 0], g[1, 2] = float("inf"), float("nan")
    (got,) = torch.autograd.grad(ops.gemm(a, b, c, 1.0, 0.0, None, None, None), c, g)
    c32 = c.detach().float().requires_grad_()
    (want,) = torch.autograd.grad(torch.addmm(c32, a.float(), b.float(), beta=0), c32, g.float())
    torch.testing.assert_close(got, want.half(), equal_nan=True)


def test_eager_autograd_function_and_op_give_the_same_gradients(interpreted_kernels):
    """Eager autograd runs a torch.autograd.Function around the direct call, the op carries
    the same formulas for traced code: both give identical results."""
    torch.manual_seed(10)
    x, w, bias = randn(2, 8, 32).requires_grad_(), randn(24, 32).requires_grad_(), randn(24).requires_grad_()
    eager = pingpong.linear(x, w, bias, "gelu_tanh")
    via_op = ops.linear(x, w, bias, "gelu_tanh")
    assert type(eager.grad_fn).__name__ == "_LinearFunctionBackward"
    assert type(via_op.grad_fn).__name__ != "_LinearFunctionBackward"
    g = randn(*eager.shape)
    for e, o in zip(torch.autograd.grad(eager, (x, w, bias), g), torch.autograd.grad(via_op, (x, w, bias), g)):
        torch.testing.assert_close(e, o, rtol=0, atol=0)
    a, b = randn(16, 32).requires_grad_(), randn(32, 8).requires_grad_()
    assert type(pingpong.matmul(a, b).grad_fn).__name__ == "_GemmFunctionBackward"


def test_compile_fullgraph_traces_the_in_place_gemm(interpreted_kernels):
    torch._dynamo.reset()
    torch.manual_seed(11)
    a, b, c = randn(16, 32), randn(32, 24), randn(16, 24)

    def f(c, a, b):
        pingpong.gemm_(c, a, b, alpha=0.5, beta=1.0)
        return c * 2

    want_c = c.clone()
    want = f(want_c, a, b)
    got_c = c.clone()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(got_c, a, b)
    torch.testing.assert_close(got_c, want_c, rtol=0, atol=0)  # the mutation reached the caller's c
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not torch.equal(got_c, c)


def _into_overlapping_a(buf, b):
    pingpong.gemm_(buf[:16, :8], buf[8:24], b)
    return buf


def _into_b(buf, a):
    pingpong.gemm_(buf[:32, :8], a, buf[:32, :8])
    return buf


def _bias_inside_c(c, a, b):
    pingpong.gemm_(c, a, b, bias=c[0])
    return c


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("f, needle", [(_into_overlapping_a, "c must not share memory with a"),
                                       (_into_b, "c must not share memory with b"),
                                       (_bias_inside_c, "bias must not share memory with c")])
def test_compiled_gemm_inplace_refuses_what_eager_refuses_and_writes_nothing(interpreted_kernels, backend, f, needle):
    """A functionalizing backend hands the op a copy of c, where the eager checks would see no
    alias: the fake implementation checks the traced views' storage before anything runs."""
    torch._dynamo.reset()
    buf, *args = {_into_overlapping_a: (randn(32, 32), randn(32, 8)), _into_b: (randn(32, 32), randn(32, 32)),
                  _bias_inside_c: (randn(16, 8), randn(16, 32), randn(32, 8))}[f]
    with pytest.raises(PingpongError, match=needle):
        f(buf.clone(), *args)
    x = buf.clone()
    with pytest.raises(Exception, match=needle):  # dynamo re-raises it as its own TorchRuntimeError
        torch.compile(f, fullgraph=True, backend=backend)(x, *args)
    assert torch.equal(x, buf)


def test_compiled_gemm_refuses_beta_without_c_as_eager_does(interpreted_kernels):
    """A β without c is no plain product: it reaches the gemm op, whose checks refuse it (mm's
    would have run a @ b and dropped β)."""
    torch._dynamo.reset()
    a, b = randn(8, 16), randn(16, 8)
    f = lambda a, b: pingpong.gemm(a, b, beta=1.0)  # noqa: E731
    with pytest.raises(PingpongError, match="beta: 1.0 scales c, but no c was given"):
        f(a, b)
    with pytest.raises(Exception, match="beta: 1.0 scales c, but no c was given"):
        torch.compile(f, backend="aot_eager", fullgraph=True)(a, b)


@pytest.mark.parametrize("activation", ["relu", "gelu_erf", "gelu_tanh", "silu"])
def test_double_backward_through_every_activation(interpreted_kernels, activation):
    """The gradient of a gradient (create_graph=True) against float64 torch: silu's took
    aten.silu_backward, which has no derivative."""
    torch.manual_seed(5)
    x, w = randn(8, 32).requires_grad_(), randn(24, 32).requires_grad_()
    (gx,) = torch.autograd.grad(pingpong.linear(x, w, None, activation).sum(), x, create_graph=True)
    gx.square().sum().backward()
    X, W = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    act = {"relu": F.relu, "gelu_erf": F.gelu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"), "silu": F.silu}
    (GX,) = torch.autograd.grad(act[activation](F.linear(X, W)).sum(), X, create_graph=True)
    GX.square().sum().backward()
    for got, want in ((gx, GX), (w.grad, W.grad)):
        assert ((got.double() - want).norm() / want.norm()).item() < 1e-2


@pytest.mark.parametrize("a_shape, b_shape", [((2, 16, 0), (0, 24)), ((2, 16, 32), (32, 0))])
def test_zero_size_k_or_n_under_a_batch_has_zero_gradients(interpreted_kernels, a_shape, b_shape):
    """reshape(-1, 0) of an empty tensor has no answer: the folded rows are counted."""
    a, b = randn(*a_shape).requires_grad_(), randn(*b_shape).requires_grad_()
    pingpong.matmul(a, b).sum().backward()
    assert a.grad.shape == a.shape and b.grad.shape == b.shape and not a.grad.any() and not b.grad.any()
    x, w = randn(*a_shape).requires_grad_(), randn(b_shape[1], a_shape[-1]).requires_grad_()
    pingpong.linear(x, w, None, "silu").sum().backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape


@pytest.mark.parametrize("a_shape", [(3, 1, 16), (2, 3, 1, 16)])
def test_a_one_by_one_bias_is_per_row_of_batched_single_rows(interpreted_kernels, a_shape):
    """M = 1 under a batch: a (1, 1) bias is per row, as in the 2-D call; folding the batch into
    M made it refused against a (B·M, N) result the caller never has. Gradients too."""
    a, b = randn(*a_shape).requires_grad_(), randn(16, 5).requires_grad_()
    bias = randn(1, 1).requires_grad_()
    y = pingpong.gemm(a, b, bias=bias, activation="relu")
    A, B, C = (t.detach().double().requires_grad_() for t in (a, b, bias))
    ref = torch.relu(A @ B + C)
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-2
    g = randn(*y.shape)
    y.backward(g)
    ref.backward(g.double())
    for got, want in ((a.grad, A.grad), (b.grad, B.grad), (bias.grad, C.grad)):
        assert got.shape == want.shape and ((got.double() - want).norm() / want.norm()).item() < 1e-2


@pytest.mark.parametrize("shape", [(7,), (1, 7), (5, 1), (3, 5, 7), (1, 5, 1)])
def test_bias_gradient_sums_what_the_bias_broadcasts_along(shape):
    """dbias = the output gradient summed to the bias's shape (fp32 accumulation, no fp32 copy)."""
    from pingpong.integration.ops import _bias_grad

    g = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    got = _bias_grad(g, torch.zeros(shape, dtype=torch.float32))
    assert got.shape == torch.Size(shape)
    assert torch.allclose(got, g.double().sum_to_size(shape).float(), atol=1e-4)


def test_dense_op_schemas_follow_the_epilogue_args():
    """pingpong::gemm and gemm_ take the epilogue's fields in DENSE_OP_ARGS's order, typed as
    EpilogueArgs declares them; op_values and op_args invert each other (a new operand is one
    entry there, not an edit of each op)."""
    from pingpong.runtime.spec import DENSE_OP_ARGS, EpilogueArgs, op_args, op_values

    def schema(op):
        return [(a.name, str(a.type)) for a in op._schema.arguments]

    want = [("c", "Optional[Tensor]"), ("alpha", "float"), ("beta", "float"), ("out_dtype", "Optional[int]"),
            ("bias", "Optional[Tensor]"), ("activation", "Optional[str]")]
    assert [n for n, _ in want] == list(DENSE_OP_ARGS)
    assert schema(torch.ops.pingpong.gemm.default) == [("a", "Tensor"), ("b", "Tensor"), *want]
    assert schema(torch.ops.pingpong.gemm_.default) == [("c", "Tensor"), ("a", "Tensor"), ("b", "Tensor"),
                                                        *(w for w in want if w[0] not in ("c", "out_dtype"))]
    c, bias = torch.zeros(2, 3), torch.zeros(3)
    args = EpilogueArgs(c, 0.5, 2.0, bias, activation="relu")
    values = op_values(args, torch.float32)
    assert values == (c, 0.5, 2.0, torch.float32, bias, "relu")
    assert op_args(values) == (args, torch.float32)
