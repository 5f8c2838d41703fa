"""FP8 GEMM for PyTorch: `scaled_mm` (torch._scaled_mm's conventions, pingpong's epilogue) and
`Float8Linear` (inference). The kernel is pingpong.hopper.kernels.fp8_gemm; activations and weights
are quantized by pingpong.quantize.quantize_fp8.

    q_a, s_a = pingpong.quantize_fp8(x, "row")                 # (M, K) e4m3, (M, 1) fp32
    q_w, s_w = pingpong.quantize_fp8(w, "row")                 # (N, K) e4m3, (N, 1) fp32
    y = pingpong.scaled_mm(q_a, q_w.t(), s_a, s_w.t(), bias=b, activation="silu")

    y = act(A·B · scales + bias), fp32 accumulation, cast once to out_dtype (bf16/fp16/fp32)

Scale layouts (exactly torch._scaled_mm's; `scale_*` multiply the fp8 values back: x ≈ q·s):

    | scaling | a (M, K) row-major    | b (K, N) column-major (= w.t())                          |
    |---------|-----------------------|----------------------------------------------------------|
    | tensor  | scale_a: 1 element    | scale_b: 1 element                                       |
    | row     | (M, 1) contiguous     | (1, N) contiguous                                        |
    | block   | (M, K/128), strides   | (K/128, N/128) strides (1, K/128): 128×128 blocks        |
    |         | (1, M): 1×128 blocks  |   (= s.t() of a row-major (N/128, K/128) s)              |
    |         | ("outer-dim-major")   | or (K/128, N) row-major: 1×128 blocks                    |

What is refused (PingpongError naming the argument, before any work):
- a or b not fp8 (e4m3fn, e5m2), or mixed kinds (e4m3 × e5m2: the kernel takes one kind);
- a not row-major or b not column-major (not K-major): refused, not copied — an operand
  copy per call would cost as much as the product; pass `w.t()` of a row-major weight;
- K or N not a multiple of 16 (TMA rows and torch's rule), block-wise K not a multiple of
  128, base addresses or row strides not 16-byte aligned;
- a scale of the wrong dtype (fp32 only), device, shape or strides for the mode that
  scale_b's shape names;
- inputs that require grad (no backward through FP8 operands: FP8 training differentiates
  the high-precision inputs, pingpong.fp8_training), on every call (a cached plan re-checks
  it: requires_grad is not in the plan's key; runtime.fp8_spec.refuse_grad decides it).
Scale *values* (finite, positive) are not checked on the call: every check reads device
memory on the host, a sync that would stall the launch queue and break CUDA-graph capture.
`check_scales` checks them on request (one sync). quantize_fp8 gives finite, positive scales
for finite input; a group holding ±inf gets an infinite scale (amax / FP8_MAX, amax clamped
from below only, as torch's float8 recipes compute it), so the group dequantizes to non-finite
values and the product shows the overflow rather than a finite, saturated wrong answer.

use_fast_accum (torch's flag): False (default) promotes every 128-deep K block into the fp32
accumulator; True lets the wgmmas accumulate in place (tensor/row only; block-wise scales are
applied at the promotion, so block-wise ignores the flag, as torch's backends may).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .integration import inductor, ops
from . import quantize as _quantize
from .runtime import plan as _plan_mod
from .runtime import spec as _spec
from .runtime.fp8_spec import FP8_DTYPES, FP8_OUT_DTYPES, check_fast_accum, check_fp8, check_scale_tensor, refuse_grad
from .errors import PingpongError, check_tensor

__all__ = ["scaled_mm", "scaling_of", "check_scales", "Float8Linear", "FP8_DTYPES", "FP8_OUT_DTYPES"]

#: scaled_mm's tensor arguments, in its order: the names its requires-grad refusal gives them
TENSOR_ARGS = ("a", "b", "scale_a", "scale_b", "bias")


def _check_operand(name: str, t, k_dim: int) -> None:
    check_fp8(name, t, 2)
    if t.stride(k_dim) != 1 and t.shape[k_dim] > 1:
        want = "row-major (M, K)" if k_dim == 1 else "column-major (K, N), i.e. w.t() of a row-major (N, K) w"
        raise PingpongError(f"{name}: fp8 wgmma reads K-major operands only; expected {want}, got strides"
                            f" {tuple(t.stride())} (refused, not copied)")


def scaling_of(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor) -> tuple[str, int]:
    """(scaling, sb_cols) of validated operands' scales: the spec's one decision
    (pingpong.runtime.spec.scale_mode), PingpongError naming the scale otherwise."""
    return _spec.scale_mode(a, b, scale_a, scale_b)


def check_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, activation, use_fast_accum,
                    device_checks: bool = True) -> tuple[str, int, str]:
    """Validate a scaled_mm call; (scaling, sb_cols, activation). Raises PingpongError naming
    the argument. `device_checks` False (the fake implementation) skips what fake tensors
    cannot answer (CUDA, addresses)."""
    _check_operand("a", a, 1)
    _check_operand("b", b, 0)
    if a.shape[1] != b.shape[0]:
        raise PingpongError(f"a and b: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied")
    if a.dtype != b.dtype:
        raise PingpongError(f"b: dtype {b.dtype} differs from a's {a.dtype}; mixed fp8 kinds are not supported")
    M, K = a.shape
    N = b.shape[1]
    _spec.check_fp8_sizes(K, N, "torch._scaled_mm")
    for name, t, k_dim in (("a", a, 1), ("b", b, 0)):
        other = 1 - k_dim
        if t.shape[other] > 1 and not _spec.tma_row_stride(t.stride(other), t.shape[k_dim], t.element_size()):
            raise PingpongError(f"{name}: the stride between K-rows must be a multiple of 16 bytes and ≥ K, got"
                                f" {t.stride(other)}")
    if b.device != a.device:
        raise PingpongError(f"b must be on a's device ({a.device}), got {b.device}")
    check_scale_tensor("scale_a", scale_a, a.device)
    check_scale_tensor("scale_b", scale_b, a.device)
    scaling, sb_cols = scaling_of(a, b, scale_a, scale_b)
    if out_dtype not in FP8_OUT_DTYPES:
        raise PingpongError(f"out_dtype: expected one of {FP8_OUT_DTYPES}, got {out_dtype!r}")
    check_fast_accum(use_fast_accum)
    act = _spec.check_epilogue(_spec.EpilogueArgs(bias=bias, activation=activation), (M, N), out_dtype, a.device)
    if device_checks:
        check_gpu(a, b)
        refuse_grad("scaled_mm", a, b, scale_a, scale_b, bias, names=TENSOR_ARGS)
    return scaling, sb_cols, act


def check_gpu(a, b) -> None:
    """The checks of a call that runs (not of the fake implementation's): a GPU tensor, 16-byte
    aligned bases."""
    if a.device.type != "cuda":
        raise PingpongError(f"a: pingpong.scaled_mm runs on a Hopper GPU, got a tensor on {a.device}")
    for name, t in (("a", a), ("b", b)):
        if t.data_ptr() % 16:
            raise PingpongError(f"{name}: base address must be 16-byte aligned (TMA)")


def check_scales(*scales: Tensor) -> None:
    """PingpongError unless every scale is finite and positive. Reads the values on the host:
    one device sync (scaled_mm does not call this; module docstring)."""
    for i, s in enumerate(scales):
        if not bool(torch.isfinite(s).all() & (s > 0).all()):
            raise PingpongError(f"scale {i}: scales must be finite and positive")


# ----------------------------------------------------------------------------- plans and launch


def _plan(a, b, scale_a, scale_b, bias, out_dtype, activation, use_fast_accum, config):
    """The cached plan of this call's GemmSpec (scales in its epilogue): validated under
    scaled_mm's names and planned by the backend registry (pingpong.hopper.host.fp8_launch's
    Fp8Plan) on a miss."""
    key = _spec.build(a, b, out_dtype=out_dtype, bias=bias, activation=activation, config=config,
                      scales=(scale_a, scale_b, use_fast_accum))
    plan = _plan_mod.get(key)
    if plan is None:
        check_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, activation, use_fast_accum)
        plan = _plan_mod.store(key, _plan_mod.plan_for(key))
    else:  # the key holds everything the check reads but requires_grad (docs/design.md)
        refuse_grad("scaled_mm", a, b, scale_a, scale_b, bias, names=TENSOR_ARGS)
    return plan


def scaled_mm_direct(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, activation=None,
                     use_fast_accum=False, config=None, out=None) -> Tensor:
    """scaled_mm on the direct path (no dispatcher): validate (plan miss), launch; into a new
    tensor, or into `out` (contiguous (M, N) of out_dtype: inductor's buffer)."""
    plan = _plan(a, b, scale_a, scale_b, bias, out_dtype, activation, use_fast_accum, config)  # alignment: in the key
    if out is None:
        out = torch.empty(a.shape[0], b.shape[1], dtype=out_dtype, device=a.device)
    if out.numel():
        plan.run(a, b, out, _spec.EpilogueArgs(bias=bias, scale_a=scale_a, scale_b=scale_b))
    return out


def scaled_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor] = None,
              scale_result: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None,
              use_fast_accum: bool = False, *, activation: Optional[str] = None) -> Tensor:
    """act(a @ b · scales + bias) with torch._scaled_mm's operands and scale layouts (module
    docstring); fp32 accumulation, one cast to out_dtype. While torch.compile traces, the
    ``pingpong::scaled_mm`` op (a fake implementation gives the shape).

    The arguments are torch._scaled_mm's, in its order (a, b, scale_a, scale_b, bias,
    scale_result, out_dtype, use_fast_accum), and the fused `activation` after them. out_dtype
    None is bf16 (torch's None would be an fp8 output, which pingpong does not write); for the
    same reason scale_result, the scale of an fp8 output, must be None."""
    if scale_result is not None:
        raise PingpongError("scale_result: scales an fp8 output, and scaled_mm writes bf16, fp16 or fp32 "
                            "(out_dtype); pass None")
    if out_dtype is None:
        out_dtype = torch.bfloat16
    if ops.traced(a, b, scale_a, scale_b):
        check_fast_accum(use_fast_accum)  # before the dispatcher makes a bool of it
        refuse_grad("scaled_mm", a, b, scale_a, scale_b, bias, names=TENSOR_ARGS)  # no backward: named here
        ops.check_sharded(torch.ops.pingpong.scaled_mm.default, a, b, scale_a, scale_b, bias, out_dtype,
                          activation or "none", use_fast_accum)
        return torch.ops.pingpong.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, activation or "none",
                                            use_fast_accum)
    return scaled_mm_direct(a, b, scale_a, scale_b, bias, out_dtype, activation, use_fast_accum)


@torch.library.custom_op("pingpong::scaled_mm", mutates_args=())
def _scaled_mm_op(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor],
                  out_dtype: torch.dtype, activation: str, use_fast_accum: bool) -> Tensor:
    return scaled_mm_direct(a, b, scale_a, scale_b, bias, out_dtype, activation, use_fast_accum)


@_scaled_mm_op.register_fake
def _(a, b, scale_a, scale_b, bias, out_dtype, activation, use_fast_accum):
    inductor.register()
    check_scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, activation, use_fast_accum, device_checks=False)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


@inductor.lowered("scaled_mm")
def scaled_mm_out(a, b, scale_a, scale_b, *optional, bias: bool, activation, use_fast_accum, out):
    """pingpong::scaled_mm into inductor's buffer (pingpong.integration.inductor)."""
    scaled_mm_direct(a, b, scale_a, scale_b, optional[0] if bias else None, out.dtype, activation, use_fast_accum,
                     out=out)


# ----------------------------------------------------------------------------- the inference layer

#: replace_linear(fp8=...) -> the quantize_fp8 granularities of (each input, the weight); not to be
#: confused with quantize.GRANULARITIES, the granularities quantize_fp8 itself takes
LAYER_SCALINGS = {"row": ("row", "row"), "block": ("block", "block128x128")}


def fp8_unsupported_reason(layer: torch.nn.Linear, fp8: str) -> str | None:
    """Why Float8Linear cannot take `layer` with scaling `fp8`, or None."""
    why = shape_reason(layer.out_features, layer.in_features, fp8)
    if why is None and not layer.weight.is_cuda:  # quantize_fp8 runs on the GPU
        why = f"weight on {layer.weight.device}: Float8Linear quantizes it at the swap, on the GPU; move the model first"
    return why


def shape_reason(n: int, k: int, fp8: str) -> str | None:
    """Why FP8 with scaling `fp8` cannot take an (n, k) weight (out_features, in_features), or
    None: scaled_mm's K and N rules (the inference layer's and the training recipes')."""
    if k <= 0 or k % _spec.FP8_MULTIPLE or n % _spec.FP8_MULTIPLE:
        return f"in_features={k}, out_features={n}: FP8 needs multiples of {_spec.FP8_MULTIPLE}"
    if fp8 == "block" and k % _spec.SCALE_BLOCK:
        return f"in_features={k}: block-wise FP8 needs a multiple of {_spec.SCALE_BLOCK}"
    return None


class _LayerRun:
    """A Float8Linear's eager call for one input signature (Float8Linear.signature), made
    after a first call validated it: the quantize kernel's bound launch and the GEMM's plan,
    the weight's views made once. Per call it allocates q, the scale and the output and
    launches both kernels; the checks and the two cache keys of the public functions (which the
    signature and the held weights already decide) are not made again. Held by the layer in
    `_runs`; `holds` says whether the layer's weights are still the ones it was made with."""

    __slots__ = ("weights", "b", "sb", "plan", "quant", "granularity", "dtype", "out_dtype", "M", "K", "N",
                 "out_shape", "flat", "device")

    def __init__(self, layer: "Float8Linear", x: Tensor, q: Tensor, s: Tensor, plan):
        bufs = layer._buffers
        self.weights = (bufs["weight_fp8"], bufs["weight_scale"], bufs["bias"])
        self.b, self.sb = self.weights[0].t(), self.weights[1].t()
        self.plan, self.granularity = plan, LAYER_SCALINGS[layer.fp8][0]
        self.dtype, self.out_dtype = q.dtype, x.dtype
        self.M, self.K = q.shape
        self.N = layer.out_features
        self.out_shape = (*x.shape[:-1], self.N)
        self.flat, self.device = x.dim() == 2, x.device
        self.quant = _quantize.bound_launch(x.view(self.M, self.K), q, s, self.granularity)

    def holds(self, buffers) -> bool:
        w, ws, bias = self.weights
        return buffers["weight_fp8"] is w and buffers["weight_scale"] is ws and buffers["bias"] is bias

    def __call__(self, x: Tensor) -> Tensor:
        x2 = x if self.flat else x.view(self.M, self.K)
        q = torch.empty(self.M, self.K, dtype=self.dtype, device=self.device)
        s = _quantize.scale_like(x2, self.granularity)
        self.quant(self.device.index, (x2.data_ptr(), q.data_ptr(), s.data_ptr()), (), _quantize.prepare, x2, q, s,
                   self.granularity)
        y = torch.empty(self.M, self.N, dtype=self.out_dtype, device=self.device)
        self.plan.run(q, self.b, y, _spec.EpilogueArgs(bias=self.weights[2], scale_a=s, scale_b=self.sb))
        return y if self.flat else y.view(self.out_shape)


def _check_layer(weight, bias, fp8, dtype) -> None:
    """Float8Linear's arguments, named, before the weight is quantized (what quantize_fp8 then
    refuses, e.g. the device, is about the weight: Float8Linear names it so)."""
    if not isinstance(fp8, str) or fp8 not in LAYER_SCALINGS:
        raise PingpongError(f"fp8: expected one of {tuple(LAYER_SCALINGS)}, got {fp8!r}")
    if dtype not in tuple(_quantize.FP8_MAX):
        raise PingpongError(f"dtype: expected one of {tuple(_quantize.FP8_MAX)}, got {dtype!r}")
    check_tensor("weight", weight)
    if weight.dim() != 2:
        raise PingpongError(f"weight: expected a 2-D (out_features, in_features) tensor, got shape"
                            f" {tuple(weight.shape)}")
    if weight.dtype not in _quantize.IN_DTYPES:
        raise PingpongError(f"weight: dtype {weight.dtype} is not supported; expected one of {_quantize.IN_DTYPES}")
    reason = shape_reason(*weight.shape, fp8)
    if reason:
        raise PingpongError(f"weight: {reason}")
    _spec.check_bias(bias, 1, weight.shape[0], weight.device, per_column=True)


class Float8Linear(torch.nn.Module):
    """Inference nn.Linear on FP8: the weight is quantized once (at construction), each input
    per call (pingpong.quantize_fp8, row-wise or 1×128 blocks), then scaled_mm with the bias
    fused. Input of any leading shape (…, in_features), bf16/fp16; the output has its dtype.
    An input that requires grad is refused (runtime.fp8_spec.refuse_grad), not silently
    detached: the trainable FP8 layer is pingpong.nn.Float8TrainingLinear.

    Eager calls on a GPU: the first call of each input signature (`signature`: shape, strides,
    dtype, device, base alignment) goes through quantize_fp8 and scaled_mm, which validate it;
    the layer then keeps that signature's launches (_LayerRun, up to RUNS) and the next calls
    take them (requires_grad, not in the signature, is checked on every call), with the
    host work of two launches and three allocations. Moving the layer (`.to`, `.cuda`, ...)
    forgets them; so does replacing a buffer (weight_fp8, weight_scale, bias; e.g.
    load_state_dict(assign=True)), on the next call that takes no kept run, which frees the old
    buffers the runs view (all runs are made with the buffers of the time). A cast of the
    model (`.half()`, `.to(dtype)`) casts the bias alone: the fp8 weight and its scales keep
    their dtypes."""

    #: input signatures whose launches a layer keeps (a prefill's token counts vary: when full,
    #: all are forgotten and the next calls validate again)
    RUNS = 64

    def __init__(self, weight: Tensor, bias: Optional[Tensor], fp8: str = "row", dtype=torch.float8_e4m3fn):
        super().__init__()
        _check_layer(weight, bias, fp8, dtype)
        self.fp8, self.fp8_dtype = fp8, dtype
        self.out_features, self.in_features = weight.shape
        try:
            with torch.no_grad():
                q, s = _quantize.quantize_fp8(weight.detach(), LAYER_SCALINGS[fp8][1], dtype=dtype)
        except PingpongError as e:  # quantize's "x" is the weight here
            raise PingpongError(f"weight: {str(e).removeprefix('x: ')}") from None
        self.register_buffer("weight_fp8", q)
        self.register_buffer("weight_scale", s)  # (N, 1) row-wise; (N/128, K/128) block-wise
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self._runs: dict = {}

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear, fp8: str = "row") -> "Float8Linear":
        if not isinstance(layer, torch.nn.Linear):
            raise PingpongError(f"layer: expected a torch.nn.Linear, got {type(layer).__name__}")
        reason = fp8_unsupported_reason(layer, fp8) if isinstance(fp8, str) and fp8 in LAYER_SCALINGS else None
        if reason:
            raise PingpongError(f"layer: {reason}")
        return cls(layer.weight, layer.bias, fp8).train(layer.training)

    def forward(self, x: Tensor) -> Tensor:
        eager = type(x) is torch.Tensor and not x.is_nested and not torch.compiler.is_compiling()
        if not eager:
            check_tensor("x", x)
        refuse_grad("Float8Linear", x, names=("x",))
        if eager:
            key = self.signature(x)
            run = self._runs.get(key)
            if run is not None and run.holds(self._buffers):
                return run(x)
            if self._runs and not next(iter(self._runs.values())).holds(self._buffers):
                self._runs.clear()  # a buffer replaced: every run views the old ones (keeping them alive)
        if x.shape[-1] != self.in_features:
            raise PingpongError(f"x: last dim {x.shape[-1]} != in_features {self.in_features}")
        x2 = x.reshape(-1, self.in_features)
        q, s = _quantize.quantize_fp8(x2, LAYER_SCALINGS[self.fp8][0], dtype=self.fp8_dtype)
        b, sb = self.weight_fp8.t(), self.weight_scale.t()
        y = scaled_mm(q, b, s, sb, bias=self.bias, out_dtype=x.dtype)
        if eager and x.is_cuda and y.numel() and (x.dim() == 2 or x.is_contiguous()):  # x2: x or a view of it
            if len(self._runs) >= self.RUNS:
                self._runs.clear()
            self._runs[key] = _LayerRun(self, x, q, s, _plan(q, b, s, sb, self.bias, x.dtype, None, False, None))
        return y.reshape(*x.shape[:-1], self.out_features)

    @staticmethod
    def signature(x: Tensor) -> tuple:
        """The key of a kept run: everything of x that its quantize launch and GEMM plan depend on
        (shape, strides, dtype, device, a 16-byte-aligned base: Triton specializes pointers on it),
        and torch's SM carveout (the SMs the GEMM's persistent grid spans). The layer's own fp8
        dtype and weights are fixed (`_LayerRun.holds`)."""
        return x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16 == 0, _spec.sm_carveout()

    def _apply(self, fn, recurse=True):
        self._runs.clear()  # the runs hold views of the buffers that fn replaces
        fixed = (self._buffers["weight_fp8"], self._buffers["weight_scale"])

        def move(t):  # .half(), .to(dtype) cast every floating-point buffer, fp8 too: the
            new = fn(t)  # quantized weight and its scales only move; the bias takes the new dtype
            return t.to(new.device) if new.dtype != t.dtype and any(t is f for f in fixed) else new

        return super()._apply(move, recurse)

    def __getstate__(self):
        return {**self.__dict__, "_runs": {}}  # launches and plans are per process; copies start without

    def __setstate__(self, state):
        super().__setstate__({"_runs": {}, **state})  # a layer pickled before layers kept launches

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp8={self.fp8!r}"
