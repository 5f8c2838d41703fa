"""quantize_groups_t (pingpong.quantize_groups): the experts' tokens quantized along the tokens,
transposed into runs that start at multiples of 128, for the MoE weight gradient's FP8 GEMM.

The contract is bitwise: expert g's run of qt and its scales = quantize_fp8(x_gᵀ zero-padded to
L_g = 128·⌈T_g/128⌉ columns) ("row": also quantize_fp8(x_gᵀ) unpadded, its q the run's first T_g
columns; "block": the (C, L_g/128) scales transposed into s's rows of the run's blocks); the
padding exactly zero; poffs the padded ends exactly; nothing written past P_{G-1}. Checked on
the CPU under Triton's interpreter against quantize_fp8 under the same interpreter: experts of
0, 1, 127, 128, 129 and 300 tokens, empty ones first and last, a decreasing offset, offsets past
T and below 0 (clipped), overlapping offsets that would overflow qt (cut, nothing written out of
bounds), no tokens at all, C = 16 and 48, x with a row stride past C, both fp8 kinds, outputs
NaN-poisoned; the fake implementation's shapes against the real outputs' (and symbolic in T);
the refusals before any work; offline for sm_90a (no spills)."""

import textwrap

import pytest
import torch

from pingpong import PingpongError, quantize, quantize_groups
from pingpong.quantize_groups import quantize_groups_t
from interpreted import check_interpreted

E4M3 = torch.float8_e4m3fn

_CHECK = textwrap.dedent("""
    import sys, torch
    from pingpong import quantize as Q
    from pingpong import quantize_groups as QG
    from torch._subclasses.fake_tensor import FakeTensorMode

    POISON = 0x7F  # a NaN byte of both fp8 kinds


    def ranges(offs, T):  # (start, tokens) of each expert: offsets clipped into [0, T], a decreasing end empty
        clip = [min(max(o, 0), T) for o in offs]
        return [((clip[g - 1] if g else 0), max(clip[g] - (clip[g - 1] if g else 0), 0)) for g in range(len(offs))]


    def check(x, offs, dtype, g, via_out=False):
        T, C = x.shape
        what = (tuple(x.shape), x.stride(0), offs, dtype, g)
        o = torch.tensor(offs, dtype=torch.int32)
        qt, s, poffs = QG.groups_like(x, o, dtype, g)
        qt.view(torch.uint8).fill_(POISON)
        s.fill_(float("nan"))
        poffs.fill_(-7)
        if via_out:
            QG.quantize_groups_t_out(x, o, granularity=g, dtype=dtype, out=(qt, s, poffs))
        else:
            got = QG.quantize_groups_direct(x, o, dtype, g, (qt, s, poffs))
            assert all(a is b for a, b in zip(got, (qt, s, poffs))), what
        with FakeTensorMode(allow_non_fake_inputs=False) as mode:  # the fake's outputs are laid out as the real
            fake = QG.quantize_groups_t(mode.from_tensor(x), mode.from_tensor(o), dtype, g)
        for f, r in zip(fake, (qt, s, poffs)):
            assert (f.shape, f.stride(), f.dtype) == (r.shape, r.stride(), r.dtype), (what, f.shape, r.shape)
        TP = -(-T // 16) * 16 + 128 * len(offs)
        assert qt.shape == (C, TP) and poffs.dtype == torch.int32, what
        assert s.shape == ((len(offs), C) if g == "row" else (TP // 128, C)), what
        zero_scale = Q.quantize_fp8(torch.zeros(C, 16, dtype=x.dtype), "row", dtype)[1][:, 0]
        P = 0
        ends = []
        for e, (start, n) in enumerate(ranges(offs, T)):
            L = -(-n // 128) * 128
            xg = x[start:start + n]
            if g == "row":
                q, sr = Q.quantize_fp8(xg.t().contiguous(), "row", dtype)
                assert torch.equal(s[e], sr[:, 0] if n else zero_scale), (what, e, "s")
                assert torch.equal(qt[:, P:P + n].view(torch.uint8), q.view(torch.uint8)), (what, e, "q unpadded")
            if L:
                xt = x.new_zeros(C, L)
                xt[:, :n] = xg.t()
                q, sr = Q.quantize_fp8(xt, g, dtype)
                assert torch.equal(qt[:, P:P + L].view(torch.uint8), q.view(torch.uint8)), (what, e, "q")
                assert not qt[:, P + n:P + L].view(torch.uint8).any(), (what, e, "padding not exactly 0")
                if g == "block":
                    assert torch.equal(s[P // 128:(P + L) // 128], sr.t()), (what, e, "s")
            P += L
            ends.append(P)
        assert poffs.tolist() == ends, (what, poffs.tolist(), ends)
        assert (qt[:, P:].view(torch.uint8) == POISON).all(), (what, "written past P_{G-1}")
        if g == "block":
            assert s[P // 128:].isnan().all(), (what, "scales written past P_{G-1}")


    gen = torch.Generator().manual_seed(int(sys.argv[1]))


    def tokens(T, C, stride=None):
        x = torch.randn(T, C, generator=gen) * torch.exp2(torch.randint(-6, 7, (1, C), generator=gen).float())
        x[:, C // 2] = 0  # a zero column
        if stride is None:
            return x.half()
        big = torch.randn(T, stride, generator=gen).half()
        big[:, :C] = x
        return big[:, :C]


    def cumsum(sizes):
        return torch.tensor(sizes).cumsum(0).tolist()


    CASES = [  # (C, T, offs, x's row stride or None)
        (48, 685, cumsum([0, 1, 127, 128, 129, 300, 0]), None),  # empty first and last
        (16, 301, cumsum([300, 0, 1]), 40),                      # a row stride past C
        (16, 200, [50, 20, 200], None),                          # a decreasing end: expert 1 empty, 2 from 20
        (48, 400, [100, 500, 700], None),                        # ends past T clipped: expert 2 empty
        (16, 10, [-5, 10, 10], None),                            # an end below 0: empty
        (64, 129, [129], 80),                                    # one expert
    ]
    for C, T, offs, stride in CASES:
        x = tokens(T, C, stride)
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            for g in ("row", "block"):
                check(x, offs, dtype, g, via_out=(g == "block" and stride is not None))
    for g in ("row", "block"):  # no tokens at all; no columns (poffs still written)
        check(tokens(0, 32), [0, 0, 0], torch.float8_e4m3fn, g)
        check(torch.zeros(300, 0).half(), [100, 300], torch.float8_e4m3fn, g)

    # overlapping offsets (each odd end decreasing to 0): runs of 384 past TP's bound, cut at 128·⌊TP/128⌋
    T, C = 300, 16
    guard = torch.full((C + 1, -(-T // 16) * 16 + 128 * 5), POISON, dtype=torch.uint8)
    qt = guard[:C].view(torch.float8_e4m3fn)
    for g in ("row", "block"):
        o = torch.tensor([T, 0, T, 0, T], dtype=torch.int32)
        _, s, poffs = QG.groups_like(tokens(T, C), o, torch.float8_e4m3fn, g)
        QG.quantize_groups_direct(tokens(T, C), o, torch.float8_e4m3fn, g, (qt, s, poffs))
        PMAX = qt.shape[1] // 128 * 128
        assert poffs.tolist() == [384, 384, 768, 768, PMAX], poffs.tolist()
        assert (guard[C] == POISON).all(), "written out of bounds"

    # the op, as torch.library sees it: schema, fake, autograd registration (not AOT dispatch's
    # comparison of outputs: qt's columns past P_{G-1} are torch.empty's, different each call)
    x, o = tokens(300, 32), torch.tensor([100, 100, 300], dtype=torch.int32)
    for g in ("row", "block"):
        torch.library.opcheck(torch.ops.pingpong.quantize_groups_t.default, (x, o, g, torch.float8_e4m3fn),
                              test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    print("OK")
""")


@pytest.mark.slow
def test_groups_under_the_interpreter_equal_quantize_fp8_of_each_expert():
    check_interpreted(_CHECK)


_COMPILED = textwrap.dedent("""
    import sys, torch
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code
    from pingpong.integration import inductor
    from pingpong.quantize_groups import quantize_groups_t

    gen = torch.Generator().manual_seed(int(sys.argv[1]))
    x = torch.randn(300, 32, generator=gen).half()
    offs = torch.tensor([0, 129, 129, 300], dtype=torch.int32)
    for g in ("row", "block"):
        torch._dynamo.reset()
        inductor.CALLS.clear()
        f = lambda x, offs: quantize_groups_t(x, offs, torch.float8_e4m3fn, g)
        with config.patch(force_disable_caches=True):
            got, (code,) = run_and_get_code(torch.compile(f, fullgraph=True, backend="inductor"), x, offs)
        assert code.count("extern_kernels.pingpong_quantize_groups_t(") == 1, code
        assert "torch.ops.pingpong" not in code and dict(inductor.CALLS) == {"quantize_groups_t": 1}, code
        want = f(x, offs)
        P = 512  # 256 + 0 + 0 + 256: what is written
        assert torch.equal(got[2], want[2]) and want[2].tolist() == [0, 256, 256, 512], (g, got[2], want[2])
        assert torch.equal(got[0][:, :P].view(torch.uint8), want[0][:, :P].view(torch.uint8)), g
        assert torch.equal(got[1], want[1]) if g == "row" else torch.equal(got[1][:P // 128], want[1][:P // 128]), g
        for a, b in zip(got, want):
            assert (a.shape, a.stride(), a.dtype) == (b.shape, b.stride(), b.dtype), g
    print("OK")
""")


@pytest.mark.slow
def test_inductor_calls_the_direct_path_into_its_buffers():
    """torch.compile (inductor, CPU under the interpreter): one direct call of the lowering
    (quantize_groups_t_out) writing inductor's buffers, the eager results bitwise where written."""
    check_interpreted(_COMPILED)


def test_fake_shapes_are_symbolic_in_the_tokens():
    """Traced with a symbolic T (make_fx, symbolic): qt (C, 16·⌈T/16⌉ + 128·G), s (G, C) or
    (TP // 128, C), poffs (G,) int32 — the same `padded_tokens` as the real outputs'."""
    from torch.fx.experimental.proxy_tensor import make_fx

    for g in ("row", "block"):
        gm = make_fx(lambda x, o: quantize_groups_t(x, o, E4M3, g), tracing_mode="symbolic")(
            torch.empty(300, 48, dtype=torch.float16), torch.empty(7, dtype=torch.int32))
        qt, s, poffs = [a.meta["val"] for a in gm.graph.output_node().args[0]]
        (T, C), (G,) = [n.meta["val"].shape for n in gm.graph.nodes if n.op == "placeholder"]
        TP = quantize_groups.padded_tokens(T, G)
        assert isinstance(T, torch.SymInt) and str(qt.shape[1]) == str(TP), qt.shape
        assert qt.shape[0] == C and qt.dtype == E4M3 and poffs.shape == (G,) and poffs.dtype == torch.int32
        assert str(tuple(s.shape)) == str((G, C) if g == "row" else (TP // 128, C)), s.shape
        assert (qt.shape[1].node.hint, s.shape[0].node.hint) == (304 + 7 * 128, 7 if g == "row" else 9)
        assert "pingpong.quantize_groups_t" in gm.code, gm.code


_X = torch.randn(300, 32).half()
_O = torch.tensor([100, 300], dtype=torch.int32)


@pytest.mark.parametrize("x, offs, dtype, granularity, needle", [
    (_X.view(3, 100, 32), _O, E4M3, "row", "x: expected a 2-D tensor"),
    (_X.float(), _O, E4M3, "row", "x: dtype torch.float32 is not supported"),
    (_X.to(torch.int8), _O, E4M3, "row", "x: dtype torch.int8 is not supported"),
    (_X.t(), _O, E4M3, "row", "x: rows must be contiguous"),
    (_X[:, :24], _O, E4M3, "row", r"x: C \(= 24\) must be a multiple of 16"),
    ([[0.0] * 16], _O, E4M3, "row", "x: expected a torch.Tensor"),
    (_X, _O.long(), E4M3, "row", r"offs: expected a contiguous \(G,\) int32 tensor"),
    (_X, _O.view(1, 2), E4M3, "row", r"offs: expected a contiguous \(G,\) int32 tensor"),
    (_X, torch.tensor([1, 0, 2, 0], dtype=torch.int32)[::2], E4M3, "row", "offs: expected a contiguous"),
    (_X, _O[:0], E4M3, "row", r"offs: no experts \(G = 0\)"),
    (_X, _O.to("meta"), E4M3, "row", "offs: on meta"),
    (_X, [100, 300], E4M3, "row", "offs: expected a torch.Tensor"),
    (_X, _O, E4M3, "tensor", "granularity: expected one of"),
    (_X, _O, E4M3, "block128x128", "granularity: expected one of"),
    (_X, _O, torch.float16, "row", "dtype: expected one of"),
    (_X.bfloat16(), _O, E4M3, "row", "x: bfloat16 on the CPU"),
])
def test_bad_arguments_are_named_before_any_work(monkeypatch, x, offs, dtype, granularity, needle):
    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(quantize_groups, "launch_groups", lambda *a: pytest.fail("launched"))
    with pytest.raises(PingpongError, match=needle):
        quantize_groups_t(x, offs, dtype, granularity)


def test_no_tokens_reads_nothing(monkeypatch):
    """T = 0: no launch (x's storage is empty); poffs zeros, the row scales an all-zero column's."""
    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(quantize_groups, "launch_groups", lambda *a: pytest.fail("launched"))
    qt, s, poffs = quantize_groups_t(torch.empty(0, 32, dtype=torch.float16), torch.zeros(3, dtype=torch.int32))
    assert qt.shape == (32, 3 * 128) and poffs.tolist() == [0, 0, 0]
    assert torch.equal(s, torch.full((3, 32), 1e-12 / 448.0, dtype=torch.float32))


@pytest.mark.slow
def test_groups_kernel_compiles_for_sm90_without_spills():
    """Both modes at Qwen3-30B-A3B's and DeepSeek-V3's expert widths (128 experts; one)."""
    from pingpong.runtime import compile as cc
    from pingpong.toolchain import KERNEL_OPTIONS

    bt, bc = quantize_groups.GROUPS_TILE
    for C, G in ((2048, 128), (7168, 1)):
        x = torch.empty(4096, C, dtype=torch.bfloat16)
        offs = torch.empty(G, dtype=torch.int32)
        qt, s, poffs = quantize_groups.groups_like(x, offs, E4M3, "row")
        with cc.offline("sm_90a"):
            kernels = {f"groups block={block}": quantize_groups._groups_t_kernel.warmup(
                x, offs, qt, s, poffs, 4096, C, G, qt.shape[1] // 128 * 128, C, qt.stride(0), FP8_MAX=448.0,
                BLOCK=block, BLOCK_T=bt, BLOCK_C=bc, BLOCK_G=G, num_warps=quantize_groups.GROUPS_WARPS, grid=(1,),
                **KERNEL_OPTIONS) for block in (False, True)}
        for name, ck in kernels.items():
            facts = cc.Compiled(name, "sm_90a", dict(ck.asm), ck.metadata).facts()
            assert facts.spill_bytes == 0, (name, C, facts.table())
