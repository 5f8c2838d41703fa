"""The FP8 kernels replaced at their launch on the CPU (`emulate_fp8`), for the FP8 training
tests (test_fp8_training.py and those importing it), the ranks of test_distributed.py and
benchmarks/dist_llama.py --cpu-smoke: quantize_fp8's and quantize_fp8_pair's launches by torch's
cast of the kernels' formula (tests/test_fp8.py checks the kernel against it under Triton's
interpreter), and the scaled plan by a float64 product of the dequantized operands, which
records every launched product (operands, scales)."""

import types

from pingpong import fp8, quantize
from pingpong.runtime import plan
from fp8_groups import QUANT_GROUPS, group_amax, per_element


def _cast(x, q, s, granularity):
    """quantize_fp8's kernels' formula (pingpong.quantize): amax / FP8_MAX, one reciprocal."""
    xf = x.float()
    fmax = quantize.FP8_MAX[q.dtype]
    amax = group_amax(xf, QUANT_GROUPS[granularity]).clamp_min(1e-12)
    s.copy_((amax / fmax).reshape(s.shape))
    inv = per_element(fmax / amax, xf.shape).float()
    q.copy_((xf * inv).clamp(-fmax, fmax).to(q.dtype))


def _cast_pair(x, q, s, qt, st, granularity, rows, cols):
    """quantize_fp8_pair's kernels' results by the unfused route: _cast of x, and of xᵀ with the
    rows padded by zeros (tests/test_quantize_pair.py checks the kernels against quantize_fp8)."""
    if rows:
        _cast(x, q, s, granularity)
    if cols:
        xt = x.new_zeros(qt.shape)
        xt[:, :x.shape[0]] = x.t()
        _cast(xt, qt, st, granularity)


class RecordedPlan(plan.Plan):
    """A scaled plan whose run is the float64 product of the dequantized operands, recorded
    (`runs`), with its use_fast_accum (`fast`, one entry per run)."""
    __slots__ = ("fast_accum",)
    runs: list = []
    fast: list = []

    def __init__(self, fast_accum: bool = False):
        self.device, self.path, self.activation, self.extents = -1, "recorded", "none", None
        self.fast_accum = fast_accum

    def run(self, a, b, out, args):
        scale_a, scale_b, bias = args.scale_a, args.scale_b, args.bias
        self.runs.append((a.clone(), b.clone(), scale_a.clone(), scale_b.clone()))
        self.fast.append(self.fast_accum)
        y = (a.double() * per_element(scale_a, a.shape)) @ (b.double() * per_element(scale_b, b.shape))
        out.copy_(y if bias is None else y + bias.double())


def emulate_fp8(setattr) -> list:
    """Every scaled plan a RecordedPlan, quantize's launches `_cast` / `_cast_pair`, CPU tensors
    let through; `setattr(obj, name, value)` applies each patch (monkeypatch.setattr, or the
    plain setattr in a process of its own). After conftest.interpret_plans (which resets the
    plan registry). Returns the list of scaled products run."""
    recorded = types.SimpleNamespace(NAME="recorded", plan=lambda s: RecordedPlan(s.epilogue.scales.fast_accum),
                                     can_implement=lambda s: None if s.epilogue.scales is not None else "unscaled")
    setattr(plan, "BACKENDS", [recorded, *plan.BACKENDS])
    setattr(fp8, "check_gpu", lambda a, b: None)
    setattr(quantize, "interpreter_enabled", lambda: True)
    setattr(quantize, "launch", _cast)
    setattr(quantize, "launch_pair", _cast_pair)
    setattr(RecordedPlan, "runs", [])
    setattr(RecordedPlan, "fast", [])
    return RecordedPlan.runs
