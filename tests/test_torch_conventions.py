"""Where pingpong mirrors a torch op, it takes the op's arguments in the op's order: code written
for torch._scaled_mm / torch._grouped_mm runs unchanged."""

import inspect

import pytest
import torch

import pingpong
from pingpong import PingpongError

FP8 = torch.float8_e4m3fn


def _torch_arguments(op):
    """(name, default) of an aten op's schema, its first two operands named a and b as ours."""
    renamed = {"self": "a", "mat_a": "a", "mat2": "b", "mat_b": "b"}
    return [(renamed.get(arg.name, arg.name), arg.default_value if arg.has_default_value() else inspect.Parameter.empty)
            for arg in op.default._schema.arguments]


@pytest.mark.parametrize("ours, theirs", [(pingpong.scaled_mm, torch.ops.aten._scaled_mm),
                                          (pingpong.grouped_mm, torch.ops.aten._grouped_mm)])
def test_positional_arguments_are_torchs(ours, theirs):
    params = [p for p in inspect.signature(ours).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert [(p.name, p.default) for p in params] == _torch_arguments(theirs)


def _fp8_operands():
    a = torch.randn(32, 64).to(FP8)
    b = torch.randn(48, 64).to(FP8).t()  # column-major, as torch._scaled_mm takes it
    return a, b, torch.tensor(1.0), torch.tensor(1.0)


def test_scaled_mm_positional_form_reaches_the_same_checks():
    """torch._scaled_mm(a, b, sa, sb, None, None, torch.bfloat16) binds as the keyword form: on the
    CPU both stop at the device check (no TypeError)."""
    a, b, sa, sb = _fp8_operands()
    for call in (lambda: pingpong.scaled_mm(a, b, sa, sb, None, None, torch.bfloat16),
                 lambda: pingpong.scaled_mm(a, b, sa, sb, bias=None, out_dtype=torch.bfloat16, use_fast_accum=True),
                 lambda: pingpong.scaled_mm(a, b, sa, sb, None, None, None, False, activation="relu")):
        with pytest.raises(PingpongError, match="runs on a Hopper GPU"):
            call()


def test_scaled_mm_scale_result_is_refused_by_name():
    a, b, sa, sb = _fp8_operands()
    with pytest.raises(PingpongError, match="scale_result: scales an fp8 output"):
        pingpong.scaled_mm(a, b, sa, sb, None, torch.tensor(1.0), torch.bfloat16)
    with pytest.raises(PingpongError, match="out_dtype"):  # the positional out_dtype is validated as out_dtype
        pingpong.scaled_mm(a, b, sa, sb, None, None, torch.int8)


def test_grouped_mm_takes_bias_none_and_refuses_a_bias():
    a, b = torch.randn(10, 16).half(), torch.randn(3, 16, 8).half()
    offs = torch.tensor([3, 7, 10], dtype=torch.int32)
    with pytest.raises(PingpongError, match="pingpong runs on CUDA"):  # bias=None: on to the device check
        pingpong.grouped_mm(a, b, offs, None, torch.float32)
    with pytest.raises(PingpongError, match="bias: grouped_mm takes no bias"):
        pingpong.grouped_mm(a, b, offs, bias=torch.zeros(8).half())


def test_replace_linear_fp8_on_the_cpu_says_to_move_first():
    model = torch.nn.Sequential(torch.nn.Linear(64, 32, dtype=torch.bfloat16))
    report = pingpong.nn.replace_linear(model, fp8="row")
    assert report.replaced == [] and "move the model first" in report.skipped["0"]
