"""Mixture-of-experts layers on pingpong.grouped_mm, and the hook into transformers' MoE models.

    x (T, H), router: top_k_index (T, k), top_k_weights (T, k)
      │ permute: the T·k (token, expert) pairs sorted by expert (stable argsort), group sizes
      │          counted on the device (scatter_add), offs = cumsum  — no host sync
      ▼
    gate_up = grouped_mm(x[token of pair], w_gate_up.transpose(1, 2), offs)    (T·k, 2I)
    h       = act(gate) · up                                                   (T·k, I)
    y       = grouped_mm(h, w_down.transpose(1, 2), offs)                      (T·k, H)
      │ weight each pair by its routing weight, un-permute: index_add_ into its token's row
      ▼
    out (T, H)

`experts_forward(experts, hidden_states, top_k_index, top_k_weights)` is that computation
with the experts module's own parameters (transformers' layout: gate_up_proj (E, 2I, H),
down_proj (E, H, I), or their transposes when `experts_are_transposed`; optional biases;
`_apply_gate` or `act_fn`). Autograd flows through grouped_mm's op (dX, dW as grouped
products), the gather, the activation and index_add_.

The hook (`use_pingpong_experts(model)`): transformers 5 computes every MoE layer's experts
through an *experts implementation* chosen per model (`ExpertsInterface`: "eager" is the
per-expert loop, "grouped_mm" torch._grouped_mm). We register `experts_forward` there as
"pingpong" and select it with `model.set_experts_implementation("pingpong")` (or the
config's `_experts_implementation` where that method is missing). Nothing else of the model
changes: the router, the shared experts and the rest run as before.
"""

from __future__ import annotations

import torch

from .grouped import grouped_mm

IMPLEMENTATION = "pingpong"


def routing(top_k_index: torch.Tensor, top_k_weights: torch.Tensor, num_experts: int):
    """(order, token of each sorted pair, weight of each sorted pair, offs) of the T·k
    (token, expert) pairs sorted by expert; offs (E,) int32 cumulative ends. No host sync."""
    T, k = top_k_index.shape
    experts = top_k_index.reshape(-1)
    order = torch.argsort(experts, stable=True)
    tokens = torch.arange(T, device=experts.device).repeat_interleave(k)[order]
    if top_k_weights.shape == (T, k):
        weights = top_k_weights.reshape(-1)[order]
    else:  # (T, E): DeepSeek-style dense routing weights
        weights = top_k_weights[torch.arange(T, device=experts.device).repeat_interleave(k), experts][order]
    counts = torch.zeros(num_experts, dtype=torch.int32, device=experts.device)
    counts.scatter_add_(0, experts.to(torch.int64), torch.ones_like(experts, dtype=torch.int32))
    return order, tokens, weights, torch.cumsum(counts, 0, dtype=torch.int32)


def experts_forward(experts: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts-implementation signature: (T, H) -> (T, H) (module docstring)."""
    gate_up_w, down_w = experts.gate_up_proj, experts.down_proj
    num_experts = gate_up_w.shape[0]
    _, tokens, weights, offs = routing(top_k_index, top_k_weights, num_experts)
    transposed = getattr(experts, "experts_are_transposed", False)  # (E, H, 2I) / (E, I, H) as stored
    x = hidden_states[tokens]
    gate_up = grouped_mm(x, gate_up_w if transposed else gate_up_w.transpose(1, 2), offs)
    expert_of_pair = None
    if getattr(experts, "gate_up_proj_bias", None) is not None:
        expert_of_pair = torch.searchsorted(offs, torch.arange(x.shape[0], device=x.device, dtype=torch.int32),
                                            right=True)
        gate_up = gate_up + experts.gate_up_proj_bias[expert_of_pair]
    if hasattr(experts, "_apply_gate"):
        h = experts._apply_gate(gate_up)
    else:
        gate, up = gate_up.chunk(2, dim=-1)
        h = experts.act_fn(gate) * up
    y = grouped_mm(h.contiguous(), down_w if transposed else down_w.transpose(1, 2), offs)
    if getattr(experts, "down_proj_bias", None) is not None:
        if expert_of_pair is None:
            expert_of_pair = torch.searchsorted(offs, torch.arange(x.shape[0], device=x.device, dtype=torch.int32),
                                                right=True)
        y = y + experts.down_proj_bias[expert_of_pair]
    y = y * weights.unsqueeze(-1).to(y.dtype)
    return torch.zeros_like(hidden_states).index_add_(0, tokens, y.to(hidden_states.dtype))


def register() -> None:
    """Register `experts_forward` as transformers' "pingpong" experts implementation."""
    from transformers.integrations.moe import ExpertsInterface

    ExpertsInterface.register(IMPLEMENTATION, experts_forward)


def use_pingpong_experts(model, implementation: str = IMPLEMENTATION):
    """Compute every MoE layer of a transformers model with `implementation` ("pingpong", or
    back to "eager" / "grouped_mm"); returns the model."""
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
