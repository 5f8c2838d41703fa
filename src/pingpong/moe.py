"""Mixture-of-experts layers on pingpong.grouped_mm, and the hook into transformers' MoE models.

    x (T, H), router: top_k_index (T, k), top_k_weights (T, k)
      │ permute: the T·k (token, expert) pairs sorted by expert (stable argsort), group sizes
      │          counted on the device (scatter_add), offs = cumsum  — no host sync
      ▼
    gate_up = grouped_mm(x[token of pair], w_gate_up.transpose(1, 2), offs)    (T·k, 2I)
    h       = act(gate) · up                                                   (T·k, I)
    y       = grouped_mm(h, w_down.transpose(1, 2), offs)                      (T·k, H)
      │ un-permute (gather by the inverse order), weight each pair by its routing weight,
      │ sum each token's k pairs: a fixed order, no atomics, the same result on every run
      ▼
    out (T, H)

`experts_forward(experts, hidden_states, top_k_index, top_k_weights)` is that computation
with the experts module's own parameters, in the layout its transformers flags name
(use_experts_implementation's): gate_up_proj (E, 2I, H), down_proj (E, H, I), or their
transposes when `is_transposed` (or `experts_are_transposed`); up_proj (E, I, H) and the
activation alone when not `has_gate`; optional biases (`*_proj_bias`); `_apply_gate` or
`act_fn`; `post_expert_norm` of each pair's output, before its routing weight, when
`has_post_expert_norm`. Autograd flows through grouped_mm's op (dX, dW as grouped
products), the gather (its gradient summed per token in a fixed order), the activation
and the weighted sum: a step's gradients are the same bit for bit from run to run.

The hook (`use_pingpong_experts(model)`): transformers 5 computes every MoE layer's experts
through an *experts implementation* chosen per model (`ExpertsInterface`: "eager" is the
per-expert loop, "grouped_mm" torch._grouped_mm). We register `experts_forward` there as
"pingpong" and select it with `model.set_experts_implementation("pingpong")` (or the
config's `_experts_implementation` where that method is missing). Nothing else of the model
changes: the router, the shared experts and the rest run as before.

FP8 (`use_pingpong_experts(model, fp8="row_gw_hp")`, for training and inference): both
projections go through pingpong.fp8_grouped_training.fp8_grouped_linear instead of grouped_mm,
the forward and the data gradient as FP8 grouped products with the recipe's scales, the weight
gradient in the parameters' precision ("row_gw_hp") or an FP8 K-grouped product ("row", "block":
pingpong.scaled_grouped_k_mm of pingpong.quantize_groups_t's operands; that module's docstring). The recipe is checked, and
every experts module's shapes against it (K and N multiples of 16, of 128 block-wise), before
anything of the model changes; the chosen recipe is kept on each experts module (FP8_ATTRIBUTE),
and `fp8=None` takes it off again. With gradient accumulation, `with keep_quantized_weights(model):`
around one optimizer step's micro-batches quantizes each expert weight once per block instead of
once per micro-batch (pingpong.kept).
"""

from __future__ import annotations

import torch

from .errors import PingpongError
from .fp8_grouped_training import fp8_grouped_linear, grouped_recipe
from .kept import keep_quantized_weights  # noqa: F401 (re-exported: the experts' FP8 copies kept)
from .fp8_training import training_shape_reason
from .grouped import grouped_mm

IMPLEMENTATION = "pingpong"
#: the FP8 recipe of an experts module (a name in fp8_grouped_training.GROUPED_RECIPES), or absent: bf16
FP8_ATTRIBUTE = "pingpong_fp8"


def routing(top_k_index: torch.Tensor, num_experts: int):
    """(order, inverse, offs) of the T·k (token, expert) pairs: `order` sorts the pairs (pair
    p = t·k + j, token t's j-th choice) by expert, stably; `inverse` undoes it; offs (E,) int32
    cumulative group ends, counted on the device. No host sync. An id ≥ E (expert parallelism's
    sentinel: another rank's expert) counts in no group: those pairs sort past offs[-1]."""
    experts = top_k_index.reshape(-1)
    order = torch.argsort(experts, stable=True)
    inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
    counts = torch.zeros(num_experts, dtype=torch.int32, device=experts.device)
    counts.scatter_add_(0, experts.clamp(max=num_experts - 1).to(torch.int64), (experts < num_experts).to(torch.int32))
    return order, inverse, torch.cumsum(counts, 0, dtype=torch.int32)


class _Dispatch(torch.autograd.Function):
    """x[token of each sorted pair], whose gradient sums each token's k pairs in a fixed order
    (gathered back by `inverse`, reduced over k) instead of the atomic accumulation autograd's
    own indexing backward would use: the same gradient bit for bit on every run."""

    @staticmethod
    def forward(ctx, hidden_states, order, inverse, k):
        ctx.save_for_backward(inverse)
        ctx.k = k
        return hidden_states[order // k]

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        return grad[inverse].unflatten(0, (-1, ctx.k)).sum(1), None, None, None


def experts_forward(experts: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts-implementation signature: (T, H) -> (T, H) (module docstring)."""
    first = first_projection(experts)
    gate_up_w, down_w = getattr(experts, first), experts.down_proj
    num_experts = gate_up_w.shape[0]
    T, k = top_k_index.shape
    order, inverse, offs = routing(top_k_index, num_experts)
    if top_k_weights.shape != (T, k):  # (T, E): DeepSeek-style dense routing weights
        top_k_weights = top_k_weights.gather(1, top_k_index)
    transposed = is_transposed(experts)  # (E, H, 2I) / (E, I, H) as stored
    recipe = getattr(experts, FP8_ATTRIBUTE, None)

    def project(inp, w):
        if recipe is None:
            return grouped_mm(inp, w if transposed else w.transpose(1, 2), offs)
        return fp8_grouped_linear(inp, w.transpose(1, 2).contiguous() if transposed else w, offs, recipe)

    x = _Dispatch.apply(hidden_states, order, inverse, k)
    gate_up = project(x, gate_up_w)
    # transformers' expert parallelism: the sentinel pairs (ids ≥ E, weight 0) sort past offs[-1],
    # rows the products leave unset; they are zeroed after each projection, so no garbage (NaN)
    # reaches the output or a gradient (the biases' included)
    kept_rows = top_k_index.reshape(-1)[order, None] < num_experts if getattr(experts, "_is_expert_parallel", False) \
        else None
    first_bias, down_bias = getattr(experts, first + "_bias", None), getattr(experts, "down_proj_bias", None)
    expert_of_pair = None  # each pair's expert, where a bias needs it (past offs[-1]: sentinels, clamped)
    if first_bias is not None or down_bias is not None:
        expert_of_pair = torch.searchsorted(offs, torch.arange(x.shape[0], device=x.device, dtype=torch.int32),
                                            right=True).clamp(max=num_experts - 1)
    if first_bias is not None:
        gate_up = gate_up + first_bias[expert_of_pair]
    if kept_rows is not None:
        gate_up = torch.where(kept_rows, gate_up, 0)
    if first == "up_proj":  # no gate: the activation alone
        h = experts.act_fn(gate_up)
    elif hasattr(experts, "_apply_gate"):
        h = experts._apply_gate(gate_up)
    else:
        gate, up = gate_up.chunk(2, dim=-1)
        h = experts.act_fn(gate) * up
    y = project(h.contiguous(), down_w)
    if down_bias is not None:
        y = y + down_bias[expert_of_pair]
    if getattr(experts, "has_post_expert_norm", False):
        y = experts.post_expert_norm(y)
    if kept_rows is not None:
        y = torch.where(kept_rows, y, 0)
    # un-permute (a gather by `inverse`: no two pairs write one row), then each token's k pairs
    # weighted and summed as one (1 × k)·(k × H) product per token: a float32 sum in a fixed
    # order, rounded once, so the output and its gradients are the same on every run
    y = torch.bmm(top_k_weights.to(y.dtype).unsqueeze(1), y[inverse].unflatten(0, (T, k)))
    return y.squeeze(1).to(hidden_states.dtype)


def register() -> None:
    """Register `experts_forward` as transformers' "pingpong" experts implementation."""
    from transformers.integrations.moe import ExpertsInterface

    ExpertsInterface.register(IMPLEMENTATION, experts_forward)


def check_implementation(implementation) -> None:
    """PingpongError naming `implementation` unless transformers knows it ("eager", one of its
    ExpertsInterface's, or ours): a name it does not know would be set and fail at the forward."""
    from transformers.integrations.moe import ExpertsInterface

    known = ("eager", IMPLEMENTATION, *ExpertsInterface().valid_keys())
    if not isinstance(implementation, str) or implementation not in known:
        raise PingpongError(f"implementation: expected one of {tuple(dict.fromkeys(known))}, got {implementation!r}")


def is_transposed(experts) -> bool:
    """Whether the experts' weights are stored transposed, (E, H, 2I) and (E, I, H): transformers'
    `is_transposed` flag (use_experts_implementation's), or `experts_are_transposed`."""
    return bool(getattr(experts, "is_transposed", False) or getattr(experts, "experts_are_transposed", False))


def first_projection(experts) -> str:
    """The name of the experts' first projection: "gate_up_proj", or "up_proj" where they have no
    gate (transformers' `has_gate` False: the activation alone between the projections)."""
    return "gate_up_proj" if getattr(experts, "has_gate", True) else "up_proj"


def experts_modules(model):
    """(name, module) of every experts module of the model: stacked 3-D gate_up_proj (up_proj
    without a gate) and down_proj."""
    return [(name, m) for name, m in model.named_modules()
            if getattr(getattr(m, first_projection(m), None), "dim", lambda: 0)() == 3
            and getattr(getattr(m, "down_proj", None), "dim", lambda: 0)() == 3]


def check_fp8_experts(model, fp8, implementation: str):
    """fp8's recipe name (None: bf16), every experts module's weight shapes checked against it
    (fp8_grouped_training.training_shape_reason: K and N): PingpongError naming the argument and
    the layer. Dtypes and devices are the call's checks (a model may be cast after this)."""
    if fp8 is None:
        return None
    recipe = grouped_recipe(fp8, "fp8")
    if implementation != IMPLEMENTATION:
        raise PingpongError(f"fp8: runs on the {IMPLEMENTATION!r} implementation, got implementation={implementation!r}")
    found = experts_modules(model)
    if not found:
        raise PingpongError("model: no experts module (stacked 3-D gate_up_proj and down_proj) to run in FP8")
    for name, m in found:
        transposed = is_transposed(m)
        for pname in (first_projection(m), "down_proj"):
            E, N, K = getattr(m, pname).shape
            N, K = (K, N) if transposed else (N, K)  # (E, N, K) as fp8_grouped_linear takes it
            why = training_shape_reason(N, K, recipe)
            if why:
                raise PingpongError(f"fp8: {name}.{pname} (E, N, K) = {(E, N, K)} cannot run recipe {recipe!r}: {why}")
    return recipe


def use_pingpong_experts(model, implementation: str = IMPLEMENTATION, fp8=None):
    """Compute every MoE layer of a transformers model with `implementation` ("pingpong", or
    back to "eager" / "grouped_mm"); returns the model. `fp8`: a recipe of
    pingpong.fp8_grouped_training.GROUPED_RECIPES ("row_gw_hp") runs the experts' products in
    FP8 (module docstring), trainable; None: bf16 (grouped_mm). Checked before any change."""
    recipe = check_fp8_experts(model, fp8, implementation)
    check_implementation(implementation)
    for _, m in experts_modules(model):
        if recipe is None:
            m.__dict__.pop(FP8_ATTRIBUTE, None)
        else:
            setattr(m, FP8_ATTRIBUTE, recipe)
    register()
    try:
        model.set_experts_implementation(implementation)
        return model
    except (AttributeError, ValueError, KeyError):  # an older 5.x: no setter, or one that checks a fixed list
        pass
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_experts_implementation"):
            config._experts_implementation = implementation
    return model
