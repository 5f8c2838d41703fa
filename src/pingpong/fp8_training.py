"""FP8 training: `fp8_linear`, y = x·Wᵀ + bias differentiable in x, W and bias, with the forward
and both gradient GEMMs in FP8 (pingpong.quantize.quantize_fp8_pair, then pingpong.scaled_mm).
While torch.compile traces, the ``pingpong::fp8_linear_train`` op (with grad: X's
``pingpong::quantize_fp8_pair`` first, then the op on it, whose outputs are y and W's FP8
operands for the backward; its autograd formula, registered once below, records
quantize_fp8_pair and scaled_mm ops into the backward graph) or ``pingpong::fp8_linear`` (the
forward alone); fake implementations give the shapes. X's quantization is its own node so that
layers fed the same input (a block's q, k and v projections; gate and up) quantize it once:
the common-subexpression pass that AOTAutograd runs on the joint graph before inductor's
partitioner splits it merges equal calls of a pure op, which the fused op on (x, W) never is.
The layer is pingpong.nn.Float8TrainingLinear.

The three products of a linear layer, x (M, K) with M tokens, W (N, K), dY (M, N):

    forward        Y  = X · Wᵀ    (M, N)   contracts K
    data grad      dX = dY · W    (M, K)   contracts N
    weight grad    dW = dYᵀ · X   (N, K)   contracts M (tokens)

A scale must be constant along the axis its product contracts (it factors out of the sum), so
each operand is quantized along the contraction of the product it feeds. Row-wise:

    | product | a (row-major, scale (rows, 1))        | b (column-major, scale (1, cols))        |
    |---------|---------------------------------------|------------------------------------------|
    | Y       | X per token, along K: (M, 1)          | W per output row, along K: (1, N)        |
    | dX      | dY per token, along N: (M, 1)         | W per input column, along N: (1, K)      |
    | dW      | dYᵀ per output column, along M: (N, 1)| X per input column, along M: (1, K)      |

X's forward scales (one per token) are not valid for dW, whose sum runs over the tokens: there
X is quantized again, one scale per column along the tokens, and dY likewise; W is quantized
along K for Y and along N for dX. scaled_mm reads both operands K-major, so "per column" means
the transpose, quantized along its rows. Each operand goes through one quantize_fp8_pair
(pingpong.quantize), which writes both from the same reads of the tensor: q along the rows as
quantize_fp8 gives it, and qt, the transpose quantized along its rows, bitwise
quantize_fp8(transpose): no transposed copy in the inputs' precision is made.

- X, in the forward: q for Y, and qt = Xᵀ (K, M') for dW, the tokens padded by zeros to M' =
  a multiple of 16 (at least 16): scaled_mm's K must be one (16-byte fp8 rows), and zeros
  change neither a sum nor an amax, so any M (1, 17, 777) trains;
- W, in the forward: q for Y, qt = Wᵀ (K, N) for dX;
- dY, in the backward: q for dX, qt = dYᵀ (N, M') for dW.

The forward saves X's and W's qt (and their scales) for the backward, not x and W: 1 byte per
element of x instead of 2, and 1 per element of W more (held from the forward to the backward).
`_wanted` decides which outputs each call needs (the one decision per recipe): X's qt only when
dW is an FP8 product and W needs a gradient, W's only when x needs one; dY's q only for dX, its
qt only for an FP8 dW.

What the quantization of one step moves, in bytes per element of each operand (bf16 in, e4m3
out), against the route of a separate transposed copy (read 2, write 2) and two quantize_fp8
calls (row: read 2, write 1; tensor-wise: read 2 twice, write 1); quantize_fp8_pair's reads are
argued in pingpong.quantize (two for "row" and "tensor", one block-wise):

    | recipe    | X (fwd + dW)          | W (fwd + dX)         | dY (dX + dW)          |
    |-----------|-----------------------|----------------------|-----------------------|
    | tensor    | 6 (was 14: 5 + 4 + 5) | 6 (was 14)           | 6 (was 14)            |
    | row       | 6 (was 10: 3 + 4 + 3) | 6 (was 10)           | 6 (was 10)            |
    | row_gw_hp | 3 (q alone, as was)   | 6 (was 10)           | 3 (q alone, as was)   |
    | block     | 4 (was 10)            | 4 (was 8: 3 + 3 + 2) | 4 (was 10)            |

Tensor-wise takes the same operands with one scale per tensor (qt then only serves the K-major
layouts).

Block-wise (DeepSeek-V3): activations and gradients in 1×128 blocks along the contraction, the
weight in 128×128 blocks (quantize_fp8's "block" and "block128x128"):

    | product | a: 1×128 blocks of                  | b                                          |
    |---------|-------------------------------------|--------------------------------------------|
    | Y       | X along K: (M, K/128)               | W, 128×128: (K/128, N/128)                 |
    | dX      | dY along N: (M, N/128)              | W, 128×128, transposed: (N/128, K/128)     |
    | dW      | dYᵀ along the tokens: (N, M'/128)   | X along the tokens, 1×128 of Xᵀ: (M'/128, K) |

A 128×128 block is the same set of values in W and in Wᵀ, so its amax, its scale and every
cast value are too: quantize_fp8(Wᵀ, "block128x128") is (qᵀ, sᵀ) of quantize_fp8(W,
"block128x128"), bitwise. So W's pair is one pass writing q and qᵀ (the kernel reads b
N-major) with the same scales, sᵀ contiguous (sᵀ.t() is then scale_b's outer-dim-major
layout). dW contracts the tokens, so X and dY are quantized again in 1×128 blocks of their
transposes (128 tokens × 1 column of the originals; one 128×128 tile holds both kinds of
group, so one read), the tokens padded with zeros to M' = a multiple of 128 (block-wise K,
here the tokens, must be one); the forward's 1×128 blocks along K are not valid there.
in_features and out_features must both be multiples of 128: each is the contraction of one
product (K of the forward, N of dX); the tokens (M) may be anything.

Recipes (RECIPES):

    | recipe      | Y, dX       | dW                                   | torchao's, forward fast-accumulated |
    |-------------|-------------|--------------------------------------|-------------------------------------|
    | "tensor"    | tensor-wise | FP8, tensor-wise                     | "tensorwise"                        |
    | "row"       | row-wise    | FP8, row-wise along the tokens       | "rowwise"                           |
    | "row_gw_hp" | row-wise    | the inputs' precision (pingpong's bf16 GEMM) | "rowwise_with_gw_hp"        |
    | "block"     | 1×128 × 128×128 | FP8, 1×128 × 1×128 along the tokens | (none)                          |

torchao's names are recipes of their own (TORCHAO_NAMES): pingpong's recipe of the same scales
with the forward GEMM fast-accumulated (use_fast_accum=True), as torchao's Float8LinearConfig
runs its output GEMM; both gradient GEMMs promote, in torchao's as in pingpong's. So a model
under "rowwise" and torchao's "rowwise" run the same arithmetic, and a comparison of the two
compares kernels, not recipes.

Formats: every FP8 operand, gradients included, is e4m3 (GRAD_DTYPE). The e5m2 tradition for
gradients comes from delayed scaling, where a stale amax needs the range; here every scale is
computed from the tensor it scales, at the call (on the device: no host sync), and row-wise
gives each row or column its own range, so e4m3's extra mantissa bit halves the rounding error
at no risk of overflow. pingpong's kernel also takes one FP8 kind per product: an e5m2 dY would
force W and X into e5m2 too. torchao's recipes use e4m3 for all three by default as well.
Every GEMM of pingpong's own recipes promotes its fp32 accumulator every 128 K
(use_fast_accum=False): pingpong's row-wise kernel needs no fast accumulation to be fast;
torchao's recipes fast-accumulate the forward (above).
Where this differs from torchao's "rowwise_with_gw_hp": torchao scales W tensor-wise for dX;
here W is scaled per column along N, the contraction, from the same pair of W as "row" (no copy).

Gradients have the inputs' dtypes (dX: x's, dW: W's, dbias: the bias's). What the recipe cannot
serve (in_features or out_features not a multiple of 16, of 128 for "block", in_features 0) is a PingpongError
naming the argument before any work; so is a weight requiring grad with fp32 x under a recipe of
high-precision dW (pingpong's GEMM takes bf16/fp16), and a double backward (the gradient GEMMs are not
differentiable: quantize_fp8 refuses a gradient that requires grad).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from .integration import inductor, ops
from .errors import PingpongError, check_tensor
from .fp8 import scaled_mm, scaled_mm_direct, shape_reason
from .kept import keeping, kept
from .quantize import IN_DTYPES, pair_like, quantize_fp8_pair, quantize_pair_direct
from .runtime.spec import FP8_MULTIPLE, INPUT_DTYPES, SCALE_BLOCK, check_bias

__all__ = ["fp8_linear", "RECIPES", "TORCHAO_NAMES", "recipe_name", "training_shape_reason", "GRAD_DTYPE"]

#: the FP8 format of every operand: forward and gradients (module docstring, "Formats")
GRAD_DTYPE = torch.float8_e4m3fn
#: the token dim of dW's operands is padded to a multiple of this (scaled_mm's K rule)
TOKEN_PAD = FP8_MULTIPLE


class Recipe(NamedTuple):
    granularity: str  # quantize_fp8's granularity of the activations and gradients (and their transposes)
    weight: str  # quantize_fp8's granularity of the weight
    fp8_weight_grad: bool  # dW as an FP8 GEMM; False: in the inputs' precision (pingpong's GEMM)
    fast_forward: bool = False  # the forward GEMM without promotion (use_fast_accum=True): torchao's recipes


#: pingpong's recipes (module docstring) ...
RECIPES = {"tensor": Recipe("tensor", "tensor", True), "row": Recipe("row", "row", True),
           "row_gw_hp": Recipe("row", "row", False), "block": Recipe("block", "block128x128", True)}
#: ... and torchao's, each by torchao's name: the pingpong recipe named here with a fast-accumulated forward
TORCHAO_NAMES = {"tensorwise": "tensor", "rowwise": "row", "rowwise_with_gw_hp": "row_gw_hp"}
RECIPES.update({name: RECIPES[ours]._replace(fast_forward=True) for name, ours in TORCHAO_NAMES.items()})


def recipe_name(recipe, argument: str = "recipe") -> str:
    """The recipe's name in RECIPES, or PingpongError naming the argument that gave it."""
    if isinstance(recipe, str) and recipe in RECIPES:
        return recipe
    raise PingpongError(f"{argument}: expected one of {tuple(RECIPES)}, got {recipe!r}")


def training_shape_reason(out_features: int, in_features: int, recipe: str = "row") -> str | None:
    """Why the FP8 training recipe (a name in RECIPES) cannot take an (out_features, in_features)
    weight, or None. Block-wise: both multiples of 128, each the contraction of one product."""
    why = shape_reason(out_features, in_features, "row")
    if why or RECIPES[recipe].granularity != "block":
        return why
    bad = [f"{name}={n}" for name, n in (("in_features", in_features), ("out_features", out_features))
           if n % SCALE_BLOCK]
    if bad:
        return (f"{', '.join(bad)}: block-wise FP8 training needs multiples of {SCALE_BLOCK} (in_features is the"
                f" forward's contraction, out_features the data gradient's)")
    return None


def check_fp8_linear(x, weight, bias, recipe: str) -> None:
    """fp8_linear's arguments (recipe already named by `recipe_name`): PingpongError naming the
    argument. Shapes, dtypes, strides and devices only: the fake implementation's check too.
    The device itself is quantize_fp8's first check (a GPU), before any work."""
    check_tensor("x", x)
    check_tensor("weight", weight)
    if weight.dim() != 2:
        raise PingpongError(f"weight: expected a 2-D (out_features, in_features) tensor, got shape"
                            f" {tuple(weight.shape)}")
    N, K = weight.shape
    why = training_shape_reason(N, K, recipe)
    if why:
        raise PingpongError(f"weight: {why} (recipe {recipe!r})")
    if x.dim() < 1 or x.shape[-1] != K:
        raise PingpongError(f"x: last dim must be in_features = {K} (weight.shape[1]), got shape {tuple(x.shape)}")
    if x.dtype not in IN_DTYPES:
        raise PingpongError(f"x: dtype {x.dtype} is not supported; expected one of {IN_DTYPES}")
    if weight.dtype != x.dtype:
        raise PingpongError(f"weight: dtype {weight.dtype} differs from x's {x.dtype}")
    if weight.device != x.device:
        raise PingpongError(f"weight: on {weight.device}; expected x's device {x.device}")
    if weight.stride(1) != 1:
        raise PingpongError(f"weight: rows must be contiguous (stride 1 along in_features), got strides"
                            f" {tuple(weight.stride())}")
    check_bias(bias, 1, N, x.device, per_column=True)


def check_weight_grad(x, weight, recipe: str) -> None:
    """A training call's dW in the inputs' precision (fp8_weight_grad False) runs on pingpong's
    bf16/fp16 GEMM: PingpongError naming x before any work for another dtype (fp32)."""
    if weight.requires_grad and not RECIPES[recipe].fp8_weight_grad and x.dtype not in INPUT_DTYPES:
        raise PingpongError(f"x: dtype {x.dtype} with recipe {recipe!r}, whose dW runs in the inputs' precision on"
                            f" pingpong's GEMM, which takes {INPUT_DTYPES}: cast the layer (.bfloat16()), take an"
                            f" FP8-dW recipe, or freeze the weight")


def fp8_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, recipe: str = "row") -> Tensor:
    """F.linear(x, weight, bias) in FP8 with the recipe's scales (module docstring), differentiable
    in x, weight and bias. x (…, K) and weight (N, K) of one dtype (bf16, fp16 or fp32); the
    output has x's dtype. Without autograd (no input requires grad, or grad mode off) it is the
    forward alone: two quantizations and one scaled_mm."""
    recipe = recipe_name(recipe)
    if isinstance(x, Tensor) and x.dim() >= 1 and x.shape[-1] > 1 and x.stride(-1) != 1:
        x = x.contiguous()  # rows with a stride (x.t(), x[..., ::2]): taken as F.linear takes them, on a copy
    if ops.traced(x, weight, bias):
        if ops.is_dtensor(x) or ops.is_dtensor(weight) or ops.is_dtensor(bias):
            return ops._rules().fp8_linear(x, weight, bias, recipe)  # each rank's local FP8 linear (pingpong.distributed)
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or
                                        (bias is not None and bias.requires_grad)):
            check_weight_grad(x, weight, recipe)
            x_cols, w_cols = _wanted(x, weight, recipe)
            xq = _traced_x_pair(x, recipe, x_cols)
            return torch.ops.pingpong.fp8_linear_train(x, weight, *xq, bias, recipe, x_cols, w_cols)[0]
        return torch.ops.pingpong.fp8_linear(x, weight, bias, recipe)
    check_fp8_linear(x, weight, bias, recipe)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or
                                    (bias is not None and bias.requires_grad)):
        check_weight_grad(x, weight, recipe)
        return _Fp8LinearFunction.apply(x, weight, bias, recipe, *_wanted(x, weight, recipe))
    return _forward(x, weight, bias, recipe)[0]


def _traced_x_pair(x, recipe: str, x_cols: bool) -> tuple:
    """X's quantize_fp8_pair as its own op (module docstring: equal ones merge), on x detached
    (the pair has no gradient; x's comes from the training op's formula): (qx, sx, qxt, sxt)."""
    r = RECIPES[recipe]
    if not isinstance(x, Tensor) or x.dim() < 1:  # the training op's fake implementation names x
        return (x,) * 4
    return torch.ops.pingpong.quantize_fp8_pair(x.detach().reshape(-1, x.shape[-1]), r.granularity, GRAD_DTYPE,
                                                _pad(r), True, x_cols)


def _wanted(x, weight, recipe: str) -> tuple[bool, bool]:
    """The one decision of which transposed FP8 operands the forward makes for the backward:
    (X along the tokens: dW is an FP8 product of the recipe and W needs a gradient; W along N:
    x needs a gradient)."""
    return weight.requires_grad and RECIPES[recipe].fp8_weight_grad, x.requires_grad


# ----------------------------------------------------------------------------- the three products


def _pad(recipe: Recipe) -> int:
    """The padding of the tokens of X's and dY's transposes (and of W's out_features, a no-op:
    they are multiples already): scaled_mm's K rule, 16, or 128 block-wise."""
    return SCALE_BLOCK if recipe.granularity == "block" else TOKEN_PAD


def _forward(x, weight, bias, recipe: str, x_cols: bool = False, w_cols: bool = False, out=None, xq=None):
    """Y = X·Wᵀ + bias: X per token (or 1×128 block) and W per output row (or 128×128 block),
    both along K; with x_cols (dW will be FP8) X's dW operand and with w_cols (dX is wanted) W's
    dX operand, from the same quantize_fp8_pair passes (X's given as `xq` = (qx, sx, qxt, sxt):
    the traced path's, quantized by its own op). Returns (y, qxt, sxt, qwt, swt) (the ones not
    asked for empty); into `out` when given: y, qwt and swt into theirs as the ops' fake
    implementations lay them out (inductor's buffers), None for each to allocate."""
    r = RECIPES[recipe]
    N, K = weight.shape
    y, qxt, sxt, qwt, swt = (None,) * 5 if out is None else out
    if xq is None:
        qx, sx, qxt, sxt = quantize_pair_direct(x.reshape(-1, K), r.granularity, GRAD_DTYPE, _pad(r), True, x_cols,
                                                (None, None, qxt, sxt))
    else:
        qx, sx, qxt, sxt = xq
    qw, sw, qwt, swt = _weight_pair(weight, r, w_cols, qwt, swt)
    y = scaled_mm_direct(qx, qw.t(), sx, sw.t(), bias, x.dtype, use_fast_accum=r.fast_forward,
                         out=None if y is None else y.view(-1, N))
    return y.view(*x.shape[:-1], N), qxt, sxt, qwt, swt


def _weight_pair(weight, r: Recipe, w_cols: bool, qwt=None, swt=None) -> tuple:
    """W's quantize_fp8_pair (qw, sw, qwt, swt), qwt / swt into the given buffers: made once
    per version of the weight inside `keep_quantized_weights` (pingpong.kept; then copied into
    the buffers, 2 bytes per element moved instead of the pair's 6), else at every call."""
    def make(buffers=(None, None)):
        return quantize_pair_direct(weight, r.weight, GRAD_DTYPE, _pad(r), True, w_cols, (None, None, *buffers))

    if not keeping(weight):
        return make((qwt, swt))
    qw, sw, kqwt, kswt = kept(weight, ("pair", r.weight, w_cols), make)
    return qw, sw, kqwt if qwt is None else qwt.copy_(kqwt), kswt if swt is None else swt.copy_(kswt)


def _backward_products(g2, qxt, sxt, qwt, swt, recipe: Recipe, data_grad: bool, weight_grad: bool, dtypes):
    """dX = dY·W (M, K) and dW = dYᵀ·X (N, K) in FP8 from one quantize_fp8_pair of dY: dY along
    N (rows) for dX, against W along N (qwt (K, N), b = qwtᵀ N-major); dYᵀ along the tokens
    (cols, (N, M')) for dW, against X along the tokens (qxt (K, M'), b = qxtᵀ)."""
    qg, sg, qgt, sgt = quantize_fp8_pair(g2, recipe.granularity, GRAD_DTYPE, _pad(recipe), rows=data_grad,
                                         cols=weight_grad)
    dx = scaled_mm(qg, qwt.t(), sg, swt.t(), out_dtype=dtypes[0]) if data_grad else None
    dw = scaled_mm(qgt, qxt.t(), sgt, sxt.t(), out_dtype=dtypes[1]) if weight_grad else None
    return dx, dw


def _save(ctx, x, weight, bias, recipe, x_cols, w_cols, qxt, sxt, qwt, swt) -> None:
    """Saves what the backward reads: the FP8 operands the forward made (X's and W's
    transposes), and x itself only for a high-precision dW; neither x nor W otherwise."""
    keep_x = weight.requires_grad and not RECIPES[recipe].fp8_weight_grad
    ctx.save_for_backward(x if keep_x else None, bias, qxt, sxt, qwt, swt)
    ctx.recipe, ctx.x_cols, ctx.w_cols = recipe, x_cols, w_cols
    ctx.shapes, ctx.dtypes = (x.shape, weight.shape), (x.dtype, weight.dtype)


def _setup_op(ctx, inputs, output) -> None:
    """pingpong::fp8_linear_train's: X's pair among its inputs, W's among its outputs."""
    x, weight, qx, sx, qxt, sxt, bias, recipe, x_cols, w_cols = inputs
    ctx.mark_non_differentiable(*output[1:])
    _save(ctx, x, weight, bias, recipe, x_cols, w_cols, qxt, sxt, *output[1:])


def _backward_op(ctx, grad, *_):
    """pingpong::fp8_linear_train's gradients, one per input (none for X's pair)."""
    needs = ctx.needs_input_grad
    dx, dw, dbias = _gradients(ctx, grad, needs[0], needs[1], needs[6])
    return dx, dw, None, None, None, None, dbias, None, None, None


def _gradients(ctx, grad, need_x: bool, need_w: bool, need_bias: bool):
    """(dX, dW, dbias) from what `_save` kept: the FP8 products (`_backward_products`), or dW in
    the inputs' precision; None for an input that needs no gradient (the need_* flags)."""
    x, bias, qxt, sxt, qwt, swt = ctx.saved_tensors
    if torch.is_grad_enabled():  # (in a backward only under create_graph=True)
        raise PingpongError("fp8_linear: double backward (create_graph=True) is not supported: the FP8 gradient"
                            " products are not differentiable")
    recipe = RECIPES[ctx.recipe]
    x_shape, (N, K) = ctx.shapes
    g2 = grad.reshape(-1, N).contiguous()  # (a broadcast gradient, e.g. of y.sum(), has stride 0)
    if g2.stride(-1) != 1:  # an empty one keeps stride 0 through contiguous(): nothing to copy
        g2 = grad.new_empty(g2.shape)
    data_grad, weight_grad = need_x and ctx.w_cols, need_w and ctx.x_cols
    dx = dw = dbias = None
    if data_grad or weight_grad:
        dx, dw = _backward_products(g2, qxt, sxt, qwt, swt, recipe, data_grad, weight_grad, ctx.dtypes)
        dx = None if dx is None else dx.view(x_shape)
    if need_w and not recipe.fp8_weight_grad:
        dw = ops._gemm(g2.mT, x.reshape(-1, K), out_dtype=ctx.dtypes[1])  # (N, K) row-major: the weight's layout
    if bias is not None and need_bias:
        dbias = ops._bias_grad(g2, bias)
    return dx, dw, dbias


@torch.library.custom_op("pingpong::fp8_linear", mutates_args=())
def _fp8_linear_op(x: Tensor, weight: Tensor, bias: Optional[Tensor], recipe: str) -> Tensor:
    return _forward(x, weight, bias, recipe)[0]


@_fp8_linear_op.register_fake
def _(x, weight, bias, recipe):
    inductor.register()
    check_fp8_linear(x, weight, bias, recipe_name(recipe))
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.custom_op("pingpong::fp8_linear_train", mutates_args=())
def _fp8_linear_train_op(x: Tensor, weight: Tensor, qx: Tensor, sx: Tensor, qxt: Tensor, sxt: Tensor,
                         bias: Optional[Tensor], recipe: str, x_cols: bool, w_cols: bool) -> tuple[Tensor, Tensor, Tensor]:
    """y, qwt, swt from x's pair (qx, sx, qxt, sxt: quantize_fp8_pair(x) as `_traced_x_pair`
    makes it) and W."""
    with torch.no_grad():
        y, _, _, qwt, swt = _forward(x, weight, bias, recipe, x_cols, w_cols, xq=(qx, sx, qxt, sxt))
    return y, qwt, swt


@_fp8_linear_train_op.register_fake
def _(x, weight, qx, sx, qxt, sxt, bias, recipe, x_cols, w_cols):
    inductor.register()
    r = RECIPES[recipe_name(recipe)]
    check_fp8_linear(x, weight, bias, recipe_name(recipe))
    N, K = weight.shape
    want = pair_like(x.reshape(-1, K), r.granularity, GRAD_DTYPE, _pad(r), True, x_cols)
    for name, got, t in zip(("qx", "sx", "qxt", "sxt"), (qx, sx, qxt, sxt), want):
        if got.shape != t.shape or got.dtype != t.dtype:
            raise PingpongError(f"{name}: expected x's quantize_fp8_pair output of shape {tuple(t.shape)} and"
                                f" dtype {t.dtype} (recipe {recipe!r}), got {tuple(got.shape)} {got.dtype}")
    y = x.new_empty((*x.shape[:-1], N))
    return (y, *pair_like(weight, r.weight, GRAD_DTYPE, _pad(r), False, w_cols)[2:])


_fp8_linear_train_op.register_autograd(_backward_op, setup_context=_setup_op)


@inductor.lowered("fp8_linear")
def fp8_linear_out(x, weight, *optional, bias: bool, recipe, out):
    """pingpong::fp8_linear (the forward alone) into inductor's buffer (pingpong.integration.inductor)."""
    _forward(x, weight, optional[0] if bias else None, recipe, out=(out, None, None, None, None))


@inductor.lowered("fp8_linear_train")
def fp8_linear_train_out(x, weight, qx, sx, qxt, sxt, *optional, bias: bool, recipe, x_cols, w_cols, out):
    """pingpong::fp8_linear_train into inductor's buffers (y, qwt, swt) (pingpong.integration.inductor)."""
    y, qwt, swt = out
    _forward(x, weight, optional[0] if bias else None, recipe, x_cols, w_cols, (y, None, None, qwt, swt),
             (qx, sx, qxt, sxt))


class _Fp8LinearFunction(torch.autograd.Function):
    """Eager autograd around the forward (the same formulas as the pingpong::fp8_linear_train
    op: cheaper on the host than the op's Python autograd wrapper, pingpong.integration.ops)."""

    @staticmethod
    def forward(ctx, x, weight, bias, recipe, x_cols, w_cols):
        out = _forward(x, weight, bias, recipe, x_cols, w_cols)
        _save(ctx, x, weight, bias, recipe, x_cols, w_cols, *out[1:])
        return out[0]

    @staticmethod
    def backward(ctx, grad):
        return (*_gradients(ctx, grad, *ctx.needs_input_grad[:3]), None, None, None)
