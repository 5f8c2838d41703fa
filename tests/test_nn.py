"""pingpong.nn (CPU): Linear is a drop-in for nn.Linear (parameters, state_dict, isinstance),
replace_linear swaps what pingpong can run and reports the rest with a reason; with the
kernel launch on Triton's interpreter (fp16), a swapped model computes the torch model's
output and gradients."""

import functools

import pytest
import torch
import torch.nn.functional as F
import torch.nn.utils.prune

import pingpong
from pingpong import PingpongError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # triton 3.6 interpreter + numpy


class Scaled(torch.nn.Linear):  # a subclass whose forward does more: never swapped
    def forward(self, x):
        return 2 * super().forward(x)


def small_model(dtype=torch.float16):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 48, dtype=dtype),
        torch.nn.GELU(),
        torch.nn.Sequential(torch.nn.Linear(48, 16, bias=False, dtype=dtype)),
        Scaled(16, 16, dtype=dtype),
    )


def test_linear_is_a_drop_in_for_nn_linear():
    ref = torch.nn.Linear(32, 48)
    ours = pingpong.nn.Linear(32, 48, activation="silu")
    assert isinstance(ours, torch.nn.Linear)
    assert list(ours.state_dict()) == list(ref.state_dict()) == ["weight", "bias"]
    ours.load_state_dict(ref.state_dict())
    assert torch.equal(ours.weight, ref.weight) and torch.equal(ours.bias, ref.bias)
    assert "activation='silu'" in repr(ours)
    shared = pingpong.nn.Linear.from_linear(ref, activation="relu")
    assert shared.weight is ref.weight and shared.bias is ref.bias and shared.activation == "relu"
    assert pingpong.nn.Linear.from_linear(torch.nn.Linear(4, 4, bias=False)).bias is None
    with pytest.raises(PingpongError, match="activation: expected None or one of"):
        pingpong.nn.Linear(4, 4, activation="tanh")


def test_replace_linear_skips_what_pingpong_cannot_run_with_a_reason():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8, dtype=torch.float16), torch.nn.Linear(8, 8),
                                Scaled(8, 8, dtype=torch.float16))
    before = list(model)
    report = pingpong.nn.replace_linear(model)
    assert report.replaced == ["0"]  # still on the CPU: it runs on pingpong once moved to the GPU
    assert isinstance(model[0], pingpong.nn.Linear) and model[0].weight is before[0].weight
    assert "weight dtype torch.float32" in report.skipped["1"]
    assert "Scaled is not a plain torch.nn.Linear" in report.skipped["2"]
    assert list(model)[1:] == before[1:]
    with pytest.raises(PingpongError, match="on cpu: pingpong runs on CUDA"):  # on the CPU its forward says why
        model[0](torch.randn(2, 8, dtype=torch.float16))
    with pytest.warns(UserWarning, match="swapped none of the model's 1 nn.Linear layers.*model.bfloat16"):
        pingpong.nn.replace_linear(torch.nn.Sequential(torch.nn.Linear(4, 4)))  # fp32, as models are built
    with pytest.warns(UserWarning, match="swapped none"):
        root = pingpong.nn.replace_linear(torch.nn.Linear(4, 4))
    assert "the model itself" in root.skipped[""]
    with pytest.raises(PingpongError, match="model: expected a torch.nn.Module"):
        pingpong.nn.replace_linear([torch.nn.Linear(4, 4)])


def test_replace_linear_skips_pruned_and_hooked_layers_and_leaves_the_model_whole():
    """A pruned layer's weight is made by a forward pre-hook each call (not a Parameter), and any
    layer's hooks would not move to a new layer: both are skipped with the reason, before any
    swap, and every other layer is swapped as usual."""
    h = torch.float16
    model = torch.nn.Sequential(torch.nn.Linear(32, 32, dtype=h), torch.nn.Linear(32, 32, dtype=h),
                                torch.nn.Linear(32, 32, dtype=h), torch.nn.Linear(32, 32, dtype=h))
    torch.nn.utils.prune.l1_unstructured(model[1], "weight", amount=0.5)
    model[2].register_forward_hook(lambda m, args, out: None)
    model[3].register_full_backward_hook(lambda m, gi, go: None)
    report = pingpong.nn.replace_linear(model)
    assert report.replaced == ["0"]
    assert "not a Parameter" in report.skipped["1"] and "hooks" in report.skipped["2"] and "hooks" in report.skipped["3"]
    assert [type(m) for m in model[1:]] == [torch.nn.Linear] * 3
    pruned = torch.nn.Sequential(torch.nn.Linear(32, 32, dtype=h))
    torch.nn.utils.prune.l1_unstructured(pruned[0], "weight", amount=0.5)
    with pytest.warns(UserWarning, match="swapped none"):
        assert "not a Parameter" in pingpong.nn.replace_linear(pruned, fp8="row", training=True).skipped["0"]
    for layer_type in (pingpong.nn.Linear, pingpong.nn.Float8TrainingLinear):  # asked for by name: refused, named
        with pytest.raises(PingpongError, match="layer: its weight or bias is not a Parameter"):
            layer_type.from_linear(pruned[0])


def test_replace_linear_skips_a_layer_whose_forward_is_replaced_on_the_instance():
    """accelerate's hooks (add_hook_to_module: device_map's offloading, cpu_offload) are not in
    the layer's hook dicts but a `forward` set on the instance, wrapping the class's: a new layer
    would not carry it, so the layer is skipped with the reason, as a hooked one is."""
    h = torch.float16
    model = torch.nn.Sequential(torch.nn.Linear(32, 32, dtype=h), torch.nn.Linear(32, 32, dtype=h))
    old = model[1].forward
    model[1].forward = functools.update_wrapper(functools.partial(lambda m, x: 2 * old(x), model[1]), old)
    report = pingpong.nn.replace_linear(model)
    assert report.replaced == ["0"] and "forward replaced on the instance" in report.skipped["1"]
    assert type(model[1]) is torch.nn.Linear and "forward" in vars(model[1])


def test_replace_linear_swaps_a_layer_under_a_shared_parent_once():
    """A block registered under two names (layers sharing weights) holds one Linear reached by
    two qualified names: it is swapped once, the block stays shared, and the layers after it
    are swapped too."""
    h = torch.float16
    block = torch.nn.Sequential(torch.nn.Linear(8, 8, dtype=h))
    model = torch.nn.Sequential(block, block, torch.nn.Linear(8, 8, dtype=h))
    weight = block[0].weight
    report = pingpong.nn.replace_linear(model)
    assert report.replaced == ["0.0", "1.0", "2"] and not report.skipped
    assert model[0] is model[1] is block and isinstance(block[0], pingpong.nn.Linear) and block[0].weight is weight
    assert isinstance(model[2], pingpong.nn.Linear)


def test_replace_linear_changes_nothing_when_a_new_layer_cannot_be_made(monkeypatch):
    model = small_model()
    before = list(model.modules())
    made = []

    def make(layer, **options):
        if made:
            raise RuntimeError("no memory left")
        made.append(layer)
        return pingpong.nn.Linear(layer.in_features, layer.out_features, layer.bias is not None, dtype=layer.weight.dtype)

    monkeypatch.setattr(pingpong.nn.Linear, "from_linear", make)
    with pytest.raises(RuntimeError, match="no memory left"):
        pingpong.nn.replace_linear(model)
    assert list(model.modules()) == before


def test_replaced_model_computes_the_torch_model(interpreted_kernels):
    model = small_model()
    x = torch.randn(2, 8, 32).half().requires_grad_()
    keys = list(model.state_dict())
    params = {n: p for n, p in model.named_parameters()}
    want = model(x)
    want_grads = torch.autograd.grad(want.float().square().sum(), [x, *params.values()])

    shared = torch.nn.Linear(16, 16, dtype=torch.float16)  # one layer under two names stays one layer
    model.append(shared)
    model.append(torch.nn.Sequential(shared))
    report = pingpong.nn.replace_linear(model, include=lambda name: name != "2.0")
    assert report.replaced == ["0", "4", "5.0"] and set(report.skipped) == {"3"}
    assert isinstance(model[0], pingpong.nn.Linear) and type(model[2][0]) is torch.nn.Linear
    assert model[4] is model[5][0]
    del model[5], model[4]
    assert list(model.state_dict()) == keys
    assert all(p is params[n] for n, p in model.named_parameters())  # shared, not copied

    got = model(x)
    got_grads = torch.autograd.grad(got.float().square().sum(), [x, *params.values()])
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-2 * w.abs().max().item())


def test_compiled_model_with_pingpong_layers(interpreted_kernels):
    """torch.compile(fullgraph=True) over a module with pingpong layers: the eager forward and
    gradients (aot_eager: the graph with the pingpong ops, run by the interpreter here)."""
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(32, 48, dtype=torch.float16), torch.nn.SiLU(),
                                torch.nn.Linear(48, 16, dtype=torch.float16))
    pingpong.nn.replace_linear(model)
    model[0].activation = "relu"
    x = torch.randn(2, 8, 32).half()
    params = list(model.parameters())
    want = model(x)
    want_grads = torch.autograd.grad(want.float().square().sum(), params)
    got = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    got_grads = torch.autograd.grad(got.float().square().sum(), params)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
