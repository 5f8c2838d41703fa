"""FP8 training on the CPU (pingpong.fp8_training, pingpong.nn.Float8TrainingLinear).

The whole call path runs as on a GPU (validation, quantize_fp8's and scaled_mm's front ends,
their plan caches, the autograd Function and the torch.library op) with the two kernels
replaced at their launch (`fp8_kernels`): quantize_fp8's launch by torch's cast (the kernel's
own formula, which tests/test_fp8.py checks against the kernel under Triton's interpreter), and
the scaled plan by a float64 product of the dequantized operands, which records every launched
product (operands, scales). So the tests see each product's shapes, layouts and scale values,
and compare the forward and both gradients with float64 products of the unquantized inputs,
within bounds derived from e4m3's precision. fp16 (Triton's interpreter, which runs the bf16
weight gradient of "row_gw_hp", is wrong for bf16)."""

import collections
import re
from pathlib import Path

import pytest
import torch

import pingpong
from closeness import FP8_TRAINING_NORM, assert_close
from pingpong import PingpongError, fp8, fp8_training, quantize
from pingpong.fp8_training import RECIPES, TORCHAO_NAMES
from pingpong.runtime import plan
from fp8_emulation import RecordedPlan, _cast, _cast_pair, emulate_fp8  # noqa: F401  (other tests import them from here)
from fp8_groups import PRODUCT_GROUPS, QUANT_GROUPS, group_amax, per_element, scales_of

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

F16, E4M3 = torch.float16, torch.float8_e4m3fn
FMAX = 448.0
#: e4m3 rounding: relative half-ulp of a normal (3 mantissa bits), and half the subnormal step
#: (2^-9) in units of the group's scale
REL, SUB = 2.0**-4, 2.0**-10


@pytest.fixture
def fp8_kernels(interpreted_kernels, monkeypatch):
    """The two FP8 kernels replaced at their launch (module docstring, tests/fp8_emulation.py);
    bf16/fp16 GEMMs on the portable kernel under Triton's interpreter. Returns the list of
    scaled products run."""
    return emulate_fp8(monkeypatch.setattr)


def spread(rows, cols, gen):
    """Normal values whose rows and columns differ in magnitude by up to 2^±2 (16× between two
    rows), so a scale taken along the wrong axis is far off; fp16 products stay finite."""
    x = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    r = torch.exp2(torch.randint(-2, 3, (rows, 1), generator=gen).double())
    c = torch.exp2(torch.randint(-2, 3, (1, cols), generator=gen).double())
    return x * r * c


#: (in_features, out_features) of the layers under test: block-wise needs multiples of 128, and
#: two blocks along each so that a block on the wrong axis or transposed is caught
FEATURES = {"block": (384, 256)}


def bound(a, b, sa, sb):
    """Elementwise bound on |fp8 product − a@b| from e4m3 rounding of each operand: |Δa| ≤
    max(REL·|a|, SUB·sa) per element (sa broadcast as a's groups), the same for b; plus the
    output's fp16 rounding."""
    da = torch.maximum(REL * a.abs(), SUB * sa)
    db = torch.maximum(REL * b.abs(), SUB * sb)
    ref = a @ b
    return da @ b.abs() + a.abs() @ db + da @ db + 2.0**-10 * ref.abs() + 1e-6


def check_close(got, ref, allowed, what):
    assert_close(got, ref, norm=FP8_TRAINING_NORM, allowed=allowed, what=what)


def run_layer(recipe, M, seed, bias=True):
    """x (M, K) → Float8TrainingLinear(K, N) → y, then y.backward(g): (layer, x, g, y)."""
    K, N = FEATURES.get(recipe, (64, 48))
    gen = torch.Generator().manual_seed(seed)
    layer = pingpong.nn.Float8TrainingLinear(K, N, bias=bias, dtype=F16, recipe=recipe)
    with torch.no_grad():
        layer.weight.copy_(spread(N, K, gen))
        if bias:
            layer.bias.copy_(torch.randn(N, generator=gen))
    x = spread(M, K, gen).to(F16).requires_grad_()
    g = spread(M, N, gen).to(F16)
    y = layer(x)
    y.backward(g)
    return layer, x, g, y


RECIPE_IDS = list(RECIPES)


@pytest.mark.parametrize("recipe", RECIPE_IDS)
@pytest.mark.parametrize("M", [1, 17, 200])
def test_forward_and_gradients_against_float64(fp8_kernels, recipe, M):
    """y, dX, dW, dbias against float64 products of the fp16 inputs, each within the bound
    that e4m3 rounding (with the recipe's scales along each product's contraction) allows."""
    seed = 1000 * M + RECIPE_IDS.index(recipe)
    layer, x, g, y = run_layer(recipe, M, seed)
    X, W, G = x.detach().double(), layer.weight.detach().double(), g.double()
    groups = PRODUCT_GROUPS[recipe]
    what = f"{recipe} M={M} seed {seed}"
    assert y.dtype == x.grad.dtype == F16 and layer.weight.grad.dtype == layer.bias.grad.dtype == F16

    def allowed(name, a, b):
        ga, gb = groups[name]
        return bound(a, b, scales_of(a, ga), scales_of(b, gb))

    check_close(y, X @ W.t() + layer.bias.detach().double(), allowed("Y", X, W.t()), f"{what}: y")
    check_close(x.grad, G @ W, allowed("dX", G, W), f"{what}: dX")
    if RECIPES[recipe].fp8_weight_grad:
        dw_allowed = allowed("dW", G.t(), X)
    else:  # the inputs' precision: fp16 products, fp32 accumulation, one fp16 rounding
        dw_allowed = 2.0**-10 * (G.t().abs() @ X.abs()) + 1e-6
    check_close(layer.weight.grad, G.t() @ X, dw_allowed, f"{what}: dW")
    torch.testing.assert_close(layer.bias.grad.double(), G.sum(0), rtol=2e-3, atol=1e-3)


def test_block_recipe_on_one_128_block(fp8_kernels):
    """K = N = 128: W is one 128×128 block, whose single scale also reads as tensor-wise; the
    forward and both gradients still run block-wise (spec.scale_mode) and match float64."""
    gen = torch.Generator().manual_seed(77)
    layer = pingpong.nn.Float8TrainingLinear(128, 128, bias=False, dtype=F16, recipe="block")
    with torch.no_grad():
        layer.weight.copy_(spread(128, 128, gen))
    x = spread(33, 128, gen).to(F16).requires_grad_()
    g = spread(33, 128, gen).to(F16)
    y = layer(x)
    y.backward(g)
    X, W, G = x.detach().double(), layer.weight.detach().double(), g.double()
    for got, ref in ((y, X @ W.t()), (x.grad, G @ W), (layer.weight.grad, G.t() @ X)):
        assert ((got.double() - ref).norm() / ref.norm()).item() < FP8_TRAINING_NORM


@pytest.mark.parametrize("recipe", RECIPE_IDS)
@pytest.mark.parametrize("M", [17, 200])
def test_each_product_scales_along_its_contraction(fp8_kernels, recipe, M):
    """The launched products, in order (forward, dX, dW): operand shapes and layouts (a
    row-major, b column-major, tokens padded with zeros for dW to 16, or 128 block-wise: the
    kernel's K rule) and scale shapes and values equal to amax / 448 of the unquantized
    operand's group along the axis the product contracts (PRODUCT_GROUPS)."""
    layer, x, g, _ = run_layer(recipe, M, seed=7 + M)
    X, W, G = x.detach().float(), layer.weight.detach().float(), g.float()
    N, K = W.shape
    fp8_weight_grad = RECIPES[recipe].fp8_weight_grad
    assert len(fp8_kernels) == (3 if fp8_weight_grad else 2)
    pad = 128 if recipe == "block" else 16
    Mp = -(-M // pad) * pad
    Gt, Xp = G.new_zeros(N, Mp), X.new_zeros(Mp, K)
    Gt[:, :M], Xp[:M] = G.t(), X
    products = [("Y", X, W.t()), ("dX", G, W), ("dW", Gt, Xp)][:len(fp8_kernels)]  # (name, A, B)
    for (name, A, B), (a, b, sa, sb) in zip(products, fp8_kernels):
        ga, gb = PRODUCT_GROUPS[recipe][name]
        assert a.dtype == b.dtype == E4M3, name
        assert a.shape == A.shape and a.stride(1) == 1, (name, a.shape, a.stride())
        assert b.shape == B.shape and b.stride(0) == 1, (name, b.shape, b.stride())
        for scale, T, group, which in ((sa, A, ga, "scale_a"), (sb, B, gb, "scale_b")):
            want = group_amax(T, group) / FMAX
            if want.numel() == 1:
                assert scale.numel() == 1, (name, which, scale.shape)
            else:
                assert scale.shape == want.shape, (name, which, tuple(scale.shape), tuple(want.shape))
            torch.testing.assert_close(scale.reshape(want.shape), want, rtol=0, atol=0, msg=f"{name}: {which} axis")
        if name == "dW":  # the padded tokens are zeros, in both operands
            assert not a[:, M:].float().any() and not b[M:].float().any()


@pytest.mark.parametrize("recipe", RECIPE_IDS)
def test_forward_saves_the_fp8_transposes_not_x_and_w(fp8_kernels, recipe):
    """What the forward keeps for the backward (one quantize_fp8_pair per operand): X's and W's
    FP8 transposes (X's only for an FP8 dW), x itself only for "row_gw_hp"'s bf16 dW, never W."""
    layer, x, g, y = run_layer(recipe, 17, seed=5, bias=False)
    saved = [t for t in layer(x).grad_fn.saved_tensors if t is not None and t.numel()]  # (empty: not asked for)
    N, K = layer.weight.shape
    Mp = 128 if recipe == "block" else 32
    fp8_shapes = sorted(tuple(t.shape) for t in saved if t.dtype == E4M3)
    want = [(K, Mp), (K, N)] if RECIPES[recipe].fp8_weight_grad else [(K, N)]
    assert fp8_shapes == sorted(want), fp8_shapes
    wide = [tuple(t.shape) for t in saved if t.dtype == F16]
    assert wide == ([] if RECIPES[recipe].fp8_weight_grad else [tuple(x.shape)]), wide


def test_recipe_table_and_torchao_names():
    """torchao's names are recipes of their own: pingpong's recipe of the same scales with the
    forward fast-accumulated, as torchao's Float8LinearConfig runs its output GEMM; pingpong's
    own recipes promote every product; docs/fp8.md names every recipe."""
    for name in RECIPES:
        assert fp8_training.recipe_name(name) == name
    assert set(TORCHAO_NAMES) == {"tensorwise", "rowwise", "rowwise_with_gw_hp"}
    for name, ours in TORCHAO_NAMES.items():
        assert RECIPES[name] == RECIPES[ours]._replace(fast_forward=True) and not RECIPES[ours].fast_forward
    assert not RECIPES["block"].fast_forward and RECIPES["block"].fp8_weight_grad
    assert fp8_training.GRAD_DTYPE == E4M3  # the format docs/fp8.md states for every gradient
    with pytest.raises(PingpongError, match="recipe: expected one of"):
        fp8_training.recipe_name("blockwise")
    text = (Path(__file__).parents[1] / "docs" / "fp8.md").read_text()
    missing = [n for n in (*RECIPES, *TORCHAO_NAMES) if f'"{n}"' not in text]
    assert not missing, f"docs/fp8.md does not name the training recipes {missing}"


@pytest.mark.parametrize("recipe", RECIPE_IDS)
def test_torchao_recipes_fast_accumulate_the_forward_alone(fp8_kernels, recipe):
    """The forward product runs with use_fast_accum=True exactly in torchao's recipes (as
    torchao's Float8LinearConfig runs its output GEMM); dX and an FP8 dW promote in every recipe."""
    from fp8_emulation import RecordedPlan

    run_layer(recipe, 17, 5)
    products = 3 if RECIPES[recipe].fp8_weight_grad else 2
    assert RecordedPlan.fast == [recipe in TORCHAO_NAMES] + [False] * (products - 1), RecordedPlan.fast


def test_no_input_requiring_grad_is_the_forward_alone(fp8_kernels):
    layer = pingpong.nn.Float8TrainingLinear(32, 16, dtype=F16)
    x = torch.randn(5, 3, 32).to(F16)
    with torch.no_grad():
        y = layer(x)
    assert y.shape == (5, 3, 16) and y.grad_fn is None and len(fp8_kernels) == 1


@pytest.mark.parametrize("recipe", ["row", "block"])
def test_kept_weight_pairs_are_made_once_per_block_and_again_when_changed(fp8_kernels, recipe, monkeypatch):
    """keep_quantized_weights around an FP8 training layer: three micro-batches quantize its
    weight once, with y and both gradients bitwise those of calls outside the block; an
    in-place change (an optimizer's) quantizes it again; a no_grad forward (W's rows alone) is
    its own copy; into inductor's buffers (the lowered op) the kept pair is copied; while a CUDA
    graph is captured, and outside the block, every call quantizes."""
    K, N = FEATURES.get(recipe, (64, 48))
    gen = torch.Generator().manual_seed(77)
    layer = pingpong.nn.Float8TrainingLinear(K, N, bias=False, dtype=F16, recipe=recipe)
    with torch.no_grad():
        layer.weight.copy_(spread(N, K, gen))
    x = spread(17, K, gen).to(F16).requires_grad_()
    g = spread(17, N, gen).to(F16)
    made = []
    real = fp8_training.quantize_pair_direct
    monkeypatch.setattr(fp8_training, "quantize_pair_direct",
                        lambda t, *a: (made.append(t is layer.weight), real(t, *a))[1])

    def step():
        x.grad = layer.weight.grad = None
        y = layer(x)
        y.backward(g)
        return y.detach(), x.grad, layer.weight.grad

    def weight_pairs(fn):
        made.clear()
        out = fn()
        return sum(made), out

    n, want = weight_pairs(step)
    assert n == 1
    with pingpong.moe.keep_quantized_weights(layer):
        for i in range(3):
            n, got = weight_pairs(step)
            assert n == (1 if i == 0 else 0) and all(torch.equal(a, b) for a, b in zip(got, want)), i
        with torch.no_grad():
            assert weight_pairs(lambda: layer(x))[0] == 1 and weight_pairs(lambda: layer(x))[0] == 0
            r = RECIPES[recipe]
            qwt, swt = (torch.full_like(t, 3.0 if t.dtype != E4M3 else 0.0) for t in
                        quantize.pair_like(layer.weight, r.weight, E4M3, fp8_training._pad(r), False, True)[2:])
            n, _ = weight_pairs(lambda: fp8_training._forward(x, layer.weight, None, recipe, False, True,
                                                              (None, None, None, qwt, swt)))
            fresh = real(layer.weight, r.weight, E4M3, fp8_training._pad(r), True, True)
            assert n == 0 and torch.equal(qwt.view(torch.uint8), fresh[2].view(torch.uint8))
            assert torch.equal(swt, fresh[3])
            layer.weight.add_(0.5)
        assert weight_pairs(step)[0] == 1 and weight_pairs(step)[0] == 0
        monkeypatch.setattr(pingpong.kept, "_capturing", lambda t: True)  # a CUDA graph's capture keeps nothing
        assert weight_pairs(step)[0] == 1 and weight_pairs(step)[0] == 1
    assert weight_pairs(step)[0] == 1 and weight_pairs(step)[0] == 1


def test_a_keep_block_closed_by_another_thread_mid_call_makes_the_copy(monkeypatch):
    """keep_quantized_weights' block is one per process: a thread may close it while another
    is inside `kept`, between asking whether the weight is kept and looking its copy up (here
    the close comes from the last check `keeping` makes). That call then makes its copy, as if
    the block had already closed; it read the closed block and raised AttributeError."""
    from pingpong import kept as kept_mod

    layer = torch.nn.Linear(8, 4)
    real = kept_mod._capturing

    def closed_meanwhile(t):
        kept_mod._BLOCK = None  # another thread's `with` block ended here
        return real(t)

    with kept_mod.keep_quantized_weights(layer):
        monkeypatch.setattr(kept_mod, "_capturing", closed_meanwhile)
        assert kept_mod.kept(layer.weight, "copy", lambda: "made") == "made"


def test_an_optimizer_step_inside_the_keep_block_quantizes_again(fp8_kernels):
    """A fused optimizer (AdamW(fused=True)) updates the parameters without moving their version
    counters: a step inside keep_quantized_weights must still be seen by the next forward
    (any optimizer's step makes every copy anew), as it is outside the block."""
    torch.manual_seed(0)
    layer = pingpong.nn.Float8TrainingLinear(32, 16, bias=False, dtype=F16)
    x = torch.randn(4, 32, dtype=F16)
    opt = torch.optim.AdamW(layer.parameters(), lr=0.5, fused=True)
    with pingpong.kept.keep_quantized_weights(layer):
        before = layer(x)
        before.float().square().mean().backward()
        version = layer.weight._version
        opt.step()
        assert layer.weight._version == version, "the premise: a fused step moves no version counter"
        inside = layer(x).detach()
    assert not torch.equal(inside, before.detach())
    torch.testing.assert_close(inside, layer(x).detach(), rtol=0, atol=0)


def test_double_backward_is_refused(fp8_kernels):
    """The FP8 gradient products are not differentiable: create_graph=True is a PingpongError,
    not gradients that silently lack their graph."""
    layer = pingpong.nn.Float8TrainingLinear(32, 16, dtype=F16)
    x = torch.randn(4, 32).to(F16).requires_grad_()
    with pytest.raises(PingpongError, match="double backward"):
        torch.autograd.grad(layer(x).sum(), x, create_graph=True)


# ----------------------------------------------------------------------------- bad input, before any work


@pytest.mark.parametrize("make, needle", [
    (lambda: pingpong.nn.Float8TrainingLinear(20, 32), "in_features=20, out_features=32: FP8 needs multiples of 16"),
    (lambda: pingpong.nn.Float8TrainingLinear(32, 24), "out_features=24"),
    (lambda: pingpong.nn.Float8TrainingLinear(32, 32, recipe="block"),
     "in_features=32, out_features=32: block-wise FP8 training needs multiples of 128"),
    (lambda: pingpong.nn.Float8TrainingLinear(384, 144, recipe="block"), r"out_features=144: block-wise"),
    (lambda: pingpong.nn.Float8TrainingLinear(400, 256, recipe="block"), r"^in_features=400: block-wise"),
    (lambda: pingpong.nn.Float8TrainingLinear(32, 32, recipe="rowwise_hp"), "recipe: expected one of"),
])
def test_layer_construction_names_what_the_recipe_cannot_serve(make, needle):
    with pytest.raises(PingpongError, match=needle):
        make()


W32 = lambda: torch.randn(16, 32).to(F16)  # noqa: E731


@pytest.mark.parametrize("args, needle", [
    ((torch.randn(4, 32).to(F16), torch.randn(16, 24).to(F16)), "weight: in_features=24"),
    ((torch.randn(4, 32).to(F16), torch.randn(20, 32).to(F16)), "weight: .*out_features=20"),
    ((torch.randn(4, 16).to(F16), W32()), r"x: last dim must be in_features = 32"),
    ((torch.randn(4, 32), W32()), "weight: dtype torch.float16 differs from x's torch.float32"),
    ((torch.randn(4, 32).to(torch.int32), W32()), "x: dtype torch.int32"),
    ((torch.randn(4, 32).to(F16), torch.randn(32, 16).to(F16).t()), "weight: rows must be contiguous"),
    ((torch.randn(4, 32).to(F16), W32(), torch.ones(15).to(F16)), r"bias: expected shape \(16,\)"),
    ((torch.randn(4, 32).to(F16), torch.randn(16, 32, 1).to(F16)), "weight: expected a 2-D"),
    ((None, W32()), "x: expected a torch.Tensor"),
    ((torch.randn(4, 32).to(F16), W32(), None, "block"), "weight: in_features=32, out_features=16: block-wise"),
    ((torch.randn(4, 384).to(F16), torch.randn(144, 384).to(F16), None, "block"), "weight: out_features=144: block"),
    ((torch.randn(4, 400).to(F16), torch.randn(256, 400).to(F16), None, "block"), "weight: in_features=400: block"),
])
@pytest.mark.parametrize("grad", [False, True])
def test_fp8_linear_names_the_argument_before_any_work(fp8_kernels, args, needle, grad):
    if grad and args[0] is not None and args[0].is_floating_point():
        args = (args[0].requires_grad_(), *args[1:])
    with pytest.raises(PingpongError, match=needle):
        fp8_training.fp8_linear(*args)
    assert fp8_kernels == [], "a refused call ran a product"


@pytest.mark.parametrize("recipe", ["row_gw_hp", "rowwise_with_gw_hp"])
def test_fp32_high_precision_weight_grad_is_refused_before_any_work(fp8_kernels, recipe):
    """fp32 x and weight (Float8TrainingLinear's default dtype) under a recipe whose dW runs on
    pingpong's bf16/fp16 GEMM: a training call is a PingpongError naming x and the recipe before
    any product (not a forward, then a backward failing on "a: dtype torch.float32"); the
    forward alone, and a frozen weight (no dW), still run."""
    layer = pingpong.nn.Float8TrainingLinear(32, 16, recipe=recipe)
    assert layer.weight.dtype == torch.float32
    x = torch.randn(4, 32, requires_grad=True)
    with pytest.raises(PingpongError, match=f"x: dtype torch.float32.*recipe '{recipe}'.*dW"):
        layer(x)
    assert fp8_kernels == [], "a refused call ran a product"
    with torch.no_grad():
        assert layer(x).shape == (4, 16)
    layer.weight.requires_grad_(False)
    layer(x).sum().backward()
    assert x.grad.shape == x.shape and layer.bias.grad.shape == (16,)


@pytest.mark.parametrize("recipe", RECIPE_IDS)
def test_an_empty_batch_trains(fp8_kernels, recipe):
    """x of 0 tokens: y is (0, N), and the backward of y.sum() (a gradient broadcast from a
    scalar: strides (0, 0), which .contiguous() keeps for an empty tensor) gives an empty dX
    and zero dW and dbias, as nn.Linear does."""
    K, N = FEATURES.get(recipe, (64, 48))
    layer = pingpong.nn.Float8TrainingLinear(K, N, dtype=F16, recipe=recipe)
    x = torch.randn(0, K).to(F16).requires_grad_()
    y = layer(x)
    assert y.shape == (0, N)
    y.sum().backward()
    assert x.grad.shape == (0, K)
    assert not layer.weight.grad.any() and not layer.bias.grad.any()


@pytest.mark.parametrize("compiled", [False, True])
def test_x_with_strided_rows_is_taken_as_f_linear_takes_it(fp8_kernels, compiled):
    """x whose last dim is not stride 1 (a transposed or sliced x, 1-D or 2-D) gives what its
    contiguous copy gives, forward and gradients, eager and compiled (the fake implementation
    accepted it; the real op refused it, so a compiled graph failed when run)."""
    import torch.nn.functional as F

    torch.manual_seed(11)
    w = (torch.randn(48, 64) * 0.1).to(F16).requires_grad_()
    f = fp8_training.fp8_linear
    if compiled:
        f = torch.compile(f, backend="aot_eager", fullgraph=True)
    for base in (torch.randn(64, 8).to(F16).t(), torch.randn(128).to(F16)[::2]):
        x = base.detach().requires_grad_()
        y = f(x, w, None, "row")
        y.float().square().sum().backward()
        x2, w2 = base.detach().contiguous().requires_grad_(), w.detach().clone().requires_grad_()
        y2 = fp8_training.fp8_linear(x2, w2, None, "row")
        y2.float().square().sum().backward()
        assert torch.equal(y, y2) and torch.equal(x.grad, x2.grad) and torch.equal(w.grad, w2.grad)
        assert (y.float() - F.linear(base.float(), w.float())).abs().max() < 0.5
        w.grad = None


def test_fp8_linear_on_the_cpu_says_so_before_any_work():
    """Without the test's kernels: the first check of the first kernel (quantize_fp8's device)."""
    x = torch.randn(4, 32).to(F16).requires_grad_()
    with pytest.raises(PingpongError, match="x: on cpu; quantize_fp8 runs on a GPU"):
        fp8_training.fp8_linear(x, W32())


def test_inference_refusals_point_at_the_training_path(fp8_kernels):
    """One decision (runtime.fp8_spec.refuse_grad) behind every FP8 refusal of grad, and each
    names the argument and the training path."""
    from pingpong.fp8 import Float8Linear

    x = torch.randn(8, 32).to(F16).requires_grad_()
    with pytest.raises(PingpongError, match=r"x: requires grad, but quantize_fp8 is inference only.*training=True"):
        pingpong.quantize_fp8(x)
    layer = Float8Linear.__new__(Float8Linear)
    torch.nn.Module.__init__(layer)
    with pytest.raises(PingpongError, match=r"x: requires grad, but Float8Linear is inference only.*fp8_linear"):
        layer(x)
    a, b = torch.zeros(16, 32).to(E4M3), torch.zeros(16, 32).to(E4M3).t()
    with pytest.raises(PingpongError, match=r"scale_b: requires grad, but scaled_mm is inference only"):
        pingpong.scaled_mm(a, b, torch.tensor(1.0), torch.tensor(1.0, requires_grad=True))


# ----------------------------------------------------------------------------- replace_linear


def test_replace_linear_for_training_skips_with_the_reason():
    class Scaled(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(torch.nn.Linear(32, 48, dtype=F16), torch.nn.Linear(48, 20, dtype=F16),
                                torch.nn.Linear(48, 48), Scaled(48, 48, dtype=F16))
    model[1] = torch.nn.Linear(48, 20, dtype=F16)
    w0 = model[0].weight
    report = pingpong.nn.replace_linear(model, fp8="rowwise", training=True)  # torchao's name
    assert report.replaced == ["0"] and isinstance(model[0], pingpong.nn.Float8TrainingLinear)
    assert model[0].weight is w0 and model[0].recipe == "rowwise" and "recipe='rowwise'" in repr(model[0])
    assert "out_features=20: FP8 needs multiples of 16" in report.skipped["1"]
    assert "weight dtype torch.float32" in report.skipped["2"]
    assert "Scaled is not a plain torch.nn.Linear" in report.skipped["3"]
    again = pingpong.nn.replace_linear(model, fp8="row", training=True)
    assert again.replaced == [] and "0" not in again.skipped  # already pingpong's


def test_replace_linear_block_skips_features_not_multiples_of_128():
    model = torch.nn.Sequential(torch.nn.Linear(384, 256, dtype=F16), torch.nn.Linear(256, 144, dtype=F16),
                                torch.nn.Linear(144, 256, dtype=F16), torch.nn.Linear(256, 128, dtype=F16))
    report = pingpong.nn.replace_linear(model, fp8="block", training=True)
    assert report.replaced == ["0", "3"] and model[3].recipe == "block"
    assert report.skipped == {"1": "out_features=144: block-wise FP8 training needs multiples of 128 (in_features"
                                   " is the forward's contraction, out_features the data gradient's)",
                              "2": "in_features=144: block-wise FP8 training needs multiples of 128 (in_features"
                                   " is the forward's contraction, out_features the data gradient's)"}


@pytest.mark.parametrize("kwargs, needle", [
    (dict(fp8="blockwise", training=True), "fp8: expected one of"),
    (dict(fp8="col", training=True), "fp8: expected one of"),
    (dict(training=True), "training: True .* needs fp8="),
    (dict(fp8="row", training="yes"), "training: expected a bool"),
    (dict(fp8="row_gw_hp"), r"fp8: expected None or one of \('row', 'block'\) \(training=True"),
])
def test_replace_linear_names_bad_training_arguments(kwargs, needle):
    with pytest.raises(PingpongError, match=needle):
        pingpong.nn.replace_linear(torch.nn.Sequential(torch.nn.Linear(32, 32, dtype=F16)), **kwargs)


# ----------------------------------------------------------------------------- torch.compile


def graphs_of(fn, *args, partition_fn=None):
    """fn compiled (fullgraph, AOTAutograd without inductor; `partition_fn` splits the joint
    graph, e.g. inductor's min-cut partitioner, whose first step is the common-subexpression
    pass): its result and the forward and backward FX graphs."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"),
                           **({"partition_fn": partition_fn} if partition_fn else {}))
    torch._dynamo.reset()
    try:
        out = torch.compile(fn, fullgraph=True, backend=backend)(*args)
        out.backward()
    finally:
        torch._dynamo.reset()
    return graphs


def pingpong_nodes(gm, name):
    return [n for n in gm.graph.nodes if n.op == "call_function" and f"pingpong.{name}" in str(n.target)]


@pytest.mark.parametrize("recipe", RECIPE_IDS)
def test_compile_records_the_op_and_the_backward_products(fp8_kernels, recipe):
    """Under torch.compile the forward is X's pingpong::quantize_fp8_pair node and one
    pingpong::fp8_linear_train node on it (their fake implementations give the shapes); the
    backward graph holds the gradient products as pingpong ops, whose fake implementations
    checked their operands and scales (shapes below); the compiled gradients equal the eager
    ones."""
    torch.manual_seed(3)
    M, (K, N) = 17, FEATURES.get(recipe, (64, 48))
    Mp = 128 if recipe == "block" else 32  # 17 tokens padded for dW (scaled_mm's K rule)
    layer = pingpong.nn.Float8TrainingLinear(K, N, dtype=F16, recipe=recipe)
    x = torch.randn(M, K).to(F16)

    def step(x):
        return (layer(x).float() ** 2).sum()

    step(x).backward()
    eager = layer.weight.grad.clone(), layer.bias.grad.clone()
    layer.zero_grad()
    graphs = graphs_of(step, x)
    forward = pingpong_nodes(graphs["forward"], "fp8_linear")
    x_pair = pingpong_nodes(graphs["forward"], "quantize_fp8_pair")
    assert len(forward) == 1 and len(x_pair) == 1 and forward[0].args[2].args[0] is x_pair[0]
    mms = pingpong_nodes(graphs["backward"], "scaled_mm")
    quants = pingpong_nodes(graphs["backward"], "quantize_fp8")
    y, qwt, swt = forward[0].meta["val"]  # pingpong::fp8_linear_train: y and W's operands for the backward
    qxt, sxt = x_pair[0].meta["val"][2:]  # X's, for dW
    assert tuple(y.shape) == (M, N) and qwt.numel() == swt.numel() == 0  # x needs no gradient: no Wᵀ
    if RECIPES[recipe].fp8_weight_grad:  # dW alone: dY's pair (its transpose only), one product
        assert len(mms) == 1 and len(quants) == 1, (len(mms), len(quants))
        assert tuple(mms[0].meta["val"].shape) == (N, K)
        assert tuple(qxt.shape) == (K, Mp) and qxt.dtype == torch.float8_e4m3fn  # X's, from the forward
        q, s, qt, st = quants[0].meta["val"]
        assert q.numel() == 0 and tuple(qt.shape) == (N, Mp)  # tokens last, padded
    else:
        assert qxt.numel() == 0 and mms == [] and quants == [], "no FP8 operands for a bf16 dW"
        assert pingpong_nodes(graphs["backward"], "mm"), "dW on the bf16 GEMM"
    torch.testing.assert_close(layer.weight.grad, eager[0], rtol=0, atol=0)
    torch.testing.assert_close(layer.bias.grad, eager[1], rtol=0, atol=0)


@pytest.mark.parametrize("recipe", RECIPE_IDS)
def test_compiled_layers_fed_one_input_quantize_it_once(fp8_kernels, recipe, monkeypatch):
    """Three training layers on one x (an attention block's q, k and v projections), compiled
    with inductor's partitioner: the forward graph quantizes x once (one
    pingpong::quantize_fp8_pair node, which the common-subexpression pass keeps for all three
    pingpong::fp8_linear_train nodes), and the compiled gradients of x and of every weight and
    bias equal the eager ones bitwise. The compiled step quantizes 7 operands: x once, each W,
    each dY (the training op takes x's pair, it does not quantize x again)."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    torch.manual_seed(4)
    M, (K, N) = 17, FEATURES.get(recipe, (64, 48))
    layers = torch.nn.ModuleList(pingpong.nn.Float8TrainingLinear(K, N, dtype=F16, recipe=recipe) for _ in range(3))
    x = torch.randn(M, K).to(F16).requires_grad_()

    def step(x):
        q, k, v = (layer(x) for layer in layers)
        return ((q.float() * k.float() + v.float()) ** 2).sum()

    def grads():
        return [t.grad.clone() for t in (x, *layers.parameters())]

    step(x).backward()
    eager = grads()
    x.grad = None
    layers.zero_grad()
    quantized, real = [], quantize.quantize_pair_direct

    def counted(t, *args, **kwargs):
        quantized.append(tuple(t.shape))
        return real(t, *args, **kwargs)

    monkeypatch.setattr(quantize, "quantize_pair_direct", counted)
    monkeypatch.setattr(fp8_training, "quantize_pair_direct", counted)
    graphs = graphs_of(step, x, partition_fn=min_cut_rematerialization_partition)
    assert sorted(quantized) == sorted([(M, K)] + [(N, K)] * 3 + [(M, N)] * 3), quantized
    pairs = pingpong_nodes(graphs["forward"], "quantize_fp8_pair")
    linears = pingpong_nodes(graphs["forward"], "fp8_linear")
    assert len(pairs) == 1 and len(linears) == 3, (len(pairs), len(linears))
    assert all(node.args[2].args[0] is pairs[0] for node in linears)  # qx: getitem(the one pair, 0)
    for got, want in zip(grads(), eager):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_fake_implementation_refuses_what_the_recipe_cannot_serve():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w = torch.empty(5, 3, 32, dtype=F16), torch.empty(48, 32, dtype=F16)
        y = torch.ops.pingpong.fp8_linear(x, w, None, "row")
        assert y.shape == (5, 3, 48) and y.dtype == F16
        with pytest.raises(PingpongError, match="weight: in_features=24"):
            torch.ops.pingpong.fp8_linear(torch.empty(5, 24, dtype=F16), torch.empty(48, 24, dtype=F16), None, "row")


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPE_IDS)
def test_inductor_calls_the_forward_and_the_gradient_products_directly(fp8_kernels, recipe):
    """Compiled by inductor (CPU): the inference forward (pingpong::fp8_linear), the training
    forward (X's pingpong::quantize_fp8_pair, then pingpong::fp8_linear_train on it: y and W's
    FP8 operands for the backward, three outputs in buffers of inductor's) and the training
    step's gradient products (pingpong::quantize_fp8_pair of dY, pingpong::scaled_mm, or
    pingpong::mm for a high-precision dW) are direct calls from the generated code
    (pingpong.integration.inductor, counted), with the eager results bitwise; no graph break
    (fullgraph)."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    from pingpong.integration import inductor

    seed = 5
    torch.manual_seed(seed)
    M, (K, N) = 17, FEATURES.get(recipe, (64, 48))
    layer = pingpong.nn.Float8TrainingLinear(K, N, dtype=F16, recipe=recipe)
    x = torch.randn(M, K).to(F16).requires_grad_()
    g = torch.randn(M, N).to(F16)
    params = (x, layer.weight, layer.bias)
    want_y = layer(x)
    want = torch.autograd.grad(want_y, params, g)
    with torch.no_grad():
        want_inference = layer(x)
    torch._dynamo.reset()
    inductor.CALLS.clear()
    try:
        with config.patch(force_disable_caches=True):
            compiled = torch.compile(layer, fullgraph=True, backend="inductor")
            with torch.no_grad():
                inference = compiled(x)
            assert dict(inductor.CALLS) == {"fp8_linear": 1}
            inductor.CALLS.clear()
            (y, got), code = run_and_get_code(lambda: (lambda y: (y, torch.autograd.grad(y, params, g)))(compiled(x)))
    finally:
        torch._dynamo.reset()
    code = "\n".join(code)
    assert "extern_kernels.pingpong_fp8_linear_train(" in code and "extern_kernels.pingpong_quantize_fp8_pair(" in code
    assert "torch.ops.pingpong" not in code, code
    torch.testing.assert_close(inference, want_inference, rtol=0, atol=0)
    torch.testing.assert_close(y, want_y, rtol=0, atol=0)
    for name, gg, ww in zip(("x", "weight", "bias"), got, want):
        torch.testing.assert_close(gg, ww, rtol=0, atol=0, msg=lambda m: f"seed {seed}, {recipe} d{name}: {m}")
    want_calls = {"scaled_mm": 2} if RECIPES[recipe].fp8_weight_grad else {"scaled_mm": 1, "mm": 1}
    assert dict(inductor.CALLS) == {"fp8_linear_train": 1, "quantize_fp8_pair": 2, **want_calls}  # X's, dY's
