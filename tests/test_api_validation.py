"""API argument checks (CPU): each bad input gets its error, naming the argument, and
gemm_ leaves c untouched when it refuses."""

import pytest
import torch

import pingpong
from pingpong import PingpongError

bf = torch.bfloat16


def t(*shape, dtype=bf):
    return torch.randn(*shape).to(dtype)


CASES = [
    ("a 1-D", lambda: pingpong.matmul(t(8), t(8, 4)), "a: expected a 2-D tensor"),
    ("batched c shape", lambda: pingpong.gemm(t(3, 8, 8), t(8, 4), t(2, 8, 4), beta=1.0),
     "c: expected shape \\(3, 8, 4\\) or \\(8, 4\\)"),
    ("in place c shared", lambda: pingpong.gemm_(t(8, 4), t(3, 8, 8), t(8, 4)), "c: expected shape \\(3, 8, 4\\)"),
    ("bias length", lambda: pingpong.gemm(t(8, 8), t(8, 4), bias=t(8)), "bias: expected shape \\(4,\\)"),
    ("bias per row", lambda: pingpong.gemm(t(8, 8), t(8, 4), bias=t(4, 1)), "bias: expected shape .*\\(8, 1\\)"),
    ("bias dtype", lambda: pingpong.gemm(t(8, 8), t(8, 4), bias=torch.zeros(4, dtype=torch.int64)), "bias: dtype"),
    ("bias type", lambda: pingpong.gemm(t(8, 8), t(8, 4), bias=[0.0] * 4), "bias: expected a torch.Tensor"),
    ("bias device", lambda: pingpong.gemm(t(8, 8), t(8, 4), bias=torch.zeros(4, device="meta")), "bias must be on"),
    ("activation", lambda: pingpong.gemm(t(8, 8), t(8, 4), activation="tanh"), "activation: expected None or one of"),
    ("activation in place", lambda: pingpong.gemm_(t(8, 4), t(8, 8), t(8, 4), activation="gelu"), "activation"),
    ("batch", lambda: pingpong.matmul(t(2, 8, 8), t(3, 8, 4)), "a and b: batch dimensions \\(2,\\) \\(a\\) and \\(3,\\) \\(b\\) do not broadcast"),
    ("batched cpu", lambda: pingpong.matmul(t(2, 8, 8), t(8, 4)), "pingpong runs on CUDA/ROCm GPUs"),
    ("linear bias length", lambda: pingpong.linear(t(8, 8), t(4, 8), t(5)), "bias: expected shape \\(4,\\) \\(weight.shape\\[0\\]"),
    ("linear bias dtype", lambda: pingpong.linear(t(8, 8), t(4, 8), torch.ones(4, dtype=torch.int64)), "bias: dtype torch.int64"),
    ("linear activation", lambda: pingpong.linear(t(8, 8), t(4, 8), None, "gelu"), "activation: expected None or one of"),
    ("not a tensor", lambda: pingpong.matmul([[1.0]], t(1, 1)), "a: expected a torch.Tensor"),
    ("shape mismatch", lambda: pingpong.matmul(t(8, 5), t(6, 4)), "a.shape\\[-1\\] must equal b.shape\\[-2\\]"),
    ("fp32 inputs", lambda: pingpong.matmul(t(8, 8, dtype=torch.float32), t(8, 8, dtype=torch.float32)),
     "a: dtype torch.float32 is not supported"),
    ("int inputs", lambda: pingpong.matmul(t(8, 8), torch.ones(8, 8, dtype=torch.int32)), "b: dtype torch.int32"),
    ("mixed dtypes", lambda: pingpong.matmul(t(8, 8), t(8, 8, dtype=torch.float16)), "same dtype"),
    ("meta device", lambda: pingpong.matmul(t(8, 8), torch.empty(8, 8, dtype=bf, device="meta")), "same device"),
    ("cpu tensors", lambda: pingpong.matmul(t(8, 8), t(8, 8)), "pingpong runs on CUDA/ROCm GPUs"),
    ("out_dtype", lambda: pingpong.matmul(t(8, 8), t(8, 8), out_dtype=torch.int8), "out_dtype"),
    ("c shape", lambda: pingpong.gemm(t(8, 8), t(8, 4), t(8, 8), beta=1.0), "c: expected shape \\(8, 4\\)"),
    ("c dtype", lambda: pingpong.gemm(t(8, 8), t(8, 4), t(8, 4, dtype=torch.float32), beta=1.0),
     "c: expected dtype torch.bfloat16"),
    ("alpha type", lambda: pingpong.gemm(t(8, 8), t(8, 4), alpha="2"), "alpha: expected a real number"),
    ("beta bool", lambda: pingpong.gemm(t(8, 8), t(8, 4), beta=True), "beta: expected a real number"),
    ("config type", lambda: pingpong.matmul_tiled(t(8, 8), t(8, 4), config=(128, 128, 64)), "config: expected"),
    ("bad config", lambda: pingpong.matmul_tiled(t(8, 8), t(8, 4), pingpong.KernelConfig(block_m=100)),
     "multiple of the wgmma M"),
    ("path_for cpu", lambda: pingpong.path_for(t(8, 8), t(8, 4)), "CUDA/ROCm"),
    ("c device", lambda: pingpong.gemm(t(8, 8), t(8, 4), torch.empty(8, 4, dtype=bf, device="meta"), beta=1.0),
     "c must be on the same device"),
    ("c device in place", lambda: pingpong.gemm_(torch.empty(8, 4, dtype=bf, device="meta"), t(8, 8), t(8, 4)),
     "c must be on the same device"),
    ("alpha overflow", lambda: pingpong.gemm(t(8, 8), t(8, 4), alpha=10**400), "alpha: .* does not fit a float"),
    ("alpha inf", lambda: pingpong.gemm(t(8, 8), t(8, 4), alpha=float("inf")), "alpha: expected a finite"),
    ("beta nan", lambda: pingpong.gemm(t(8, 8), t(8, 4), t(8, 4), beta=float("nan")), "beta: expected a finite"),
    ("beta nan in place", lambda: pingpong.gemm_(t(8, 4), t(8, 8), t(8, 4), beta=float("nan")),
     "beta: expected a finite"),
]


@pytest.mark.parametrize("name, call, needle", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_a_named_error(name, call, needle):
    with pytest.raises(PingpongError, match=needle):
        call()


def test_errors_are_value_errors():
    assert issubclass(PingpongError, ValueError)


@pytest.mark.parametrize(
    "make_c, needle",
    [
        (lambda: t(8, 8, dtype=torch.float32), "c: expected shape"),
        (lambda: torch.ones(8, 4, dtype=torch.int32), "c: dtype torch.int32 is not supported"),
        (lambda: t(8, 4, dtype=torch.float32), "pingpong runs on CUDA"),  # valid, but on the CPU
    ],
)
def test_gemm_inplace_refusal_leaves_c_untouched(make_c, needle):
    c = make_c()
    before = c.clone()
    with pytest.raises(PingpongError, match=needle):
        pingpong.gemm_(c, t(8, 8), t(8, 4), alpha=2.0, beta=3.0)
    assert torch.equal(c, before)


def test_gemm_inplace_refuses_a_bias_inside_c(portable_runs):  # as on a GPU (CPU: the device error first)
    c = t(8, 4)
    before = c.clone()
    with pytest.raises(PingpongError, match="bias must not share memory with c"):
        pingpong.gemm_(c, t(8, 8), t(8, 4), bias=c[0])
    assert torch.equal(c, before)


def test_gemm_inplace_refuses_aliasing(portable_runs):
    buf = torch.randn(8, 16).to(bf)
    a = buf[:, :8]
    b = torch.randn(8, 8).to(bf)
    before = buf.clone()
    with pytest.raises(PingpongError, match="must not share memory"):
        pingpong.gemm_(buf[:, 8:], a, b)
    assert torch.equal(buf, before)
