"""Fuzzed validators (issue 44): every public function gets drawn shapes, strides (transposed,
expanded, strided, overlapping views), dtypes, devices (CPU, meta), sparse and nested tensors,
None and non-tensors. Each call must either be accepted or raise a PingpongError whose
message starts with one of the function's own argument names (the argument at fault), and
a refused in-place call must leave its output untouched. No other exception may escape.

Bounded for CI: a fixed number of derandomized examples per function (about 20 s in all), no
example database; PINGPONG_FUZZ_EXAMPLES=2000 runs a longer search locally."""

import inspect
import os
import re
import warnings

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pingpong  # noqa: E402
from pingpong.errors import PingpongError  # noqa: E402

DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32, torch.int64, torch.bool,
          torch.float8_e4m3fn, torch.float8_e5m2)
SIZES = (0, 1, 2, 3, 16, 32, 128)
#: examples per function: CI's bound (PINGPONG_FUZZ_EXAMPLES for a longer local run)
EXAMPLES = int(os.environ.get("PINGPONG_FUZZ_EXAMPLES", "60"))


@st.composite
def tensors(draw, max_dims=3):
    """A tensor of a drawn dtype, shape, device and layout (or a view of one)."""
    dims = draw(st.integers(0, max_dims))
    shape = tuple(draw(st.sampled_from(SIZES)) for _ in range(dims))
    dtype = draw(st.sampled_from(DTYPES))
    device = draw(st.sampled_from(("cpu", "meta")))
    t = torch.zeros(shape, dtype=dtype, device=device)
    view = draw(st.sampled_from(("plain", "transposed", "expanded", "strided", "overlapping", "offset",
                                 "sparse", "nested", "grad")))
    if view == "transposed" and dims >= 2:
        t = t.mT
    elif view == "expanded" and dims >= 1:
        t = torch.zeros((1, *shape[1:]), dtype=dtype, device=device).expand(shape)
    elif view == "strided" and dims >= 1:
        t = torch.zeros((2 * shape[0], *shape[1:]), dtype=dtype, device=device)[::2]
    elif view == "overlapping" and dims >= 2 and 0 not in shape:
        t = torch.zeros(shape[-2] + shape[-1], dtype=dtype, device=device).as_strided(shape[-2:], (1, 1))
    elif view == "offset" and t.numel():
        t = torch.zeros(t.numel() + 1, dtype=dtype, device=device)[1:].view(shape)
    elif view == "sparse" and device == "cpu" and dims >= 1 and dtype not in DTYPES[-2:]:
        t = t.to_sparse()
    elif view == "nested" and device == "cpu" and dims == 2 and dtype.is_floating_point and dtype not in DTYPES[-2:]:
        t = torch.nested.nested_tensor([torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)])
    elif view == "grad" and dtype.is_floating_point and dtype not in DTYPES[-2:]:
        t = t.requires_grad_()
    return t


def values(max_dims=3):
    """A tensor most of the time; else None or something that is not a tensor."""
    return st.one_of(tensors(max_dims), tensors(max_dims), tensors(max_dims),
                     st.sampled_from((None, 1, 2.5, "a", [[1.0]], (1, 2))))


SCALARS = st.sampled_from((1.0, 0.0, -2.0, 3, float("nan"), float("inf"), True, "1", None, 10 ** 400))
OUT_DTYPES = st.sampled_from((None, torch.bfloat16, torch.float16, torch.float32, torch.int8, torch.float8_e4m3fn,
                              "bf16", 1))
ACTIVATIONS = st.sampled_from((None, "none", "relu", "gelu_erf", "silu", "tanh", "RELU", 1, ["relu"]))
FLAGS = st.sampled_from((True, False, 1, 0, "no", None))


def _names(fn) -> list:
    return list(inspect.signature(fn).parameters)


# function -> (its own argument names, the strategy of its keyword arguments)
CALLS = {
    "matmul": (pingpong.matmul, st.fixed_dictionaries({"a": values(), "b": values(), "out_dtype": OUT_DTYPES})),
    "gemm": (pingpong.gemm, st.fixed_dictionaries({
        "a": values(), "b": values(), "c": st.one_of(st.none(), values()), "alpha": SCALARS, "beta": SCALARS,
        "out_dtype": OUT_DTYPES, "bias": st.one_of(st.none(), values(2)), "activation": ACTIVATIONS})),
    "gemm_": (pingpong.gemm_, st.fixed_dictionaries({
        "c": values(), "a": values(), "b": values(), "alpha": SCALARS, "beta": SCALARS,
        "bias": st.one_of(st.none(), values(2)), "activation": ACTIVATIONS})),
    "path_for": (pingpong.path_for, st.fixed_dictionaries({
        "a": values(), "b": values(), "c": st.one_of(st.none(), values()), "beta": SCALARS, "out_dtype": OUT_DTYPES,
        "inplace": FLAGS, "bias": st.one_of(st.none(), values(2)), "activation": ACTIVATIONS})),
    "matmul_tiled": (pingpong.matmul_tiled, st.fixed_dictionaries({
        "a": values(), "b": values(), "config": st.sampled_from((pingpong.KernelConfig(), (128, 128, 64), None)),
        "out_dtype": OUT_DTYPES})),
    "linear": (pingpong.linear, st.fixed_dictionaries({
        "x": values(), "weight": values(), "bias": st.one_of(st.none(), values(2)), "activation": ACTIVATIONS})),
    "scaled_mm": (pingpong.scaled_mm, st.fixed_dictionaries({
        "a": values(), "b": values(), "scale_a": values(2), "scale_b": values(2),
        "bias": st.one_of(st.none(), values(2)), "out_dtype": OUT_DTYPES, "activation": ACTIVATIONS,
        "use_fast_accum": FLAGS})),
    "quantize_fp8": (pingpong.quantize_fp8, st.fixed_dictionaries({
        "x": values(), "granularity": st.sampled_from(("row", "block", "block128x128", "tensor", "col", None)),
        "dtype": st.sampled_from((torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, None))})),
    "grouped_mm": (pingpong.grouped_mm, st.fixed_dictionaries({
        "a": values(), "b": values(), "offs": st.one_of(st.none(), values(1)), "out_dtype": OUT_DTYPES})),
    "scaled_grouped_mm": (pingpong.scaled_grouped_mm, st.fixed_dictionaries({
        "a": values(), "b": values(), "scale_a": values(2), "scale_b": values(), "offs": values(1),
        "out_dtype": OUT_DTYPES, "use_fast_accum": FLAGS})),
    "vector_add": (pingpong.vector_add, st.fixed_dictionaries({
        "a": values(), "b": values(), "out": st.one_of(st.none(), values())})),
    "Float8Linear": (pingpong.fp8.Float8Linear, st.fixed_dictionaries({
        "weight": values(), "bias": st.one_of(st.none(), values(1)),
        "fp8": st.sampled_from(("row", "block", "tensor", None)),
        "dtype": st.sampled_from((torch.float8_e4m3fn, torch.float8_e5m2, torch.float16))})),
}


def _call(fn, kwargs):
    """Positional where the signature has no keyword-only marker (`*`), as a user writes it."""
    params = inspect.signature(fn).parameters
    keyword = {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    return fn(*[kwargs[n] for n in params if n in kwargs and n not in keyword],
              **{n: kwargs[n] for n in keyword & set(kwargs)})


def _snapshot(kwargs):
    return {n: v.clone() for n, v in kwargs.items()
            if isinstance(v, torch.Tensor) and v.layout is torch.strided and not v.is_nested and v.device.type == "cpu"}


@pytest.mark.parametrize("name", list(CALLS))
def test_validators_name_an_argument_or_accept(name):
    fn, strategy = CALLS[name]
    own = _names(fn.__init__ if isinstance(fn, type) else fn)
    pattern = re.compile(r"^(%s)\b" % "|".join(re.escape(n) for n in own if n != "self"))

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def check(kwargs):
        before = _snapshot(kwargs)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _call(fn, kwargs)
        except PingpongError as e:
            assert pattern.match(str(e)), f"{name}: the message names none of {own}: {e}"
            for n, v in before.items():  # a refusal changes nothing
                assert torch.equal(kwargs[n], v), f"{name}: refused, but {n} changed"

    check()
