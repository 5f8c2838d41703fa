"""Drop-in modules: `Linear` (nn.Linear on pingpong's kernel) and `replace_linear`.

    model = transformers.AutoModelForCausalLM.from_config(cfg).bfloat16()
    report = pingpong.nn.replace_linear(model)      # every nn.Linear pingpong can run, in place
    model.cuda()                                      # the swapped layers run on pingpong there
    report.skipped                                    # {"lm_head": "weight dtype torch.float32 ..."}

`Linear` subclasses nn.Linear: the same parameters (weight (out, in), bias (out,)), the same
state_dict keys and `isinstance(m, nn.Linear)`; forward is `pingpong.linear(x, weight, bias,
activation)` (bias and activation fused in the GEMM's epilogue; autograd through the
``pingpong::linear`` op). `from_linear` shares the layer's Parameter objects (no copy): tied
weights stay tied and an optimizer built before the swap still updates them.

`Float8TrainingLinear` is the same drop-in with an FP8 forward and FP8 gradients
(pingpong.fp8_training's recipes); `replace_linear(model, fp8="row", training=True)` swaps a
model for it. `Float8Linear` is the inference layer (quantized weight buffers, no backward).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import torch

from . import fp8_training
from .integration import ops
from .errors import PingpongError
from .fp8 import LAYER_SCALINGS, Float8Linear, fp8_unsupported_reason
from .runtime.spec import INPUT_DTYPES, check_activation

__all__ = ["Linear", "Float8Linear", "Float8TrainingLinear", "replace_linear", "ReplaceReport", "unsupported_reason"]


class Linear(torch.nn.Linear):
    """nn.Linear computed by pingpong, with an optional fused activation."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 activation: str | None = None):
        check_activation(activation)
        super().__init__(in_features, out_features, bias, device, dtype)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.call_linear(x, self.weight, self.bias, self.activation)  # pingpong.linear's body

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear, activation: str | None = None) -> "Linear":
        """A pingpong Linear holding `layer`'s own Parameters (shared, not copied)."""
        return _sharing(cls, layer, activation=activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", activation={self.activation!r}" if self.activation else "")


class Float8TrainingLinear(torch.nn.Linear):
    """nn.Linear trained in FP8: forward, data and weight gradients as FP8 GEMMs with dynamic
    scales (`pingpong.fp8_training.fp8_linear`, `recipe` one of its RECIPES, torchao's names among them).
    The parameters are nn.Linear's, in their own precision (the optimizer's); each call quantizes
    what it multiplies. in_features and out_features must be multiples of 16, of 128 for the
    "block" recipe (PingpongError naming them at construction)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 recipe: str = "row"):
        recipe = fp8_training.recipe_name(recipe)
        why = fp8_training.training_shape_reason(out_features, in_features, recipe)
        if why:
            raise PingpongError(why)  # names in_features and out_features with their values
        super().__init__(in_features, out_features, bias, device, dtype)
        self.recipe = recipe

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fp8_training.fp8_linear(x, self.weight, self.bias, self.recipe)

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear, recipe: str = "row") -> "Float8TrainingLinear":
        """An FP8 training layer holding `layer`'s own Parameters (shared, not copied)."""
        return _sharing(cls, layer, recipe=recipe)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", recipe={self.recipe!r}"


def _sharing(cls, layer, **options):
    """A `cls` layer (Linear or Float8TrainingLinear) holding `layer`'s Parameters: built on the
    meta device, then given the layer's weight and bias (tied weights stay tied)."""
    if not isinstance(layer, torch.nn.Linear):
        raise PingpongError(f"layer: expected a torch.nn.Linear, got {type(layer).__name__}")
    if _parallelized(layer):
        raise PingpongError(f"layer: {_PARALLELIZED}")
    if not _parameters(layer):
        raise PingpongError(f"layer: {_NOT_PARAMETERS}")
    new = cls(layer.in_features, layer.out_features, layer.bias is not None, device="meta",
              dtype=layer.weight.dtype, **options)
    new.weight = layer.weight
    new.bias = layer.bias
    new.train(layer.training)
    return new


_PARALLELIZED = ("its parameters are DTensors: parallelize_module or fully_shard already ran, and their hooks stay on"
                 " this module; replace the Linears first, then parallelize (docs/distributed.md)")


_NOT_PARAMETERS = ("its weight or bias is not a Parameter but made before each call (torch.nn.utils.prune, weight_norm):"
                   " the new layer would not make it; swap first, or make it permanent (prune.remove)")


def _parameters(layer: torch.nn.Linear) -> bool:
    """Whether the layer's weight and bias are Parameters (or no bias): what a new layer can hold."""
    return isinstance(layer.weight, torch.nn.Parameter) and isinstance(layer.bias, (torch.nn.Parameter, type(None)))


def _parallelized(layer: torch.nn.Module) -> bool:
    """Whether torch.distributed already made the layer's parameters DTensors (TP or FSDP2)."""
    return any(ops.is_dtensor(p) for p in layer.parameters(recurse=False))


def unsupported_reason(layer: torch.nn.Module) -> str | None:
    """Why pingpong cannot run this layer, or None when it can."""
    if _parallelized(layer):
        return _PARALLELIZED
    if type(layer) is not torch.nn.Linear:
        return f"{type(layer).__name__} is not a plain torch.nn.Linear (its forward may do more)"
    if not _parameters(layer):
        return _NOT_PARAMETERS
    if layer._forward_pre_hooks or layer._forward_hooks or layer._backward_pre_hooks or layer._backward_hooks:
        return "it has hooks (yours, pruning's), which a new layer would not carry; swap before adding them"
    if "forward" in vars(layer):  # accelerate's hooks (add_hook_to_module) wrap the forward on the instance
        return ("it has its forward replaced on the instance (accelerate's hooks: device_map, cpu_offload), which a new"
                " layer would not carry; swap before adding them")
    if layer.weight.dtype not in INPUT_DTYPES:
        return (f"weight dtype {layer.weight.dtype}: pingpong runs torch.bfloat16 / torch.float16 (cast the model first:"
                " model.bfloat16())")
    return None  # any device: a model built on the CPU runs on pingpong once moved to the GPU


class ReplaceReport(NamedTuple):
    replaced: list[str]  # qualified names of the layers now pingpong.nn.Linear
    skipped: dict[str, str]  # qualified name -> why it was left as it was


def replace_linear(model: torch.nn.Module, *, include=None, fp8: str | None = None,
                   training: bool = False) -> ReplaceReport:
    """Swap `model`'s nn.Linear layers for `Linear` in place (parameters shared, not copied).

    Layers pingpong cannot run (`unsupported_reason`: fp32 weights, nn.Linear subclasses, hooked or
    pruned layers) stay as they are and are listed in the report's `skipped` with the reason (a
    warning says so where no layer was swapped); the model changes only once every new layer is
    made. The model may still be on the CPU: the swapped layers run on pingpong once it is moved
    to the GPU (on the CPU their forward raises PingpongError). `include`, a
    predicate on the qualified name, limits the swap to the layers it accepts. `fp8` "row" or
    "block": swap for inference `pingpong.fp8.Float8Linear` layers instead (weights quantized
    now, copies; activations per call). `training=True` with `fp8` a training recipe ("tensor",
    "row", "row_gw_hp", "block" or torchao's names): `Float8TrainingLinear` layers (parameters
    shared; layers whose features are not multiples of 16, of 128 for "block", are skipped with
    the reason).
    """
    make, fp8_reason = _swap_for(fp8, training)
    if not isinstance(model, torch.nn.Module):
        raise PingpongError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if include is not None and not callable(include):
        raise PingpongError(f"include: expected None or a callable taking a layer's qualified name and returning"
                            f" whether to swap it (e.g. lambda name: name.startswith(\"model.layers.\")), got"
                            f" {type(include).__name__}")
    replaced, skipped, swapped = [], {}, {}  # swapped: id(old) -> new, so a layer shared by two
    modules = list(model.named_modules(remove_duplicate=False))  # parents stays shared; held: the ids stay theirs
    for name, module in modules:
        if not isinstance(module, torch.nn.Linear) or isinstance(module, (Linear, Float8TrainingLinear)):
            continue
        if include is not None and not include(name):
            continue
        reason = "the model itself is the layer: use pingpong.nn.Linear.from_linear" if name == "" else unsupported_reason(module)
        if reason is None:
            reason = fp8_reason(module)
        if reason is not None:
            skipped[name] = reason
            continue
        if id(module) not in swapped:
            swapped[id(module)] = make(module)
        replaced.append(name)
    for name in replaced:  # the model changes only once every new layer is made (one may fail: the model stays whole)
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        new = swapped.get(id(getattr(parent, attr)))
        if new is not None:  # None: a parent under two names (a shared block), its layer swapped at the first
            setattr(parent, attr, new)
    if skipped and not replaced:  # e.g. an fp32 model: it would run on torch as before, unnoticed
        first = next(iter(skipped.items()))
        warnings.warn(f"pingpong.nn.replace_linear swapped none of the model's {len(skipped)} nn.Linear layers"
                      f" (the report's .skipped says why; {first[0] or 'the model'}: {first[1]})", stacklevel=2)
    return ReplaceReport(replaced, skipped)


def _swap_for(fp8, training):
    """replace_linear's (new layer of an nn.Linear, why a layer cannot be swapped or None) for its
    `fp8` and `training` arguments, checked (PingpongError naming them)."""
    if not isinstance(training, bool):
        raise PingpongError(f"training: expected a bool, got {training!r}")
    if training:
        if fp8 is None:
            raise PingpongError("training: True swaps for FP8 training layers and needs fp8= one of"
                                f" {tuple(fp8_training.RECIPES)}; pingpong.nn.Linear layers (fp8=None) train as they are")
        recipe = fp8_training.recipe_name(fp8, "fp8")
        return (lambda m: Float8TrainingLinear.from_linear(m, recipe),
                lambda m: fp8_training.training_shape_reason(m.out_features, m.in_features, recipe))
    if fp8 is None:
        return Linear.from_linear, lambda m: None
    if not isinstance(fp8, str) or fp8 not in LAYER_SCALINGS:
        raise PingpongError(f"fp8: expected None or one of {tuple(LAYER_SCALINGS)} (training=True: one of"
                            f" {tuple(fp8_training.RECIPES)}), got {fp8!r}")
    return lambda m: Float8Linear.from_linear(m, fp8), lambda m: fp8_unsupported_reason(m, fp8)
