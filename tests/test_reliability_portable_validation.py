"""portable_gemm (the CPU opt-in, interpret=True) validates its arguments with the API's checks."""

import pytest
import torch

from pingpong.errors import PingpongError
from pingpong.portable import portable_gemm

F16 = torch.float16


def t(*shape, dtype=F16):
    return torch.randn(*shape).to(dtype)


# ----------------------------------------------------------------------------- 7: portable_gemm validates


def _p(m=8, n=4, k=16, dtype=F16):
    return t(m, k, dtype=dtype), t(k, n, dtype=dtype), torch.full((m, n), float("nan"))


@pytest.mark.parametrize(
    "change, needle",
    [
        (dict(a=None), "a: expected a torch.Tensor, got NoneType"),
        (dict(out=None), "out: expected a torch.Tensor, got NoneType"),
        (dict(a=t(8, 15, dtype=F16)), "shape mismatch"),
        (dict(b=t(16, 4, dtype=torch.int32)), "b: dtype torch.int32 is not supported"),
        (dict(a=t(8, 16, dtype=torch.float64), b=t(16, 4, dtype=torch.float64)), "a: dtype torch.float64"),
        (dict(out=torch.empty(8, 5)), "out: expected shape \\(8, 4\\)"),
        (dict(out=torch.empty(8, 4, dtype=torch.int32)), "out: dtype torch.int32 is not supported"),
        (dict(bias=t(5, dtype=F16)), "bias: expected shape"),
        (dict(c=t(8, 5), beta=1.0), "c: expected shape"),
        (dict(activation="tanh"), "activation: expected None or one of"),
        (dict(alpha=float("nan")), "alpha: expected a finite"),
    ],
    ids=lambda x: str(x)[:40] if isinstance(x, str) else None,
)
def test_portable_gemm_validates_its_arguments(change, needle):
    a, b, out = _p()
    args = {**dict(a=a, b=b, out=out), **change}
    with pytest.raises(PingpongError, match=needle):
        portable_gemm(args.pop("a"), args.pop("b"), args.pop("out"), interpret=True, **args)
    assert out.isnan().all()  # untouched


def test_portable_gemm_refuses_an_out_aliasing_a():
    buf = torch.randn(8, 20).half()
    a, b = buf[:, :16], t(16, 4, dtype=F16)
    out = buf[:, 12:16]  # inside a
    before = buf.clone()
    with pytest.raises(PingpongError, match="out must not share memory with a"):
        portable_gemm(a, b, out, interpret=True)
    assert torch.equal(buf, before)


def test_portable_gemm_refuses_a_self_overlapping_out_and_accepts_out_is_c():
    a, b = t(8, 16, dtype=F16), t(16, 4, dtype=F16)
    with pytest.raises(PingpongError, match="out: its elements overlap"):
        portable_gemm(a, b, torch.zeros(1, 4, dtype=F16).expand(8, 4), interpret=True)
    c = torch.randn(8, 4).half()
    ref = a.double() @ b.double() + c.double()
    portable_gemm(a, b, c, c=c, beta=1.0, interpret=True)  # in place on c: allowed
    assert torch.allclose(c.double(), ref, atol=1e-2, rtol=1e-2)
