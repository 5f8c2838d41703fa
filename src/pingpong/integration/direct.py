"""The direct calls: eager, no autograd, no tracing. One GemmSpec per call, one cached plan
per spec (pingpong.runtime), then the launch. pingpong.api and pingpong.functional route here
when `ops.needs_op` says nothing else must see the call; the ops' bodies and the autograd
Functions (pingpong.integration.ops) call these too.

    gemm / gemm_ / path_for / matmul_tiled        spec.build(...) once
        PLANS hit ──────────────────────────────▶ plan.run(...)
        miss ─▶ N-D operands: pingpong.integration.batching (fold, or one batched product) on these calls
             ─▶ spec.validate*(...) (errors under the caller's names) ─▶ plan_for(spec), cached

    linear                                        a LayerPlan per call signature (x, weight,
        LAYERS hit ─▶ forward: one launch          bias, activation, SM carveout): the forward
                      backward: two launches       plan and, on the first backward, the dx and
                      and one bias reduction       dweight plans (pingpong.integration.ops' autograd
                                                   Function calls them)

Every key holds torch's SM carveout at the call (pingpong.runtime.device), so a plan's
persistent grid is never reused under another carveout.

Imports: runtime, batching, errors; nothing of the front end above it (ops, api,
functional, nn import this module, never the other way).
"""

from __future__ import annotations

import collections

import torch

from . import batching
from ..errors import PingpongError
from ..runtime import plan as plan_mod
from ..runtime import spec as spec_mod
from ..runtime.spec import GEMM, LINEAR, NO_ARGS, EpilogueArgs, operand, sm_carveout

__all__ = ["gemm", "gemm_", "matmul_tiled", "path_for", "gemm_into", "linear", "layer_plan", "LayerPlan", "LAYERS"]


def _new_out(spec) -> torch.Tensor:
    """A new contiguous result of the spec's shape and dtype (read from the spec: no tensor
    attribute read again)."""
    a, b = spec.a.shape, spec.b.shape
    if len(a) == 2 and len(b) == 2:
        return torch.empty(a[0], b[1], dtype=spec.out_dtype, device=spec.a.device)
    return torch.empty(*spec_mod.result_shape(spec.a, spec.b), dtype=spec.out_dtype, device=spec.a.device)


def gemm(a, b, args: EpilogueArgs, out_dtype, names=GEMM, out=None) -> torch.Tensor:
    """act(α·a@b + bias) + β·c into a new tensor (`args`: the epilogue's operands, α and β
    already checked), or into `out`: a contiguous tensor of the result's shape and dtype that
    the caller made (inductor's generated code: pingpong.integration.inductor)."""
    spec = spec_mod.build_args(a, b, args, out_dtype)
    plan = plan_mod.get(spec)
    if plan is None:
        if not batching.native(a, b):  # torch.matmul's batching: fold, or one batched product
            result = batched_gemm(a, b, args, out_dtype, names)
            return result if out is None else out.copy_(result)
        spec_mod.validate(spec, a, b, args, out_dtype, names)
        plan = plan_mod.cached_plan(spec)
    if out is None:
        out = _new_out(spec)
    plan.run(a, b, out, args)
    return out


def batched_gemm(a, b, args: EpilogueArgs, out_dtype, names=GEMM) -> torch.Tensor:
    """`gemm` on N-D operands: checked (before any broadcast or copy), then run as one 2-D or
    one batched product (pingpong.integration.batching) through `gemm`."""
    _, _, act = spec_mod.validate_nd(a, b, args, out_dtype, names, batching.out_shape)
    spec_mod.check_gpu(a.device, names)

    def two_d(x, y, z):
        return gemm(x, y, args._replace(c=z, activation=act), out_dtype, names)

    read = args.c if spec_mod.reads_c(args.c, args.beta) else None
    return batching.run(a, b, read, two_d, two_d, fold=not batching.per_row(args.bias, a.shape[-2]))


def gemm_(a, b, args: EpilogueArgs) -> torch.Tensor:
    """c ← act(α·a@b + bias) + β·c in place, c being args.c (α, β already checked)."""
    c = args.c
    spec = spec_mod.build_args(a, b, args, getattr(c, "dtype", None), inplace=True)
    plan = plan_mod.get(spec)
    if plan is None:
        spec_mod.validate_inplace(spec, a, b, args)
        plan = plan_mod.cached_plan(spec)
    else:
        spec_mod.check_no_alias_fast(c, a, b, plan.extents)  # addresses change from call to call
        spec_mod.check_args_not_in(c, args)
    plan.run(a, b, c, args)
    torch.autograd.graph.increment_version(c)  # a backward that saved c must not read the new values
    return c


def matmul_tiled(a, b, config, out_dtype) -> torch.Tensor:
    from ..hopper.host.config import KernelConfig

    spec = spec_mod.build(a, b, None, 0.0, out_dtype, None, None, config=config)
    plan = plan_mod.get(spec)
    if plan is None:
        spec_mod.check_operands(a, b)
        if not isinstance(config, KernelConfig):
            raise PingpongError(f"config: expected a pingpong.KernelConfig, got {type(config).__name__}")
        dtype = spec_mod.check_out_dtype(out_dtype, a.dtype)
        config.validate(a.element_size(), dtype.itemsize)
        spec_mod.check_gpu(a.device)
        plan = plan_mod.cached_plan(spec)
    out = _new_out(spec)
    plan.run(a, b, out)
    return out


def path_for(a, b, args: EpilogueArgs, out_dtype, inplace: bool) -> str:
    return plan_of(a, b, args, out_dtype, inplace).path


def plan_of(a, b, args: EpilogueArgs, out_dtype, inplace: bool) -> plan_mod.Plan:
    """The plan the same matmul/gemm (inplace: gemm_, into args.c) call runs: the cached one,
    or a new one."""
    c = args.c
    spec = spec_mod.build_args(a, b, args, getattr(c, "dtype", None) if inplace else out_dtype, inplace=inplace)
    plan = plan_mod.get(spec)
    if plan is None:
        if inplace:  # gemm_'s validation: no in-place plan is cached without it
            spec_mod.validate_inplace(spec, a, b, args)
        else:
            spec_mod.validate(spec, a, b, args, out_dtype)
        plan = plan_mod.cached_plan(spec)
    elif inplace:  # as gemm_ on a hit: addresses are not in the key
        spec_mod.check_no_alias_fast(c, a, b, plan.extents)
        spec_mod.check_args_not_in(c, args)
    return plan


def gemm_into(out, a, b, c, alpha, beta, config, bias=None, activation=None) -> torch.Tensor:
    """Tests and benchmarks: out ← act(α·a@b + bias) + β·c with an explicit config (None =
    the default), into a caller-made contiguous out (poisoned by tests), through the same plans."""
    assert out.is_contiguous() and tuple(out.shape) == spec_mod.result_shape(a, b)
    args = EpilogueArgs(c, float(alpha), float(beta), bias, activation=activation)
    spec = spec_mod.build_args(a, b, args, out.dtype, config=config)
    plan = plan_mod.get(spec)
    if plan is None:
        spec_mod.validate(spec, a, b, args, out.dtype)
        plan = plan_mod.cached_plan(spec)
    plan.run(a, b, out, args)
    return out


# ----------------------------------------------------------------------------- layers

#: LayerPlans kept; least recently used evicted (second chance: runtime.plan.remember).
LAYER_CACHE_SIZE = 1024
LAYERS: "collections.OrderedDict[tuple, LayerPlan]" = collections.OrderedDict()


class LayerPlan:
    """One `linear` call signature, decided once: y = act(x @ weightᵀ + bias).

    forward    x (…, K) viewed as (M, K) (a fold: contiguous x) → the forward plan of
               x2 @ weight.t() with the bias and activation fused: one launch
    backward   (activation "none"; planned on the first backward, for the gradient's layout)
               dx = g2 @ weight (M, K), dweight = g2ᵀ @ x2 (N, K): one launch each, on plans
               kept here; dbias = Σ rows of g2: one reduction in the bias's dtype
    The layer key fixes x's, weight's and the bias's layouts, so where a plan launches from
    base addresses (`Plan.pointer_launch`: no aligned copies) the views the kernels see are
    made only when a launch goes through Triton's JIT. Layers that do not fold (a
    non-contiguous x of 3 or more dims) keep the general path (`folds` False)."""

    __slots__ = ("folds", "x_shape", "w_shape", "x2_shape", "out2", "out_shape", "lead", "dtype", "device", "activation", "fwd", "fwd_ptrs",
                 "grads", "bias_dtype", "used")

    def __init__(self, x, weight, bias, activation):
        K, N = weight.shape[1], weight.shape[0]
        self.activation, self.dtype, self.device = activation, x.dtype, x.device  # the key fixes both
        self.folds = x.dim() <= 2 or x.is_contiguous()  # a 1-D x of any stride is a (1, K) view
        self.x2_shape = (x.numel() // K if K else x.shape[:-1].numel(), K)
        self.out2 = (self.x2_shape[0], N)
        self.out_shape = (*x.shape[:-1], N)
        self.x_shape, self.w_shape = tuple(x.shape), (N, K)  # dx's and dweight's: the inputs' own
        self.lead = tuple(range(x.dim() - 1))  # the dims dbias sums over (none for a 1-D x: g is dbias)
        self.bias_dtype = None if bias is None else bias.dtype
        self.fwd = None
        self.fwd_ptrs = False
        self.grads = (None, None, None, False)  # (gradient key, dx plan, dweight plan, pointer launches): `backward`
        if self.folds:
            x2 = x if x.dim() == 2 else x.view(self.x2_shape)
            self.fwd = _plan_of(x2, weight.t(), None, x.dtype, bias, activation)
            self.fwd_ptrs = self.fwd.pointer_launch and (bias is None or bias.dim() == 1 and bias.stride(0) == 1)

    def forward(self, x, weight, bias, out=None) -> torch.Tensor:
        """y, into a new tensor or into `out` (contiguous, the result's shape and dtype)."""
        if not self.folds:
            return gemm(x, weight.t(), EpilogueArgs(bias=bias, activation=self.activation), None, LINEAR, out)
        if out is None:
            out = torch.empty(*self.out_shape, dtype=self.dtype, device=self.device)  # sizes as ints: parsed faster
        if self.fwd_ptrs:
            self.fwd.run_ptrs(x.data_ptr(), weight.data_ptr(), out.data_ptr(), 0 if bias is None else bias.data_ptr(),
                              _forward_views, self, x, weight, out, bias)
        else:
            self.fwd.run(x.view(self.x2_shape), weight.t(), out.view(self.out2),
                         NO_ARGS if bias is None else EpilogueArgs(bias=bias))
        return out

    def backward(self, g, x, weight, needs) -> tuple:
        """(dx, dweight, dbias, None) for activation "none" on a folding layer: the gradients
        of (x, weight, bias, the plan) as the autograd Function returns them."""
        if g.dtype != self.dtype:
            g = g.to(self.dtype)
        key = (g.shape, g.stride(), g.data_ptr() % 16 == 0, sm_carveout())  # x and weight: the layer key fixed them
        grad_key, dx_plan, dw_plan, ptrs = self.grads  # one tuple, replaced whole: never half of each layout's
        if key != grad_key:  # the first backward (or a gradient of another layout, or another SM carveout)
            g2, x2 = g.reshape(self.out2), x.view(self.x2_shape)
            dx_plan = _plan_of(g2, weight, None, self.dtype, None, "none")
            dw_plan = _plan_of(g2.mT, x2, None, self.dtype, None, "none")
            ptrs = g.is_contiguous() and dx_plan.pointer_launch and dw_plan.pointer_launch
            self.grads = (key, dx_plan, dw_plan, ptrs)
        dx = dw = dbias = None
        if ptrs:  # g, x, weight contiguous row-major, all keyed
            gp = g.data_ptr()
            if needs[0]:
                dx = torch.empty(*self.x_shape, dtype=self.dtype, device=self.device)
                dx_plan.run_ptrs(gp, weight.data_ptr(), dx.data_ptr(), 0, _dx_views, self, g, weight, dx)
            if needs[1]:
                dw = torch.empty(*self.w_shape, dtype=self.dtype, device=self.device)  # (N, K): the weight's layout
                dw_plan.run_ptrs(gp, x.data_ptr(), dw.data_ptr(), 0, _dw_views, self, g, x, dw)
        else:
            g2, x2 = g.reshape(self.out2), x.view(self.x2_shape)
            if needs[0]:
                dx = torch.empty(*self.x2_shape, dtype=self.dtype, device=self.device)
                dx_plan.run(g2, weight, dx)
                dx = dx.view(x.shape)
            if needs[1]:
                dw = torch.empty(*self.w_shape, dtype=self.dtype, device=self.device)
                dw_plan.run(g2.mT, x2, dw)
        if needs[2] and self.bias_dtype is not None:  # one reduction over g's leading dims (16-bit sums
            # accumulate in fp32 and round once, as torch's addmm backward sums a bias's gradient)
            if not self.lead:  # sum(()) would reduce every dim
                dbias = g.to(self.bias_dtype, copy=True)
            elif self.bias_dtype == self.dtype:
                dbias = g.sum(self.lead)
            else:
                dbias = g.sum(self.lead, dtype=self.bias_dtype)
        return dx, dw, dbias, None


def _forward_views(lp, x, weight, out, bias):
    """The tensors the forward kernel reads and writes (made only for a launch through the JIT)."""
    return x.view(lp.x2_shape), weight.t(), out.view(lp.out2), bias


def _dx_views(lp, g, weight, dx):
    return g.view(lp.out2), weight, dx.view(lp.x2_shape), None


def _dw_views(lp, g, x, dw):
    return g.view(lp.out2).mT, x.view(lp.x2_shape), dw, None


def _plan_of(a, b, c, out_dtype, bias, activation):
    """The cached plan of a GEMM the layer's own validation covers (no second validation)."""
    spec = spec_mod.build(a, b, c, 0.0, out_dtype, bias, activation)
    return plan_mod.get(spec) or plan_mod.cached_plan(spec)


def layer_plan(x, weight, bias, activation) -> LayerPlan:
    """The LayerPlan of this call's signature; validated (errors name x, weight, bias) on a miss."""
    try:  # the key: one flat tuple of what a plan depends on (an Operand's fields; without a
        # bias it is 4 shorter, so the two kinds never compare equal)
        if bias is None:
            key = (x.dtype, x.shape, x.stride(), x.device, x.data_ptr() % 16 == 0,
                   weight.dtype, weight.shape, weight.stride(), weight.device, weight.data_ptr() % 16 == 0,
                   activation, sm_carveout())  # the carveout: the SMs its plans' grids span
        else:
            key = (x.dtype, x.shape, x.stride(), x.device, x.data_ptr() % 16 == 0,
                   weight.dtype, weight.shape, weight.stride(), weight.device, weight.data_ptr() % 16 == 0,
                   activation, sm_carveout(), bias.dtype, bias.shape, bias.stride(), bias.device,
                   bias.data_ptr() % 16 == 0)
        lp = None if x.is_neg() or weight.is_neg() or (bias is not None and bias.is_neg()) else LAYERS.get(key)
    except (AttributeError, TypeError, RuntimeError):
        key = lp = None
    if lp is not None:
        lp.used = True  # the cache's second chance (runtime.plan.remember)
        return lp
    act = spec_mod.validate_linear(x, weight, bias, activation)
    spec_mod.check_gpu(x.device, LINEAR)
    lp = LayerPlan(x, weight, bias, act)
    if key is not None:
        plan_mod.remember(LAYERS, key, lp, LAYER_CACHE_SIZE)
    return lp


def linear(x, weight, bias, activation, out=None) -> torch.Tensor:
    """`pingpong.linear` without the op machinery (eager, no autograd); into `out` as `gemm`."""
    return layer_plan(x, weight, bias, activation).forward(x, weight, bias, out)
