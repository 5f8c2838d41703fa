"""pingpong's ops under torch.compile's inductor on the CPU (pingpong.integration.inductor): the generated
code calls the plans directly (extern_kernels.pingpong_*, not the dispatcher), with the eager
results, and refuses what the eager call refuses. Kernels: the portable kernel under Triton's
interpreter (the `interpreted_kernels` fixture), fp16. The graphs hold only pingpong ops and
views, so inductor compiles no C++ for them."""

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import pingpong
from pingpong import PingpongError, fp8_grouped_training, fp8_training, quantize
from pingpong.integration import inductor

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

f16 = torch.float16


def randn(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(f16)


@pytest.fixture
def fresh_compile():
    """No compiled code from an earlier test or process (inductor's caches off) and counters at 0."""
    from torch._inductor import config

    torch._dynamo.reset()
    inductor.CALLS.clear()
    with config.patch(force_disable_caches=True):
        yield
    torch._dynamo.reset()


def products(a, b, c, w, bias):
    y = pingpong.matmul(a, b)  # pingpong::mm
    z = pingpong.gemm(a, b, c, alpha=0.5, beta=2.0, bias=bias[:16], activation="gelu_tanh")  # pingpong::gemm
    return y, z, pingpong.linear(z, w, bias, "silu")  # pingpong::linear


def inputs(seed):
    return randn(64, 32, seed=seed), randn(16, 32, seed=seed + 1).t(), randn(64, 16, seed=seed + 2), \
        randn(24, 16, seed=seed + 3), randn(24, seed=seed + 4)


def test_generated_code_calls_the_plans_directly(interpreted_kernels, fresh_compile):
    seed = 11
    args = inputs(seed)
    want = products(*args)
    compiled = torch.compile(products, fullgraph=True, backend="inductor")
    got, (code,) = run_and_get_code(compiled, *args)
    assert "extern_kernels.pingpong_mm(" in code and "extern_kernels.pingpong_gemm(" in code, code
    assert "extern_kernels.pingpong_linear(" in code and "torch.ops.pingpong" not in code, code
    for g, w in zip(got, want):  # the same plans and kernels as the eager call: bitwise equal
        torch.testing.assert_close(g, w, rtol=0, atol=0, msg=lambda m: f"seed {seed}: {m}")
    calls = dict(inductor.CALLS)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        compiled(*inputs(seed + 10))  # fresh inputs, the same compiled code
    assert {k: v - calls[k] for k, v in inductor.CALLS.items()} == {"mm": 1, "gemm": 1, "linear": 1}
    seen = {e.key for e in prof.key_averages()}
    assert {"pingpong::mm", "pingpong::gemm", "pingpong::linear"} <= seen, seen
    ranges = {e.name: e for e in prof.events() if e.name.startswith("pingpong::")}
    assert {name: e.kwinputs for name, e in ranges.items()} == dict.fromkeys(ranges, {"plan": "interpreted"})
    assert ranges["pingpong::gemm"].input_shapes[:4] == [[64, 32], [32, 16], [64, 16], [16]]  # a, b, c, bias
    assert ranges["pingpong::linear"].input_shapes == [[64, 16], [24, 16], [24]]  # x, weight, bias


def test_direct_call_opens_a_profiler_range_only_under_a_profiler(interpreted_kernels, monkeypatch):
    """Not profiled (the timed runs), a direct call enters no range; under torch.profiler it shows
    as one pingpong::<op> range holding its operands' shapes and strides and the plan it ran; the
    result is the product either way."""
    seed = 21
    entered, real = [], inductor._range
    monkeypatch.setattr(inductor, "_range", lambda label, *rest: entered.append(label) or real(label, *rest))
    a, b = randn(32, 16, seed=seed), randn(24, 16, seed=seed + 1).t()
    want = (a.double() @ b.double())
    for profiled in (False, True):
        out = torch.full((32, 24), float("nan"), dtype=f16)
        if profiled:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
                inductor.KERNELS["mm"](a, b, out=out)
            assert entered == ["pingpong::mm"], entered
            assert [e.count for e in prof.key_averages() if e.key == "pingpong::mm"] == [1]
            (e,) = [e for e in prof.events() if e.name == "pingpong::mm"]  # the product and the plan it ran
            assert e.input_shapes == [[32, 16], [16, 24]], e
            if hasattr(e, "structured_input_strides"):  # recorded since torch 2.12 (2.11's events have no strides)
                assert e.structured_input_strides == [[16, 1], [1, 16]], e
            assert e.kwinputs == {"plan": "interpreted"}, e.kwinputs
        else:
            inductor.KERNELS["mm"](a, b, out=out)
            assert entered == [], "a range entered with no profiler active"
        err = (out.double() - want).abs()
        assert err.max() <= 1e-2 * want.abs().max() and torch.linalg.norm(out.double() - want) <= 1e-3 * torch.linalg.norm(want), \
            f"seed {seed}: max error {err.max():.3g}"


def test_training_step_lowers_the_backward_ops_too(interpreted_kernels, fresh_compile):
    seed = 12
    x, w = randn(2, 16, 32, seed=seed).requires_grad_(), randn(24, 32, seed=seed + 1).requires_grad_()

    def step(x, w):
        return pingpong.linear(x, w)  # no bias: its gradient, a reduction, would compile C++

    g = randn(2, 16, 24, seed=seed + 3)
    want = torch.autograd.grad(step(x, w), (x, w), g)
    got = torch.autograd.grad(torch.compile(step, fullgraph=True, backend="inductor")(x, w), (x, w), g)
    for gg, ww in zip(got, want):
        torch.testing.assert_close(gg, ww, rtol=0, atol=0, msg=lambda m: f"seed {seed}: {m}")
    assert inductor.CALLS["linear"] == 1 and inductor.CALLS["mm"] == 2  # forward; dx and dweight


def test_compiled_graph_refuses_what_the_eager_call_refuses(fresh_compile):
    """CPU tensors: the fake implementation accepts them (it checks shapes and dtypes); the
    first call refuses them as the eager call does, naming the argument, before any launch."""
    x, w = randn(16, 32, seed=13), randn(24, 32, seed=14)
    with pytest.raises(PingpongError) as eager:
        pingpong.linear(x, w)
    compiled = torch.compile(lambda x, w: pingpong.linear(x, w), fullgraph=True, backend="inductor")
    for _ in range(2):  # a repeated call is refused too: nothing was cached
        with pytest.raises(PingpongError) as got:
            compiled(x, w)
        assert str(got.value) == str(eager.value)
    assert inductor.CALLS["linear"] == 2


def test_dynamic_shapes_take_the_direct_calls(interpreted_kernels, fresh_compile):
    """dynamic=True: one graph for every row count, its calls direct, results as eager."""
    w, bias = randn(24, 32, seed=21), randn(24, seed=22)
    compiled = torch.compile(lambda x: pingpong.linear(x, w, bias, "silu"), dynamic=True, backend="inductor")
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for rows in (16, 40, 9):
        x = randn(rows, 32, seed=rows)
        torch.testing.assert_close(compiled(x), pingpong.linear(x, w, bias, "silu"), rtol=0, atol=0,
                                   msg=lambda m: f"rows {rows}: {m}")
    assert inductor.CALLS["linear"] == 3
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs == 1


def test_a_static_graph_takes_its_sites_plan_without_the_layer_key(interpreted_kernels, fresh_compile, monkeypatch):
    """pingpong::linear, mm and gemm in a static graph name their sites (`site=`): a site's
    first call keeps its plan, later calls take it without the layer key or the spec
    (direct.layer_plan, direct.gemm not called), with the eager results; an input not 16-byte
    aligned, or another SM carveout, goes through the key again and still gets the eager
    result, and leaves the sites' kept plans as they were (the next aligned call takes them);
    under symbolic layouts no call names a site."""
    from pingpong.integration import direct

    looked = []
    for name in ("layer_plan", "gemm"):
        real = getattr(direct, name)
        monkeypatch.setattr(direct, name, lambda *a, real=real, **k: looked.append(1) or real(*a, **k))
    w, bias, b = randn(24, 32, seed=31), randn(24, seed=32), randn(24, 32, seed=37)

    def f(x, w, bias, b):
        y = pingpong.linear(x, w, bias, "silu")
        return y, pingpong.matmul(y, b), pingpong.gemm(y, b, x, beta=0.5, activation="relu")

    def eager(*args):  # the eager calls' own lookups are not the compiled graph's
        n = len(looked)
        want = f(*args)
        del looked[n:]
        return want

    compiled = torch.compile(f, fullgraph=True, backend="inductor")
    x = randn(16, 32, seed=33)
    _, (code,) = run_and_get_code(compiled, x, w, bias, b)
    assert code.count("site=") == 3, code
    for seed in (34, 35):
        x = randn(16, 32, seed=seed)
        want, looked[:] = eager(x, w, bias, b), []
        for got, ref in zip(compiled(x, w, bias, b), want):
            torch.testing.assert_close(got, ref, rtol=0, atol=0, msg=lambda m: f"seed {seed}: {m}")
        assert not looked, "the sites' plans: no layer key, no spec"
    shifted = torch.empty(16 * 32 + 1, dtype=f16)[1:].view(16, 32)  # the same layout 2 bytes off 16-byte alignment
    shifted.copy_(randn(16, 32, seed=36))
    want, kept = eager(shifted, w, bias, b), dict(inductor.SITES)
    for got, ref in zip(compiled(shifted, w, bias, b), want):
        torch.testing.assert_close(got, ref, rtol=0, atol=0)
    assert len(looked) >= 2, "unaligned x: the linear and the gemm (x its C) through the key"
    assert inductor.SITES == kept, "a plan made for an unaligned input replaced a site's"
    want, looked[:] = eager(x, w, bias, b), []
    for got, ref in zip(compiled(x, w, bias, b), want):
        torch.testing.assert_close(got, ref, rtol=0, atol=0)
    assert not looked, "aligned again: the sites' plans"
    torch._C._set_sm_carveout_experimental(8)
    try:
        for got, ref in zip(compiled(x, w, bias, b), want):
            torch.testing.assert_close(got, ref, rtol=0, atol=0)
    finally:
        torch._C._set_sm_carveout_experimental(None)
    assert len(looked) == 3, "another carveout: every call through the key"
    torch._dynamo.reset()
    _, (code,) = run_and_get_code(torch.compile(f, dynamic=True, backend="inductor"), x, w, bias, b)
    assert "extern_kernels.pingpong_linear(" in code and "site=" not in code, "symbolic layouts: no site"


# ----------------------------------------------------------------------------- grouped and FP8 ops


def test_grouped_training_step_calls_the_plans_directly(monkeypatch, fresh_compile):
    """grouped_mm forward and its two gradient products (themselves grouped_mm, the tails
    zeroed) are direct calls in the compiled forward and backward, with the eager results
    (the portable kernel under Triton's interpreter); no graph break (fullgraph)."""
    from fused_reference import offsets
    from pingpong import grouped as gm

    compute = gm._compute
    monkeypatch.setattr(gm, "_compute", lambda *args, **kw: compute(*args, **dict(kw, interpret=True)))
    seed = 31
    offs = offsets([5, 0, 18, 1])
    a, b = randn(26, 16, seed=seed).requires_grad_(), randn(4, 16, 12, seed=seed + 1).requires_grad_()
    g = randn(26, 12, seed=seed + 2)
    g[24:] = 0  # rows past offs[-1] are unset in the forward: out of the gradient

    def step(a, b):
        return pingpong.grouped_mm(a, b, offs)

    out = step(a, b)
    want = torch.autograd.grad(out, (a, b), g)
    inductor.CALLS.clear()
    got_out = torch.compile(step, fullgraph=True, backend="inductor")(a, b)
    got = torch.autograd.grad(got_out, (a, b), g)
    torch.testing.assert_close(got_out[:24], out[:24], rtol=0, atol=0, msg=lambda m: f"seed {seed}: {m}")
    for gg, ww in zip(got, want):
        torch.testing.assert_close(gg, ww, rtol=0, atol=0, msg=lambda m: f"seed {seed}: {m}")
    assert dict(inductor.CALLS) == {"grouped_mm": 3}  # forward; dA and dB


#: a weight that requires grad: fp8_linear is then pingpong::fp8_linear_train (several outputs)
WEIGHT = torch.randn(48, 64, generator=torch.Generator().manual_seed(43)).half().requires_grad_()


def fp8_operands(M=32, K=64, N=48):
    a = torch.randn(M, K, generator=torch.Generator().manual_seed(41)).to(torch.float8_e4m3fn)
    w = torch.randn(N, K, generator=torch.Generator().manual_seed(42)).to(torch.float8_e4m3fn)
    return a, w.t(), torch.rand(M, 1) + 0.5, torch.rand(1, N) + 0.5


@pytest.mark.parametrize("op, needle, call", [
    ("scaled_mm", "^a: pingpong.scaled_mm runs on a Hopper GPU", lambda a, b, sa, sb: pingpong.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)),
    ("grouped_mm", "^a and b are on cpu", lambda a, b, sa, sb: pingpong.grouped_mm(a.half(), b.half().unsqueeze(0).repeat(2, 1, 1),
                                                           torch.tensor([10, 32], dtype=torch.int32))),
    ("scaled_grouped_mm", "^a: pingpong.scaled_grouped_mm runs on a Hopper", lambda a, b, sa, sb: pingpong.scaled_grouped_mm(
        a, b.t().unsqueeze(0).repeat(2, 1, 1).transpose(1, 2), sa.view(-1), sb.repeat(2, 1),
        torch.tensor([10, 32], dtype=torch.int32))),
    ("fp8_linear", "^x: ", lambda a, b, sa, sb: pingpong.fp8_training.fp8_linear(a.half(), b.t().half())),
    # the training forward: x's own quantize_fp8_pair call comes first, and refuses first
    ("quantize_fp8_pair", "^x: on cpu", lambda a, b, sa, sb: fp8_training.fp8_linear(a.half(), WEIGHT)),
    ("fp8_grouped_linear", "^x: on cpu", lambda a, b, sa, sb: fp8_grouped_training.fp8_grouped_linear(
        a.half(), b.t().half().unsqueeze(0).repeat(2, 1, 1), torch.tensor([10, 32], dtype=torch.int32))),
    ("quantize_fp8", "^x: on cpu", lambda a, b, sa, sb: pingpong.quantize_fp8(a.half(), "tensor")),
    ("quantize_fp8_pair", "^x: on cpu", lambda a, b, sa, sb: quantize.quantize_fp8_pair(a.half(), cols=False)),
])
def test_compiled_fp8_and_grouped_refuse_what_the_eager_call_refuses(fresh_compile, op, needle, call):
    """CPU tensors: each op's fake implementation accepts them (shapes, dtypes, strides); its
    direct call from the compiled code refuses them as the eager call does, naming the argument,
    on every call (nothing cached)."""
    args = fp8_operands()
    with pytest.raises(PingpongError, match=needle) as eager:
        call(*args)
    compiled = torch.compile(call, fullgraph=True, backend="inductor")
    for _ in range(2):
        with pytest.raises(PingpongError) as got:
            compiled(*args)
        assert str(got.value) == str(eager.value)
    assert inductor.CALLS[op] == 2


# ----------------------------------------------------------------------------- ops with several outputs


@pytest.fixture
def cast_kernels(monkeypatch):
    """quantize_fp8's and quantize_fp8_pair's launches replaced by torch's cast of the kernels'
    formula (tests/test_fp8_training.py's), CPU tensors let through."""
    from test_fp8_training import _cast, _cast_pair

    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(quantize, "launch", _cast)
    monkeypatch.setattr(quantize, "launch_pair", _cast_pair)


@pytest.mark.parametrize("granularity", quantize.GRANULARITIES)
def test_quantize_ops_write_the_buffers_inductor_allocates(cast_kernels, fresh_compile, granularity):
    """quantize_fp8 and quantize_fp8_pair have several outputs: each is one direct call that
    writes buffers inductor allocates in the fake implementation's layouts (the 1×128 scales
    outer-dim-major, the tensor-wise scale 0-d), with the eager results bitwise; outputs the
    graph does not read (the pair's q and scales when only qt is used) get new tensors."""
    seed = 51

    def quantized(x):
        q, s = pingpong.quantize_fp8(x, granularity)
        q2, s2, qt, st = quantize.quantize_fp8_pair(x, granularity, pad=128)
        qt3 = quantize.quantize_fp8_pair(x[:24], granularity, pad=128, rows=False)[2]  # q, s, st unread
        return q, s, q2, s2, qt, st, qt3

    x = randn(40, 256, seed=seed) * torch.linspace(0.1, 4, 256).half()  # the columns' ranges differ
    want = quantized(x)
    got, (code,) = run_and_get_code(torch.compile(quantized, fullgraph=True, backend="inductor"), x)
    assert code.count("extern_kernels.pingpong_quantize_fp8(") == 1, code
    assert code.count("extern_kernels.pingpong_quantize_fp8_pair(") == 2 and "torch.ops.pingpong" not in code, code
    for i, (g, w) in enumerate(zip(got, want)):
        what = f"seed {seed}, {granularity}, output {i}"
        assert (g.shape, g.stride(), g.dtype) == (w.shape, w.stride(), w.dtype), what
        torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=0, msg=lambda m: f"{what}: {m}")
    assert dict(inductor.CALLS) == {"quantize_fp8": 1, "quantize_fp8_pair": 2}


def test_several_outputs_under_dynamic_shapes(cast_kernels, fresh_compile):
    """dynamic=True: one graph for every row count (fewer and more than the pair's pad); the
    buffers' shapes and strides (the padded transpose, the unread outputs' new tensors) follow
    the symbolic row count, the results as eager."""
    def quantized(x):
        q, s = pingpong.quantize_fp8(x, "row")
        return q, s, quantize.quantize_fp8_pair(x, "row", rows=False)[2:]

    compiled = torch.compile(quantized, dynamic=True, backend="inductor")
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for rows in (16, 40, 9):
        x = randn(rows, 256, seed=rows)
        got, want = compiled(x), quantized(x)
        for i, (g, w) in enumerate(zip((*got[:2], *got[2]), (*want[:2], *want[2]))):
            assert (g.shape, g.stride()) == (w.shape, w.stride()), (rows, i)
            torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=0, msg=lambda m: f"rows {rows}, {i}: {m}")
    assert dict(inductor.CALLS) == {"quantize_fp8": 3, "quantize_fp8_pair": 3}
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs == 1


def _graph_key(gm, args) -> str:
    """Inductor's FX graph cache key of `gm` (AOTAutograd's cache hashes the same details)."""
    from torch._inductor.codecache import compiled_fx_graph_hash

    return compiled_fx_graph_hash(gm, args, {}, [])[0]


def _traced_mm():
    """A graph holding pingpong::mm, traced with fake tensors (its fake implementation runs
    `register`, as a torch.compile trace does), and its inputs."""
    from torch.fx.experimental.proxy_tensor import make_fx

    args = (randn(64, 32, seed=61), randn(32, 16, seed=62))
    pingpong.matmul  # loads the ops
    return make_fx(lambda a, b: torch.ops.pingpong.mm(a, b), tracing_mode="fake")(*args), args


def test_cache_key_holds_the_lowering_version(monkeypatch):
    """The FX graph cache key of a graph with a pingpong op changes with the lowering's version
    (the digest of the code that emits the calls, or how the registered ops are called) and
    only with it: code cached under another lowering is not loaded."""
    gm, args = _traced_mm()
    keys = {}
    for digest, calls in (("one", "direct"), ("one", "direct"), ("two", "direct"), ("one", "dispatcher")):
        monkeypatch.setattr(inductor, "_sources_digest", lambda: digest)
        monkeypatch.setattr(inductor, "MODES", {"mm": calls})
        keys.setdefault((digest, calls), set()).add(_graph_key(gm, args))
    assert [len(k) for k in keys.values()] == [1, 1, 1], keys  # equal versions, equal keys
    assert len(set.union(*keys.values())) == 3, keys  # each version a key of its own


def test_lowering_sources_hold_every_lowered_function():
    """The digest in the key covers the file of each `lowered` function (which ops are lowered,
    their names and arguments) and all its files exist."""
    import importlib
    import inspect
    from pathlib import Path

    for module in ("fp8", "fp8_grouped", "fp8_training", "fp8_grouped_training", "grouped", "quantize"):
        importlib.import_module(f"pingpong.{module}")
    root = Path(inductor.__file__).resolve().parents[1]
    files = {Path(inspect.getfile(fn.__wrapped__)).resolve().relative_to(root).as_posix() for fn in inductor.KERNELS.values()}
    assert files <= set(inductor.LOWERING_SOURCES), files - set(inductor.LOWERING_SOURCES)
    assert all((root / rel).is_file() for rel in inductor.LOWERING_SOURCES)
    assert inductor.lowering_version() == f"pingpong lowering direct {inductor._sources_digest()}"
    # the files that decide a fake's output layout too: the graph's code holds those layouts, and
    # inductor's key hashes the code, not the shapes recorded on its nodes
    from pingpong.integration import batching
    from pingpong.runtime import fp8_spec

    for fn in (batching.check, fp8_spec.validate_scaled_grouped):
        assert Path(inspect.getfile(fn)).resolve().relative_to(root).as_posix() in inductor.LOWERING_SOURCES, fn


def test_the_key_says_how_the_registered_ops_were_lowered(monkeypatch):
    """The call mode in the key is the one each op was lowered with, fixed at registration: the
    environment variable changed later in the process does not move the key away from the
    code inductor emits."""
    inductor.register()
    assert inductor.MODES and set(inductor.MODES.values()) == {"direct"}
    before = inductor.lowering_version()
    monkeypatch.setenv("PINGPONG_INDUCTOR_CALLS", "dispatcher")
    assert inductor.lowering_version() == before


def test_compiled_code_of_another_lowering_version_is_not_loaded(interpreted_kernels, monkeypatch):
    """Through torch.compile with inductor's on-disk caches on (empty at first): a second compile
    of the same function under the same lowering loads the cached code, one under another
    lowering compiles afresh, and its code calls the plan directly."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import fresh_cache

    def step(a, b):
        return pingpong.matmul(a, b)

    args = (randn(64, 32, seed=63), randn(32, 16, seed=64))
    hits = []
    with fresh_cache():
        for digest in ("one", "one", "two"):
            monkeypatch.setattr(inductor, "_sources_digest", lambda: digest)
            torch._dynamo.reset()
            counters.clear()
            inductor.CALLS.clear()
            torch.compile(step, fullgraph=True, backend="inductor")(*args)
            hits.append(counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"] > 0)
            assert inductor.CALLS["mm"] == 1, digest
    torch._dynamo.reset()
    assert hits == [False, True, False]


def test_user_passes_keep_running_and_keying(interpreted_kernels, monkeypatch):
    """The lowering's key entry takes no pass slot of the user's: their post-grad pass stays
    as set, and their DDP fusion passes (the list the entry joins) stay in it, first, run as
    before, and their uuid enters the key beside the lowering's version."""
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Pass(CustomGraphPass):
        def __init__(self, uuid):
            self.id, self.runs = uuid, 0

        def __call__(self, graph):
            self.runs += 1

        def uuid(self):
            return self.id

    post, fusion = Pass("post"), Pass("fusion")
    monkeypatch.setattr(config, "post_grad_custom_post_pass", post)
    monkeypatch.setattr(config, "_fuse_ddp_communication_passes", [fusion])  # the user's list, set after `register`
    gm, args = _traced_mm()  # the trace puts the key entry back
    assert config.post_grad_custom_post_pass is post
    assert config._fuse_ddp_communication_passes == [fusion, inductor.key_pass()]
    keys = [_graph_key(gm, args)]
    fusion.id = "fusion, changed"
    keys.append(_graph_key(gm, args))  # the user's uuid is in the key
    monkeypatch.setattr(inductor, "_sources_digest", lambda: "other")
    keys.append(_graph_key(gm, args))  # and so is the lowering's version, beside it
    assert len(set(keys)) == 3, keys
    with config.patch(force_disable_caches=True, _fuse_ddp_communication=True):
        torch._dynamo.reset()
        torch.compile(lambda a, b: pingpong.matmul(a, b), fullgraph=True, backend="inductor")(*args)
    torch._dynamo.reset()
    assert (post.runs, fusion.runs) == (1, 1)


@pytest.mark.slow
def test_dispatcher_switch_covers_the_ops_with_several_outputs(tmp_path):
    """PINGPONG_INDUCTOR_CALLS=dispatcher (read when the lowerings register: a process of its
    own): the ops with several outputs keep inductor's fallback, the dispatcher call, as the
    others do (`register` decides for all at once), with the same results."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "dispatcher.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import torch
from torch._inductor import config
from torch._inductor.utils import run_and_get_code
import pingpong
from pingpong import quantize
from pingpong.integration import inductor
from test_fp8_training import _cast
quantize.interpreter_enabled, quantize.launch = (lambda: True), _cast

def quantized(x):
    return pingpong.quantize_fp8(x, "row"), quantize.quantize_fp8_pair(x, "row", cols=False)

x = torch.randn(32, 16, generator=torch.Generator().manual_seed(52)).half()
with config.patch(force_disable_caches=True):
    got, (code,) = run_and_get_code(torch.compile(quantized, fullgraph=True, backend="inductor"), x)
assert "torch.ops.pingpong.quantize_fp8.default(" in code and "torch.ops.pingpong.quantize_fp8_pair.default(" in code, code
assert "extern_kernels.pingpong" not in code and not inductor.CALLS, (code, inductor.CALLS)
assert torch.equal(got[0][0].float(), quantized(x)[0][0].float())
print("ok")
""")
    env = dict(os.environ, PINGPONG_INDUCTOR_CALLS="dispatcher",
               PYTHONPATH=os.pathsep.join([str(Path(pingpong.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-3000:] + run.stderr[-3000:]
