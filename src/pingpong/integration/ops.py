"""pingpong's GEMMs for PyTorch: torch.library ops (traced by torch.compile) and autograd.

    | op                | public function                          | autograd                          |
    |-------------------|------------------------------------------|-----------------------------------|
    | pingpong::mm      | matmul(a, b, out_dtype=), gemm(a, b)     | dA = dC·Bᵀ, dB = Aᵀ·dC            |
    | pingpong::gemm    | gemm(a, b, c, alpha=, beta=, out_dtype=,  | dz = act'(z)·dC, dA = α·dz·Bᵀ,    |
    |                   |      bias=, activation=)                 | dB = α·Aᵀ·dz, dbias = Σ dz, dc = β·dC |
    | pingpong::gemm_   | gemm_(c, a, b, alpha=, beta=)             | none: refused while autograd records |
    | pingpong::linear  | linear(x, weight, bias, activation)       | dx = dz·w, dw = dzᵀ·x, dbias = Σ dz |

The epilogue is y = act(z) + β·c with z = α·a@b + bias (the GEMM API's contract).

Which path a public call takes (`needs_op`, then `route_gemm` / `route_linear`):

    eager, no autograd (inference)      the kernel directly: no dispatcher round trip, no
                                        fake-tensor checks, no autograd wrapper
    eager, autograd records the call    a torch.autograd.Function around the direct call
    (grad mode on, an input requires    (cheaper on the host than the op's Python autograd
    grad)                               wrapper; see below)
    torch.compile / export tracing, or  the torch.library op: one graph node per call; its
    a tensor subclass (a tracer's fake  fake implementation gives the output's shape, dtype
    or functional tensors)              and strides (contiguous row-major, as the kernels
                                        write it); its autograd is the same formulas

On the host the direct call costs the least, the Function more, and the op with its Python
autograd wrapper several times as much (benchmarks/host_cpu.py measures the call path on a
CPU, the kernel launch stubbed out).

`linear` under eager autograd takes the thinnest Function (`_LayerFunction`) when it can (no
activation, x folds into 2-D): it saves x and weight and calls the layer's cached plan
(pingpong.integration.direct.LayerPlan): one launch forward; two launches and one bias reduction backward.

Backward formulas (shared by the Function and the op) route as the public functions do
(`_gemm`: needs_op, then the op or the direct call), so an eager backward launches directly
and a traced backward records the ops. This module imports pingpong.integration.direct and
pingpong.integration.batching, never pingpong.api or pingpong.functional (no import circle). Operands are transposed
*views* (``b.mT``, ``a.mT``: the four layouts run without copies). Gradients have the inputs'
dtype (an fp32 ``out_dtype`` gradient is cast to the input dtype first). The activation's
derivative needs the pre-activation z: the forward does not save it (an M×N fp32 buffer per
layer, written by every forward); the backward recomputes z with one more GEMM (fp32 output,
bias fused). `linear`'s relu reads the saved output instead (y > 0 exactly where z > 0).
"""

from __future__ import annotations

import importlib
import math
import sys
from typing import Optional

import torch
from torch import Tensor

from . import batching, direct, inductor
from ..errors import PingpongError
from ..runtime.spec import (DENSE_OP_ARGS, DENSE_TENSORS, NO_ARGS, PLAIN_TENSORS, EpilogueArgs, check_activation,
                            check_args_not_in, check_no_alias, op_args, op_grads, op_schema, op_values, plain_args,
                            torch_activation, validate_linear)

__all__ = ["needs_op", "route_gemm", "route_linear", "call_linear", "check_sharded", "sharded", "is_dtensor",
           "check_not_differentiated", "mm", "gemm", "gemm_", "linear", "activation_forward", "activation_backward"]


def needs_op(a, b, c=None, d=None) -> bool:
    """True when a public call with tensor arguments a, b (and optional c, d: C, a bias) must
    leave the direct path (module docstring). Ordered for the common eager case: type lookups,
    the grad-mode flag, one call."""
    plain = PLAIN_TENSORS
    if type(a) in plain and type(b) in plain and (c is None or type(c) in plain) and (d is None or type(d) in plain):
        if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or (c is not None and c.requires_grad)
                                        or (d is not None and d.requires_grad)):
            return True
        return torch.compiler.is_compiling()
    # a tensor subclass (a tracer's fake/functional tensors): the op; not tensors: validation
    return traced(a, b, c, d)


def traced(*tensors) -> bool:
    """Whether an FP8 call (scaled_mm, scaled_grouped_mm) goes to its torch.library op:
    compiling, or a tensor subclass (a tracer's, DTensor) among `tensors`; arguments that are not
    tensors stay on the direct path, whose validation names them. Plain tensors cost a type
    lookup each and the compile flag."""
    for t in tensors:
        if type(t) not in PLAIN_TENSORS and isinstance(t, torch.Tensor):
            return True
    return torch.compiler.is_compiling()


def is_dtensor(t) -> bool:
    """Whether t is a DTensor, without importing torch.distributed.tensor (a DTensor exists only
    once that module is loaded)."""
    dtensor = sys.modules.get("torch.distributed.tensor")
    return dtensor is not None and isinstance(t, dtensor.DTensor)


def check_sharded(op, *args) -> None:
    """A call of `op` (an OpOverload) with DTensor arguments: pingpong.distributed's sharding
    rules registered (loaded on the first such call) and its checks, before any work. Costs a
    dict lookup when torch.distributed.tensor is not loaded; skipped while torch.compile traces
    (the rules must be imported before: pingpong.distributed's docstring)."""
    if torch.compiler.is_compiling():
        return
    if any(is_dtensor(t) for t in args):
        _rules().check(op, *args)


def sharded(op, *args) -> tuple:
    """`check_sharded` for the routes below: returns `args`, a DTensor whose spec misstates its
    local tensor's dtype rebuilt first (pingpong.distributed.checked; also while torch.compile
    traces, where the checks are skipped)."""
    for t in args:
        if is_dtensor(t):
            return _rules().checked(op, args)
    return args


def _rules():
    """pingpong.distributed, which depends on this module (its rules are for these ops): loaded
    by name, as a plugin; this module never imports it."""
    return sys.modules.get("pingpong.distributed") or importlib.import_module("pingpong.distributed")


def route_gemm(a, b, args: EpilogueArgs, out_dtype) -> Tensor:
    """A `gemm` call that left the direct path: the op when traced (pingpong::mm for a plain
    product), else the autograd Function. The op and the Function take `args` flattened
    (pingpong.runtime.spec.op_values)."""
    tensors = _tensors(args)
    if traced(a, b, *tensors):
        if plain_args(args):
            return _route_mm(a, b, out_dtype)
        return _GEMM(*sharded(_GEMM, a, b, *op_values(args, out_dtype)))
    return _GemmFunction.apply(a, b, args, out_dtype, *tensors)


def _route_mm(a, b, out_dtype) -> Tensor:
    """`route_gemm` of a traced a @ b: pingpong::mm."""
    a, b, _ = sharded(_MM, a, b, out_dtype)
    return _MM(a, b, out_dtype)


def route_gemm_(a, b, args: EpilogueArgs) -> None:
    """A `gemm_` call (into args.c) that left the direct path: refused while autograd would
    record it; else the pingpong::gemm_ op (torch.compile, DTensors)."""
    values = op_values(args, fields=INPLACE_OP_ARGS)
    check_not_differentiated(args.c, a, b, *_tensors(args)[1:])
    check_sharded(torch.ops.pingpong.gemm_.default, args.c, a, b, *values)
    gemm_(args.c, a, b, *values)


def route_linear(x, w, bias, activation) -> Tensor:
    """A `linear` call that left the direct path: the op when traced, else the Function (the
    thin one on the layer's cached plan when it can: no activation, x folds into 2-D)."""
    if traced(x, w, bias):
        x, w, bias, _ = sharded(_LINEAR, x, w, bias, activation)
        return _LINEAR(x, w, bias, activation)
    lp = direct.layer_plan(x, w, bias, activation)
    if lp.folds and lp.activation == "none":
        return _layer_apply(x, w, bias, lp)
    return _LinearFunction.apply(x, w, bias, activation)


def call_linear(x, w, bias, activation) -> Tensor:
    """`pingpong.linear`'s dispatch with each check made once (needs_op, then route_linear):
    plain tensors take the direct call, the layer Function, or (compiling) the op."""
    if type(x) in PLAIN_TENSORS and type(w) in PLAIN_TENSORS and (bias is None or type(bias) in PLAIN_TENSORS):
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad
                                        or (bias is not None and bias.requires_grad)):
            if torch.compiler.is_compiling():
                return linear(x, w, bias, activation)
            lp = direct.layer_plan(x, w, bias, activation)
            if lp.folds and lp.activation == "none":
                return _layer_apply(x, w, bias, lp)
            return _LinearFunction.apply(x, w, bias, activation)
        if not torch.compiler.is_compiling():
            return direct.linear(x, w, bias, activation)
    if needs_op(x, w, bias):
        return route_linear(x, w, bias, activation)
    return direct.linear(x, w, bias, activation)


def _gemm(a, b, alpha=1.0, out_dtype=None, args: EpilogueArgs | None = None) -> Tensor:
    """pingpong.gemm's routing, for the backward formulas: an eager backward launches directly,
    a traced one records the ops (and a double backward goes through the Function). `args`:
    the epilogue (else α·a@b alone)."""
    if args is None:
        args = NO_ARGS if alpha == 1.0 else EpilogueArgs(alpha=alpha)
        if needs_op(a, b):
            return _route_mm(a, b, out_dtype) if alpha == 1.0 and traced(a, b) else route_gemm(a, b, args, out_dtype)
    elif needs_op(a, b, *_tensors(args)):
        return route_gemm(a, b, args, out_dtype)
    return direct.gemm(a, b, args, out_dtype)


def check_not_differentiated(c, a, b, *operands) -> None:
    """gemm_ is not differentiable: PingpongError while autograd would record it (an epilogue
    operand, e.g. a bias, that requires grad too: its gradient would be dropped)."""
    if torch.is_grad_enabled():
        names = [f for f in DENSE_TENSORS if f != "c"]
        for name, t in (("c", c), ("a", a), ("b", b), *zip(names, operands)):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise PingpongError(f"{name}: requires grad; gemm_ writes c in place and is not differentiable "
                                    "(use pingpong.gemm, or call gemm_ under torch.no_grad())")


# ----------------------------------------------------------------------------- the ops


# The ops' bodies run below the dispatcher's Autograd key (their autograd, DTensor's dispatch and
# torch.compile's graphs all call them from there): nothing they do records a graph.


@torch.library.custom_op("pingpong::mm", mutates_args=())
def mm(a: Tensor, b: Tensor, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    return direct.gemm(a, b, NO_ARGS, out_dtype)


@mm.register_fake
def _(a, b, out_dtype=None):
    inductor.register()
    shape, dtype = batching.check(a, b, EpilogueArgs(), out_dtype)
    return a.new_empty(shape, dtype=dtype)


#: gemm_'s arguments after (c, a, b): the dense ones but C (its first argument) and out_dtype (C's).
INPLACE_OP_ARGS = tuple(f for f in DENSE_OP_ARGS if f not in ("c", "out_dtype"))


def _gemm_op(a, b, *values):
    args, out_dtype = op_args(values)
    return direct.gemm(a, b, args, out_dtype)


def _gemm_fake(a, b, *values):
    inductor.register()
    args, out_dtype = op_args(values)
    shape, dtype = batching.check(a, b, args, out_dtype)
    return a.new_empty(shape, dtype=dtype)


# the schemas: (a, b) then the epilogue's arguments (pingpong.runtime.spec.DENSE_OP_ARGS)
gemm = torch.library.custom_op("pingpong::gemm", _gemm_op, mutates_args=(), schema=op_schema("Tensor a, Tensor b"))
gemm.register_fake(_gemm_fake)


def _gemm__op(c, a, b, *values):
    args, _ = op_args(values, INPLACE_OP_ARGS)
    direct.gemm_(a, b, args._replace(c=c))


def _gemm__fake(c, a, b, *values):
    args, _ = op_args(values, INPLACE_OP_ARGS)
    batching.check(a, b, args._replace(c=c), c.dtype)
    # while tracing, before a functionalizing backend hands the op a copy of c: c must not share
    # memory with what the product reads (the eager path's check, by fake storage)
    check_no_alias(c, a, b)
    check_args_not_in(c, args)


gemm_ = torch.library.custom_op("pingpong::gemm_", _gemm__op, mutates_args=("c",),
                                schema=op_schema("Tensor(a!) c, Tensor a, Tensor b", INPLACE_OP_ARGS, "()"))
gemm_.register_fake(_gemm__fake)


@torch.library.custom_op("pingpong::linear", mutates_args=())
def linear(x: Tensor, w: Tensor, bias: Optional[Tensor] = None, activation: Optional[str] = None) -> Tensor:
    return direct.linear(x, w, bias, activation)


@linear.register_fake
def _(x, w, bias=None, activation=None):
    inductor.register()
    validate_linear(x, w, bias, activation)
    return x.new_empty(tuple(x.shape[:-1]) + (w.shape[0],))


# ----------------------------------------------------------------------------- autograd formulas


def _product_grads(needs_a, needs_b, a, b, g, alpha):
    """(dA, dB) of α·a@b for output gradient g, in the inputs' dtype, on pingpong's kernels.

    Broadcast batch dims are summed out. A 2-D b under a batched a (a shared weight) gets its
    gradient from one GEMM over the folded batch: dB = a(B·M, K)ᵀ · g(B·M, N).
    """
    g = g.to(a.dtype)
    da = db = None
    if needs_a:
        da = _summed(_gemm(g, b.mT, alpha=alpha, out_dtype=_sum_dtype(g.shape[:-2], a)), a)
    if needs_b:
        if b.dim() == 2 and a.dim() > 2:
            db = _gemm(_rows(a).mT, _rows(g), alpha=alpha, out_dtype=a.dtype)
        else:
            db = _summed(_gemm(a.mT, g, alpha=alpha, out_dtype=_sum_dtype(g.shape[:-2], b)), b)
    return da, db


def _sum_dtype(batch, t) -> torch.dtype:
    """fp32 when broadcast batch dims will be summed out (one rounding, after the sum)."""
    return torch.float32 if tuple(batch) != tuple(t.shape[:-2]) else t.dtype


def _summed(grad, t) -> Tensor:
    """grad summed over t's broadcast dims, in t's dtype."""
    return grad.sum_to_size(t.shape).to(t.dtype)


def _preactivation(a, b, args: EpilogueArgs) -> Tensor:
    """z = α·a@b + bias in fp32 (`args`: the epilogue without C and the activation), recomputed
    on the kernel (the forward keeps only act(z))."""
    return _gemm(a, b, out_dtype=torch.float32, args=args)


def _bias_grad(gz, bias) -> Tensor:
    """dbias: gz summed over what the bias is broadcast along (rows, columns, batches), in the
    bias's dtype. torch's CUDA sum accumulates 16-bit inputs in fp32 and rounds once, so no
    fp32 copy of gz is made (a (8192, 14336) gradient is 470 MB in fp32); asking for an fp32
    result of a 16-bit sum costs many times the plain sum's host time (docs/design.md, the layer
    path)."""
    lead = gz.dim() - bias.dim()
    dims = [*range(lead), *(lead + i for i, n in enumerate(bias.shape) if n == 1 and gz.shape[lead + i] != 1)]
    if not dims:
        return gz.reshape(bias.shape).to(bias.dtype)
    dtype = None if bias.dtype == gz.dtype else bias.dtype  # same dtype: the plain (fast) reduction
    return gz.sum(dim=dims, keepdim=True, dtype=dtype).reshape(bias.shape)


_TENSOR_FIELDS = tuple(EpilogueArgs._fields.index(f) for f in DENSE_TENSORS)


def _tensors(args: EpilogueArgs) -> tuple:
    """args's tensors of the dense epilogue (DENSE_TENSORS: C first)."""
    return tuple([args[i] for i in _TENSOR_FIELDS])


_NO_TENSORS = dict.fromkeys(DENSE_TENSORS)
_BIAS = DENSE_TENSORS.index("bias") - 1  # among the saved tensors (C is not saved)
_OP_TENSORS = tuple(2 + DENSE_OP_ARGS.index(f) for f in DENSE_TENSORS)  # their places in the op's inputs


def _save(ctx, a, b, args: EpilogueArgs) -> None:
    """What the backward reads: a, b and the epilogue's tensors but C saved, C's shape, β, the
    activation, and the epilogue of z = α·a@b + bias without its tensors (`_preactivation`'s)."""
    ctx.save_for_backward(a, b, *_tensors(args)[1:])
    ctx.c_shape = None if args.c is None else args.c.shape
    ctx.beta, ctx.activation = args.beta, check_activation(args.activation)
    ctx.z = args._replace(beta=0.0, activation=None, **_NO_TENSORS)


def _gradients(ctx, g, needs: dict) -> tuple:
    """(dA, dB, {epilogue tensor: gradient}) of the gemm `_save` saved; `needs`: which of the
    epilogue's tensors want a gradient."""
    a, b, *operands = ctx.saved_tensors
    grads = {}
    if ctx.c_shape is not None and needs["c"]:  # β·g at any β, as torch.addmm's: β = 0 gives zeros
        grads["c"] = (g * ctx.beta).sum_to_size(ctx.c_shape)  # (NaN where g is not finite), not None
    gz = g
    if ctx.activation != "none":
        z = _preactivation(a, b, ctx.z._replace(**dict(zip(DENSE_TENSORS[1:], operands))))
        gz = activation_backward(ctx.activation, g, z)
    da, db = _product_grads(ctx.needs_input_grad[0], ctx.needs_input_grad[1], a, b, gz, ctx.z.alpha)
    bias = operands[_BIAS]
    if bias is not None and needs["bias"]:
        grads["bias"] = _bias_grad(gz, bias)
    return da, db, grads


def _setup_gemm(ctx, inputs, output):
    _save(ctx, inputs[0], inputs[1], op_args(inputs[2:])[0])


def _backward_gemm(ctx, g):
    needs = ctx.needs_input_grad  # as long as the call's inputs (trailing defaults left out)
    da, db, grads = _gradients(ctx, g, {f: i < len(needs) and needs[i] for f, i in zip(DENSE_TENSORS, _OP_TENSORS)})
    return (da, db) + op_grads(grads)


def _setup_mm(ctx, inputs, output):
    _save(ctx, inputs[0], inputs[1], NO_ARGS)


def _backward_mm(ctx, g):
    return _gradients(ctx, g, _NO_TENSORS)[:2] + (None,)


def _setup_linear(ctx, inputs, output):
    x, w, bias, activation = inputs
    ctx.activation = check_activation(activation)
    ctx.save_for_backward(x, w, bias, output if ctx.activation == "relu" else None)


def _backward_linear(ctx, g):
    x, w, bias, y = ctx.saved_tensors
    needs = ctx.needs_input_grad
    g2 = _rows(g)
    if ctx.activation != "none":
        saved = _rows(y) if ctx.activation == "relu" else _preactivation(_rows(x), w.t(), EpilogueArgs(bias=bias))
        g2 = activation_backward(ctx.activation, g2, saved)
    dbias = _bias_grad(g2, bias) if bias is not None and needs[2] else None
    g2 = g2.to(x.dtype)
    dx = _unrows(_gemm(g2, w), x) if needs[0] else None
    dw = _gemm(g2.mT, _rows(x)) if needs[1] else None  # (N, K) row-major: the weight's own layout
    return dx, dw, dbias, None


def _rows(t) -> Tensor:
    """t as (rows, its last dim); t itself when 2-D (on a DTensor every view is a dispatch).
    The rows counted, not inferred: reshape(-1, 0) of an empty t has no answer."""
    return t if t.dim() == 2 else t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


def _unrows(t, like) -> Tensor:
    return t if like.dim() == 2 else t.view(like.shape)


mm.register_autograd(_backward_mm, setup_context=_setup_mm)
gemm.register_autograd(_backward_gemm, setup_context=_setup_gemm)
linear.register_autograd(_backward_linear, setup_context=_setup_linear)

# the routes call the OpOverloads (what a CustomOpDef's __call__ calls: one Python frame fewer)
_MM, _GEMM, _LINEAR = torch.ops.pingpong.mm.default, torch.ops.pingpong.gemm.default, torch.ops.pingpong.linear.default


class _GemmFunction(torch.autograd.Function):
    """Eager autograd around the direct gemm (same formulas as the pingpong::gemm op)."""

    @staticmethod
    def forward(ctx, a, b, args, out_dtype, *tensors):  # tensors: args's (autograd sees them here)
        out = direct.gemm(a, b, args, out_dtype)
        _save(ctx, a, b, args)
        return out

    @staticmethod
    def backward(ctx, g):
        da, db, grads = _gradients(ctx, g, dict(zip(DENSE_TENSORS, ctx.needs_input_grad[4:])))
        return (da, db, None, None, *(grads.get(f) for f in DENSE_TENSORS))


class _LinearFunction(torch.autograd.Function):
    """Eager autograd around the direct linear (same formulas as the pingpong::linear op)."""

    @staticmethod
    def forward(ctx, x, w, bias, activation):
        out = direct.linear(x, w, bias, activation)
        _setup_linear(ctx, (x, w, bias, activation), out)
        return out

    backward = staticmethod(_backward_linear)


class _LayerFunction(torch.autograd.Function):
    """The layer path's autograd, as thin as torch's: the forward and both backward launches
    are the LayerPlan's (pingpong.integration.direct), decided once per call signature; dbias one reduction."""

    @staticmethod
    def forward(ctx, x, w, bias, lp):
        ctx.save_for_backward(x, w)
        ctx.lp = lp
        return lp.forward(x, w, bias)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        if torch.is_grad_enabled() and (g.requires_grad or x.requires_grad or w.requires_grad):  # double backward
            return _backward_linear_generic(ctx, g, x, w)
        return ctx.lp.backward(g, x, w, ctx.needs_input_grad)


_RAW_LAYER_APPLY = torch._C._FunctionBase.__dict__["apply"].__get__(None, _LayerFunction)


def _layer_apply(x, w, bias, lp) -> Tensor:
    """_LayerFunction.apply for plain tensors: torch's Function.apply adds a Python pass over
    the arguments for functorch's wrappers; without functorch transforms
    active, and with plain tensors (the callers checked), the C-level apply is the same call."""
    if torch._C._are_functorch_transforms_active():
        return _LayerFunction.apply(x, w, bias, lp)
    return _RAW_LAYER_APPLY(x, w, bias, lp)


def _backward_linear_generic(ctx, g, x, w):
    g2 = _rows(g).to(x.dtype)
    needs = ctx.needs_input_grad
    dx = _unrows(_gemm(g2, w), x) if needs[0] else None
    dw = _gemm(g2.mT, _rows(x)) if needs[1] else None
    dbias = g2.sum(0) if needs[2] else None
    return dx, dw, dbias, None


# ----------------------------------------------------------------------------- activations


def activation_forward(name: str, z: torch.Tensor) -> torch.Tensor:
    """The activation in torch (pingpong.runtime.spec.torch_activation)."""
    return torch_activation(name)(z)


def activation_backward(name: str, grad: torch.Tensor, saved: torch.Tensor) -> torch.Tensor:
    """dL/dz from dL/dy for y = act(z), by torch's own derivative kernels, in fp32.

    `saved` is the pre-activation z, or for relu also the output y (y > 0 exactly where z > 0).
    """
    grad, saved = grad.float(), saved.float()
    aten = torch.ops.aten
    if name == "relu":
        return aten.threshold_backward(grad, saved, 0)
    if name == "silu":
        if torch.is_grad_enabled() and (grad.requires_grad or saved.requires_grad):  # a double backward:
            s = torch.sigmoid(saved)  # aten.silu_backward has no derivative, its formula has
            return grad * s * (1 + saved * (1 - s))
        return aten.silu_backward(grad, saved)
    return aten.gelu_backward(grad, saved, approximate="tanh" if name == "gelu_tanh" else "none")
