"""FP8 MoE experts training on the CPU (pingpong.fp8_grouped_training, pingpong.moe's fp8 option).

The whole call path runs as on a GPU (validation, quantize_fp8's and scaled_grouped_mm's front
ends and plan caches, the torch.library op and its autograd, grouped_mm's ragged-K weight
gradient) with the kernels replaced (`kernels`): quantize_fp8's launch by torch's cast of the
kernel's formula (tests/test_fp8_training.py's), the FP8 grouped plan by a per-group float64
product of the dequantized operands that reads the scales in scaled_grouped_mm's layouts and
records each launch, grouped_mm on its portable kernel under Triton's interpreter. So the
tests see each product's operands and scale values, and compare the forward and both
gradients with float64 products of the unquantized inputs within bounds derived from e4m3's
precision. fp16 (Triton's interpreter is wrong for bf16)."""

import types

import pytest
import torch

from pingpong import PingpongError, fp8_grouped, fp8_grouped_training as fgt, grouped as gm, moe, quantize
from pingpong import quantize_groups
from pingpong.fp8_training import RECIPES, TORCHAO_NAMES
from pingpong.runtime import plan
from fp8_groups import group_amax, per_element, scales_of
from test_fp8_training import RecordedPlan, _cast, bound, check_close

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

F16, E4M3 = torch.float16, torch.float8_e4m3fn
FMAX = 448.0


def group_bounds(offs, T):
    """(start, end) rows of each group, as the kernels clip them."""
    start, out = 0, []
    for end in offs.tolist():
        end = min(max(end, start), T)
        out.append((start, end))
        start = end
    return out


class RecordedGroupedPlan(RecordedPlan):
    """scaled_grouped_mm's plan as a per-group float64 product of the dequantized operands (the
    rows it does not write NaN), scales read in the kernel's layouts (row: scale_a (T,), scale_b (G, N); block: scale_a
    (T, K/128), scale_b (G, N/128, K/128)); every launch recorded."""
    __slots__ = ()
    runs: list = []

    def run(self, a, b, out, args):
        sa, sb, offs = args.scale_a, args.scale_b, args.offs
        self.runs.append((a.clone(), b.clone(), sa.clone(), sb.clone(), offs.clone()))
        self.fast.append(self.fast_accum)
        T, K = a.shape
        N = b.shape[2]
        out.fill_(float("nan"))  # the rows past offs[-1] are not written: garbage, as on a GPU
        for g, (s, e) in enumerate(group_bounds(offs, T)):
            rows = sa[s:e].double().reshape(-1, 1) if sa.dim() == 1 else per_element(sa[s:e], (e - s, K))
            cols = sb[g].double().reshape(1, N) if sb.dim() == 2 else per_element(sb[g].t(), (K, N))
            out[s:e] = ((a[s:e].double() * rows) @ (b[g].double() * cols)).to(out.dtype)


def _cast_columns(x, q, s, amax=None):
    """quantize_fp8_columns's kernel by its contract: _cast of the transposed copy, row-wise (the
    same with the column maxima given: tests/test_quantize_columns.py)."""
    G, N, K = x.shape
    _cast(x.transpose(1, 2).reshape(G * K, N), q.view(G * K, N), s.view(G * K, 1), "row")


def _cast_blocks_t(x, qt, st):
    """quantize_fp8_blocks_t's kernel by its contract (tests/test_quantize_blocks_t.py): _cast of
    the (G·N, K) view's 128×128 blocks, each matrix and its scale grid transposed."""
    G, N, K = x.shape
    q, s = torch.empty(G * N, K, dtype=qt.dtype), torch.empty(G * N // 128, K // 128)
    _cast(x.reshape(G * N, K), q, s, "block128x128")
    qt.copy_(q.view(G, N, K).transpose(1, 2))
    st.copy_(s.view(G, N // 128, K // 128).transpose(1, 2))


def _cast_stacked(x, q, s, amax):
    """quantize_stacked_direct's kernel by its contract: _cast of the rows, the columns' maxima."""
    G, N, K = x.shape
    _cast(x.reshape(G * N, K), q.view(G * N, K), s.view(G * N, 1), "row")
    amax.copy_(x.float().abs().amax(1))


def _cast_groups(x, offs, qt, s, poffs, granularity):
    """quantize_groups_t's kernel by its contract (tests/test_quantize_groups.py): each expert's
    tokens transposed, zero-padded to a multiple of 128 and quantized as quantize_fp8 would (its
    launch replaced by _cast), into the expert's run of qt and its scales."""
    p = 0
    for g, (start, end) in enumerate(group_bounds(offs, x.shape[0])):
        run_ = 128 * -(-(end - start) // 128)
        if run_:
            padded = x.new_zeros(x.shape[1], run_)
            padded[:, :end - start] = x[start:end].t()
            q, sc = quantize.quantize_direct(padded, granularity, qt.dtype)
            qt[:, p:p + run_] = q
            if granularity == "row":
                s[g] = sc.view(-1)
            else:
                s[p // 128:(p + run_) // 128] = sc.t()
        elif granularity == "row":
            s[g] = torch.full((), 1e-12) / FMAX
        p += run_
        poffs[g] = p


class RecordedGroupedK:
    """scaled_grouped_k_mm's launch as a per-expert float64 product of its dequantized operands
    (the scales read in the kernel's layouts: row (G, ·), block (TP // 128, ·)); every launch
    recorded."""
    runs: list = []

    @classmethod
    def launch(cls, a, b, out, poffs, sa, sb, scaling):
        cls.runs.append((a.clone(), b.clone(), sa.clone(), sb.clone(), poffs.clone(), scaling))
        start = 0
        for g, end in enumerate(poffs.tolist()):
            x, y = a[:, start:end].double(), b[:, start:end].double()
            if scaling == "row":
                x, y = x * sa[g].double()[:, None], y * sb[g].double()[:, None]
            else:
                x = x * sa[start // 128:end // 128].double().t().repeat_interleave(128, 1)
                y = y * sb[start // 128:end // 128].double().t().repeat_interleave(128, 1)
            out[g] = (x @ y.t()).to(out.dtype)
            start = end


@pytest.fixture
def kernels(interpreted_kernels, monkeypatch):
    """The kernels replaced (module docstring); returns the list of FP8 grouped products run."""
    recorded = types.SimpleNamespace(NAME="recorded", plan=lambda s: RecordedGroupedPlan(s.epilogue.scales.fast_accum),
                                     can_implement=lambda s: None if s.epilogue.scales is not None else "unscaled")
    monkeypatch.setattr(plan, "BACKENDS", [recorded, *plan.BACKENDS])
    monkeypatch.setattr(fp8_grouped, "check_gpu", lambda device: None)
    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(quantize, "launch", _cast)
    monkeypatch.setattr(quantize, "launch_columns", _cast_columns)
    monkeypatch.setattr(quantize, "launch_stacked", _cast_stacked)
    monkeypatch.setattr(quantize, "launch_blocks_t", _cast_blocks_t)
    compute = gm._compute
    monkeypatch.setattr(gm, "_compute", lambda *a, **kw: compute(*a, **dict(kw, interpret=True)))
    monkeypatch.setattr(RecordedGroupedPlan, "runs", [])
    monkeypatch.setattr(RecordedGroupedPlan, "fast", [])
    monkeypatch.setattr(fp8_grouped, "check_hopper", lambda device: None)
    monkeypatch.setattr(quantize_groups, "launch_groups", _cast_groups)
    monkeypatch.setattr(fp8_grouped, "_launch_grouped_k", RecordedGroupedK.launch)
    monkeypatch.setattr(RecordedGroupedK, "runs", [])
    return RecordedGroupedPlan.runs


def spread(*shape, gen):
    """Normal values whose rows and columns (of the last two dims) differ in magnitude by up to
    16×, so a scale taken along the wrong axis is far off."""
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    r = torch.exp2(torch.randint(-2, 3, (*shape[:-1], 1), generator=gen).double())
    c = torch.exp2(torch.randint(-2, 3, (*shape[:-2], 1, shape[-1]), generator=gen).double())
    return x * r * c


#: (G, N, K) of the expert weights: a rectangular one, and a square one (a scale along the wrong
#: axis has the right shape there, so only its values can catch it)
SHAPES = {"rect": (4, 48, 64), "square": (4, 64, 64)}
#: rows per expert; the extra rows past offs[-1] (`tail`) belong to no expert
SIZES = {"odd": [0, 1, 17, 30], "one": [0, 0, 5, 0]}


def run(shape, sizes, seed, recipe="row_gw_hp", tail=3):
    """x (T, K), weight (G, N, K) → fp8_grouped_linear → y, y.backward(g): (x, w, g, y, offs)."""
    G, N, K = SHAPES[shape]
    gen = torch.Generator().manual_seed(seed)
    T = sum(sizes) + tail
    w = spread(G, N, K, gen=gen).to(F16).requires_grad_()
    x = spread(T, K, gen=gen).to(F16).requires_grad_()
    g = spread(T, N, gen=gen).to(F16)
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    y = fgt.fp8_grouped_linear(x, w, offs, recipe)
    y.backward(g)
    return x, w, g, y, offs


@pytest.mark.parametrize("recipe", ["row", "row_gw_hp"])  # (block-wise: test_block_wise_training)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("sizes", list(SIZES))
def test_forward_and_gradients_against_float64(kernels, recipe, shape, sizes):
    """y, dX, dW against per-expert float64 products of the fp16 inputs: y and dX within the
    bound e4m3 rounding allows with the recipe's scales along each contraction, dW too ("row":
    dYᵀ and Xᵀ per expert along its tokens) or within fp16's ("row_gw_hp", the inputs'
    precision); dX's rows past offs[-1] zero; empty experts get a zero dW."""
    seed = 100 * list(SHAPES).index(shape) + list(SIZES).index(sizes)
    x, w, g, y, offs = run(shape, SIZES[sizes], seed, recipe)
    what = f"{recipe} {shape} {sizes} seed {seed}"
    X, W, Gd = x.detach().double(), w.detach().double(), g.double()
    assert y.dtype == x.grad.dtype == w.grad.dtype == F16 and w.grad.shape == w.shape
    bounds = group_bounds(offs, X.shape[0])
    routed = bounds[-1][1]
    y_ref, y_ok, dx_ref, dx_ok = (torch.zeros(routed, c, dtype=torch.float64) for c in (W.shape[1], W.shape[1],
                                                                                     W.shape[2], W.shape[2]))
    dw_ref, dw_ok = torch.zeros_like(W), torch.zeros_like(W)
    for gi, (s, e) in enumerate(bounds):
        Xg, Gg, Wg = X[s:e], Gd[s:e], W[gi]
        y_ref[s:e], dx_ref[s:e], dw_ref[gi] = Xg @ Wg.t(), Gg @ Wg, Gg.t() @ Xg
        y_ok[s:e] = bound(Xg, Wg.t(), scales_of(Xg, (1, -1)), scales_of(Wg.t(), (-1, 1)))
        dx_ok[s:e] = bound(Gg, Wg, scales_of(Gg, (1, -1)), scales_of(Wg, (-1, 1)))
        if RECIPES[recipe].fp8_weight_grad and e > s:
            dw_ok[gi] = bound(Gg.t(), Xg, scales_of(Gg.t(), (1, -1)), scales_of(Xg, (-1, 1)))
        else:  # (an empty expert: exact zeros)
            dw_ok[gi] = 2.0**-10 * (Gg.t().abs() @ Xg.abs()) + 1e-6
    check_close(y[:routed], y_ref, y_ok, f"{what}: y")
    check_close(x.grad[:routed], dx_ref, dx_ok, f"{what}: dX")
    assert not x.grad[routed:].any(), f"{what}: dX rows past offs[-1] not zero"
    check_close(w.grad, dw_ref, dw_ok, f"{what}: dW")


@pytest.mark.parametrize("recipe", ["row", "rowwise", "row_gw_hp", "rowwise_with_gw_hp"])
def test_torchao_recipes_fast_accumulate_the_forward_alone(kernels, recipe):
    """torchao's names run the forward's grouped product with use_fast_accum=True, as torchao's
    recipes run their output GEMM, and the data gradient's promoted; pingpong's promote both."""
    run("rect", SIZES["odd"], 7, recipe)
    assert RecordedGroupedPlan.fast == [recipe in TORCHAO_NAMES, False], RecordedGroupedPlan.fast


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_product_scales_along_its_contraction(kernels, shape):
    """The launched FP8 products, in order (forward, dX): fp8 operands, a row-major, b K-major
    (stride 1 along the contraction), scale_a per row of a and scale_b per group and column of
    b, each amax / 448 of the unquantized operand along the axis the product contracts."""
    x, w, g, _, offs = run(shape, SIZES["odd"], seed=7)
    X, W, Gd = x.detach().float(), w.detach().float(), g.float()
    G, N, K = W.shape
    assert len(kernels) == 2
    products = [("Y", X, W.transpose(1, 2)), ("dX", Gd, W)]  # (name, A (T, C), B (G, C, D))
    for (name, A, B), (a, b, sa, sb, o) in zip(products, kernels):
        assert a.dtype == b.dtype == E4M3, name
        assert a.shape == A.shape and a.stride(1) == 1, (name, a.shape, a.stride())
        assert b.shape == B.shape and b.stride(1) == 1, (name, b.shape, b.stride())
        assert torch.equal(o, offs)
        torch.testing.assert_close(sa, group_amax(A, (1, -1)).view(-1) / FMAX, rtol=0, atol=0, msg=f"{name}: scale_a")
        want = torch.stack([group_amax(B[i], (-1, 1)).view(-1) for i in range(G)]) / FMAX
        torch.testing.assert_close(sb, want, rtol=0, atol=0, msg=f"{name}: scale_b axis")


@pytest.mark.parametrize("shape", [(2, 256, 384), (3, 256, 256)])
def test_block_wise_forward_and_data_gradient(kernels, shape):
    """The block-wise products (1×128 activations, 128×128 weights; no grouped recipe serves
    them yet: "block" promises an FP8 weight gradient): y and dX against float64 within the
    e4m3 bound of their blocks, and each launch's scales the amax / 448 of its blocks along the
    contraction, scale_b of dX the forward's 128×128 grid transposed."""
    G, N, K = shape
    gen = torch.Generator().manual_seed(11)
    sizes = [0, 17, 130][:G] if G == 3 else [1, 200]
    T = sum(sizes)
    w, x, g = spread(G, N, K, gen=gen).to(F16), spread(T, K, gen=gen).to(F16), spread(T, N, gen=gen).to(F16)
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    y, dx = fgt._forward(x, w, offs, "block")[0], fgt._data_grad(g, w, None, offs, "block", F16)
    X, W, Gd = x.double(), w.double(), g.double()
    for name, got, A, B in (("Y", y, X, W.transpose(1, 2)), ("dX", dx, Gd, W)):
        ref, ok = torch.zeros(T, B.shape[2], dtype=torch.float64), torch.zeros(T, B.shape[2], dtype=torch.float64)
        for gi, (s, e) in enumerate(group_bounds(offs, T)):
            ref[s:e] = A[s:e] @ B[gi]
            ok[s:e] = bound(A[s:e], B[gi], scales_of(A[s:e], (1, 128)), scales_of(B[gi], (128, 128)))
        check_close(got, ref, ok, f"block {shape} {name}")
    for (name, A, B), (a, b, sa, sb, _) in zip((("Y", X, W.transpose(1, 2)), ("dX", Gd, W)), kernels):
        assert b.shape == B.shape and b.stride(1) == 1 and sa.stride(0) == 1, name
        torch.testing.assert_close(sa, group_amax(A.float(), (1, 128)) / FMAX, rtol=0, atol=0, msg=f"{name}: scale_a")
        want = torch.stack([group_amax(B[i].float(), (128, 128)).t() for i in range(G)]) / FMAX
        torch.testing.assert_close(sb, want, rtol=0, atol=0, msg=f"{name}: scale_b blocks")


def test_recipes_are_the_dense_tables_but_tensor_wise():
    """The grouped path serves the dense recipes but tensor-wise, torchao's included; tensor-wise
    and unknown names are refused naming the argument."""
    assert fgt.GROUPED_RECIPES == ("row", "row_gw_hp", "block", "rowwise", "rowwise_with_gw_hp")
    assert fgt.grouped_recipe("rowwise_with_gw_hp") == "rowwise_with_gw_hp" and fgt.grouped_recipe("rowwise") == "rowwise"
    for name in ("tensor", "tensorwise"):
        with pytest.raises(PingpongError, match=f"fp8: recipe '{name}' scales tensor-wise"):
            fgt.grouped_recipe(name, "fp8")
    with pytest.raises(PingpongError, match="recipe: expected one of"):
        fgt.grouped_recipe("bogus")


@pytest.mark.parametrize("recipe", ["row", "block"])
def test_the_fp8_weight_gradient_scales_each_expert_along_its_tokens(kernels, recipe):
    """dW's launch: a = dYᵀ and b = Xᵀ in padded runs (each expert's tokens from a multiple of
    128, zeros after them), their scales amax / 448 along each expert's tokens (row: per expert
    and feature; block: per 128 padded tokens and feature), and dW against float64 within e4m3's
    bound (block-wise: 1×128 blocks along the tokens); dX of the same backward too."""
    G, N, K = (3, 128, 256)
    gen = torch.Generator().manual_seed(5)
    sizes = [130, 0, 17]
    T = sum(sizes) + 2
    w = spread(G, N, K, gen=gen).to(F16).requires_grad_()
    x = spread(T, K, gen=gen).to(F16).requires_grad_()
    g = spread(T, N, gen=gen).to(F16)
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    fgt.fp8_grouped_linear(x, w, offs, recipe).backward(g)
    (a, b, sa, sb, poffs, scaling), = RecordedGroupedK.runs
    assert scaling == ("row" if recipe == "row" else "block") and poffs.tolist() == [256, 256, 384]
    X, W, Gd = x.detach().double(), w.detach().double(), g.double()
    for gi, (s, e) in enumerate(group_bounds(offs, T)):
        p = [0, 256, 256][gi]
        for name, q, scale, A in (("dY", a, sa, Gd), ("X", b, sb, X)):
            run_ = q[:, p:p + 128 * -(-(e - s) // 128)].float()
            assert not run_[:, e - s:].any(), f"{name}: expert {gi}'s padding not zero"
            if recipe == "row":
                want = group_amax(A[s:e].t().float(), (1, -1)).view(-1) / FMAX if e > s else None
                if want is not None:
                    torch.testing.assert_close(scale[gi], want, rtol=0, atol=0, msg=f"{name}: expert {gi}'s scales")
            elif e > s:
                padded = torch.zeros(A.shape[1], run_.shape[1], dtype=torch.float32)
                padded[:, :e - s] = A[s:e].t().float()
                want = group_amax(padded, (1, 128)).t() / FMAX
                torch.testing.assert_close(scale[p // 128:p // 128 + want.shape[0]], want, rtol=0, atol=0,
                                           msg=f"{name}: expert {gi}'s block scales")
        if e == s:
            assert not w.grad[gi].any(), f"{recipe}: empty expert {gi}'s dW not zero"
            continue
        ref = Gd[s:e].t() @ X[s:e]
        block = (1, 128) if recipe == "block" else (1, -1)
        ok = bound(Gd[s:e].t(), X[s:e], scales_of(Gd[s:e].t(), block), scales_of(X[s:e], block[::-1]))
        check_close(w.grad[gi], ref, ok, f"{recipe} dW expert {gi}")
        # dX of the same backward
        wb = (128, 128) if recipe == "block" else (-1, 1)
        ok = bound(Gd[s:e], W[gi], scales_of(Gd[s:e], block), scales_of(W[gi], wb))
        check_close(x.grad[s:e], Gd[s:e] @ W[gi], ok, f"{recipe} dX expert {gi}")


def _bad():
    x, w, offs = torch.zeros(40, 64, dtype=F16), torch.zeros(4, 48, 64, dtype=F16), torch.tensor([10, 20, 30, 40],
                                                                                                  dtype=torch.int32)
    return [
        (dict(x=torch.zeros(40, 24, dtype=F16), weight=torch.zeros(4, 48, 24, dtype=F16)), "weight: in_features=24"),
        (dict(weight=torch.zeros(4, 40, 64, dtype=F16)), "weight: .*out_features=40"),
        (dict(weight=w[0]), "weight: expected a 3-D"),
        (dict(weight=torch.zeros(4, 64, 48, dtype=F16).transpose(1, 2)), "weight: expected a contiguous"),
        (dict(weight=w.float()), "weight: dtype torch.float32 differs"),
        (dict(x=x.float(), weight=w.float()), "x: dtype torch.float32 is not supported"),
        (dict(x=x[:, :32]), r"x: expected \(T, K\) with K = 64"),
        (dict(x=torch.zeros(64, 40, dtype=F16).t()), "x: rows must be contiguous"),
        (dict(x=x[None]), r"x: expected \(T, K\)"),
        (dict(offs=offs.long()), "offs: dtype torch.int64; expected torch.int32"),
        (dict(offs=offs[:3]), "offs: expected G = 4 cumulative row ends"),
        (dict(offs=torch.stack([offs, offs], 1)[:, 0]), "offs: must be contiguous"),
        (dict(offs=[10, 20, 30, 40]), "offs: expected a 1-D int32 tensor"),
        (dict(recipe="tensor"), "recipe: recipe 'tensor' scales tensor-wise"),
        (dict(recipe="block"), "weight: in_features=64, out_features=48: block-wise"),
        (dict(recipe="rows"), "recipe: expected one of"),
    ], dict(x=x, weight=w, offs=offs)


@pytest.mark.parametrize("i", range(len(_bad()[0])))
@pytest.mark.parametrize("grad", [False, True])
def test_bad_arguments_are_named_before_any_work(monkeypatch, i, grad):
    """PingpongError naming the argument; nothing quantized or launched (eager, and the op's
    path when an input requires grad)."""
    monkeypatch.setattr(fgt, "quantize_fp8", lambda *a, **k: pytest.fail("quantized before the refusal"))
    change, needle = _bad()[0][i]
    args = dict(_bad()[1], **change)
    if grad:
        for k in ("x", "weight"):
            if args[k].dtype.is_floating_point and args[k].is_leaf:
                args[k] = args[k].clone().requires_grad_()
    with pytest.raises(PingpongError, match=needle):
        fgt.fp8_grouped_linear(**args)


def test_fake_implementation_gives_the_shape_and_refuses():
    """The op's fake implementation: (T, N) of x's dtype on meta tensors, and the same refusals."""
    x, w = torch.empty(33, 64, dtype=torch.bfloat16, device="meta"), torch.empty(4, 48, 64, dtype=torch.bfloat16,
                                                                                   device="meta")
    offs = torch.empty(4, dtype=torch.int32, device="meta")
    y = torch.ops.pingpong.fp8_grouped_linear(x, w, offs, "row_gw_hp")
    assert y.shape == (33, 48) and y.dtype == torch.bfloat16 and y.device.type == "meta"
    with pytest.raises(PingpongError, match="weight: .*out_features=40"):
        torch.ops.pingpong.fp8_grouped_linear(x, torch.empty(4, 40, 64, dtype=torch.bfloat16, device="meta"), offs,
                                              "row_gw_hp")
    with pytest.raises(PingpongError, match="recipe 'tensor' scales tensor-wise"):
        torch.ops.pingpong.fp8_grouped_linear(x, w, offs, "tensor")


def test_without_grad_it_is_the_forward_alone(kernels):
    x, w = torch.randn(20, 64, dtype=F16), torch.randn(2, 48, 64, dtype=F16)
    y = fgt.fp8_grouped_linear(x, w, torch.tensor([5, 20], dtype=torch.int32))
    assert y.shape == (20, 48) and not y.requires_grad and len(kernels) == 1


def test_weight_gradient_alone_runs_no_data_gradient(kernels):
    x, w = torch.randn(20, 64, dtype=F16), torch.randn(2, 48, 64, dtype=F16, requires_grad=True)
    fgt.fp8_grouped_linear(x, w, torch.tensor([5, 20], dtype=torch.int32)).sum().backward()
    assert len(kernels) == 1 and w.grad.shape == w.shape and x.grad is None


def test_double_backward_is_refused(kernels):
    x = torch.randn(20, 64, dtype=F16, requires_grad=True)
    w = torch.randn(2, 48, 64, dtype=F16, requires_grad=True)
    y = fgt.fp8_grouped_linear(x, w, torch.tensor([5, 20], dtype=torch.int32))
    with pytest.raises(PingpongError, match="double backward"):
        torch.autograd.grad(y.sum(), x, create_graph=True)


def test_no_tokens_with_a_broadcast_gradient(kernels):
    """T = 0 and y.sum().backward(): the (0, N) gradient broadcast with zero strides is taken as
    an empty operand; dW is zero, dX empty."""
    x = torch.randn(0, 64, dtype=F16, requires_grad=True)
    w = torch.randn(2, 48, 64, dtype=F16, requires_grad=True)
    fgt.fp8_grouped_linear(x, w, torch.zeros(2, dtype=torch.int32)).sum().backward()
    assert x.grad.shape == (0, 64) and w.grad.shape == w.shape and not w.grad.any()


# ----------------------------------------------------------------------------- pingpong.moe


class Experts(torch.nn.Module):
    """transformers' experts module layout: gate_up_proj (E, 2I, H), down_proj (E, H, I), act_fn."""

    def __init__(self, E, H, inter, gen, transposed=False):
        super().__init__()
        gu = torch.randn(E, 2 * inter, H, generator=gen) / H**0.5
        dn = torch.randn(E, H, inter, generator=gen) / inter**0.5
        if transposed:
            gu, dn = gu.transpose(1, 2).contiguous(), dn.transpose(1, 2).contiguous()
            self.experts_are_transposed = True
        self.gate_up_proj = torch.nn.Parameter(gu.to(F16))
        self.down_proj = torch.nn.Parameter(dn.to(F16))
        self.act_fn = torch.nn.SiLU()


class Model(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Module()])
        self.layers[0].experts = Experts(**kw)


def _moe_grads(model, x, idx, wts):
    x = x.clone().requires_grad_()
    out = moe.experts_forward(model.layers[0].experts, x, idx, wts)
    out.float().pow(2).mean().backward()
    grads = [x.grad] + [p.grad for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    return out, grads


def _loop_reference(gu, dn, act, x, idx, wts):
    """transformers' eager experts (gate_up_proj gu (E, 2I, H), down_proj dn (E, H, I)): each
    expert's tokens, its weighted output added into their rows; wts (T, k) or dense (T, E)."""
    out = torch.zeros_like(x)
    for e in range(gu.shape[0]):
        token, slot = torch.nonzero(idx == e, as_tuple=True)
        gate, up = (x[token] @ gu[e].T).chunk(2, dim=-1)
        w = wts[token, slot] if wts.shape == idx.shape else wts[token, e]
        out = out.index_add(0, token, (act(gate) * up @ dn[e].T) * w[:, None])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("dense_weights", [False, True])
def test_moe_experts_match_the_per_expert_loop(kernels, monkeypatch, dense_weights):
    """pingpong.moe's bf16 path (dispatch, grouped_mm twice, the per-token weighted sum of the k
    pairs) against transformers' eager loop in float64: the output and the gradients of x, of
    both expert weights and of the routing weights, within fp16's error (norm and elementwise)."""
    monkeypatch.setattr(moe, "register", lambda: None)
    gen = torch.Generator().manual_seed(5)
    E, H, inter, T, k = 4, 64, 32, 29, 3
    experts = Model(E=E, H=H, inter=inter, gen=gen).layers[0].experts
    x = torch.randn(T, H, generator=gen).to(F16).requires_grad_()
    idx = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    wts = torch.rand(T, E if dense_weights else k, generator=gen).to(F16).requires_grad_()
    out = moe.experts_forward(experts, x, idx, wts)
    leaves = [x, experts.gate_up_proj, experts.down_proj, wts]
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    got = [out, *torch.autograd.grad(out, leaves, g.to(out.dtype))]
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref = _loop_reference(*ref_leaves[1:3], experts.act_fn, ref_leaves[0], idx, ref_leaves[3])
    want = [ref, *torch.autograd.grad(ref, ref_leaves, g)]
    for what, a, b in zip(("out", "dx", "d gate_up", "d down", "d routing weights"), got, want):
        a = a.double()
        rel = ((a - b).norm() / b.norm()).item()
        worst = ((a - b).abs() / (b.abs() + 1e-2 * b.abs().max())).max().item()
        assert rel < 1e-2 and worst < 5e-2, f"{what}: norm {rel:.3g}, elementwise {worst:.3g} from float64"


def _transformers_experts(name, cls, config, **kw):
    """transformers' own experts module `cls` of models/`name` (tiny, random weights, float64)."""
    transformers = pytest.importorskip("transformers", reason="needs transformers, the moe extra")
    import importlib

    module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    experts = getattr(module, cls)(getattr(transformers, config)(**kw)).double()
    gen = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for p in experts.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.2)
    return experts


@pytest.mark.parametrize("name, cls, config, kw", [
    # stored transposed (is_transposed: gate_up_proj (E, H, 2I)), interleaved gate/up, biases
    ("gpt_oss", "GptOssExperts", "GptOssConfig", dict(hidden_size=32, intermediate_size=16, num_local_experts=4)),
    # no gate (has_gate=False): up_proj (E, I, H) and the activation alone
    ("nemotron_h", "NemotronHExperts", "NemotronHConfig", dict(hidden_size=32, moe_intermediate_size=16,
                                                               n_routed_experts=4)),
    # a norm of each pair's output before its routing weight (has_post_expert_norm)
    ("muse_spark", "MuseSparkExperts", "MuseSparkTextConfig", dict(moe_hidden_size=32, moe_intermediate_size=16,
                                                                   num_local_experts=4)),
])
def test_moe_experts_follow_the_transformers_layouts(monkeypatch, name, cls, config, kw):
    """experts_forward of transformers' experts modules whose layout its flags describe
    (is_transposed, has_gate, has_bias, has_post_expert_norm): the module's own eager forward,
    one expert left empty."""
    compute = gm._compute
    monkeypatch.setattr(gm, "_compute", lambda *a, **k: compute(*a, **dict(k, interpret=True)))
    experts = _transformers_experts(name, cls, config, **kw)
    gen = torch.Generator().manual_seed(9)
    T, k = 9, 2
    x = torch.randn(T, 32, generator=gen, dtype=torch.float64)
    idx = torch.stack([torch.randperm(3, generator=gen)[:k] for _ in range(T)])  # expert 3: no token
    wts = torch.rand(T, k, generator=gen, dtype=torch.float64)
    experts.config._experts_implementation = "eager"
    want = experts(x, idx, wts)
    got = moe.experts_forward(experts.half(), x.half(), idx, wts.half()).double()
    rel = ((got - want).norm() / want.norm()).item()
    assert rel < 5e-3, f"{name}: relative error {rel:.3g} from the module's own forward"


def test_moe_experts_skip_expert_parallel_sentinels(monkeypatch):
    """Under transformers' expert parallelism (`_is_expert_parallel`) a pair routed to another
    rank's expert has an id ≥ E (a sentinel) and weight 0: it counts in no group and adds
    nothing, to the output or to any gradient (the rows past offs[-1], unset: NaN here, are never
    read)."""
    compute = gm._compute

    def unset_tail(a, b, offs, dtype, zero_tail=False, out=None, interpret=False):
        out = compute(a, b, offs, dtype, zero_tail, out, interpret=True)
        if a.dim() == 2 and b.dim() == 3 and not zero_tail:  # ragged rows: what the GPU may leave there
            out[int(offs[-1]):] = float("nan")
        return out

    monkeypatch.setattr(gm, "_compute", unset_tail)
    gen = torch.Generator().manual_seed(6)
    E, H, inter, T, k = 4, 32, 16, 11, 2
    experts = Model(E=E, H=H, inter=inter, gen=gen).layers[0].experts
    experts._is_expert_parallel = True
    experts.gate_up_proj_bias = torch.nn.Parameter(torch.randn(E, 2 * inter, generator=gen).to(F16))
    x = torch.randn(T, H, generator=gen).to(F16).requires_grad_()
    idx = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    idx[::3, 1] = E  # sentinels: experts of another rank
    wts = torch.rand(T, k, generator=gen).to(F16).masked_fill(idx >= E, 0).requires_grad_()
    out = moe.experts_forward(experts, x, idx, wts)
    leaves = [x, experts.gate_up_proj, experts.gate_up_proj_bias, wts]
    grads = torch.autograd.grad(out.float().sum(), leaves)
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    rx, gu, bias, rw = ref_leaves
    ref = torch.zeros_like(rx)
    for e in range(E):
        token, slot = torch.nonzero(idx == e, as_tuple=True)
        gate, up = (rx[token] @ gu[e].T + bias[e]).chunk(2, dim=-1)
        h = experts.act_fn(gate) * up @ experts.down_proj[e].double().T
        ref = ref.index_add(0, token, h * rw[token, slot][:, None])
    want = torch.autograd.grad(ref.sum(), ref_leaves)
    for what, a, b in zip(("out", "dx", "d gate_up", "d bias", "d routing weights"), (out, *grads), (ref, *want)):
        assert a.isfinite().all(), what
        rel = ((a.double() - b).norm() / b.norm()).item()
        assert rel < 1e-2, f"{what}: relative error {rel:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("transposed", [False, True])
def test_moe_experts_in_fp8_track_the_bf16_path(kernels, monkeypatch, transposed):
    """pingpong.moe's experts with fp8="rowwise_with_gw_hp" (row_gw_hp with the forward fast-
    accumulated) against the same experts on grouped_mm: the
    output and every gradient (x, gate_up_proj, down_proj) within FP8's error; the FP8 products
    ran (forward: 2, backward: 2 data gradients)."""
    monkeypatch.setattr(moe, "register", lambda: None)  # transformers' registry is not needed here
    gen = torch.Generator().manual_seed(3)
    E, H, inter, T, k = 4, 64, 32, 37, 2
    model = Model(E=E, H=H, inter=inter, gen=gen, transposed=transposed)
    x = (torch.randn(T, H, generator=gen)).to(F16)
    idx = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    wts = torch.rand(T, k, generator=gen).to(F16)
    ref, ref_grads = _moe_grads(model, x, idx, wts)
    assert not kernels
    moe.use_pingpong_experts(model, fp8="rowwise_with_gw_hp")
    assert getattr(model.layers[0].experts, moe.FP8_ATTRIBUTE) == "rowwise_with_gw_hp"  # torchao's: its own recipe
    out, grads = _moe_grads(model, x, idx, wts)
    assert len(kernels) == 4
    for what, got, want in [("out", out, ref), *zip(("dx", "d gate_up", "d down"), grads, ref_grads)]:
        rel = ((got.double() - want.double()).norm() / want.double().norm()).item()
        assert rel < 0.1, f"{what}: relative difference {rel:.3g} from the bf16 path"
    moe.use_pingpong_experts(model)
    assert not hasattr(model.layers[0].experts, moe.FP8_ATTRIBUTE)


@pytest.mark.parametrize("kw, needle", [
    (dict(fp8="tensor"), "fp8: recipe 'tensor' scales tensor-wise"),
    (dict(fp8="bogus"), "fp8: expected one of"),
    (dict(fp8="row_gw_hp", implementation="eager"), "fp8: runs on the 'pingpong' implementation"),
    (dict(fp8="row_gw_hp", inter=20), r"fp8: layers.0.experts.gate_up_proj \(E, N, K\) = \(4, 40, 64\).*"
                                      "out_features=40"),
])
def test_use_pingpong_experts_names_what_fp8_cannot_serve(monkeypatch, kw, needle):
    """Refused before anything of the model changes (transformers is not even imported)."""
    monkeypatch.setattr(moe, "register", lambda: pytest.fail("registered before the refusal"))
    inter = kw.pop("inter", 32)
    model = Model(E=4, H=64, inter=inter, gen=torch.Generator().manual_seed(0))
    with pytest.raises(PingpongError, match=needle):
        moe.use_pingpong_experts(model, **kw)
    assert not hasattr(model.layers[0].experts, moe.FP8_ATTRIBUTE)


def test_use_pingpong_experts_names_an_implementation_transformers_does_not_know(monkeypatch):
    """Refused before anything of the model changes (its FP8 recipe stays on the experts)."""
    pytest.importorskip("transformers.integrations.moe", reason="the moe extra (transformers >= 5) is not installed")
    monkeypatch.setattr(moe, "register", lambda: pytest.fail("registered before the refusal"))
    model = Model(E=4, H=64, inter=32, gen=torch.Generator().manual_seed(0))
    model.layers[0].experts.pingpong_fp8 = "row_gw_hp"
    with pytest.raises(PingpongError, match="implementation: expected one of .*'eager'.*got 'bogus'"):
        moe.use_pingpong_experts(model, implementation="bogus")
    assert model.layers[0].experts.pingpong_fp8 == "row_gw_hp"


def test_compile_records_the_op_and_the_backward_products(kernels):
    """Under torch.compile the forward is one pingpong::fp8_grouped_linear node; the backward
    graph holds dX's FP8 grouped product and dW's ragged-K grouped_mm as pingpong ops (their fake
    implementations checked the operands); the compiled gradients equal the eager ones."""
    from test_fp8_training import graphs_of, pingpong_nodes

    gen = torch.Generator().manual_seed(4)
    w = spread(3, 48, 64, gen=gen).to(F16).requires_grad_()
    x = spread(40, 64, gen=gen).to(F16).requires_grad_()
    offs = torch.tensor([7, 7, 33], dtype=torch.int32)

    def step(x, w):
        return (fgt.fp8_grouped_linear(x, w, offs).float() ** 2).sum()

    step(x, w).backward()
    eager = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    graphs = graphs_of(step, x, w)
    assert len(pingpong_nodes(graphs["forward"], "fp8_grouped_linear")) == 1
    mms = pingpong_nodes(graphs["backward"], "scaled_grouped_mm")
    assert len(mms) == 1 and tuple(mms[0].meta["val"].shape) == (40, 64)
    dws = pingpong_nodes(graphs["backward"], "grouped_mm")
    assert [tuple(n.meta["val"].shape) for n in dws if "scaled" not in str(n.target)] == [(3, 48, 64)]
    torch.testing.assert_close(x.grad, eager[0], rtol=0, atol=0)
    torch.testing.assert_close(w.grad, eager[1], rtol=0, atol=0)


@pytest.mark.slow
def test_inductor_calls_the_forward_and_the_backward_products_directly(kernels):
    """Compiled by inductor (CPU): an experts block's two pingpong::fp8_grouped_linear forwards
    and their backward's products (pingpong::quantize_fp8 of dY, quantize_fp8_columns of W, scaled_grouped_mm,
    grouped_mm: each with a call per layer) are direct calls from the generated code
    (pingpong.integration.inductor, counted), with the eager gradients bitwise; no graph break."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    from pingpong.integration import inductor

    seed = 6
    gen = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(3, 64, 48, generator=gen) / 48**0.5).to(F16).requires_grad_()
    w2 = (torch.randn(3, 48, 32, generator=gen) / 32**0.5).to(F16).requires_grad_()
    x = torch.randn(33, 48, generator=gen).to(F16).requires_grad_()  # every row in a group: the loss reads them all
    offs = torch.tensor([7, 7, 33], dtype=torch.int32)

    def step(x, w1, w2):
        gate, up = fgt.fp8_grouped_linear(x, w1, offs).chunk(2, dim=-1)
        return (fgt.fp8_grouped_linear((gate * up).contiguous(), w2, offs).float() ** 2).sum()

    def grads(fn):
        loss = fn(x, w1, w2)
        return loss, torch.autograd.grad(loss, (x, w1, w2))

    want = grads(step)
    torch._dynamo.reset()
    inductor.CALLS.clear()
    try:
        with config.patch(force_disable_caches=True):
            (loss, got), code = run_and_get_code(grads, torch.compile(step, fullgraph=True, backend="inductor"))
    finally:
        torch._dynamo.reset()
    code = "\n".join(code)
    assert "extern_kernels.pingpong_fp8_grouped_linear_train(" in code and "extern_kernels.pingpong_quantize_fp8(" in code
    assert "torch.ops.pingpong" not in code, code
    # the loss's fp32 sum in inductor's order of its own; the gradients bitwise
    torch.testing.assert_close(loss, want[0], rtol=1e-6, atol=0, msg=lambda m: f"seed {seed}: {m}")
    for name, g, w in zip(("x", "w1", "w2"), got, want[1]):
        torch.testing.assert_close(g, w, rtol=0, atol=0, msg=lambda m: f"seed {seed}, d{name}: {m}")
    assert dict(inductor.CALLS) == {"fp8_grouped_linear_train": 2, "quantize_fp8": 2, "quantize_fp8_columns": 2,
                                    "scaled_grouped_mm": 2, "grouped_mm": 2}


def test_experts_training_step_copies_nothing(monkeypatch):
    """fp8_grouped_linear's forward and backward of the experts with every kernel a no-op and
    grouped_mm planned as on a GPU (tests/copies.py): no aten copy at all — in particular no
    copy of Wᵀ in the inputs' precision for dX's quantization along N (a weight-sized copy)."""
    from copies import CopiedBytes, experts_step, experts_tensors
    from launches import no_op_kernels

    no_op_kernels(monkeypatch.setattr)
    seed = torch.seed()
    x, w1, w2, g, offs = experts_tensors(E=4, H=128, inter=64, T=64, gen=torch.Generator().manual_seed(seed),
                                         dtype=F16)
    with CopiedBytes() as copied:
        experts_step(lambda a, w, offs: fgt.fp8_grouped_linear(a, w, offs), x, w1, w2, g, offs)
    assert copied.copies == [], f"seed {seed}: copies {copied.copies}"
    assert w1.grad.stride() == w1.stride() and w2.grad.stride() == w2.stride() and x.grad is not None


def _step_launches(monkeypatch, project, E, H, inter, T):
    """Launches of one experts' forward + backward (tests/copies.py's step), kernels no-ops."""
    from copies import experts_step, experts_tensors
    from launches import no_op_kernels

    launches = no_op_kernels(monkeypatch.setattr)
    x, w1, w2, g, offs = experts_tensors(E=E, H=H, inter=inter, T=T, gen=torch.Generator().manual_seed(0), dtype=F16)
    with launches:
        experts_step(project, x, w1, w2, g, offs)
    return launches


def test_experts_training_step_launches_and_bytes(monkeypatch):
    """One experts' forward + backward, every kernel counted with the bytes it moves (CPU, the
    kernels no-ops): FP8's aten kernels are bf16's (SiLU·up and its backward, the chunk's
    gradient) plus the zeroing of the two projections' column-maxima buffers — nothing of the
    size of an activation (no mask over dX: its tail is zeroed by the product's op, which writes
    only the tail rows); its pingpong kernels are, per projection, X's and dY's row
    quantizations, W's rows with the column maxima (one read) and Wᵀ cast from those maxima (one
    read), two FP8 products, dX's tail and the bf16 dW; the weights' quantization moves 6 bytes
    per element (2 reads of bf16, 2 fp8 writes), the step 2 fewer per element than reading W
    twice for dX."""
    from collections import Counter

    E, H, inter, T = 4, 128, 64, 64
    bf16 = _step_launches(monkeypatch, lambda a, w, offs: gm.grouped_mm(a, w.transpose(1, 2), offs),
                          E, H, inter, T)
    monkeypatch.undo()
    fp8 = _step_launches(monkeypatch, lambda a, w, offs: fgt.fp8_grouped_linear(a, w, offs), E, H, inter, T)
    aten = lambda launches: Counter(n for n in launches.names() if n.startswith("aten."))
    extra = aten(fp8) - aten(bf16)
    assert not aten(bf16) - aten(fp8), aten(bf16) - aten(fp8)
    assert sum(extra.values()) == 2 and set(extra) <= {"aten.zero_", "aten.fill_", "aten.zeros"}, extra
    assert fp8.bytes("aten.") - bf16.bytes("aten.") == E * (H + inter) * 4  # the (E, K) fp32 maxima, zeroed
    ours = Counter(n for n in fp8.names() if not n.startswith("aten."))
    assert ours == {"quantize_fp8 row": 4, "quantize_stacked": 2, "quantize_fp8_columns": 2, "scaled_grouped_mm": 4,
                    "zero_tail": 2, "grouped_mm": 2}, ours
    weights = E * 2 * inter * H + E * H * inter  # elements of w1 and w2
    row_scales, maxima = E * (2 * inter + H) * 4, E * (H + inter) * 4  # fp32; the columns' scales: the maxima's size
    quantized_w = fp8.bytes("quantize_stacked") + fp8.bytes("quantize_fp8_columns")
    assert quantized_w == 6 * weights + row_scales + 3 * maxima, quantized_w  # maxima: written, read, scales written
    assert fp8.bytes("zero_tail") == 2 * offs_bytes(E), "dX's tail: nothing past offs[-1] in a balanced step"


def offs_bytes(E):
    """What a tail zeroing reads when no row lies past offs[-1]: offs (E,) int32."""
    return E * 4


def test_kept_weights_are_quantized_once_per_block_and_again_when_changed(monkeypatch):
    """keep_quantized_weights: three micro-batches quantize each expert weight once (its rows with
    the column maxima, its Wᵀ along N), not three times; an in-place change of one weight (an
    optimizer's kind) re-quantizes that weight alone; outside the block every step quantizes
    again; a weight of a module not named is not kept; bad arguments are refused by name."""
    from collections import Counter

    from copies import experts_step, experts_tensors
    from launches import no_op_kernels

    launches = no_op_kernels(monkeypatch.setattr)
    x, w1, w2, g, offs = experts_tensors(E=4, H=128, inter=64, T=64, gen=torch.Generator().manual_seed(0), dtype=F16)
    project = lambda a, w, offs: fgt.fp8_grouped_linear(a, w, offs)  # noqa: E731
    experts = torch.nn.ParameterList([w1, w2])  # Parameters sharing w1's and w2's storage

    def weight_quantizations(step):
        launches.kernels.clear()
        with launches:
            step()
        return Counter(n for n in launches.names() if n in ("quantize_stacked", "quantize_fp8_columns"))

    once = {"quantize_stacked": 2, "quantize_fp8_columns": 2}
    with moe.keep_quantized_weights(experts):
        assert weight_quantizations(lambda: experts_step(project, x, w1, w2, g, offs)) == once
        assert weight_quantizations(lambda: experts_step(project, x, w1, w2, g, offs)) == {}
        with torch.no_grad():
            w1.add_(1.0)
        assert weight_quantizations(lambda: experts_step(project, x, w1, w2, g, offs)) == {
            "quantize_stacked": 1, "quantize_fp8_columns": 1}
    assert weight_quantizations(lambda: experts_step(project, x, w1, w2, g, offs)) == once
    with moe.keep_quantized_weights(torch.nn.ParameterList([w2])):
        experts_step(project, x, w1, w2, g, offs)
        assert weight_quantizations(lambda: experts_step(project, x, w1, w2, g, offs)) == {
            "quantize_stacked": 1, "quantize_fp8_columns": 1}
    for bad in ((), (w1,)):
        with pytest.raises(PingpongError, match=r"modules: keep_quantized_weights takes the torch.nn.Module\(s\)"):
            with moe.keep_quantized_weights(*bad):
                pass
    from pingpong import kept

    assert kept._BLOCK is None


def test_kept_copies_serve_inductors_calls_through_their_buffers(monkeypatch):
    """Inside keep_quantized_weights, inductor's call of quantize_fp8_columns (its lowering, into
    inductor's buffers: a compiled backward's Wᵀ) and of the stacked rows (into its maxima
    buffer) are served from the kept copy, copied into the buffers — one launch each for two
    calls — and no kept tensor is handed out (the maxima come out as a copy); outside the block
    each call launches (kernels no-ops, counted)."""
    from launches import no_op_kernels

    from pingpong import kept

    launches = no_op_kernels(monkeypatch.setattr)
    w = torch.randn(2, 64, 32).to(F16).requires_grad_()
    dtype = torch.float8_e4m3fn

    def bitwise_equal(a, b):  # the kernels are no-ops: what is copied is whatever memory held (NaN too)
        return a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))

    def columns_twice():
        outs = [quantize.columns_like(w, dtype) for _ in range(2)]
        with launches, torch.no_grad():  # as a backward runs
            for out in outs:
                quantize.quantize_fp8_columns_out(w, dtype=dtype, out=out)
        return outs

    def stacked_twice():
        bufs = [torch.full((2, 32), -1.0) for _ in range(2)]
        with launches:
            got = [quantize.quantize_stacked_direct(w.detach(), dtype, buf) for buf in bufs]
        return bufs, got

    with kept.keep_quantized_weights(torch.nn.ParameterList([w])):
        (q1, s1), (q2, s2) = columns_twice()
        bufs, got = stacked_twice()
        (copy_q, copy_s), = [v for k, (_, v) in kept._BLOCK.copies.items() if k[0][0] == "columns"]
        (_, _, kept_amax), = [v for k, (_, v) in kept._BLOCK.copies.items() if k[0][0] == "stacked"]
    assert launches.names().count("quantize_fp8_columns") == 1 and launches.names().count("quantize_stacked") == 1
    for q, s in ((q1, s1), (q2, s2)):
        assert bitwise_equal(q, copy_q) and bitwise_equal(s, copy_s)
        assert q.data_ptr() != copy_q.data_ptr()
    for buf, (_, _, amax) in zip(bufs, got):
        assert amax is buf and bitwise_equal(buf, kept_amax) and buf.data_ptr() != kept_amax.data_ptr()
    launches.kernels.clear()
    columns_twice()
    stacked_twice()
    assert launches.names().count("quantize_fp8_columns") == 2 and launches.names().count("quantize_stacked") == 2
