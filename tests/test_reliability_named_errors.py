"""Issue 44's raw errors and silent acceptances (CPU): each call raises a PingpongError naming
the argument, before any work."""

import pytest
import torch

import pingpong
from pingpong.fp8 import Float8Linear
from pingpong.portable import portable_gemm
from pingpong.tools import suites

H, BF, F32 = torch.float16, torch.bfloat16, torch.float32
I32 = torch.int32


def t(*shape, dtype=H):
    return torch.randn(*shape).to(dtype)


def nested(k=16):
    return torch.nested.nested_tensor([torch.randn(2, k), torch.randn(3, k)]).to(H)


def offs():
    return torch.tensor([1, 2], dtype=I32)


def _transposed_alias():
    out = t(16, 16, dtype=F32)
    return portable_gemm(t(16, 16), t(16, 16), out, c=out.t(), beta=1.0, interpret=True)


CASES = [
    # nested tensors: torch raised "NestedTensorImpl doesn't support sizes"
    ("matmul nested a", lambda: pingpong.matmul(nested(), t(16, 8)), "a: nested tensors"),
    ("gemm nested c", lambda: pingpong.gemm(t(8, 16), t(16, 16), nested(), beta=1.0), "c: nested tensors"),
    ("linear nested x", lambda: pingpong.linear(nested(), t(8, 16)), "x: nested tensors"),
    ("linear nested weight", lambda: pingpong.linear(t(4, 16), nested()), "weight: nested tensors"),
    ("quantize_fp8 nested x", lambda: pingpong.quantize_fp8(nested()), "x: nested tensors"),
    ("grouped_mm nested a", lambda: pingpong.grouped_mm(nested(), t(2, 16, 8), offs()), "a: nested tensors"),
    ("vector_add nested a", lambda: pingpong.vector_add(nested(), nested()), "a: nested tensors"),
    # None before validation: AttributeError
    ("scaled_mm None", lambda: pingpong.scaled_mm(None, None, None, None), "a: expected a torch.Tensor"),
    ("grouped_mm None", lambda: pingpong.grouped_mm(None, t(2, 16, 8), offs()), "a: expected a torch.Tensor"),
    ("Float8Linear None weight", lambda: Float8Linear(None, None), "weight: expected a torch.Tensor"),
    # Float8Linear's weight and bias, checked before the weight is quantized
    ("Float8Linear 1-D weight", lambda: Float8Linear(t(32), None), "weight: expected a 2-D"),
    ("Float8Linear 3-D weight", lambda: Float8Linear(t(2, 32, 32), None), "weight: expected a 2-D"),
    ("Float8Linear int32 weight", lambda: Float8Linear(torch.ones(32, 32, dtype=I32), None), "weight: dtype"),
    ("Float8Linear (32, 24) weight", lambda: Float8Linear(t(32, 24), None), "weight: in_features=24"),
    ("Float8Linear block K", lambda: Float8Linear(t(32, 32), None, fp8="block"), "weight: in_features=32: block"),
    ("Float8Linear bias length", lambda: Float8Linear(t(32, 32), t(33)), r"bias: expected shape \(32,\)"),
    ("Float8Linear int32 bias", lambda: Float8Linear(t(32, 32), torch.ones(32, dtype=I32)), "bias: dtype"),
    ("Float8Linear str bias", lambda: Float8Linear(t(32, 32), "b"), "bias: expected a torch.Tensor or None"),
    # the interpreter and portable_gemm's own arguments
    ("portable_gemm block=5", lambda: portable_gemm(t(16, 16), t(16, 16), t(16, 16), block=5, interpret=True),
     "block: expected"),
    ("portable_gemm bf16 interpreted", lambda: portable_gemm(t(16, 16, dtype=BF), t(16, 16, dtype=BF),
                                                             t(16, 16, dtype=F32), interpret=True),
     "a and b: bfloat16 inputs are computed wrongly"),
    ("portable_gemm c = out.t()", _transposed_alias, "c must not share memory with out"),
    ("path_for inplace='no'", lambda: pingpong.path_for(t(8, 8), t(8, 8), t(8, 8), inplace="no"),
     "inplace: expected a bool"),
    # the MoE suite's group sizes
    ("moe_group_sizes negative tokens", lambda: suites.moe_group_sizes(-5, 8, 2, "balanced"), "tokens"),
    ("moe_group_sizes no experts", lambda: suites.moe_group_sizes(5, 0, 2, "balanced"), "experts"),
    ("moe_group_sizes top_k > experts", lambda: suites.moe_group_sizes(5, 2, 3, "zipf"), "top_k"),
]


@pytest.mark.parametrize("name, call, needle", CASES, ids=[c[0] for c in CASES])
def test_named_refusal(name, call, needle):
    with pytest.raises(pingpong.PingpongError, match=needle):
        call()


def test_portable_gemm_refusals_leave_out_untouched():
    out = t(16, 16, dtype=F32)
    before = out.clone()
    for kw in (dict(c=out.t(), beta=1.0), dict(block=5)):
        with pytest.raises(pingpong.PingpongError):
            portable_gemm(t(16, 16), t(16, 16), out, interpret=True, **kw)
    assert torch.equal(out, before)


def test_portable_gemm_takes_a_bf16_output_and_bias_in_the_interpreter():
    """Only bf16 *inputs* are wrong in the interpreter; a bf16 out, c or bias rounds as expected."""
    a, b, bias = t(16, 16), t(16, 16), t(16, dtype=BF)
    out = torch.empty(16, 16, dtype=BF)
    portable_gemm(a, b, out, bias=bias, interpret=True)
    ref = a.float() @ b.float() + bias.float()
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)
