"""FP8 grouped GEMM on the CPU: scaled_grouped_mm's refusals (PingpongError naming the
argument, before any work), the fake implementation (shapes; torch.compile traces the op),
the pure host helpers (tile choice, scale strides, worker registers) and the Hopper kernel's
offline compile facts (fp8 wgmma, no spills, shared memory within budget)."""

import re

import pytest
import torch

import pingpong
from pingpong.errors import PingpongError
from pingpong.fp8_grouped import check_scaled_grouped_mm
from pingpong.hopper.host import fp8_grouped as kernel
from pingpong.hopper.host.config import SMEM_LIMIT
from pingpong.runtime import compile as cc

E4M3 = torch.float8_e4m3fn
T, K, N, G = 300, 256, 512, 4


def operands(t=T, k=K, n=N, g=G, dtype=E4M3):
    a = torch.zeros(t, k).to(dtype)
    w = torch.zeros(g, n, k).to(dtype)
    return dict(a=a, b=w.transpose(1, 2), sa=torch.ones(t), sb=torch.ones(g, n),
                offs=torch.tensor([t // 4 * (i + 1) for i in range(g)], dtype=torch.int32))


def check(a, b, sa, sb, offs, out_dtype=torch.bfloat16, fast=False):
    return check_scaled_grouped_mm(a, b, sa, sb, offs, out_dtype, fast, device_checks=False)


def test_row_and_tensor_wise_scales_are_recognised():
    x = operands()
    assert check(**x) == ("row", "row")
    assert check(**dict(x, sa=torch.tensor(2.0), sb=torch.ones(G))) == ("tensor", "group")
    assert check(**dict(x, sb=torch.ones(1))) == ("row", "tensor")


def _bad():
    x = operands()
    w = torch.zeros(G, N, K).to(E4M3)
    return [
        (dict(x, a=x["a"].float()), "a: dtype torch.float32 is not supported"),
        (dict(x, a=x["a"][None]), "a: expected a 2-D tensor"),
        (dict(x, b=w.transpose(1, 2).float()), "b: dtype"),
        (dict(x, b=w.transpose(1, 2).to(torch.float8_e5m2)), "b: dtype .* differs from a's"),
        (dict(x, b=w[0].t()), "b: expected a 3-D"),
        (dict(x, b=torch.zeros(G, K, N).to(E4M3)), "b: expected K-major"),  # (G, K, N) row-major: not K-major
        (dict(x, b=torch.zeros(G, N, K + 16).to(E4M3).transpose(1, 2)), r"b: its K \(272"),
        (dict(x, a=torch.zeros(T, 24).to(E4M3), b=torch.zeros(G, N, 24).to(E4M3).transpose(1, 2),
              sa=torch.ones(T)), "K=24: must be a positive multiple of 16"),
        (dict(x, b=torch.zeros(G, 200, K).to(E4M3).transpose(1, 2), sb=torch.ones(G, 200)), "N=200"),
        (dict(x, a=torch.zeros(K, T).to(E4M3).t()), "a: expected row-major"),
        (dict(x, offs=x["offs"].long()), "offs: dtype torch.int64"),
        (dict(x, offs=x["offs"][None]), "offs: expected a 1-D"),
        (dict(x, offs=torch.zeros(2 * G, dtype=torch.int32)[::2]), "offs: must be contiguous"),
        (dict(x, offs=x["offs"][:-1]), "offs: length 3 must equal b's group count 4"),
        (dict(x, offs=[1, 2, 3, 4]), "offs: expected a 1-D int32 tensor"),
        (dict(x, sa=torch.ones(T, dtype=torch.float64)), "scale_a: dtype torch.float64"),
        (dict(x, sb=torch.ones(G, N).bfloat16()), "scale_b: dtype torch.bfloat16"),
        (dict(x, sa=torch.ones(T + 1)), r"scale_a: expected \(T,\) = \(300,\)"),
        (dict(x, sa=torch.ones(2 * T)[::2]), "scale_a: must be contiguous"),
        (dict(x, sb=torch.ones(G, N + 16)), r"scale_b: expected \(G, N\) = \(4, 512\)"),
        (dict(x, sb=torch.ones(N, G).t()), r"scale_b: \(G, N\) scales must be contiguous in N"),
        (dict(x, sb=torch.ones(G + 1)), "scale_b: expected"),
        (dict(x, sa=torch.ones(T, K // 128)), r"scale_b: scale_a \(300, 2\) looks block-wise .* \(4, 4, 2\)"),
        (dict(x, sb=torch.ones(G, N // 128, K // 128)), r"scale_a: scale_b is block-wise, .* \(300, 2\) with strides"
                                                        r" \(1, 300\)"),
        (dict(x, sa="1"), "scale_a: expected a torch.Tensor"),
    ]


def block_operands(t=T, k=K, n=N, g=G):
    """Operands with DeepSeek-V3's block scales: scale_a (T, K/128) outer-dim-major (as
    quantize_fp8(x, "block") gives), scale_b (G, N/128, K/128)."""
    x = operands(t, k, n, g)
    return dict(x, sa=torch.ones(k // 128, t).t(), sb=torch.ones(g, n // 128, k // 128))


def _bad_block():
    x = block_operands()
    kb, nb = K // 128, N // 128
    return [
        (dict(block_operands(k=144), sb=torch.ones(G, nb, 1)), "K=144: block-wise scales .* multiple of 128"),
        (dict(block_operands(n=208), sb=torch.ones(G, 2, kb)), "N=208: block-wise scales .* multiple of 128"),
        (dict(x, sb=torch.ones(G + 1, nb, kb)), r"scale_b: 5 groups of block scales .* offs has 4"),
        (dict(x, sb=torch.ones(G - 1, nb, kb)), r"scale_b: 3 groups of block scales .* offs has 4"),
        (dict(x, sb=torch.ones(G, nb, kb + 1)), r"scale_b: block-wise scales are \(G, N/128, K/128\) = \(4, 4, 2\)"),
        (dict(x, sb=torch.ones(G, nb + 1, kb)), r"scale_b: block-wise scales are"),
        (dict(x, sb=torch.ones(G, kb, nb).transpose(1, 2)), r"scale_b: .*contiguous in K/128 \(stride\(2\) = 1\)"),
        (dict(x, sb=torch.ones(G, nb, kb, dtype=torch.float64)), "scale_b: dtype torch.float64"),
        (dict(x, sa=torch.ones(T, kb)), r"scale_a: scale_b is block-wise.*got shape \(300, 2\) strides \(2, 1\)"),
        (dict(x, sa=torch.ones(kb, T + 4).t()[:T]), r"scale_a: scale_b is block-wise.*strides \(1, 304\)"),
        (dict(x, sa=torch.ones(kb, T + 1).t()), r"scale_a: scale_b is block-wise.*got shape \(301, 2\)"),
        (dict(x, sa=torch.ones(T)), r"scale_a: scale_b is block-wise.*got shape \(300,\)"),
        (dict(x, sa=torch.ones(kb, T).t().half()), "scale_a: dtype torch.float16"),
        (dict(x, sa=torch.ones(T, kb), sb=torch.ones(G, N)), r"scale_b: scale_a \(300, 2\) looks block-wise"),
    ]


def test_block_scales_are_recognised():
    assert check(**block_operands()) == ("block", "block")
    assert check(**block_operands(k=128)) == ("block", "block")  # K/128 = 1: scale_a (T, 1)
    assert check(**dict(block_operands(), sb=torch.ones(N // 128, K // 128).expand(G, -1, -1))) == ("block", "block")
    assert check(**block_operands(), fast=True) == ("block", "block")  # promoted all the same (prepare)


def test_block_scales_always_promote_and_read_through_tma():
    """use_fast_accum=True with block scales still promotes (scaled_mm's choice: the scales
    apply at the promotion); the scales become TMA descriptors of scale_a's (K/128, T) rows
    (a copy padded to 4 rows where T % 4: 16-byte TMA rows) and scale_b's storage as one row."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    cfg = pingpong.KernelConfig(64, 128, 128, schedule="pingpong")
    for t in (T, 301):
        x = block_operands(t=t)
        a, w, out = x["a"], x["b"].transpose(1, 2), torch.empty(t, N, dtype=torch.bfloat16)
        fn, args, kwargs, grid = kernel.prepare(a, w, out, x["offs"], x["sa"], x["sb"], False, cfg, 132)
        assert kwargs["PROMOTE"] is True and kwargs["SCALING"] == "block"
        sa, sb = args[5], args[6]
        assert isinstance(sa, TensorDescriptor) and isinstance(sb, TensorDescriptor)
        assert list(sa.shape) == [K // 128, t] and sa.strides[0] == -(-t // 4) * 4 and sa.block_shape == [1, 128]
        assert list(sb.shape) == [1, G * (N // 128) * (K // 128)] and sb.block_shape == [1, 32]
        assert args[-3:] == (0, (N // 128) * (K // 128), K // 128)  # sa_row, sb_g, sb_col
    view, _ = kernel.block_scale_views(x["sa"], x["sb"])
    assert view.stride(0) == 304 and torch.equal(view, x["sa"].t())


def test_block_scale_b_read_with_the_strides_of_what_the_descriptor_holds():
    """A sliced scale_b whose base is not 16-byte aligned (one N-block in: 28 bytes) is cloned
    for its TMA descriptor; the kernel's group and column strides must be the clone's, not the
    slice's (which would read another group's blocks)."""
    cfg = pingpong.KernelConfig(64, 128, 128, schedule="pingpong")
    x = block_operands()
    sb = torch.ones(G, N // 128 + 1, K // 128)[:, 1:, :]  # a shard of N-blocks: group stride 10, base at 8 bytes
    assert sb.data_ptr() % 16 and check(**dict(x, sb=sb)) == ("block", "block")
    a, w, out = x["a"], x["b"].transpose(1, 2), torch.empty(T, N, dtype=torch.bfloat16)
    fn, args, kwargs, grid = kernel.prepare(a, w, out, x["offs"], x["sa"], sb, False, cfg, 132)
    clone = kernel.block_scale_views(x["sa"], sb)[1]
    assert clone.data_ptr() % 16 == 0 and clone.stride() == ((N // 128) * (K // 128), K // 128, 1)
    assert args[-3:] == (0, *clone.stride()[:2])
    assert list(args[6].shape) == [1, G * (N // 128) * (K // 128)]


@pytest.mark.parametrize("i", range(len(_bad()) + len(_bad_block())))
def test_bad_input_names_the_argument(i):
    """Row-/tensor-wise cases, then block-wise ones."""
    args, match = (_bad() + _bad_block())[i]
    with pytest.raises(PingpongError, match=match):
        check(**args)


def test_out_dtype_and_flag_and_grad_are_checked():
    x = operands()
    with pytest.raises(PingpongError, match="out_dtype"):
        check(**x, out_dtype=torch.float8_e4m3fn)
    with pytest.raises(PingpongError, match="use_fast_accum"):
        check(**x, fast=1)
    with pytest.raises(PingpongError, match="requires grad.*inference only"):
        check(**dict(x, sa=torch.ones(T, requires_grad=True)))


def test_public_call_refuses_before_any_work():
    x = operands()
    with pytest.raises(PingpongError, match="runs on a Hopper"):
        pingpong.scaled_grouped_mm(x["a"], x["b"], x["sa"], x["sb"], x["offs"])
    with pytest.raises(PingpongError, match="offs: length"):
        pingpong.scaled_grouped_mm(x["a"], x["b"], x["sa"], x["sb"], x["offs"][:2])


def test_fake_gives_the_shape_and_compile_traces_the_op():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = operands()
        out = torch.ops.pingpong.scaled_grouped_mm(x["a"], x["b"], x["sa"], x["sb"], x["offs"], torch.float32, False)
        assert out.shape == (T, N) and out.dtype == torch.float32
        with pytest.raises(PingpongError, match="scale_b"):
            torch.ops.pingpong.scaled_grouped_mm(x["a"], x["b"], x["sa"], torch.ones(3, 3), x["offs"], torch.bfloat16,
                                                 False)
        y = block_operands()
        out = torch.ops.pingpong.scaled_grouped_mm(y["a"], y["b"], y["sa"], y["sb"], y["offs"], torch.bfloat16, True)
        assert out.shape == (T, N) and out.dtype == torch.bfloat16
        with pytest.raises(PingpongError, match="scale_b: 3 groups"):
            torch.ops.pingpong.scaled_grouped_mm(y["a"], y["b"], y["sa"], y["sb"][:3], y["offs"], torch.bfloat16,
                                                 False)

    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return lambda *args: (torch.empty(T, N, dtype=torch.bfloat16),)

    x = operands()
    fn = torch.compile(lambda a, b, sa, sb, offs: pingpong.scaled_grouped_mm(a, b, sa, sb, offs), fullgraph=True,
                       backend=backend)
    fn(x["a"], x["b"], x["sa"], x["sb"], x["offs"])
    assert any("pingpong.scaled_grouped_mm" in str(n.target) for g in graphs for n in g.graph.nodes)


@pytest.mark.parametrize("fast", [2, 0.0, 1])
def test_traced_calls_refuse_a_use_fast_accum_that_is_not_a_bool(fast):
    """The dispatcher would make a bool of it for the op (eager refuses it): both FP8 products
    refuse it while dynamo traces, before the op."""
    torch._dynamo.reset()  # each value traced as the constant it is (not made dynamic by the last case's)
    x = operands()
    grouped = torch.compile(lambda a, b, sa, sb, offs: pingpong.scaled_grouped_mm(a, b, sa, sb, offs,
                                                                                  use_fast_accum=fast),
                            fullgraph=True, backend=lambda gm, inputs: gm)
    with pytest.raises(Exception, match=f"use_fast_accum: expected a bool, got {fast!r}"):
        grouped(x["a"], x["b"], x["sa"], x["sb"], x["offs"])
    a, b = torch.randn(32, 256).to(E4M3), torch.randn(64, 256).to(E4M3).t()
    dense = torch.compile(lambda a, b, sa, sb: pingpong.scaled_mm(a, b, sa, sb, use_fast_accum=fast), fullgraph=True,
                          backend=lambda gm, inputs: gm)
    with pytest.raises(Exception, match=f"use_fast_accum: expected a bool, got {fast!r}"):
        dense(a, b, torch.ones(32, 1), torch.ones(1, 64))


def test_traced_inference_fp8_calls_refuse_inputs_that_require_grad():
    """scaled_mm and quantize_fp8 have no backward: under torch.compile the caller gets the
    eager refusal naming the argument (the compiler said only "no autograd formula")."""
    torch._dynamo.reset()
    quantize = torch.compile(lambda x: pingpong.quantize_fp8(x, "row"), backend="aot_eager")
    with pytest.raises(PingpongError, match="x: requires grad, but quantize_fp8 is inference only"):
        quantize(torch.randn(32, 256, requires_grad=True))
    a, b = torch.randn(32, 256).to(E4M3), torch.randn(64, 256).to(E4M3).t()
    dense = torch.compile(lambda a, b, sa, sb: pingpong.scaled_mm(a, b, sa, sb), backend="aot_eager")
    with pytest.raises(PingpongError, match="scale_a: requires grad, but scaled_mm is inference only"):
        dense(a, b, torch.ones(32, 1, requires_grad=True), torch.ones(1, 64))


def test_tile_choice_scale_strides_and_registers():
    assert kernel.select_fp8_grouped_config(8192 * 2, 8, 14336, True).schedule == "cooperative"
    assert kernel.select_fp8_grouped_config(8192 * 2, 8, 14336, True).block_n == 128  # two accumulators
    assert kernel.select_fp8_grouped_config(8192 * 2, 8, 14336, False).block_n == 256
    assert kernel.select_fp8_grouped_config(4096 * 8, 256, 2048, True).block_m == 64  # 128 rows per expert
    assert kernel.select_fp8_grouped_config(100, 8, 128, False).block_n == 128
    assert all(c.block_k == 128 for c in (kernel.select_fp8_grouped_config(t, g, n, p) for t in (16, 4096)
                                          for g in (1, 256) for n in (128, 4096) for p in (True, False)))
    sa, sb = torch.ones(T), torch.ones(G, 2 * N)[:, ::2].contiguous()
    assert kernel.scale_strides(sa, sb) == (1, N, 1)
    assert kernel.scale_strides(torch.ones(()), torch.ones(G)) == (0, 1, 0)
    assert kernel.scale_strides(torch.ones(1), torch.ones(1, 1)) == (0, 0, 0)
    assert kernel.worker_regs((232, 40), 32) == (232, 40)
    assert kernel.worker_regs((232, 40), 256) == (224, 56)
    assert kernel.worker_regs((232, 40), 512) == (208, 88)
    for g_pad in (32, 256, 512, 1024):  # the register file stays full, not over
        c, p = kernel.worker_regs((232, 40), g_pad)
        assert 8 * c + 4 * p == 8 * 232 + 4 * 40 and c % 8 == 0 and p % 8 == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", list(kernel.OFFLINE_VARIANTS))
def test_kernel_compiles_offline_without_spills(name):
    """sm_90a, no GPU: fp8 (e4m3) wgmma, no local memory, shared memory within budget, TMA
    loads and the TMA store of whole tiles; promoted: every wgmma group waited to 0."""
    config, groups, promote, scaling = kernel.OFFLINE_VARIANTS[name]
    c = cc.compile_kernel(name, "sm_90a")
    f = c.facts()
    ptx = c.asm["ptx"]
    assert re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k32\.f32\.e4m3\.e4m3", ptx)
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k32", ptx)) == {str(config.block_n)}
    assert f.spill_bytes == 0 and f.counts["LDL/STL"] == 0, "local-memory spills"
    assert 0 < f.shared_bytes <= SMEM_LIMIT
    assert f.counts["UTMALDG"] > 0 and f.counts["UTMASTG"] > 0 and f.warps == 12
    waits = set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx))
    # promoted, on ping-pong and 64-column cooperative tiles: the next K block's wgmma in flight
    # (wait(1)); other promoted cooperative tiles: none
    paired = config.schedule == "pingpong" or config.block_n <= 64
    assert waits == ({"0"} if promote and not paired else {"0", "1"}), waits


@pytest.mark.parametrize("scaling", ["row", "block"])
def test_direct_launch_passes_what_triton_passes(monkeypatch, scaling):
    """The plan's slot addresses (launch_ptrs) bound to the compiled kernel hand Triton's
    C launcher exactly what Triton's own launch would: descriptors of a, W, out at their
    addresses, then out, offs and both scales as pointers (block-wise: descriptors of their
    views, block_scale_views), then the scalars."""
    import fake_launcher

    from pingpong.runtime.launcher import DirectLaunch, bind_jit_args

    a, w = torch.empty(T, K, dtype=E4M3), torch.empty(G, N, K, dtype=E4M3)
    out, offs = torch.empty(T, N, dtype=torch.bfloat16), torch.empty(G, dtype=torch.int32)
    if scaling == "block":
        sa, sb = torch.empty(K // 128, T).t(), torch.empty(G, N // 128, K // 128)
    else:
        sa, sb = torch.empty(T), torch.empty(G, N)
    fn, args, kwargs, grid = kernel.prepare(a, w, out, offs, sa, sb, True,
                                            pingpong.KernelConfig(64, 128, 128, schedule="pingpong"), 132)
    with cc.offline("sm_90a"):
        compiled = fn.warmup(*args, grid=grid, **kwargs)
        from triton.runtime import driver

        calls = fake_launcher.install(driver.active)
        monkeypatch.setattr(compiled, "_run", None)
        monkeypatch.setattr(compiled, "module", None)
        values = list(args) + [kwargs[n] for n in fn.arg_names[len(args):]]
        values = [v.data_ptr() if isinstance(v, torch.Tensor) else v for v in values]
        compiled.run(*grid, 1, 1, 99, compiled.function, compiled.packed_metadata, None, None, None, *values)
        direct = DirectLaunch.from_kernel(compiled)
        block = scaling == "block"
        assert direct is not None and len(direct.encodings) == (5 if block else 3)
        ptrs = kernel.launch_ptrs(a, w, out, offs, *(kernel.block_scale_views(sa, sb) if block else (sa, sb)))
        bind_jit_args(direct, fn, args, kwargs)((grid[0], 1, 1), 99, ptrs, ())
    theirs, ours = calls
    assert fake_launcher.parts(ours)[0] == fake_launcher.parts(theirs)[0]
    assert fake_launcher.parts(ours)[3] == fake_launcher.parts(theirs)[3]
    maps = [x for x in fake_launcher.parts(ours)[3] if isinstance(x, tuple) and x[:1] == ("map",)]
    tma = [0, 1, 2, 5, 6] if block else [0, 1, 2]
    assert [m[1] for m in maps] == [ptrs[i] for i in tma]
    assert [len(m[6]) for m in maps] == [2, 3, 2] + [2, 2] * block  # W: rank 3
