"""FP8 training of mixture-of-experts experts: `fp8_grouped_linear`, Y_g = X_g·W_gᵀ for the
tokens X_g routed to expert g, differentiable in x and the stacked expert weights, the forward
and the data gradient as FP8 grouped products (pingpong.scaled_grouped_mm), the weight
gradient an FP8 K-grouped product (pingpong.scaled_grouped_k_mm) or, recipe "row_gw_hp", in the
inputs' precision (pingpong.grouped_mm's ragged-K kernel). While autograd
records or torch.compile traces, the ``pingpong::fp8_grouped_linear_train`` op (with grad: Y
and W's column maxima for dX, its autograd formula registered once below) or
``pingpong::fp8_grouped_linear`` (the forward alone); fake implementations give the shapes. pingpong.moe
runs a transformers model's experts through it (`use_pingpong_experts(model, fp8=...)`).

x (T, K): the routed tokens sorted by expert; weight (G, N, K): the experts' stacked weights
(transformers' layout: gate_up_proj (E, 2I, H), down_proj (E, H, I)); offs (G,) int32, the
cumulative row ends (pingpong.grouped's convention; read on the device only, no host sync).
The three products, per group g:

    | product | per group         | contracts   | a (scale per row)             | b (scale per column)               |
    |---------|-------------------|-------------|-------------------------------|------------------------------------|
    | Y       | X_g · W_gᵀ (T_g,N)| K           | X per token, along K: (T,)    | W_g per output row, along K: (G, N)|
    | dX      | dY_g · W_g (T_g,K)| N           | dY per token, along N: (T,)   | W_g per column, along N: (G, K)    |
    | dW      | dY_gᵀ · X_g (N,K) | T_g (tokens)| dY_gᵀ per feature, along T_g: | X_g per feature, along T_g: (G, K)  |
    |         |                   |             | (G, N) (block: per 128 tokens) | (row_gw_hp: grouped_mm, ragged K)   |

Each operand is quantized along the contraction of the product it feeds, as
pingpong.fp8_training's dense recipes are (its RECIPES table, GRAD_DTYPE e4m3 for every
operand, dynamic scales from quantize_fp8 on the device). The FP8 grouped kernel reads b
K-major only (fp8 wgmma takes no transposed operand), so dX's b, W_g read along N, must be
stored N-contiguous: Wᵀ (G, K, N). The weights change every step, so both are quantized
every step, and row-wise each needs its whole axis: a row's scale all of its K, a column's
all of the expert's N rows. No kernel can cast an element along both before it has read the
whole expert (pingpong.quantize's pair argument), so W is read twice, by two kernels:

    forward   quantize_stacked_direct(W)           one read: q, s (G, N) along K, and each
                                                   column's max |W| along N, amax (G, K) fp32
    backward  quantize_fp8_columns(W, amax=amax)   one read: Wᵀ (G, K, N) along N, s (G, K)

6 bytes per weight element (2 reads of bf16, 2 fp8 writes) where reading W twice for dX's
quantization alone made 8. The forward keeps amax for the backward (the op
pingpong::fp8_grouped_linear_train returns it beside Y), not the fp8 Wᵀ: writing Wᵀ in the
forward moves the same bytes but holds half a byte per weight element more from the forward
to the backward (a Qwen3-30B-A3B layer: 0.6 GB). `_wanted` decides when (x needs a gradient,
the rows fit MAX_ROW); otherwise dX's quantization reads W twice itself. Block-wise (1×128
activations, 128×128 weights, DeepSeek-V3), a 128×128 block is the same set of values in W_g and
W_gᵀ, so dX's b is W's block quantization written transposed by the quantizing kernel itself
(quantize_fp8_blocks_t: one read of W, qᵀ (G, K, N) and the scale grid (G, K/128, N/128);
recipe "block"). An fp8 transposed copy of the forward's q instead ran at a tenth of the
bandwidth (torch's generic strided copy: 1.7 ms for a Qwen3-30B-A3B gate-up weight on an H200).

The weight gradient contracts each expert's tokens, a ragged K. With the recipes whose weight
gradient is FP8 ("row" and torchao's "rowwise"; "block": DeepSeek-V3's), dYᵀ and Xᵀ are each
quantized along the tokens, per expert (row-wise: one scale per expert and feature; block-wise:
per 128 tokens and feature), and written transposed with the tokens contiguous, each expert's
run padded with zeros to a multiple of 128 on the device (pingpong.quantize_groups_t, no host
sync); the product is pingpong.scaled_grouped_k_mm (the FP8 K-grouped kernel,
pingpong.hopper.kernels.fp8_grouped_k), whose 128-deep K blocks never straddle two experts.
"row_gw_hp" (and torchao's "rowwise_with_gw_hp") keeps it in the inputs' precision: grouped_mm's
ragged-K product of dYᵀ and X. Tensor-wise is refused, naming the recipe (one scale over every
expert's tokens would let the largest expert's range set every other's precision).

Rows of the output past offs[-1] are not written (as grouped_mm's forward); dX's product op
zeroes them (scaled_grouped_mm's zero_tail: only those rows written).

What bounds the step (an experts block: gate-up and down projections, forward and backward;
T routed rows, weights of E·(N₁K₁ + N₂K₂) elements; Hopper's dense rates, FP8 twice bf16's):
bf16 is three products at the bf16 rate and the SwiGLU's elementwise traffic (~28 bytes per
routed row at Qwen3-30B-A3B's widths). FP8 row_gw_hp does two products at the FP8 rate, the
weight gradient still at the bf16 rate, the activations' row quantizations (3 bytes per
element of X, h and both dY), the SwiGLU as bf16, and the weights' 6 bytes per element, a
cost independent of T. Per routed row it saves a third of the products' time and spends a
third of that saving on the activations' quantization, so its ratio to bf16 approaches
(3 products at bf16 + SwiGLU) / (2 at FP8 + 1 at bf16 + quantization + SwiGLU) ≈ 1.2 at large
T, and is below 1 near 512 rows per expert, where the weights' quantization is a quarter of
the step. The FP8 weight gradient ("row", "block": dYᵀ and Xᵀ quantized along the tokens too,
6 more bytes per activation element) moves the large-T limit to just under 1.3; past it only fewer bytes per
element help (each second read from L2). The numbers are in the benchmark results.

What the recipe cannot serve (K or N not a multiple of 16, of 128 block-wise), x not
(T, K) bf16/fp16 with contiguous rows, a weight of another dtype or device or not a
contiguous (G, N, K), offs not (G,) int32 on x's device, the tensor-wise recipe: PingpongError
naming the argument before any work; so is a double backward.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import grouped as grouped_mod
from .integration import inductor, ops
from .kept import kept
from .errors import PingpongError, check_tensor
from .fp8_grouped import scaled_grouped_k_mm, scaled_grouped_mm_direct, scaled_grouped_mm_route
from .fp8_training import GRAD_DTYPE, RECIPES, recipe_name, training_shape_reason
from .grouped import grouped_mm
from .quantize import MAX_ROW, quantize_fp8, quantize_fp8_blocks_t, quantize_fp8_columns, quantize_stacked_direct
from .quantize_groups import quantize_groups_t
from .runtime.spec import SCALE_BLOCK, check_offs

__all__ = ["fp8_grouped_linear", "GROUPED_RECIPES", "grouped_recipe", "check_fp8_grouped_linear"]

#: the recipes of pingpong.fp8_training the grouped path serves: all but tensor-wise (module docstring)
GROUPED_RECIPES = tuple(name for name, r in RECIPES.items() if r.granularity != "tensor")
#: x's dtypes: the FP8 products' outputs and grouped_mm's inputs (the weight gradient) alike
DTYPES = (torch.bfloat16, torch.float16)


def grouped_recipe(recipe, argument: str = "recipe") -> str:
    """The recipe's name in RECIPES if the grouped path serves it (GROUPED_RECIPES), else a
    PingpongError naming the argument."""
    name = recipe_name(recipe, argument)
    if name not in GROUPED_RECIPES:
        raise PingpongError(f"{argument}: recipe {recipe!r} scales tensor-wise, which the grouped (MoE) path does"
                            f" not serve (one scale over every expert's tokens); use one of {GROUPED_RECIPES}")
    return name


def check_fp8_grouped_linear(x, weight, offs, recipe: str) -> None:
    """fp8_grouped_linear's arguments (recipe already named by `grouped_recipe`): PingpongError
    naming the argument. Shapes, dtypes, strides and devices only (the fake implementation's
    check too); the device itself is quantize_fp8's first check."""
    check_tensor("x", x)
    check_tensor("weight", weight)
    if weight.dim() != 3:
        raise PingpongError(f"weight: expected a 3-D (G, N, K) tensor of stacked expert weights, got shape"
                            f" {tuple(weight.shape)}")
    G, N, K = weight.shape
    why = training_shape_reason(N, K, recipe)
    if why:
        raise PingpongError(f"weight: {why} (recipe {recipe!r}; weight is (G, N, K) = {tuple(weight.shape)})")
    if x.dim() != 2 or x.shape[1] != K:
        raise PingpongError(f"x: expected (T, K) with K = {K} (weight.shape[2]), got shape {tuple(x.shape)}")
    if x.dtype not in DTYPES:
        raise PingpongError(f"x: dtype {x.dtype} is not supported; expected one of {DTYPES}")
    if x.stride(1) != 1 and K > 1:
        raise PingpongError(f"x: rows must be contiguous (stride 1 along K), got strides {tuple(x.stride())}")
    if weight.dtype != x.dtype:
        raise PingpongError(f"weight: dtype {weight.dtype} differs from x's {x.dtype}")
    if weight.device != x.device:
        raise PingpongError(f"weight: on {weight.device}; expected x's device {x.device}")
    if not weight.is_contiguous():
        raise PingpongError(f"weight: expected a contiguous (G, N, K) tensor, got strides {tuple(weight.stride())}"
                            " (a transposed (G, K, N) storage: pass weight.transpose(1, 2).contiguous())")
    if check_offs(offs, x.device, "x") != G:
        raise PingpongError(f"offs: expected G = {G} cumulative row ends (weight.shape[0]), got {offs.shape[0]}")


def fp8_grouped_linear(x: Tensor, weight: Tensor, offs: Tensor, recipe: str = "row_gw_hp") -> Tensor:
    """(T, N): rows of group g are x[rows of g] · weight[g]ᵀ, in FP8 with the recipe's scales
    (module docstring); differentiable in x and weight. Without autograd (no input requires
    grad, or grad mode off) it is the forward alone: two quantizations and one grouped product."""
    recipe = grouped_recipe(recipe)
    check_fp8_grouped_linear(x, weight, offs, recipe)
    if ops.needs_op(x, weight, offs):
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
            return torch.ops.pingpong.fp8_grouped_linear_train(x, weight, offs, recipe,
                                                               _wanted(x, weight, recipe))[0]
        return torch.ops.pingpong.fp8_grouped_linear(x, weight, offs, recipe)
    return _forward(x, weight, offs, recipe)[0]


def _wanted(x, weight, recipe: str) -> bool:
    """The one decision of whether the forward keeps W's column maxima for dX (module
    docstring): x needs a gradient, W is scaled row-wise, and its rows fit the one-read row
    kernel (pingpong.quantize.MAX_ROW; longer rows: dX's quantization reads W twice instead)."""
    return x.requires_grad and RECIPES[recipe].weight == "row" and weight.shape[2] <= MAX_ROW


# ----------------------------------------------------------------------------- the products


def _quantize_weight(weight: Tensor, granularity: str):
    """(q (G, N, K), scale) of the stacked weights along K: row-wise (G, N); 128×128 blocks
    (G, N/128, K/128) (N a multiple of 128: no block spans two experts)."""
    G, N, K = weight.shape
    q, s = quantize_fp8(weight.reshape(G * N, K), granularity, GRAD_DTYPE)
    s = s.view(G, N) if granularity == "row" else s.view(G, N // SCALE_BLOCK, K // SCALE_BLOCK)
    return q.view(G, N, K), s


def _activation_scale(s: Tensor, granularity: str) -> Tensor:
    """quantize_fp8's scale of a (T, C) activation as scaled_grouped_mm's scale_a: (T,) row-wise;
    block-wise (T, C/128) outer-dim-major, as returned."""
    return s.view(-1) if granularity == "row" else s


def _forward(x, weight, offs, recipe: str, w_amax: bool = False, out=(None, None)):
    """(Y, amax): Y = X_g·W_gᵀ, X per token (1×128 blocks) and W per output row (128×128
    blocks), both along K (no copies: b is W's K-major view); with w_amax W's rows are quantized
    by the one read that also gives each expert's column maxima along N, amax (G, K) fp32, which
    dX's quantization of W then casts with (else amax is empty (0,)). Into `out` = (y, amax)
    (inductor's buffers, as the train op's fake implementation lays them out; None: new)."""
    r = RECIPES[recipe]
    y, amax = out
    qx, sx = quantize_fp8(x, r.granularity, GRAD_DTYPE)
    if w_amax:  # kept inside keep_quantized_weights (pingpong.kept), as quantize_columns_direct's Wᵀ
        qw, sw, amax = quantize_stacked_direct(weight, GRAD_DTYPE, amax)
    else:
        qw, sw = kept(weight, "rows " + r.weight, lambda: _quantize_weight(weight, r.weight))
        amax = weight.new_empty(0, dtype=torch.float32) if amax is None else amax
    y = scaled_grouped_mm_direct(qx, qw.transpose(1, 2), _activation_scale(sx, r.granularity), sw, offs, x.dtype,
                                 r.fast_forward, y)
    return y, amax


def _data_grad(g, weight, amax, offs, recipe: str, dtype) -> Tensor:
    """dX = dY_g·W_g (T, K), contracting N: dY per token (1×128 blocks) along N; W_g per column
    along N, quantized straight into Wᵀ's layout (G, K, N) (quantize_fp8_columns, from the
    forward's column maxima `amax` when given: one read of W), or block-wise W's 128×128
    quantization written transposed (quantize_fp8_blocks_t). Rows past offs[-1] set to zero by the product's op
    (only those rows written)."""
    r = RECIPES[recipe]
    qg, sg = quantize_fp8(g, r.granularity, GRAD_DTYPE)
    if r.weight == "block128x128":  # W's 128×128 blocks written transposed by the quantization itself
        qwt, swt = kept(weight, "columns block", lambda: quantize_fp8_blocks_t(weight, GRAD_DTYPE))
    else:  # W along N, written transposed (G, K, N) by the quantization itself: no copy of Wᵀ
        qwt, swt = quantize_fp8_columns(weight, GRAD_DTYPE, amax)
    return scaled_grouped_mm_route(qg, qwt.transpose(1, 2), _activation_scale(sg, r.granularity), swt, offs, dtype,
                                   False, zero_tail=True)


def _weight_grad(g, x, offs, recipe: str, dtype) -> Tensor:
    """dW_g = dY_gᵀ·X_g (G, N, K), contracting each expert's tokens (an empty expert gives zeros):
    FP8, dYᵀ and Xᵀ quantized per expert along the tokens into padded runs and multiplied by the
    K-grouped kernel; row_gw_hp: grouped_mm's ragged-K product in the inputs' precision."""
    r = RECIPES[recipe]
    if not r.fp8_weight_grad:
        return grouped_mm(g.t(), x, offs, out_dtype=dtype)
    granularity = "row" if r.granularity == "row" else "block"
    qgt, sg, poffs = quantize_groups_t(g, offs, GRAD_DTYPE, granularity)
    qxt, sx, _ = quantize_groups_t(x, offs, GRAD_DTYPE, granularity)
    return scaled_grouped_k_mm(qgt, qxt, sg, sx, poffs, scaling=granularity, out_dtype=dtype)


# ----------------------------------------------------------------------------- ops and autograd


@torch.library.custom_op("pingpong::fp8_grouped_linear", mutates_args=())
def _fp8_grouped_linear_op(x: Tensor, weight: Tensor, offs: Tensor, recipe: str) -> Tensor:
    return _forward(x, weight, offs, recipe)[0]


@_fp8_grouped_linear_op.register_fake
def _(x, weight, offs, recipe):
    inductor.register()
    check_fp8_grouped_linear(x, weight, offs, grouped_recipe(recipe))
    return x.new_empty((x.shape[0], weight.shape[1]))


@torch.library.custom_op("pingpong::fp8_grouped_linear_train", mutates_args=())
def _fp8_grouped_linear_train_op(x: Tensor, weight: Tensor, offs: Tensor, recipe: str,
                                 w_amax: bool) -> tuple[Tensor, Tensor]:
    with torch.no_grad():
        return _forward(x, weight, offs, recipe, w_amax)


@_fp8_grouped_linear_train_op.register_fake
def _(x, weight, offs, recipe, w_amax):
    inductor.register()
    check_fp8_grouped_linear(x, weight, offs, grouped_recipe(recipe))
    G, N, K = weight.shape
    amax = weight.new_empty((G, K) if w_amax else (0,), dtype=torch.float32)
    return x.new_empty((x.shape[0], N)), amax


@inductor.lowered("fp8_grouped_linear")
def fp8_grouped_linear_out(x, weight, offs, *, recipe, out):
    """pingpong::fp8_grouped_linear (the forward alone) into inductor's buffer (pingpong.integration.inductor)."""
    _forward(x, weight, offs, recipe, out=(out, None))


@inductor.lowered("fp8_grouped_linear_train")
def fp8_grouped_linear_train_out(x, weight, offs, *, recipe, w_amax, out):
    """pingpong::fp8_grouped_linear_train into inductor's buffers (y, amax) (pingpong.integration.inductor)."""
    _forward(x, weight, offs, recipe, w_amax, out)


def _setup(ctx, inputs, output) -> None:
    x, weight, offs, recipe, _ = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)  # no zeros made for amax's gradient (a launch per backward)
    ctx.save_for_backward(x, weight, offs, output[1])  # the inputs (each product quantizes its own), W's column maxima
    ctx.recipe = recipe


def _backward(ctx, grad, _):
    x, weight, offs, amax = ctx.saved_tensors
    if torch.is_grad_enabled() and (grad.requires_grad or x.requires_grad or weight.requires_grad):
        raise PingpongError("fp8_grouped_linear: double backward (create_graph=True) is not supported: the FP8"
                            " gradient products are not differentiable")
    grouped_mod._ensure_context(grad)
    g = grad.to(x.dtype).contiguous()  # (T, N); a broadcast gradient has stride 0
    if not g.numel():  # (an empty one keeps its zero strides through contiguous())
        g = g.new_empty(g.shape)
    needs_x, needs_w = ctx.needs_input_grad[:2]
    dx = _data_grad(g, weight, amax if amax.dim() == 2 else None, offs, ctx.recipe, x.dtype) if needs_x else None
    dw = _weight_grad(g, x, offs, ctx.recipe, weight.dtype) if needs_w else None
    return dx, dw, None, None, None


_fp8_grouped_linear_train_op.register_autograd(_backward, setup_context=_setup)
