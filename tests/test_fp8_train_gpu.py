"""FP8 training on a Hopper GPU (pingpong.fp8_training, pingpong.nn.Float8TrainingLinear).

Every recipe, odd token counts (1, 17, 777), fresh random inputs (seed in every message) with
rows and columns spread over 2^±3 so that a scale along the wrong axis fails:

- the forward and both gradients against the float64 product of the dequantized operands,
  each quantized here by quantize_fp8 along the axis its product contracts (bf16 rounding
  and fp32 accumulation apart, the same numbers), and against the float64 product of the
  unquantized inputs within the bound e4m3 rounding allows;
- outputs NaN-poisoned first (the caching allocator's next blocks hold NaN), so an unwritten
  element (the padded tokens of dW included) never passes;
- torch.compile's training step equals the eager one;
- 200 steps of a small learnable task end within 1% of the bf16 torch model's loss.
"""

import pytest
import torch

import pingpong
from pingpong.integration import inductor
from closeness import FP8_TRAINING_NORM, assert_close, rel_norm
from fp8_groups import PRODUCT_GROUPS, QUANT_GROUPS, per_element, scales_of
from pingpong.fp8_training import RECIPES

pytestmark = pytest.mark.gpu

BF16 = torch.bfloat16
RECIPE_IDS = list(RECIPES)


def spread(rows, cols, gen):
    x = torch.randn(rows, cols, generator=gen, device="cuda", dtype=torch.float64)
    r = torch.exp2(torch.randint(-3, 4, (rows, 1), generator=gen, device="cuda").double())
    c = torch.exp2(torch.randint(-3, 4, (1, cols), generator=gen, device="cuda").double())
    return x * r * c


def poison():
    """Fill the caching allocator's free memory near the next allocations with NaN."""
    p = torch.full((64 << 20,), float("nan"), dtype=torch.float32, device="cuda")
    del p


def dequantized_along(t, granularity, dim):
    """float64 values of t quantized by quantize_fp8 with one scale per group along `dim` (1:
    per row, or 1×128 block of a row, along the columns; 0: the same along the rows, from tᵀ;
    tensor-wise: one; "block128x128": 128×128 blocks of t, or of tᵀ). Block-wise, the quantized
    axis is padded with zeros to a multiple of 128 (zeros change no amax), as dW's tokens are."""
    src = t if dim == 1 else t.t()
    R, C = src.shape
    if QUANT_GROUPS[granularity][1] == 128:
        src = torch.nn.functional.pad(src, (0, -C % 128))
    q, s = pingpong.quantize_fp8(src.contiguous(), granularity)
    d = (q.double() * per_element(s, q.shape))[:, :C]
    return d if dim == 1 else d.t()


def e4m3_bound(a, b, groups):
    """|fp8 product − a@b| elementwise, from e4m3 rounding of a and b with scales over `groups`
    (fp8_groups.PRODUCT_GROUPS): |Δ| ≤ max(2^-4·|v|, 2^-10·s) per element (a normal's relative
    half-ulp; half the subnormal step 2^-9 in units of the group's scale s = amax / 448); plus
    bf16 output rounding and fp32 accumulation."""
    sa, sb = scales_of(a, groups[0]), scales_of(b, groups[1])
    da = torch.maximum(2.0**-4 * a.abs(), 2.0**-10 * sa)
    db = torch.maximum(2.0**-4 * b.abs(), 2.0**-10 * sb)
    return da @ b.abs() + a.abs() @ db + da @ db + 2.0**-8 * (a @ b).abs() + 2.0**-11 * (a.abs() @ b.abs())


def close_to_dequantized(got, a, b, what, bias=None, fast=False):
    """got against the float64 product of the dequantized operands (+ bias): bf16 output
    rounding and the kernel's fp32 accumulation only (wgmma's in-block accumulation is
    narrower than fp32: 2^-11 of the magnitude covers it; a scale on the wrong axis is off by
    factors of 2 and more). fast: use_fast_accum (no promotion; the accumulator keeps about
    14 bits across all of K: 2^-7 of the magnitude and a 4e-2 norm, as the FP8 kernels' tests
    of fast accumulation)."""
    ref = a @ b if bias is None else a @ b + bias
    allowed = 2.0**-8 * ref.abs() + (2.0**-7 if fast else 2.0**-11) * (a.abs() @ b.abs())
    assert_close(got, ref, norm=4e-2 if fast else 1e-2, allowed=allowed, what=what)


@pytest.mark.parametrize("recipe", RECIPE_IDS)
@pytest.mark.parametrize("M", [1, 17, 777])
def test_forward_and_gradients_against_float64(recipe, M):
    seed = 31 * M + RECIPE_IDS.index(recipe)
    K, N = (640, 384) if recipe == "block" else (528, 400)  # multiples of 16, not of 128 (block-wise: of 128, not 256)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    layer = pingpong.nn.Float8TrainingLinear(K, N, dtype=BF16, device="cuda", recipe=recipe)
    with torch.no_grad():
        layer.weight.copy_(spread(N, K, gen))
        layer.bias.copy_(torch.randn(N, generator=gen, device="cuda", dtype=torch.float64))
    x = spread(M, K, gen).to(BF16).requires_grad_()
    g = spread(M, N, gen).to(BF16)
    poison()
    y = layer(x)
    poison()
    y.backward(g)
    what = f"{recipe} M={M} seed {seed}"
    X, W, G, b = x.detach(), layer.weight.detach(), g, layer.bias.detach().double()
    gr, wg, groups = RECIPES[recipe].granularity, RECIPES[recipe].weight, PRODUCT_GROUPS[recipe]
    assert y.dtype == x.grad.dtype == layer.weight.grad.dtype == layer.bias.grad.dtype == BF16

    # (block-wise, dX's W is quantize_fp8 of Wᵀ here: pingpong transposes W's 128×128 quantization)
    close_to_dequantized(y, dequantized_along(X, gr, 1), dequantized_along(W, wg, 1).t(), f"{what}: y", bias=b,
                         fast=RECIPES[recipe].fast_forward)
    close_to_dequantized(x.grad, dequantized_along(G, gr, 1), dequantized_along(W, wg, 0), f"{what}: dX")
    if RECIPES[recipe].fp8_weight_grad:
        close_to_dequantized(layer.weight.grad, dequantized_along(G, gr, 0).t(), dequantized_along(X, gr, 0),
                             f"{what}: dW")
    Xd, Wd, Gd = X.double(), W.double(), G.double()
    assert_close(y.double() - b, Xd @ Wd.t(), norm=FP8_TRAINING_NORM, allowed=e4m3_bound(Xd, Wd.t(), groups["Y"]) + 2.0**-8 * b.abs(),
                 what=f"{what}: y vs unquantized")
    assert_close(x.grad, Gd @ Wd, norm=FP8_TRAINING_NORM, allowed=e4m3_bound(Gd, Wd, groups["dX"]), what=f"{what}: dX vs unquantized")
    if RECIPES[recipe].fp8_weight_grad:
        allowed = e4m3_bound(Gd.t(), Xd, groups["dW"])
    else:  # bf16 operands, fp32 accumulation, one bf16 rounding
        allowed = 2.0**-8 * (Gd.t() @ Xd).abs() + 2.0**-14 * (Gd.t().abs() @ Xd.abs())
    assert_close(layer.weight.grad, Gd.t() @ Xd, norm=FP8_TRAINING_NORM, allowed=allowed, what=f"{what}: dW vs unquantized")
    torch.testing.assert_close(layer.bias.grad.double(), Gd.sum(0), rtol=2e-2, atol=1e-2 * Gd.abs().sum(0).max().item())


@pytest.mark.parametrize("recipe", RECIPE_IDS)
def test_compiled_training_step_equals_eager(recipe):
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    model = model.cuda().to(BF16)
    report = pingpong.nn.replace_linear(model, fp8=recipe, training=True)
    assert report.replaced == ["0", "2"], report
    x = torch.randn(4, 77, 512, device="cuda", dtype=BF16, requires_grad=True)

    def step(x):
        return model(x).float().pow(2).mean()

    def grads(fn):
        model.zero_grad()
        x.grad = None
        fn(x).backward()
        return [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]

    eager = grads(step)
    torch._dynamo.reset()
    inductor.CALLS.clear()
    compiled = grads(torch.compile(step, fullgraph=True))
    # inductor calls each layer's forward (X's quantize_fp8_pair, then pingpong::fp8_linear_train,
    # its three outputs in inductor's buffers), dY's quantize_fp8_pair and the gradient products
    # directly (pingpong.integration.inductor)
    want_calls = {"scaled_mm": 4} if RECIPES[recipe].fp8_weight_grad else {"scaled_mm": 2, "mm": 2}
    want_calls.update(fp8_linear_train=2, quantize_fp8_pair=4)
    assert dict(inductor.CALLS) == want_calls, (recipe, dict(inductor.CALLS))
    for name, e, c in zip(["x"] + [n for n, _ in model.named_parameters()], eager, compiled):
        # inductor fuses the loss and GELU in its own order: a bf16 ulp of dY may flip an e4m3
        # rounding, so the compiled gradients are compared norm-wise
        assert rel_norm(c, e) < 2e-2, (recipe, name, rel_norm(c, e))


@pytest.mark.parametrize("recipe", ["row", "block"])
def test_kept_weights_give_what_quantizing_every_call_gives(recipe, monkeypatch):
    """keep_quantized_weights around three micro-batches of two FP8 training layers: the weights'
    pairs made once (quantize_pair_direct on them counted), every gradient bitwise that of calls
    outside the block; compiled inside the block (inductor's buffers take a copy of the kept pair):
    the gradients of the compiled step outside the block, bitwise."""
    from pingpong import fp8_training

    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    model = model.cuda().to(BF16)
    pingpong.nn.replace_linear(model, fp8=recipe, training=True)
    weights = [model[0].weight, model[2].weight]
    x = torch.randn(3, 77, 512, device="cuda", dtype=BF16, requires_grad=True)
    made = []
    real = fp8_training.quantize_pair_direct
    monkeypatch.setattr(fp8_training, "quantize_pair_direct",
                        lambda t, *a: (made.append(any(t is w for w in weights)), real(t, *a))[1])

    def grads(fn):
        model.zero_grad()
        x.grad = None
        fn(x).float().pow(2).mean().backward()
        return [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]

    want = grads(model)
    made.clear()
    with pingpong.kept.keep_quantized_weights(model):
        for i in range(3):
            got = grads(model)
            assert all(torch.equal(a, b) for a, b in zip(got, want)), i
        assert sum(made) == 2, made
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    want = grads(compiled)
    with pingpong.kept.keep_quantized_weights(model):
        for i in range(3):
            got = grads(compiled)
            assert all(torch.equal(a, b) for a, b in zip(got, want)), ("compiled", i)


def test_loss_curve_within_one_percent_of_bf16():
    """200 Adam steps of a noisy teacher-student classification (a fixed random teacher, labels
    sampled from its softmax: a loss floor well above zero), the same batches and initial weights:
    the FP8 models' final loss (mean of the last 20 steps) within 1% of the bf16 torch model's."""
    seed = 123
    D, H, C, B, steps = 256, 512, 16, 512, 200
    gen = torch.Generator(device="cuda").manual_seed(seed)
    teacher = torch.randn(D, C, generator=gen, device="cuda") / D**0.5 * 3
    batches = []
    for _ in range(steps):
        x = torch.randn(B, D, generator=gen, device="cuda")
        y = torch.multinomial(torch.softmax(x @ teacher, 1), 1, generator=gen).squeeze(1)
        batches.append((x.to(BF16), y))
    torch.manual_seed(seed)
    base = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.GELU(), torch.nn.Linear(H, H), torch.nn.GELU(),
                               torch.nn.Linear(H, C)).cuda().to(BF16)
    state = {k: v.clone() for k, v in base.state_dict().items()}

    def train(recipe):
        model = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.GELU(), torch.nn.Linear(H, H), torch.nn.GELU(),
                                    torch.nn.Linear(H, C)).cuda().to(BF16)
        model.load_state_dict(state)
        if recipe is not None:  # block-wise: the 16-class head is not a multiple of 128, stays bf16
            report = pingpong.nn.replace_linear(model, fp8=recipe, training=True)
            assert report.replaced == (["0", "2"] if recipe == "block" else ["0", "2", "4"]), report
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        losses = []
        for x, y in batches:
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return sum(losses[-20:]) / 20, losses[0]

    ref, first = train(None)
    assert ref < 0.9 * first, f"seed {seed}: the task did not learn (loss {first:.4f} -> {ref:.4f})"
    for recipe in RECIPE_IDS:
        got, _ = train(recipe)
        assert abs(got - ref) <= 0.01 * ref, f"seed {seed}: {recipe} final loss {got:.4f} vs bf16 {ref:.4f}"
