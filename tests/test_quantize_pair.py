"""quantize_fp8_pair (pingpong.quantize): both axes of one operand, for FP8 training.

The contract is bitwise: (q, s) = quantize_fp8(x) and (qt, st) = quantize_fp8(xᵀ with the rows
padded by zeros to M'), the unfused route fp8_training took before. Checked

- on the CPU, the kernels under Triton's interpreter against quantize_fp8 under the same
  interpreter (its fp8 cast's flaws are then the same on both sides), every granularity, odd row
  counts, zero rows and columns, outputs poisoned with NaN first, each output alone; the scales
  also exactly amax / FP8_MAX of torch's group maxima;
- offline for sm_90a: every kernel compiles without spills;
- on a GPU (marked gpu): bf16, rows 1, 17, 777, K 128..16384, bitwise against quantize_fp8 and
  the transposed copy, outputs NaN-poisoned.
"""

import itertools
import textwrap

import pytest
import torch

from pingpong import PingpongError, quantize
from pingpong.quantize import GRANULARITIES, quantize_fp8_pair
from interpreted import check_interpreted

E4M3 = torch.float8_e4m3fn

_CHECK = textwrap.dedent("""
    import sys, torch
    from pingpong import quantize as Q

    NAN = {torch.float8_e4m3fn: 0x7F, torch.float8_e5m2: 0x7F}  # a NaN byte of each fp8 kind


    def unfused(x, g, dtype, pad):
        M, K = x.shape
        xt = x.new_zeros(K, Q.padded_rows(M, pad))
        xt[:, :M] = x.t()
        return (*Q.quantize_fp8(x, g, dtype), *Q.quantize_fp8(xt, g, dtype))


    def bits(t):
        return t.view(torch.uint8) if t.element_size() == 1 else t


    def group_amax(t, rows, cols):  # amax of each (rows, cols) group (-1: the whole axis)
        R, C = t.shape
        rows, cols = (R if rows == -1 else rows), (C if cols == -1 else cols)
        p = t.new_zeros(-(-R // rows) * rows, -(-C // cols) * cols)
        p[:R, :C] = t.abs()
        return p.view(p.shape[0] // rows, rows, p.shape[1] // cols, cols).amax((1, 3))


    GROUPS = {"tensor": (-1, -1), "row": (1, -1), "block": (1, 128), "block128x128": (128, 128)}


    def check(x, g, dtype, pad, rows=True, cols=True):
        what = (g, tuple(x.shape), x.dtype, dtype, pad, rows, cols)
        q, s, qt, st = Q.pair_like(x, g, dtype, pad, rows, cols)
        for t in (q, qt):
            t.view(torch.uint8).fill_(NAN[dtype])
        for t in (s, st):
            t.fill_(float("nan"))
        if x.numel():
            Q.launch_pair(x, q, s, qt, st, g, rows, cols)
        else:
            q, s, qt, st = Q.quantize_fp8_pair(x, g, dtype, pad, rows, cols)
        want = unfused(x, g, dtype, pad)
        fmax = Q.FP8_MAX[dtype]
        for name, got, ref, on in (("q", q, want[0], rows), ("s", s, want[1], rows), ("qt", qt, want[2], cols),
                                   ("st", st, want[3], cols)):
            if not on:
                assert got.numel() == 0, (what, name)
                continue
            assert got.shape == ref.shape and got.stride() == ref.stride(), (what, name, got.shape, ref.shape,
                                                                             got.stride(), ref.stride())
            assert torch.equal(bits(got), bits(ref)), (what, name)
        if rows and x.numel():  # the scales, exactly, from torch's maxima along the right axis
            amax = group_amax(x.float(), *GROUPS[g]).clamp_min(1e-12)
            assert torch.equal(s.reshape(amax.shape), amax / fmax), (what, "s axis")
        if cols and x.numel():
            xt = x.new_zeros(qt.shape)
            xt[:, :x.shape[0]] = x.t()
            amax = group_amax(xt.float(), *GROUPS[g]).clamp_min(1e-12)
            assert torch.equal(st.reshape(amax.shape), amax / fmax), (what, "st axis")
            assert not qt[:, x.shape[0]:].float().any(), (what, "padding")


    torch.manual_seed(int(sys.argv[1]))
    print("seed", sys.argv[1])
    for g in ("tensor", "row", "block", "block128x128"):
        pad = 128 if g.startswith("block") else 16
        for M in (1, 17, 200):
            for K in (128, 384):
                x = torch.randn(M, K) * torch.exp2(torch.randint(-4, 5, (M, 1)).float())
                x = x * torch.exp2(torch.randint(-4, 5, (1, K)).float())
                x[M // 2] = 0  # a zero row
                x[:, 5] = 0  # a zero column
                for src in (x, x.half()):
                    check(src, g, torch.float8_e4m3fn, pad)
        x = torch.randn(17, 256).half()
        check(x, g, torch.float8_e5m2, pad)
        check(x, g, torch.float8_e4m3fn, 2 * pad)  # more padding than one group
        check(x, g, torch.float8_e4m3fn, pad, rows=False)
        check(x, g, torch.float8_e4m3fn, pad, cols=False)
        check(torch.zeros(17, 256).half(), g, torch.float8_e4m3fn, pad)  # amax 0 everywhere
        check(torch.zeros(0, 256).half(), g, torch.float8_e4m3fn, pad)  # no rows: qt all padding
    print("OK")
""")


@pytest.mark.slow
def test_pair_under_the_interpreter_equals_the_unfused_route():
    """Bitwise (q, s, qt, st) against quantize_fp8 of x and of xᵀ padded, under Triton's
    interpreter (module docstring); the scales along the right axes; the padding zeros."""
    check_interpreted(_CHECK, seed=40)


_REUSED = textwrap.dedent("""
    import sys, torch
    from pingpong import quantize as Q

    torch.manual_seed(int(sys.argv[1]))
    for g in ("tensor", "row"):
        x = torch.randn(70, 384).half()
        slots = Q.amax_slots(x, g)[0].new_zeros(2, 512)  # two slots, as a stream's buffer holds them
        for i, scale in enumerate((1.0, 1 / 64, 4.0, 1 / 4096, 2.0)):  # a maximum left set outweighs the next's
            xs = x * scale
            out = Q.pair_like(xs, g, torch.float8_e4m3fn, 16, True, True)
            inputs = (xs, *out, slots[i % 2], slots[1 - i % 2], g, True, True)
            for prepare_step, _, _ in Q.pair_steps(*inputs):
                fn, args, kwargs, grid = prepare_step(*inputs, interpret=True)
                fn[grid](*args, **kwargs)
            assert not slots[1 - i % 2].any(), (g, scale, "the other slot left set")
            assert slots[i % 2].any(), (g, scale, "no maxima in the filled slot")
            q, s = Q.quantize_fp8(xs, g)
            assert torch.equal(out[0].view(torch.uint8), q.view(torch.uint8)) and torch.equal(out[1], s), (g, scale)
            xt = xs.new_zeros(out[2].shape)
            xt[:, :70] = xs.t()
            qt, st = Q.quantize_fp8(xt, g)
            assert torch.equal(out[2].view(torch.uint8), qt.view(torch.uint8)) and torch.equal(out[3], st), (g, scale)
    print("OK")
""")


def test_the_cast_zeroes_the_other_slot_for_the_next_call():
    """Two amax slots taken in turns through five pair calls of falling and rising magnitude,
    under the interpreter: after each call the slot the next call fills is all zero again
    (the cast cleared it) and the one it filled holds its maxima, and each call's outputs are
    bitwise quantize_fp8's of its own x (a maximum left set would scale the next, smaller x
    by the bigger one's)."""
    check_interpreted(_REUSED)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(granularity="col"), "granularity: expected one of"),
    (dict(pad=0), "pad: expected a positive int, got 0"),
    (dict(pad=True), "pad: expected a positive int"),
    (dict(granularity="block", pad=16), r"pad: block scales along the rows need pad \(= 16\) to be a multiple of 128"),
    (dict(granularity="block128x128", pad=64), "pad: block128x128"),
    (dict(rows=False, cols=False), "rows, cols: at least one output"),
    (dict(dtype=torch.float16), "dtype: expected one of"),
])
def test_pair_names_the_bad_argument_before_any_work(monkeypatch, kwargs, needle):
    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(quantize, "launch_pair", lambda *a: pytest.fail("launched"))
    args = dict(granularity="row", dtype=E4M3, pad=16, rows=True, cols=True) | kwargs
    with pytest.raises(PingpongError, match=needle):
        quantize_fp8_pair(torch.randn(4, 256).half(), **args)


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_pair_fake_shapes(granularity):
    """The op's fake implementation: the shapes and layouts quantize_fp8 gives x and xᵀ padded."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    pad = 128 if granularity.startswith("block") else 16
    with FakeTensorMode():
        x = torch.empty(17, 256, dtype=torch.bfloat16)
        q, s, qt, st = torch.ops.pingpong.quantize_fp8_pair(x, granularity, E4M3, pad, True, True)
        xt = torch.empty(256, pad * (-(-17 // pad)), dtype=torch.bfloat16)
        assert q.shape == x.shape and qt.shape == xt.shape and qt.stride() == (xt.shape[1], 1)
        assert s.shape == quantize.scale_like(x, granularity).shape
        assert st.shape == quantize.scale_like(xt, granularity).shape
        assert st.stride() == quantize.scale_like(xt, granularity).stride()


@pytest.mark.slow
@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_pair_kernels_compile_for_sm90_without_spills(granularity):
    from pingpong.runtime import compile as cc

    M, K = 777, 4096
    x = torch.empty(M, K, dtype=torch.bfloat16)
    pad = 128 if granularity.startswith("block") else 16
    q, s, qt, st = quantize.pair_like(x, granularity, E4M3, pad, True, True)
    mode, amax, clear = quantize._PAIR_MODES[granularity], torch.empty(M + K), torch.empty(M + K)
    with cc.offline("sm_90a"):
        compiled = []
        for prepare in (quantize.prepare_pair_amax,) * (mode < 2) + (quantize.prepare_pair_cast,):
            fn, args, kwargs, _ = prepare(x, q, s, qt, st, amax, clear, granularity, True, True)
            compiled.append(fn.warmup(*args, **kwargs, grid=(1,)))
    for ck in compiled:
        facts = cc.Compiled("pair", "sm_90a", dict(ck.asm), ck.metadata).facts()
        assert facts.spill_bytes == 0, (granularity, facts.table())
    # two casts' CTAs share an SM (64K registers): with one, the row-wise cast ran 40% longer
    # (the slot's clearing loop placed after the tile's stores held 110 registers a thread).
    # "block" (both reductions and the transpose in one tile) holds 123 and runs one a SM.
    if granularity != "block":
        assert 2 * facts.registers * facts.threads <= 65536, (granularity, facts.table())
    # the cast orders nothing with its other programs: the slot it zeroes is no other program's
    # (`_clear_slot`): no atomic, no fence, no CTA barrier that would hold a program at its end
    ptx = compiled[-1].asm["ptx"]
    assert not any(op in ptx for op in ("atom.", "fence.", "membar.")), granularity


# ----------------------------------------------------------------------------- GPU


def _gpu_unfused(x, g, pad):
    M, K = x.shape
    xt = x.new_zeros(K, quantize.padded_rows(M, pad))
    xt[:, :M] = x.t()
    return (*quantize.quantize_fp8(x, g), *quantize.quantize_fp8(xt, g))


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("M", [1, 17, 777])
@pytest.mark.parametrize("K", [128, 4096, 16384])
def test_pair_on_the_gpu_equals_the_unfused_route(granularity, M, K):
    """bf16 rows spread over 2^±4, a zero row and a zero column, outputs NaN-poisoned (the
    caching allocator's next blocks): bitwise the unfused route, each output alone too; each
    call twice (the first through Triton's JIT, the second on launch_pair's bound launches)."""
    seed = 7 * M + K
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=gen, device="cuda") * torch.exp2(
        torch.randint(-4, 5, (M, 1), generator=gen, device="cuda").float())
    x = x.to(torch.bfloat16)
    x[M // 2], x[:, 3] = 0, 0
    pad = 128 if granularity.startswith("block") else 16
    want = _gpu_unfused(x, granularity, pad)
    quantize._LAUNCHES.clear()  # each shape's first call through the JIT (its PairPlan made then)
    quantize._PAIR_PLANS.clear()
    for rows, cols, call in itertools.product((True, False), (True, False), ("jit", "bound")):
        if not (rows or cols):
            continue
        torch.full((64 << 20,), float("nan"), device="cuda")  # freed: the outputs land on NaN
        got = quantize_fp8_pair(x, granularity, E4M3, pad, rows, cols)
        for name, a, b, on in zip(("q", "s", "qt", "st"), got, want, (rows, rows, cols, cols)):
            what = f"{granularity} M={M} K={K} rows={rows} cols={cols} {name} ({call}) seed {seed}"
            if not on:
                assert a.numel() == 0, what
                continue
            assert a.shape == b.shape and a.stride() == b.stride(), what
            ab, bb = (a.view(torch.uint8), b.view(torch.uint8)) if a.element_size() == 1 else (a, b)
            assert torch.equal(ab, bb), f"{what}: {(ab != bb).sum().item()} differ"


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", ["tensor", "row"])
@pytest.mark.parametrize("M, K", [(17, 4096), (777, 1024), (4096, 4096)])
def test_pair_plans_amax_buffer_is_clean_between_calls_streams_and_graph_replays(granularity, M, K):
    """The stream's two amax slots, each zeroed by the next call's cast (`amax_slots`), through
    24 calls of one shape whose magnitude falls and rises (a maximum left set, or zeroed before
    a program read it, scales a call by another's), on the default stream, on a side stream,
    and through a CUDA graph replayed on new inputs: every output bitwise the unfused route's,
    and after each call the slot each stream's next call fills all zero."""
    seed = 11 * M + K + len(granularity)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    base = torch.randn(M, K, generator=gen, device="cuda").to(torch.bfloat16)
    quantize._PAIR_PLANS.clear()
    quantize_fp8_pair(base, granularity, E4M3)  # the plan made
    side = torch.cuda.Stream()

    def check(x, got, what):
        for name, a, b in zip(("q", "s", "qt", "st"), got, _gpu_unfused(x, granularity, 16)):
            ab, bb = (a.view(torch.uint8), b.view(torch.uint8)) if a.element_size() == 1 else (a, b)
            assert torch.equal(ab, bb), f"{what} {name} seed {seed}: {(ab != bb).sum().item()} differ"
        for key, buf in quantize._MAXIMA.items():
            held, turn = quantize._TURNS[key]
            assert held is buf and not buf.view(2, -1)[turn].any(), f"{what}: the next slot left set, seed {seed}"

    for i in range(24):
        x = base * 2.0 ** ((i * 7) % 13 - 6)
        stream = side if i % 3 == 2 else torch.cuda.current_stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            got = quantize_fp8_pair(x, granularity, E4M3)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        check(x, got, f"{granularity} M={M} K={K} call {i}")
    device = base.device.index
    streams = {(device, torch.cuda.current_stream().cuda_stream), (device, side.cuda_stream)}
    assert streams <= set(quantize._MAXIMA), "one buffer per stream"
    before = dict(quantize._MAXIMA)
    static = base.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = quantize_fp8_pair(static, granularity, E4M3)
    for i in range(6):
        static.copy_(base * 2.0 ** (5 - 2 * i))
        graph.replay()
        torch.cuda.synchronize()
        check(static, got, f"{granularity} M={M} K={K} replay {i}")
    assert set(quantize._MAXIMA) == set(before) and all(quantize._MAXIMA[k] is before[k] for k in before), \
        "the graph's buffer is its own"


def _stored_plan(monkeypatch, x, granularity="row", rows=True, cols=True, pad=16):
    """x's PairPlan stored as after a first GPU call, its launches recording their base addresses
    (CPU tensors stand in for CUDA ones; the device queries answer 0)."""
    from pingpong.runtime import launcher

    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)  # (CPU builds have neither)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False)
    monkeypatch.setattr(quantize, "_PAIR_PLANS", launcher.LaunchCache(8))
    plan = quantize.PairPlan(x, quantize.pair_like(x, granularity, E4M3, pad, rows, cols), granularity, rows, cols)
    plan.index, launched = 0, []
    for cached in plan.launches:
        cached.bound = lambda grid, stream, ptrs, dyn: launched.append(ptrs)
        cached.grid, cached.key = (1, 1, 1), launcher.launch_key()
    quantize._PAIR_PLANS[quantize._pair_key(x, granularity, E4M3, pad, rows, cols)] = plan
    return plan, launched


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_pair_plan_launches_what_the_checked_path_does(monkeypatch, granularity):
    """A call alike after a stored PairPlan: no check_pair, outputs laid out as pair_like's, the
    launches (amax pass and cast; block-wise the cast) on launch_pair's base addresses; an
    `out` of another layout goes back to the checked path."""
    pad = 16 if granularity in ("row", "tensor") else 128
    x = torch.randn(33, 256, dtype=torch.float16)
    plan, launched = _stored_plan(monkeypatch, x, granularity, pad=pad)
    monkeypatch.setattr(quantize, "check_pair", lambda *a: pytest.fail("a plan hit ran check_pair"))
    made = quantize.quantize_pair_direct(x, granularity, E4M3, pad)
    want = quantize.pair_like(x, granularity, E4M3, pad, True, True)
    assert [(t.shape, t.stride(), t.dtype) for t in made] == [(t.shape, t.stride(), t.dtype) for t in want]
    steps = quantize.pair_steps(x, *made, x, x, granularity, True, True)
    assert len(launched) == len(steps) == (1 if granularity.startswith("block") else 2)
    cast = launched[-1]  # x, q, s, qt, st, then the amax buffer's (x itself block-wise)
    assert cast[:5] == tuple(t.data_ptr() for t in (x, *made))
    if granularity == "row":  # amax[M:], the columns' maxima, after the rows'
        assert launched[0][2] - launched[0][1] == 4 * x.shape[0] == cast[6] - cast[5]
    monkeypatch.setattr(quantize, "check_pair", lambda *a: (_ for _ in ()).throw(PingpongError("checked")))
    wrong = torch.empty_strided(want[2].shape, (1, want[2].shape[0]), dtype=E4M3)  # qt column-major
    with pytest.raises(PingpongError, match="checked"):
        quantize.quantize_pair_direct(x, granularity, E4M3, pad, out=(None, None, wrong, want[3]))


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_rows_alone_plan_launches_quantize_fp8s_kernels(monkeypatch, granularity):
    """Rows alone (cols=False: a forward without dW in FP8, a dY without dW): a stored PairPlan's
    hit runs no check_pair and launches quantize_fp8's own kernels (`launch`: one read; tensor-wise
    the amax partials, then the cast) on x, q and s; qt and st come back empty."""
    pad = 16 if granularity in ("row", "tensor") else 128
    x = torch.randn(33, 256, dtype=torch.float16)
    plan, launched = _stored_plan(monkeypatch, x, granularity, cols=False, pad=pad)
    monkeypatch.setattr(quantize, "check_pair", lambda *a: pytest.fail("a plan hit ran check_pair"))
    made = quantize.quantize_pair_direct(x, granularity, E4M3, pad, True, False)
    want = quantize.pair_like(x, granularity, E4M3, pad, True, False)
    assert [(t.shape, t.stride(), t.dtype) for t in made] == [(t.shape, t.stride(), t.dtype) for t in want]
    assert made[2].numel() == made[3].numel() == 0
    q, s = made[0].data_ptr(), made[1].data_ptr()
    if granularity == "tensor":  # (x, the partials), then (x, q, s, the partials)
        assert len(launched) == 2 and launched[0][0] == x.data_ptr() and launched[1][:3] == (x.data_ptr(), q, s)
        assert launched[1][3] == launched[0][1]
    else:
        assert launched == [(x.data_ptr(), q, s)]


def test_pair_plan_hit_still_refuses_grad_and_takes_only_plain_tensors(monkeypatch):
    """Bad input on a plan hit: x requiring grad under grad mode is refused by name; a tensor
    subclass (a DTensor) never takes a plan, nor a sparse x (whose key cannot be read)."""
    x = torch.randn(16, 128, dtype=torch.float16)
    _, launched = _stored_plan(monkeypatch, x)
    with pytest.raises(PingpongError, match="x: requires grad"):
        quantize.quantize_pair_direct(x.requires_grad_())
    assert launched == []

    class Sub(torch.Tensor):
        pass

    assert quantize._pair_key(x.detach().as_subclass(Sub), "row", E4M3, 16, True, True) is None
    assert quantize._pair_key(x.detach().to_sparse(), "row", E4M3, 16, True, True) is None


@pytest.mark.parametrize("kw, needle", [(dict(pad=16.0), "pad: expected a positive int"),
                                        (dict(pad=True), "pad: expected a positive int"),
                                        (dict(negated=True), "x: a negated view")])
def test_pair_plan_is_no_shortcut_for_an_argument_equal_only_in_value(monkeypatch, kw, needle):
    """16.0 and True equal 16 and 1, and a negated view of x has x's memory, strides and
    dtype: with the plan of pad=16 (and of pad=1) stored, they still go through check_pair,
    which refuses them, and nothing launches."""
    x = torch.randn(16, 128, dtype=torch.float16)
    _, launched = _stored_plan(monkeypatch, x, pad=int(kw.get("pad", 16)))
    checked = quantize.check_pair  # the CPU stands in for the GPU: the device check aside
    monkeypatch.setattr(quantize, "check_pair", lambda *a, **k: checked(*a, device_checks=False))
    with pytest.raises(PingpongError, match=needle):
        if kw.pop("negated", False):
            x = torch._neg_view(x)
        quantize.quantize_pair_direct(x, **kw)
    assert launched == []


def test_pair_plan_is_made_with_pair_likes_layouts_whatever_out_the_first_call_had(monkeypatch):
    """The first call of a signature makes its PairPlan from pair_like's layouts even when that
    call writes into an `out` of another layout (which then goes through launch_pair); the next
    call without `out` gets pair_like's layouts from the plan."""
    x = torch.randn(20, 128, dtype=torch.float16)
    plan, launched = _stored_plan(monkeypatch, x)  # (stubs the device queries; the plan is replaced below)
    quantize._PAIR_PLANS.clear()
    monkeypatch.setattr(quantize, "_plans_on", lambda t: True)
    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)  # the CPU x passes check_pair
    made, real = [], quantize.PairPlan

    def make(t, outputs, *args):
        made.append(real(t, outputs, *args))
        made[-1].index = 0
        for cached in made[-1].launches:
            cached.bound, cached.grid, cached.key = plan.launches[0].bound, (1, 1, 1), plan.launches[0].key
        return made[-1]

    monkeypatch.setattr(quantize, "PairPlan", make)
    slow = []
    monkeypatch.setattr(quantize, "launch_pair", lambda *a: slow.append(a))
    want = quantize.pair_like(x, "row", E4M3, 16, True, True)
    odd_qt = torch.empty_strided(want[2].shape, (1, want[2].shape[0]), dtype=E4M3)
    quantize.quantize_pair_direct(x, out=(None, None, odd_qt, want[3]))
    assert len(made) == 1 and len(slow) == 1 and slow[0][3] is odd_qt  # planned, then the checked launch
    got = quantize.quantize_pair_direct(x)
    assert len(slow) == 1 and len(made) == 1  # the plan's launches
    assert [(t.shape, t.stride()) for t in got] == [(t.shape, t.stride()) for t in want]


def test_stream_zeros_keeps_one_buffer_per_stream_and_none_for_a_graph(monkeypatch):
    """runtime.plan.stream_zeros (the pair's amax buffer, split-K's counters): the same buffer
    on one stream, call after call (the kernels leave it zeroed: no zeroing launch); another on
    another stream; a larger one when more words are asked for; a fresh one, not kept, while a
    CUDA graph is captured (its replays may run beside the stream's calls) and off a GPU."""
    from pingpong.runtime import plan as plans

    stream, capturing, kept = [0], [False], {}
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: stream[0], raising=False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    real_zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda n, dtype, device: real_zeros(n, dtype=dtype))  # a CPU stand-in
    gpu = torch.device("cuda", 0)
    first = plans.stream_zeros(kept, gpu, 10, torch.float32)
    assert plans.stream_zeros(kept, gpu, 300, torch.float32) is first and first.numel() >= 300
    stream[0] = 7
    other = plans.stream_zeros(kept, gpu, 10, torch.float32)
    assert other is not first and set(kept) == {(0, 0), (0, 7)}
    assert plans.stream_zeros(kept, gpu, 5000, torch.float32).numel() >= 5000 and kept[(0, 7)] is not other
    capturing[0] = True
    fresh = plans.stream_zeros(kept, gpu, 10, torch.float32)
    assert fresh.numel() == 10 and all(buf is not fresh for buf in kept.values()) and len(kept) == 2
    capturing[0] = False
    assert plans.stream_zeros(kept, torch.device("cpu"), 10).numel() == 10 and len(kept) == 2


def test_amax_slots_take_turns_per_stream_and_start_over_with_a_new_buffer(monkeypatch):
    """amax_slots: on one stream, consecutive pair calls fill the two slots of its buffer in
    turns, each call's cast clearing the slot the call before it filled; another stream has
    its own buffer; while a graph is captured a fresh buffer, and the stream's turn does not
    move; a buffer made again (grown here) starts at its slot 0. Both slots 16-byte aligned,
    each a multiple of SLOT_WORDS and at least the maxima's words."""
    import types

    stream, capturing = [0], [False]
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: stream[0], raising=False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    real_zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda n, dtype, device: real_zeros(n, dtype=dtype))  # a CPU stand-in
    monkeypatch.setattr(quantize, "_MAXIMA", {})
    monkeypatch.setattr(quantize, "_TURNS", {})
    gpu = torch.device("cuda", 0)
    x = types.SimpleNamespace(shape=(70, 384), device=gpu)
    ptr = torch.Tensor.data_ptr
    a, b, c = (quantize.amax_slots(x, "row") for _ in range(3))
    assert ptr(b[0]) == ptr(a[1]) and ptr(b[1]) == ptr(a[0]) and ptr(c[0]) == ptr(a[0]) != ptr(a[1])
    assert a[0].numel() == a[1].numel() >= 70 + 384 and a[0].numel() % quantize.SLOT_WORDS == 0
    assert ptr(a[0]) % 16 == ptr(a[1]) % 16 == 0
    stream[0] = 7
    assert ptr(quantize.amax_slots(x, "tensor")[0]) not in (ptr(a[0]), ptr(a[1]))
    stream[0], capturing[0] = 0, True
    captured = quantize.amax_slots(x, "row")
    assert {ptr(captured[0]), ptr(captured[1])}.isdisjoint({ptr(a[0]), ptr(a[1])})
    capturing[0] = False
    assert ptr(quantize.amax_slots(x, "row")[0]) == ptr(a[1])  # the turn after c's
    grown = quantize.amax_slots(types.SimpleNamespace(shape=(5000, 4096), device=gpu), "row")
    assert grown[0].numel() >= 9096 and ptr(grown[0]) < ptr(grown[1])  # a new buffer's slot 0
    assert ptr(quantize.amax_slots(x, "row")[0]) == ptr(grown[1])


def test_stream_zeros_keeps_nothing_for_the_cuda_graph_trees_stream(monkeypatch):
    """torch.compile's CUDA-graph trees warm up on their own stream, uncaptured, allocating from
    the graphs' private pool: no buffer is kept for that stream (a fresh one per call); other
    streams keep theirs; without the trees imported nothing is asked."""
    import sys
    import types

    from pingpong.runtime import plan as plans

    stream = [5]
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: stream[0], raising=False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    real_zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda n, dtype, device: real_zeros(n, dtype=dtype))
    manager = types.SimpleNamespace(stream=types.SimpleNamespace(cuda_stream=9))
    trees = types.SimpleNamespace(get_manager=lambda index, create_if_none_exists: manager)
    monkeypatch.setitem(sys.modules, "torch._inductor.cudagraph_trees", trees)
    gpu, kept = torch.device("cuda", 0), {}
    kept_buf = plans.stream_zeros(kept, gpu, 10)
    assert plans.stream_zeros(kept, gpu, 10) is kept_buf and set(kept) == {(0, 5)}
    stream[0] = 9  # the trees' stream
    first, second = plans.stream_zeros(kept, gpu, 10), plans.stream_zeros(kept, gpu, 10)
    assert first is not second and first.numel() == 10 and set(kept) == {(0, 5)}
    monkeypatch.setitem(sys.modules, "torch._inductor.cudagraph_trees", types.SimpleNamespace())  # unreadable
    assert plans.stream_zeros(kept, gpu, 10) is not plans.stream_zeros(kept, gpu, 10) and set(kept) == {(0, 5)}
    monkeypatch.delitem(sys.modules, "torch._inductor.cudagraph_trees")
    assert plans.stream_zeros(kept, gpu, 10) is plans.stream_zeros(kept, gpu, 10) and set(kept) == {(0, 5), (0, 9)}


def test_a_pair_launch_that_raised_drops_its_streams_amax_buffer(monkeypatch):
    """The amax pass may have left maxima set when the cast's launch raised: the stream's kept
    buffer is dropped (the next call starts from a fresh zeroed one)."""
    x = torch.randn(24, 128, dtype=torch.float16)
    plan, launched = _stored_plan(monkeypatch, x)
    quantize._MAXIMA[(x.device.index, 0)] = kept = torch.zeros(4096)
    monkeypatch.setattr(quantize, "amax_slots", lambda *a: (kept[:2048], kept[2048:]))
    quantize.quantize_pair_direct(x)
    assert launched[0][1] == launched[1][5] == kept.data_ptr() and (x.device.index, 0) in quantize._MAXIMA

    def fail(*a):
        raise RuntimeError("launch failed")

    plan.launches[1].bound = fail
    with pytest.raises(RuntimeError, match="launch failed"):
        quantize.quantize_pair_direct(x)
    assert (x.device.index, 0) not in quantize._MAXIMA


def test_split_scratch_keeps_a_workspace_and_counters_per_stream(monkeypatch):
    """runtime.plan.split_scratch (split-K / stream-K launches): one fp32 workspace and the
    counters per stream, the same call after call (no allocation per call), grown when a launch
    needs more; a workspace over WORKSPACE_KEEP_WORDS made per call and not kept; fresh ones, not
    kept, while a graph is captured, on the CUDA-graph trees' stream and off a GPU."""
    import sys
    import types

    from pingpong.runtime import plan as plans

    stream, capturing = [0], [False]
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: stream[0], raising=False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    real_zeros, real_empty = torch.zeros, torch.empty
    monkeypatch.setattr(torch, "zeros", lambda n, dtype, device: real_zeros(n, dtype=dtype))  # CPU stand-ins
    monkeypatch.setattr(torch, "empty", lambda n, dtype, device: real_empty(n, dtype=dtype))
    monkeypatch.setattr(plans, "_WORKSPACES", {})
    monkeypatch.setattr(plans, "_COUNTERS", {})
    monkeypatch.delitem(sys.modules, "torch._inductor.cudagraph_trees", raising=False)
    gpu, ptr = torch.device("cuda", 0), torch.Tensor.data_ptr
    ws, counters = plans.split_scratch(gpu, 1000, 10)
    assert ws.dtype == torch.float32 and ws.numel() >= 1000 and counters.dtype == torch.int32 and not counters.any()
    again = plans.split_scratch(gpu, 900, 12)
    assert again[0] is ws and again[1] is counters  # kept: no allocation per call
    grown = plans.split_scratch(gpu, 100_000, 10)
    assert grown[0].numel() >= 100_000 and grown[0] is not ws and plans._WORKSPACES[(0, 0)] is grown[0]
    big = plans.WORKSPACE_KEEP_WORDS + 1
    first, second = plans.split_scratch(gpu, big, 10)[0], plans.split_scratch(gpu, big, 10)[0]
    assert first.numel() >= big and first is not second and plans._WORKSPACES[(0, 0)] is grown[0]  # not kept
    stream[0] = 7
    other = plans.split_scratch(gpu, 1000, 10)
    assert ptr(other[0]) != ptr(grown[0]) and other[1] is not counters and set(plans._WORKSPACES) == {(0, 0), (0, 7)}
    capturing[0] = True
    captured = plans.split_scratch(gpu, 1000, 10)
    assert captured[0] is not other[0] and captured[1] is not other[1] and len(plans._WORKSPACES) == 2
    capturing[0] = False
    manager = types.SimpleNamespace(stream=types.SimpleNamespace(cuda_stream=9))
    monkeypatch.setitem(sys.modules, "torch._inductor.cudagraph_trees",
                        types.SimpleNamespace(get_manager=lambda index, create_if_none_exists: manager))
    stream[0] = 9  # the trees' stream: nothing kept
    assert plans.split_scratch(gpu, 1000, 10)[0] is not plans.split_scratch(gpu, 1000, 10)[0]
    assert set(plans._WORKSPACES) == {(0, 0), (0, 7)}
    cpu = plans.split_scratch(torch.device("cpu"), 1000, 10)
    assert cpu[0].numel() == 1000 and cpu[1].numel() == 10 and set(plans._WORKSPACES) == {(0, 0), (0, 7)}


def test_amax_turns_follow_the_streams_launch_order_across_threads(monkeypatch):
    """Two threads on one stream (torch's current stream is per thread, the default one shared):
    each pair call takes its turn and queues its launches as one step, so in the stream's order
    every amax pass fills a slot the cast before it zeroed. Here thread A's amax launch waits
    (at most a while) for thread B to take its turn: B must not fill the slot A's cast has yet to
    zero (the maxima would then hold the last call's: wrong scales)."""
    import threading
    import types

    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    real_zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda n, dtype, device: real_zeros(n, dtype=dtype))  # a CPU stand-in
    monkeypatch.setattr(quantize, "_MAXIMA", {})
    monkeypatch.setattr(quantize, "_TURNS", {})
    gpu = torch.device("cuda", 0)
    M, K = 70, 384
    x = types.SimpleNamespace(shape=(M, K), device=gpu, data_ptr=lambda: 0)
    q, s, qt, st = torch.empty(M, K), torch.empty(M, 1), torch.empty(K, 80), torch.empty(1, 80)
    stream, lock = [], threading.Lock()  # the launches in queue order: (amax slot, cleared slot)
    b_took_turn, a_waiting = threading.Event(), threading.Event()

    def launch(device, ptrs, dyn, prepare, *inputs):
        if prepare is quantize.prepare_pair_amax and threading.current_thread().name == "A":
            a_waiting.set()
            b_took_turn.wait(0.5)
        with lock:
            stream.append(("amax", ptrs[1]) if prepare is quantize.prepare_pair_amax else ("cast", ptrs[7]))

    monkeypatch.setattr(quantize, "bound_pair", lambda *inputs: (launch, launch))
    real_slots = quantize.amax_slots

    def amax_slots(x, granularity):
        got = real_slots(x, granularity)
        if threading.current_thread().name == "B":
            b_took_turn.set()
        return got

    monkeypatch.setattr(quantize, "amax_slots", amax_slots)
    quantize.launch_pair(x, q, s, qt, st, "row", True, True)  # the stream's first call: slot 0 now set
    a = threading.Thread(target=quantize.launch_pair, args=(x, q, s, qt, st, "row", True, True), name="A")
    b = threading.Thread(target=lambda: (a_waiting.wait(5), quantize.launch_pair(x, q, s, qt, st, "row", True, True)),
                         name="B")
    a.start(), b.start(), a.join(10), b.join(10)
    assert len(stream) == 6
    dirty = set()  # slots holding maxima: the stream's buffer starts zeroed
    for i, (kind, ptr) in enumerate(stream):
        if kind == "amax":
            assert ptr not in dirty, f"launch {i}: the amax pass fills a slot no cast has zeroed: {stream}"
            dirty.add(ptr)
        else:
            dirty.discard(ptr)
