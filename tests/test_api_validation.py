"""API argument checks (CPU): each bad input gets its error, naming the argument, and
gemm_ leaves c untouched when it refuses."""

import collections

import pytest
import torch

import pingpong
from pingpong import PingpongError, api
from pingpong.integration import batching
from pingpong.fp8 import Float8Linear
from pingpong.portable import portable_gemm
from pingpong.runtime import plan, spec
from pingpong.tools import suites

bf = torch.bfloat16


def t(*shape, dtype=bf):
    return torch.randn(*shape).to(dtype)


CASES = [
    ("a 1-D", lambda: pingpong.matmul(t(8), t(8, 4)), "a: expected a 2-D tensor"),
    ("batched c shape", lambda: pingpong.gemm(t(3, 8, 8), t(8, 4), t(2, 8, 4), beta=1.0),
     "c: expected shape \\(3, 8, 4\\) or \\(8, 4\\)"),
    ("in place c shared", lambda: pingpong.gemm_(t(8, 4), t(3, 8, 8), t(8, 4)), "c: expected shape \\(3, 8, 4\\)"),
    ("bias length", lambda: pingpong.gemm(t(8, 8), t(8, 4), bias=t(8)), "bias: expected shape \\(4,\\)"),
    ("bias per row", lambda: pingpong.gemm(t(8, 8), t(8, 4), bias=t(4, 1)), "bias: expected shape .*\\(8, 1\\)"),
    ("bias dtype", lambda: pingpong.gemm(t(8, 8), t(8, 4), bias=torch.zeros(4, dtype=torch.int64)), "bias: dtype"),
    ("bias type", lambda: pingpong.gemm(t(8, 8), t(8, 4), bias=[0.0] * 4), "bias: expected a torch.Tensor"),
    ("bias device", lambda: pingpong.gemm(t(8, 8), t(8, 4), bias=torch.zeros(4, device="meta")), "bias must be on"),
    ("activation", lambda: pingpong.gemm(t(8, 8), t(8, 4), activation="tanh"), "activation: expected None or one of"),
    ("activation in place", lambda: pingpong.gemm_(t(8, 4), t(8, 8), t(8, 4), activation="gelu"), "activation"),
    ("batch", lambda: pingpong.matmul(t(2, 8, 8), t(3, 8, 4)), "a and b: batch dimensions \\(2,\\) \\(a\\) and \\(3,\\) \\(b\\) do not broadcast"),
    ("batched cpu", lambda: pingpong.matmul(t(2, 8, 8), t(8, 4)), "pingpong runs on CUDA/ROCm GPUs"),
    ("linear bias length", lambda: pingpong.linear(t(8, 8), t(4, 8), t(5)), "bias: expected shape \\(4,\\) \\(weight.shape\\[0\\]"),
    ("linear bias dtype", lambda: pingpong.linear(t(8, 8), t(4, 8), torch.ones(4, dtype=torch.int64)), "bias: dtype torch.int64"),
    ("linear activation", lambda: pingpong.linear(t(8, 8), t(4, 8), None, "gelu"), "activation: expected None or one of"),
    ("not a tensor", lambda: pingpong.matmul([[1.0]], t(1, 1)), "a: expected a torch.Tensor"),
    ("shape mismatch", lambda: pingpong.matmul(t(8, 5), t(6, 4)), "a.shape\\[-1\\] must equal b.shape\\[-2\\]"),
    ("fp32 inputs", lambda: pingpong.matmul(t(8, 8, dtype=torch.float32), t(8, 8, dtype=torch.float32)),
     "a: dtype torch.float32 is not supported"),
    ("int inputs", lambda: pingpong.matmul(t(8, 8), torch.ones(8, 8, dtype=torch.int32)), "b: dtype torch.int32"),
    ("mixed dtypes", lambda: pingpong.matmul(t(8, 8), t(8, 8, dtype=torch.float16)), "same dtype"),
    ("meta device", lambda: pingpong.matmul(t(8, 8), torch.empty(8, 8, dtype=bf, device="meta")), "same device"),
    ("cpu tensors", lambda: pingpong.matmul(t(8, 8), t(8, 8)), "pingpong runs on CUDA/ROCm GPUs"),
    ("out_dtype", lambda: pingpong.matmul(t(8, 8), t(8, 8), out_dtype=torch.int8), "out_dtype"),
    ("c shape", lambda: pingpong.gemm(t(8, 8), t(8, 4), t(8, 8), beta=1.0), "c: expected shape \\(8, 4\\)"),
    ("c dtype", lambda: pingpong.gemm(t(8, 8), t(8, 4), t(8, 4, dtype=torch.float32), beta=1.0),
     "c: expected dtype torch.bfloat16"),
    ("alpha type", lambda: pingpong.gemm(t(8, 8), t(8, 4), alpha="2"), "alpha: expected a real number"),
    ("beta without c", lambda: pingpong.gemm(t(8, 8), t(8, 4), beta=1.0), "beta: 1.0 scales c, but no c"),
    ("beta bool", lambda: pingpong.gemm(t(8, 8), t(8, 4), beta=True), "beta: expected a real number"),
    ("config type", lambda: pingpong.matmul_tiled(t(8, 8), t(8, 4), config=(128, 128, 64)), "config: expected"),
    ("bad config", lambda: pingpong.matmul_tiled(t(8, 8), t(8, 4), pingpong.KernelConfig(block_m=100)),
     "multiple of the wgmma M"),
    ("path_for cpu", lambda: pingpong.path_for(t(8, 8), t(8, 4)), "CUDA/ROCm"),
    ("c device", lambda: pingpong.gemm(t(8, 8), t(8, 4), torch.empty(8, 4, dtype=bf, device="meta"), beta=1.0),
     "c must be on the same device"),
    ("c device in place", lambda: pingpong.gemm_(torch.empty(8, 4, dtype=bf, device="meta"), t(8, 8), t(8, 4)),
     "c must be on the same device"),
    ("alpha overflow", lambda: pingpong.gemm(t(8, 8), t(8, 4), alpha=10**400), "alpha: .* does not fit a float"),
    ("alpha inf", lambda: pingpong.gemm(t(8, 8), t(8, 4), alpha=float("inf")), "alpha: expected a finite"),
    ("beta nan", lambda: pingpong.gemm(t(8, 8), t(8, 4), t(8, 4), beta=float("nan")), "beta: expected a finite"),
    ("beta nan in place", lambda: pingpong.gemm_(t(8, 4), t(8, 8), t(8, 4), beta=float("nan")),
     "beta: expected a finite"),
]


@pytest.mark.parametrize("name, call, needle", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_a_named_error(name, call, needle):
    with pytest.raises(PingpongError, match=needle):
        call()


def test_errors_are_value_errors():
    assert issubclass(PingpongError, ValueError)


@pytest.mark.parametrize(
    "make_c, needle",
    [
        (lambda: t(8, 8, dtype=torch.float32), "c: expected shape"),
        (lambda: torch.ones(8, 4, dtype=torch.int32), "c: dtype torch.int32 is not supported"),
        (lambda: t(8, 4, dtype=torch.float32), "pingpong runs on CUDA"),  # valid, but on the CPU
    ],
)
def test_gemm_inplace_refusal_leaves_c_untouched(make_c, needle):
    c = make_c()
    before = c.clone()
    with pytest.raises(PingpongError, match=needle):
        pingpong.gemm_(c, t(8, 8), t(8, 4), alpha=2.0, beta=3.0)
    assert torch.equal(c, before)


def test_gemm_inplace_refuses_a_bias_inside_c(portable_runs):  # as on a GPU (CPU: the device error first)
    c = t(8, 4)
    before = c.clone()
    with pytest.raises(PingpongError, match="bias must not share memory with c"):
        pingpong.gemm_(c, t(8, 8), t(8, 4), bias=c[0])
    assert torch.equal(c, before)


def test_gemm_inplace_refuses_aliasing(portable_runs):
    buf = torch.randn(8, 16).to(bf)
    a = buf[:, :8]
    b = torch.randn(8, 8).to(bf)
    before = buf.clone()
    with pytest.raises(PingpongError, match="must not share memory"):
        pingpong.gemm_(buf[:, 8:], a, b)
    assert torch.equal(buf, before)


# ----------------------------------------------------------------------------- named errors
# Issue 44's raw errors and silent acceptances (CPU): each call raises a PingpongError naming
# the argument, before any work.

H, BF, F32 = torch.float16, torch.bfloat16, torch.float32
I32 = torch.int32


def h(*shape, dtype=H):
    return torch.randn(*shape).to(dtype)


def nested(k=16):
    return torch.nested.nested_tensor([torch.randn(2, k), torch.randn(3, k)]).to(H)


def offs():
    return torch.tensor([1, 2], dtype=I32)


def _transposed_alias():
    out = h(16, 16, dtype=F32)
    return portable_gemm(h(16, 16), h(16, 16), out, c=out.t(), beta=1.0, interpret=True)


NAMED_CASES = [
    # nested tensors: torch raised "NestedTensorImpl doesn't support sizes"
    ("matmul nested a", lambda: pingpong.matmul(nested(), h(16, 8)), "a: nested tensors"),
    ("gemm nested c", lambda: pingpong.gemm(h(8, 16), h(16, 16), nested(), beta=1.0), "c: nested tensors"),
    ("linear nested x", lambda: pingpong.linear(nested(), h(8, 16)), "x: nested tensors"),
    ("linear nested weight", lambda: pingpong.linear(h(4, 16), nested()), "weight: nested tensors"),
    ("quantize_fp8 nested x", lambda: pingpong.quantize_fp8(nested()), "x: nested tensors"),
    ("grouped_mm nested a", lambda: pingpong.grouped_mm(nested(), h(2, 16, 8), offs()), "a: nested tensors"),
    ("vector_add nested a", lambda: pingpong.vector_add(nested(), nested()), "a: nested tensors"),
    # None before validation: AttributeError
    ("scaled_mm None", lambda: pingpong.scaled_mm(None, None, None, None), "a: expected a torch.Tensor"),
    ("grouped_mm None", lambda: pingpong.grouped_mm(None, h(2, 16, 8), offs()), "a: expected a torch.Tensor"),
    ("Float8Linear None weight", lambda: Float8Linear(None, None), "weight: expected a torch.Tensor"),
    # Float8Linear's weight and bias, checked before the weight is quantized
    ("Float8Linear 1-D weight", lambda: Float8Linear(h(32), None), "weight: expected a 2-D"),
    ("Float8Linear 3-D weight", lambda: Float8Linear(h(2, 32, 32), None), "weight: expected a 2-D"),
    ("Float8Linear int32 weight", lambda: Float8Linear(torch.ones(32, 32, dtype=I32), None), "weight: dtype"),
    ("Float8Linear (32, 24) weight", lambda: Float8Linear(h(32, 24), None), "weight: in_features=24"),
    ("Float8Linear block K", lambda: Float8Linear(h(32, 32), None, fp8="block"), "weight: in_features=32: block"),
    ("Float8Linear bias length", lambda: Float8Linear(h(32, 32), h(33)), r"bias: expected shape \(32,\)"),
    ("Float8Linear int32 bias", lambda: Float8Linear(h(32, 32), torch.ones(32, dtype=I32)), "bias: dtype"),
    ("Float8Linear str bias", lambda: Float8Linear(h(32, 32), "b"), "bias: expected a torch.Tensor or None"),
    # the interpreter and portable_gemm's own arguments
    ("portable_gemm block=5", lambda: portable_gemm(h(16, 16), h(16, 16), h(16, 16), block=5, interpret=True),
     "block: expected"),
    ("portable_gemm bf16 interpreted", lambda: portable_gemm(h(16, 16, dtype=BF), h(16, 16, dtype=BF),
                                                             h(16, 16, dtype=F32), interpret=True),
     "a and b: bfloat16 inputs are computed wrongly"),
    ("portable_gemm c = out.t()", _transposed_alias, "c must not share memory with out"),
    ("path_for inplace='no'", lambda: pingpong.path_for(h(8, 8), h(8, 8), h(8, 8), inplace="no"),
     "inplace: expected a bool"),
    # the MoE suite's group sizes
    ("moe_group_sizes negative tokens", lambda: suites.moe_group_sizes(-5, 8, 2, "balanced"), "tokens"),
    ("moe_group_sizes no experts", lambda: suites.moe_group_sizes(5, 0, 2, "balanced"), "experts"),
    ("moe_group_sizes top_k > experts", lambda: suites.moe_group_sizes(5, 2, 3, "zipf"), "top_k"),
]


@pytest.mark.parametrize("name, call, needle", NAMED_CASES, ids=[c[0] for c in NAMED_CASES])
def test_named_refusal(name, call, needle):
    with pytest.raises(pingpong.PingpongError, match=needle):
        call()


def test_portable_gemm_refusals_leave_out_untouched():
    out = h(16, 16, dtype=F32)
    before = out.clone()
    for kw in (dict(c=out.t(), beta=1.0), dict(block=5)):
        with pytest.raises(pingpong.PingpongError):
            portable_gemm(h(16, 16), h(16, 16), out, interpret=True, **kw)
    assert torch.equal(out, before)


def test_portable_gemm_takes_a_bf16_output_and_bias_in_the_interpreter():
    """Only bf16 *inputs* are wrong in the interpreter; a bf16 out, c or bias rounds as expected."""
    a, b, bias = h(16, 16), h(16, 16), h(16, dtype=BF)
    out = torch.empty(16, 16, dtype=BF)
    portable_gemm(a, b, out, bias=bias, interpret=True)
    ref = a.float() @ b.float() + bias.float()
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)


# ----------------------------------------------------------------------------- refusals
# Issue 23's refusals: each bad call raises PingpongError naming the argument, before any work,
# and leaves in-place outputs untouched (CPU and meta tensors; kernel runs are recorded).

F16, BF16 = torch.float16, torch.bfloat16


# ----------------------------------------------------------------------------- 1: path_for and the plan cache


def test_path_for_inplace_does_not_cache_a_plan_that_skips_the_self_overlap_check(portable_runs):
    a, b = t(8, 16), t(16, 4)
    c = t(1, 4).expand(8, 4)  # every row is the same memory
    before = c.clone()
    with pytest.raises(PingpongError, match="c: its elements overlap"):
        pingpong.path_for(a, b, c, beta=1.0, inplace=True)
    with pytest.raises(PingpongError, match="c: its elements overlap"):
        pingpong.gemm_(c, a, b, beta=1.0)
    assert portable_runs == [] and torch.equal(c, before)


def test_path_for_inplace_validates_as_gemm_does(portable_runs):
    buf = t(8, 8)
    with pytest.raises(PingpongError, match="c must not share memory with a"):
        pingpong.path_for(buf, t(8, 4), buf[:, 4:], inplace=True)


# ----------------------------------------------------------------------------- 2: a bias that requires grad


def test_gemm_inplace_refuses_a_bias_that_requires_grad():
    c, bias = t(8, 4), torch.randn(4, requires_grad=True)
    before = c.clone()
    with pytest.raises(PingpongError, match="bias: requires grad"):
        pingpong.gemm_(c, t(8, 8), t(8, 4), bias=bias)
    assert torch.equal(c, before)
    with torch.no_grad():  # then nothing is recorded: refused only for the device
        with pytest.raises(PingpongError, match="pingpong runs on CUDA"):
            pingpong.gemm_(c, t(8, 8), t(8, 4), bias=bias)


# ----------------------------------------------------------------------------- 3: sparse operands


def _sparse(kind, x):
    return x.to_sparse() if kind == "coo" else x.to_sparse_csr()


@pytest.mark.parametrize("kind, layout", [("coo", "torch.sparse_coo"), ("csr", "torch.sparse_csr")])
@pytest.mark.parametrize("where", ["a", "b", "c", "bias"])
def test_sparse_tensors_are_refused_early(kind, layout, where):
    x = {"a": t(8, 16, dtype=F16), "b": t(16, 4, dtype=F16), "c": t(8, 4, dtype=F16), "bias": t(4, dtype=F16)}
    if where == "bias" and kind == "csr":
        x[where] = _sparse("coo", x[where])  # CSR is 2-D only
        layout = "torch.sparse_coo"
    else:
        x[where] = _sparse(kind, x[where])
    needle = f"{where}: sparse tensors are not supported \\(layout {layout}\\); pass a dense tensor"
    with pytest.raises(PingpongError, match=needle):
        pingpong.gemm(x["a"], x["b"], x["c"], beta=1.0, bias=x["bias"])
    if where != "c":
        with pytest.raises(PingpongError, match=needle):
            pingpong.gemm_(t(8, 4, dtype=F16), x["a"], x["b"], bias=x["bias"])
    with pytest.raises(PingpongError, match=needle):
        pingpong.path_for(x["a"], x["b"], x["c"], beta=1.0, bias=x["bias"])


def test_sparse_batched_and_linear_are_refused():
    with pytest.raises(PingpongError, match="a: sparse tensors are not supported"):
        pingpong.gemm(t(2, 3, 8, 16, dtype=F16).to_sparse(), t(16, 4, dtype=F16))
    with pytest.raises(PingpongError, match="weight: sparse tensors are not supported"):
        pingpong.linear(t(8, 16, dtype=F16), t(4, 16, dtype=F16).to_sparse())
    with pytest.raises(PingpongError, match="bias: sparse tensors are not supported"):
        pingpong.linear(t(8, 16, dtype=F16), t(4, 16, dtype=F16), t(4, dtype=F16).to_sparse())


# ----------------------------------------------------------------------------- 4: the device error first


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_gemm_inplace_off_gpu_reports_the_device_not_aliasing(device):
    a = torch.empty(8, 8, dtype=BF16, device=device)
    b, c = torch.empty(8, 4, dtype=BF16, device=device), torch.empty(8, 4, dtype=BF16, device=device)
    if device == "cpu":  # c inside a: aliasing, but the device is what is wrong first
        base = torch.zeros(8 * 8, dtype=BF16)
        a, c = base.view(8, 8), base[:32].view(8, 4)
    before = c.clone() if device == "cpu" else None
    with pytest.raises(PingpongError, match="pingpong runs on CUDA"):
        pingpong.gemm_(c, a, b)
    if device == "cpu":
        assert torch.equal(c, before)


# ----------------------------------------------------------------------------- 5: nn


def test_replace_linear_include_must_be_a_predicate():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(PingpongError, match="include: expected None or a callable"):
        pingpong.nn.replace_linear(m, include="fc")
    assert type(m[0]) is torch.nn.Linear


def test_from_linear_needs_a_linear():
    with pytest.raises(PingpongError, match="layer: expected a torch.nn.Linear, got Conv2d"):
        pingpong.nn.Linear.from_linear(torch.nn.Conv2d(3, 3, 1))


# ----------------------------------------------------------------------------- 6: batched, off the GPU


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_batched_off_gpu_is_refused_before_any_broadcast_or_copy(device, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("batched operands were expanded/copied before the refusal")

    monkeypatch.setattr(batching, "run", no_work)
    monkeypatch.setattr(batching, "operand_view", no_work)
    a = torch.empty(8, 1, 512, 1024, dtype=BF16, device=device)
    b = torch.empty(4, 1024, 64, dtype=BF16, device=device)
    with pytest.raises(PingpongError, match="pingpong runs on CUDA"):
        pingpong.gemm(a, b)
    with pytest.raises(PingpongError, match="pingpong runs on CUDA"):
        pingpong.matmul(a, b)


# ----------------------------------------------------------------------------- 10: LRU


def test_plan_cache_evicts_the_least_recently_used(portable_runs, monkeypatch):
    monkeypatch.setattr(plan, "PLAN_CACHE_SIZE", 3)
    shapes = [(8, 16, n) for n in (4, 8, 12)]
    ops = [(t(m, k), t(k, n)) for m, k, n in shapes]
    keys = []
    for a, b in ops:
        pingpong.path_for(a, b)
        keys.append(spec.build(a, b))
    assert list(plan.PLANS) == keys
    pingpong.path_for(*ops[0])  # a hit: now the most recent
    pingpong.path_for(t(8, 16), t(16, 16))  # evicts ops[1], the least recently used
    assert keys[0] in plan.PLANS and keys[1] not in plan.PLANS and keys[2] in plan.PLANS


def test_layer_cache_evicts_the_least_recently_used(portable_runs, monkeypatch):
    """pingpong.integration.direct's LayerPlans: a hit marks its plan used (no reordering), so a full cache
    evicts the least recently used one."""
    from pingpong.integration import direct

    monkeypatch.setattr(direct, "LAYER_CACHE_SIZE", 3)
    w = t(16, 8)
    xs = [t(m, 8) for m in (4, 5, 6)]
    layers = [direct.layer_plan(x, w, None, None) for x in xs]
    assert list(direct.LAYERS.values()) == layers
    assert direct.layer_plan(xs[0], w, None, None) is layers[0]  # a hit: now the most recent
    direct.layer_plan(t(7, 8), w, None, None)  # evicts xs[1]'s, the least recently used
    kept = list(direct.LAYERS.values())
    assert layers[0] in kept and layers[1] not in kept and layers[2] in kept and len(kept) == 3


def test_layer_backward_that_failed_planning_leaves_the_kept_gradient_plans_whole(interpreted_kernels, monkeypatch):
    """LayerPlan.backward plans dx and dweight anew for a gradient of another layout: when the
    second planning raised, the layer kept the first one's new dx plan under the old gradient key,
    so the next backward of the old layout ran dx on the plan of the other layout (on a GPU: the
    kernel reads g with the wrong strides). A failed planning now changes nothing."""
    from pingpong.integration import direct

    def t(*shape):
        return torch.randn(*shape, dtype=torch.float16)

    cls = plan.BACKENDS[0].plan_class
    ran, run_ptrs = [], cls.run_ptrs
    monkeypatch.setattr(cls, "run_ptrs", lambda self, *args: (ran.append(self), run_ptrs(self, *args)))
    x, w = t(4, 8), t(16, 8)
    lp = direct.layer_plan(x, w, None, None)
    g = t(4, 16)
    lp.backward(g, x, w, (True, True, False))
    first, ran[:] = list(ran), []
    real, calls = direct._plan_of, []

    def second_fails(*args):
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("planning failed")
        return real(*args)

    monkeypatch.setattr(direct, "_plan_of", second_fails)
    with pytest.raises(RuntimeError, match="planning failed"):
        lp.backward(t(16, 4).t(), x, w, (True, True, False))  # another layout: dx planned, then dweight raises
    monkeypatch.setattr(direct, "_plan_of", real)
    lp.backward(g, x, w, (True, True, False))
    assert len(first) == 2 and ran == first, "the old layout's gradients must run on its own plans"


@pytest.mark.parametrize("change, with_bias", [
    *((c, b) for c in ("x strides", "weight strides", "bias", "x alignment", "activation") for b in (True, False)),
    ("bias strides", True)])
def test_layer_key_holds_every_layout(portable_runs, change, with_bias):
    """A LayerPlan is reused only for a call of the same layouts: each field of its key changed
    alone gives another plan (a layer with a bias or without: two kinds of key)."""
    from pingpong.integration import direct

    x, w, bias = t(4, 8), t(16, 8), (t(16) if with_bias else None)
    base = direct.layer_plan(x, w, bias, None)
    other = {"x strides": lambda: (t(8, 4).t(), w, bias, None),
             "weight strides": lambda: (x, t(8, 16).t(), bias, None),
             "bias": lambda: (x, w, None, None) if with_bias else (x, w, t(16), None),
             "bias strides": lambda: (x, w, t(16, 2)[:, 0], None),
             "x alignment": lambda: (t(4 * 8 + 1)[1:].view(4, 8), w, bias, None),
             "activation": lambda: (x, w, bias, "relu")}[change]()
    assert direct.layer_plan(*other) is not base
    assert direct.layer_plan(x, w, bias, None) is base


# ----------------------------------------------------------------------------- mutation guards


def test_overlap_span_counts_the_last_element_and_only_it():
    buf = torch.zeros(40, dtype=BF16)
    x = buf[:10]
    assert spec.overlaps(x, buf[9:19])  # shares x's last element: an off-by-one span misses it
    assert not spec.overlaps(x, buf[10:20])  # adjacent: a span of s·stride would see overlap
    m = buf[:20].view(4, 5)[:, :2]  # last element at offset 3·5 + 1 = 16
    assert spec.overlaps(m, buf[16:17]) and not spec.overlaps(m, buf[17:18])


def test_cached_plan_checks_overlap_and_bias_in_c_per_call(portable_runs):
    a, b = t(8, 16), t(16, 4)
    c, bias = t(8, 4), t(4)
    pingpong.gemm_(c, a, b, bias=bias)  # builds the plan
    assert len(portable_runs) == 1
    c2 = t(8, 4)
    before = c2.clone()
    inside = c2[2]  # 16-byte aligned as bias was: the same signature, a plan hit
    assert plan.get(spec.build(a, b, c2, 0.0, c2.dtype, inside, inplace=True)) is not None
    with pytest.raises(PingpongError, match="bias must not share memory with c"):
        pingpong.gemm_(c2, a, b, bias=inside)
    base = torch.zeros(8 * 4 + 8 * 16 - 1, dtype=BF16)
    c3, a3 = base[:32].view(8, 4), base[31:].view(8, 16)  # one element shared
    with pytest.raises(PingpongError, match="c must not share memory with a"):
        pingpong.gemm_(c3, a3, b, bias=bias)
    base4 = torch.zeros(8 * 4 + 8 * 16, dtype=BF16)
    c4, a4 = base4[:32].view(8, 4), base4[32:].view(8, 16)  # adjacent: allowed
    pingpong.gemm_(c4, a4, b, bias=bias)
    assert len(portable_runs) == 2 and torch.equal(c2, before)
