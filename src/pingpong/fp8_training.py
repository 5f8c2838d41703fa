"""FP8 training: `fp8_linear`, y = x·Wᵀ + bias differentiable in x, W and bias, with the forward
and both gradient GEMMs in FP8 (pingpong.quantize_fp8, then pingpong.scaled_mm). While
torch.compile traces, the ``pingpong::fp8_linear`` op (a fake implementation gives the shape;
its autograd formula, registered once below, records quantize_fp8 and scaled_mm ops into the
backward graph). The layer is pingpong.nn.Float8TrainingLinear.

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
X is quantized again, one scale per column along the tokens, and dY likewise. quantize_fp8
reads rows and scaled_mm reads both operands K-major, so "per column" means: copy the
transpose, then quantize its rows. The copies (all in the inputs' precision, each once):

- dX: Wᵀ (K, N), so W is scaled along N (its rows become K-major b = (Wᵀ)ᵀ);
- dW: dYᵀ (N, M') and Xᵀ (K, M'), with the tokens padded by zeros to M' = a multiple of 16
  (at least 16): scaled_mm's K must be one (16-byte fp8 rows), and zeros change neither a
  sum nor an amax, so any M (1, 17, 777) trains.

Tensor-wise takes the same operands and copies with one scale per tensor (the copies then only
serve the K-major layouts).

Block-wise (DeepSeek-V3): activations and gradients in 1×128 blocks along the contraction, the
weight in 128×128 blocks (quantize_fp8's "block" and "block128x128"):

    | product | a: 1×128 blocks of                  | b                                          |
    |---------|-------------------------------------|--------------------------------------------|
    | Y       | X along K: (M, K/128)               | W, 128×128: (K/128, N/128)                 |
    | dX      | dY along N: (M, N/128)              | W, 128×128, transposed: (N/128, K/128)     |
    | dW      | dYᵀ along the tokens: (N, M'/128)   | X along the tokens, 1×128 of Xᵀ: (M'/128, K) |

A 128×128 block is the same set of values in W and in Wᵀ, so its amax, its scale and every
cast value are too: quantize_fp8(Wᵀ, "block128x128") is (qᵀ, sᵀ) of quantize_fp8(W,
"block128x128"), bitwise. So dX needs no quantization of Wᵀ: the backward quantizes W as the
forward does (only the high-precision inputs are saved) and transposes the result, an fp8 copy
of qᵀ (the kernel reads b N-major) and sᵀ made contiguous (sᵀ.t() is then scale_b's
outer-dim-major layout), instead of copying Wᵀ in the inputs' precision and quantizing that.
dW contracts the tokens, so X and dY are quantized again in 1×128 blocks of their transposes
(128 tokens × 1 column of the originals), the tokens padded with zeros to M' = a multiple of 128
(block-wise K, here the tokens, must be one); the forward's 1×128 blocks along K are not
valid there. in_features and out_features must both be multiples of 128: each is the
contraction of one product (K of the forward, N of dX); the tokens (M) may be anything.

Recipes (RECIPES; torchao's names are accepted too):

    | recipe      | torchao             | Y, dX       | dW                                   |
    |-------------|---------------------|-------------|--------------------------------------|
    | "tensor"    | "tensorwise"        | tensor-wise | FP8, tensor-wise                     |
    | "row"       | "rowwise"           | row-wise    | FP8, row-wise along the tokens       |
    | "row_gw_hp" | "rowwise_with_gw_hp"| row-wise    | the inputs' precision (pingpong's bf16 GEMM), no copies |
    | "block"     | (none)              | 1×128 × 128×128 | FP8, 1×128 × 1×128 along the tokens |

Formats: every FP8 operand, gradients included, is e4m3 (GRAD_DTYPE). The e5m2 tradition for
gradients comes from delayed scaling, where a stale amax needs the range; here every scale is
computed from the tensor it scales, at the call (on the device: no host sync), and row-wise
gives each row or column its own range, so e4m3's extra mantissa bit halves the rounding error
at no risk of overflow. pingpong's kernel also takes one FP8 kind per product: an e5m2 dY would
force W and X into e5m2 too. torchao's recipes use e4m3 for all three by default as well.
Every GEMM promotes its fp32 accumulator every 128 K (use_fast_accum=False): pingpong's
row-wise kernel needs no fast accumulation to be fast (torchao's row-wise recipes turn it on).
Where this differs from torchao's "rowwise_with_gw_hp": torchao scales W tensor-wise for dX;
here W is scaled per column along N, the contraction, at the cost of the Wᵀ copy "row" pays.

Gradients have the inputs' dtypes (dX: x's, dW: W's, dbias: the bias's). What the recipe cannot
serve (in_features or out_features not a multiple of 16, of 128 for "block", in_features 0) is a PingpongError
naming the argument before any work; so is a double backward (the gradient GEMMs are not
differentiable: quantize_fp8 refuses a gradient that requires grad).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from . import ops
from .errors import PingpongError, check_tensor
from .fp8 import scaled_mm, shape_reason
from .quantize import IN_DTYPES, quantize_fp8
from .runtime.spec import FP8_MULTIPLE, SCALE_BLOCK, check_bias

__all__ = ["fp8_linear", "RECIPES", "TORCHAO_NAMES", "recipe_name", "training_shape_reason", "GRAD_DTYPE"]

#: the FP8 format of every operand: forward and gradients (module docstring, "Formats")
GRAD_DTYPE = torch.float8_e4m3fn
#: the token dim of dW's operands is padded to a multiple of this (scaled_mm's K rule)
TOKEN_PAD = FP8_MULTIPLE


class Recipe(NamedTuple):
    granularity: str  # quantize_fp8's granularity of the activations and gradients (and tokens-last copies)
    weight: str  # quantize_fp8's granularity of the weight
    fp8_weight_grad: bool  # dW as an FP8 GEMM; False: in the inputs' precision (pingpong's GEMM)
    torchao: Optional[str]  # torchao's name of the recipe (None: torchao's float8 training has none)


RECIPES = {"tensor": Recipe("tensor", "tensor", True, "tensorwise"), "row": Recipe("row", "row", True, "rowwise"),
           "row_gw_hp": Recipe("row", "row", False, "rowwise_with_gw_hp"),
           "block": Recipe("block", "block128x128", True, None)}
TORCHAO_NAMES = {r.torchao: name for name, r in RECIPES.items() if r.torchao}


def recipe_name(recipe, argument: str = "recipe") -> str:
    """The recipe's name in RECIPES (torchao's names map to ours), or PingpongError naming the
    argument that gave it."""
    if isinstance(recipe, str):
        if recipe in RECIPES:
            return recipe
        if recipe in TORCHAO_NAMES:
            return TORCHAO_NAMES[recipe]
    raise PingpongError(f"{argument}: expected one of {(*RECIPES, *TORCHAO_NAMES)}, got {recipe!r}")


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


def fp8_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, recipe: str = "row") -> Tensor:
    """F.linear(x, weight, bias) in FP8 with the recipe's scales (module docstring), differentiable
    in x, weight and bias. x (…, K) and weight (N, K) of one dtype (bf16, fp16 or fp32); the
    output has x's dtype. Without autograd (no input requires grad, or grad mode off) it is the
    forward alone: two quantizations and one scaled_mm."""
    recipe = recipe_name(recipe)
    if ops.traced(x, weight, bias):
        return torch.ops.pingpong.fp8_linear(x, weight, bias, recipe)
    check_fp8_linear(x, weight, bias, recipe)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or
                                    (bias is not None and bias.requires_grad)):
        return _Fp8LinearFunction.apply(x, weight, bias, recipe)
    return _forward(x, weight, bias, recipe)


# ----------------------------------------------------------------------------- the three products


def _forward(x, weight, bias, recipe: str) -> Tensor:
    """Y = X·Wᵀ + bias: X per token (or 1×128 block) and W per output row (or 128×128 block),
    both along K (no copies)."""
    r = RECIPES[recipe]
    N, K = weight.shape
    qx, sx = quantize_fp8(x.reshape(-1, K), r.granularity, GRAD_DTYPE)
    qw, sw = quantize_fp8(weight, r.weight, GRAD_DTYPE)
    y = scaled_mm(qx, qw.t(), sx, sw.t(), bias=bias, out_dtype=x.dtype)
    return y.view(*x.shape[:-1], N)


def _data_grad(g2, weight, recipe: Recipe, dtype) -> Tensor:
    """dX = dY·W (M, K): dY per token (or 1×128 block) along N; W per column along N, from Wᵀ
    (K, N) (a copy: quantize_fp8 reads rows, and b must be N-major). 128×128 blocks: W's own
    quantization transposed (module docstring), an fp8 copy."""
    qg, sg = quantize_fp8(g2, recipe.granularity, GRAD_DTYPE)
    if recipe.weight == "block128x128":
        qw, sw = quantize_fp8(weight, recipe.weight, GRAD_DTYPE)
        qwt, swt = qw.t().contiguous(), sw.t().contiguous()
    else:
        qwt, swt = quantize_fp8(weight.t().contiguous(), recipe.weight, GRAD_DTYPE)
    return scaled_mm(qg, qwt.t(), sg, swt.t(), out_dtype=dtype)


def tokens_last(t: Tensor, pad: int = TOKEN_PAD) -> Tensor:
    """tᵀ (C, M') of a (M, C) t, contiguous, the tokens padded with zeros to M' (a multiple of
    `pad`, at least one): the weight gradient's operands, quantized along the tokens (a copy)."""
    M, C = t.shape
    Mp = max(pad, -(-M // pad) * pad)
    out = t.new_empty(C, Mp)
    out[:, :M].copy_(t.t())
    out[:, M:].zero_()
    return out


def _weight_grad(g2, x2, granularity: str, dtype) -> Tensor:
    """dW = dYᵀ·X (N, K), contracting the tokens: dYᵀ per output column and X per input column
    (block-wise: per 128 tokens of each), both along the tokens (tokens_last: two copies, the
    tokens padded to 16, or 128 block-wise: scaled_mm's K rule)."""
    pad = SCALE_BLOCK if granularity == "block" else TOKEN_PAD
    qg, sg = quantize_fp8(tokens_last(g2, pad), granularity, GRAD_DTYPE)  # (N, M') e4m3, (N, 1) | (N, M'/128)
    qx, sx = quantize_fp8(tokens_last(x2, pad), granularity, GRAD_DTYPE)  # (K, M') e4m3, (K, 1) | (K, M'/128)
    return scaled_mm(qg, qx.t(), sg, sx.t(), out_dtype=dtype)


def _setup(ctx, inputs, output) -> None:
    x, weight, bias, recipe = inputs
    ctx.save_for_backward(x, weight, bias)  # the high-precision inputs: each product re-quantizes
    ctx.recipe = recipe


def _backward(ctx, grad):
    x, weight, bias = ctx.saved_tensors
    if torch.is_grad_enabled() and (grad.requires_grad or x.requires_grad or weight.requires_grad):
        raise PingpongError("fp8_linear: double backward (create_graph=True) is not supported: the FP8 gradient"
                            " products are not differentiable")
    needs = ctx.needs_input_grad
    recipe = RECIPES[ctx.recipe]
    N, K = weight.shape
    g2 = grad.reshape(-1, N).contiguous()  # (a broadcast gradient, e.g. of y.sum(), has stride 0)
    dx = dw = dbias = None
    if needs[0]:
        dx = _data_grad(g2, weight, recipe, x.dtype).view(x.shape)
    if needs[1]:
        x2 = x.reshape(-1, K)
        if recipe.fp8_weight_grad:
            dw = _weight_grad(g2, x2, recipe.granularity, weight.dtype)
        else:
            dw = ops._gemm(g2.mT, x2, out_dtype=weight.dtype)  # (N, K) row-major: the weight's layout
    if bias is not None and needs[2]:
        dbias = ops._bias_grad(g2, bias)
    return dx, dw, dbias, None


@torch.library.custom_op("pingpong::fp8_linear", mutates_args=())
def _fp8_linear_op(x: Tensor, weight: Tensor, bias: Optional[Tensor], recipe: str) -> Tensor:
    with torch.no_grad():
        return _forward(x, weight, bias, recipe)


@_fp8_linear_op.register_fake
def _(x, weight, bias, recipe):
    check_fp8_linear(x, weight, bias, recipe_name(recipe))
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


_fp8_linear_op.register_autograd(_backward, setup_context=_setup)


class _Fp8LinearFunction(torch.autograd.Function):
    """Eager autograd around the forward (the same formulas as the pingpong::fp8_linear op:
    cheaper on the host than the op's Python autograd wrapper, pingpong.ops)."""

    @staticmethod
    def forward(ctx, x, weight, bias, recipe):
        out = _forward(x, weight, bias, recipe)
        _setup(ctx, (x, weight, bias, recipe), out)
        return out

    backward = staticmethod(_backward)
