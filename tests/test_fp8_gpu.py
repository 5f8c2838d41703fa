"""FP8 on a Hopper GPU: scaled_mm per scaling mode against a float64 product of the dequantized
operands, no worse than torch._scaled_mm on the same inputs; quantize_fp8 exactly torch's cast;
Float8Linear and torch.compile. Scales are made strongly non-uniform (row magnitudes and 128-deep
K blocks spread over 2^±4), so a scale applied to the wrong row, column or block fails."""

import math
import warnings

import pytest
import torch

import pingpong
from closeness import rel_norm
from pingpong.fp8 import Float8Linear, scaled_mm_direct
from pingpong.hopper.host.config import column_pieces
from pingpong.tools.bench_fp8 import dequantized

pytestmark = pytest.mark.gpu

GRAN = {"tensor": ("tensor", "tensor"), "row": ("row", "row"), "block": ("block", "block128x128"),
        "block1x128": ("block", "block")}


def spread(rows, cols, gen):
    """Random normal values whose rows and 128-column blocks differ by up to 2^±4."""
    x = torch.randn(rows, cols, generator=gen, device="cuda")
    row = torch.exp2(torch.randint(-4, 5, (rows, 1), generator=gen, device="cuda").float())
    blk = torch.exp2(torch.randint(-4, 5, (1, -(-cols // 128)), generator=gen, device="cuda").float())
    return x * row * blk.repeat_interleave(128, 1)[:, :cols]


def operands(M, N, K, mode, seed, magnitude=1.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, w = (spread(M, K, gen) * magnitude).bfloat16(), (spread(N, K, gen) * magnitude).bfloat16()
    ga, gw = GRAN[mode]
    qa, sa = pingpong.quantize_fp8(a, ga)
    qw, sw = pingpong.quantize_fp8(w, gw)
    kind = "block" if mode.startswith("block") else mode
    wmode = "a" if mode == "block1x128" else "w"  # 1×128 weight scales dequantize like A's
    ref = dequantized(qa, sa, kind, "a") @ dequantized(qw, sw, kind, wmode).t()
    return qa, qw.t(), sa, sw.t(), ref


def poisoned_call(fn, shape, dtype):
    """fn() with the caching allocator's next block of `shape` filled with NaN first."""
    p = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    del p
    return fn()


def check(out, theirs, ref, seed):
    """As close as torch._scaled_mm (`theirs`): its norm-wise error within 1.25×, its largest
    elementwise error within 2×."""
    assert not out.isnan().any(), f"seed {seed}: NaN left in the output (unwritten tile)"
    e_ours, e_torch = rel_norm(out, ref), rel_norm(theirs, ref)
    assert e_ours <= 1.25 * e_torch + 1e-5, f"seed {seed}: rel.err {e_ours:.3e} vs torch._scaled_mm {e_torch:.3e}"
    d_ours = (out.double() - ref).abs().max().item()
    d_torch = (theirs.double() - ref).abs().max().item()
    assert d_ours <= 2 * d_torch + 1e-6 * ref.abs().max().item(), f"seed {seed}: max |err| {d_ours} vs torch {d_torch}"


@pytest.mark.parametrize("mode", ["tensor", "row", "block", "block1x128"])
@pytest.mark.parametrize("shape", [(512, 1024, 2048), (1000, 528, 1024), (77, 144, 384), (16, 4096, 1024),
                                   (200, 1536, 256)])
@pytest.mark.parametrize("fast", [False, True])
def test_scaled_mm_matches_torch_accuracy(mode, shape, fast):
    M, N, K = shape
    seed = hash((mode, shape, fast)) % 1000
    qa, qb, sa, sb, ref = operands(M, N, K, mode, seed)
    out = poisoned_call(lambda: pingpong.scaled_mm(qa, qb, sa, sb, use_fast_accum=fast), (M, N), torch.bfloat16)
    try:
        if mode == "block1x128":
            raise RuntimeError("compared with the rounded exact product below")
        theirs = torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    except RuntimeError:  # a pair or shape cuBLASLt does not run (block-wise 77×144×384): the
        theirs = ref.bfloat16()  # exact product, rounded once, is the stricter yardstick
    if theirs.isnan().any():  # cuBLASLt's block-wise result had NaNs (200×1536×256, torch 2.11)
        warnings.warn(f"seed {seed}: torch._scaled_mm returned NaN for {mode} {shape}; compared with the exact product")
        theirs = ref.bfloat16()
    check(out, theirs, ref, seed)


@pytest.mark.parametrize("mode", ["tensor", "row"])
@pytest.mark.parametrize("shape", [(512, 1536, 2048), (1000, 528, 1024), (77, "ragged", 384), (300, 6144, 256)])
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("width", [192, 160, 144, 96, 80])
def test_two_piece_tiles_match_torch_accuracy(mode, shape, fast, width):
    """128×192, 128×160, 128×144, 128×96 and 128×80 tiles (128 + 64, 128 + 32, 128 + 16, 64 + 32,
    64 + 16 columns): a column piece's scales, bias or store off by its offset fails the bounds (row
    scales over 2^±4 per column; "ragged" N ends inside the third tile's second piece, or at
    its end where that piece is 16 columns (N a multiple of 16 for torch._scaled_mm), 528
    inside the last tile); with a bias, GELU and each output dtype on one shape."""
    M, N, K = shape
    if N == "ragged":
        N = 3 * width - column_pieces(width)[1] // 32 * 16
    seed = hash((mode, shape, fast, width)) % 1000
    qa, qb, sa, sb, ref = operands(M, N, K, mode, seed)
    config = pingpong.KernelConfig(128, width, 128)
    out = poisoned_call(lambda: scaled_mm_direct(qa, qb, sa, sb, use_fast_accum=fast, config=config), (M, N),
                        torch.bfloat16)
    check(out, torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast), ref, seed)
    if shape == (1000, 528, 1024):
        qa, qb, sa, sb, ref = operands(M, N, K, mode, seed, magnitude=1 / 64)  # within fp16's range
        bias = (torch.randn(N, device="cuda") * ref.abs().mean()).bfloat16()  # as large as the product
        want = torch.nn.functional.gelu(ref + bias.double())
        for out_dtype in (torch.bfloat16, torch.float16, torch.float32):
            got = poisoned_call(lambda: scaled_mm_direct(qa, qb, sa, sb, bias, out_dtype, "gelu_erf", fast, config),
                                (M, N), out_dtype)
            err = ((got.double() - want).norm() / want.norm()).item()
            assert not got.isnan().any() and err < 0.01, f"seed {seed}: {out_dtype} rel.err {err:.3e}"


#: mid-row shapes (odd M, N and K off the tiles) on which the FP8 mid-rows model picks each of its
#: tiles (tests/test_fp8.py pins which; checked again below on this GPU's SM count)
MID_ROWS_SHAPES = [(175, 5136, 13824), (81, 7184, 20480), (248, 21904, 2048), (103, 16400, 3072),
                   (121, 5136, 13824), (72, 2064, 10944), (200, 3600, 3600), (591, 3600, 3616), (567, 8208, 8192),
                   (137, 8208, 8192), (153, 7184, 20480), (286, 27664, 5120), (547, 5136, 13824), (290, 7184, 7168),
                   (377, 3088, 8192)]


@pytest.mark.parametrize("mode", ["tensor", "row"])
@pytest.mark.parametrize("shape", MID_ROWS_SHAPES)
def test_the_fp8_mid_rows_picks_match_torch_accuracy(mode, shape):
    """pingpong.scaled_mm on the shapes whose tile the FP8 mid-rows model chooses (64-row ping-pong,
    128×192, 128×160 and 128×144 in two pieces, split 128×128, swap-AB 64×64, 64×144 and
    64×160, the staged swap-AB 128×144, 128×192 and 128×160, and 128×96), through the selection,
    output NaN-poisoned."""
    from pingpong.hopper.host.fp8_select import fp8_mid_rows_decides

    M, N, K = shape
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert fp8_mid_rows_decides(M, N, K, sms, mode), "the premise: the model decides this shape"
    seed = hash((mode, shape, "midrows")) % 1000
    qa, qb, sa, sb, ref = operands(M, N, K, mode, seed)
    out = poisoned_call(lambda: pingpong.scaled_mm(qa, qb, sa, sb), (M, N), torch.bfloat16)
    check(out, torch._scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16), ref, seed)


@pytest.mark.parametrize("shape", [(512, 1024, 2048), (1000, 528, 1024), (77, 144, 384)])
def test_tensor_scales_through_the_row_kernel(shape, monkeypatch):
    """The long-product route (fp8_launch.kernel_scaling: tensor-wise scalars broadcast into
    the row-wise kernel's vectors), forced on small shapes: as accurate as torch._scaled_mm,
    and a second call with other scalars uses them (the vectors are made per call)."""
    from pingpong.hopper.host import fp8_select
    from pingpong.runtime import plan

    monkeypatch.setattr(fp8_select, "LONG_WORK", 0)
    monkeypatch.setattr(plan, "PLANS", type(plan.PLANS)())  # plans made here are not kept
    M, N, K = shape
    seed = hash(shape) % 1000
    qa, qb, sa, sb, ref = operands(M, N, K, "tensor", seed)
    for factor in (1.0, 3.0):
        out = poisoned_call(lambda: pingpong.scaled_mm(qa, qb, sa * factor, sb), (M, N), torch.bfloat16)
        theirs = torch._scaled_mm(qa, qb, sa * factor, sb, out_dtype=torch.bfloat16)
        check(out, theirs, ref * factor, seed)
    key = next(iter(plan.PLANS.values()))
    assert (key.scaling, key.broadcast) == ("row", True), "the route under test did not run"


@pytest.mark.parametrize("mode", ["tensor", "row", "block"])
def test_a_scale_on_the_wrong_block_fails(mode):
    """The test's power: scales permuted along the dimension they index change the result far
    beyond the bounds above."""
    M, N, K = 256, 256, 1024
    qa, qb, sa, sb, ref = operands(M, N, K, mode, 7)
    if mode == "tensor":
        sa = sa * 2
    elif mode == "row":
        sa = sa.flip(0).contiguous()
    else:
        sa = sa.flip(1).t().contiguous().t()
    out = pingpong.scaled_mm(qa, qb, sa, sb)
    assert ((out.double() - ref).norm() / ref.norm()).item() > 0.1


def _shifted(s):
    """s's values, shape and strides at a base address 4 bytes past a 16-byte boundary."""
    span = 1 + sum((n - 1) * st for n, st in zip(s.shape, s.stride()))
    t = torch.empty(span + 4, device="cuda")[1:].as_strided(s.shape, s.stride())
    t.copy_(s)
    assert t.data_ptr() % 16 == 4
    return t


@pytest.mark.parametrize("mode", ["block", "block1x128"])
@pytest.mark.parametrize("M", [200, 77])
def test_block_scales_tma_cannot_read_in_place(mode, M):
    """Block scales the kernel's TMA cannot read where they are (a base address off 16 bytes;
    M = 77: rows of scale_a's (K/128, M) storage not a 16-byte multiple) are copied by the
    plan: the same result, bit for bit, as aligned scales, and a NaN-poisoned output is
    overwritten. Each call of a cached plan copies again (the second call's scales differ)."""
    N, K = 384, 640
    qa, qb, sa, sb, ref = operands(M, N, K, mode, 11)
    want = pingpong.scaled_mm(qa, qb, sa, sb)
    check(want, ref.bfloat16(), ref, 11)
    for _ in range(2):
        got = poisoned_call(lambda: pingpong.scaled_mm(qa, qb, _shifted(sa), _shifted(sb)), (M, N), torch.bfloat16)
        assert torch.equal(got, want)
        sa, sb = sa * 2, sb * 0.5  # the plan is cached now: its copies must follow the new values
        want = pingpong.scaled_mm(qa, qb, sa, sb)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("activation", [None, "gelu_erf", "silu"])
def test_bias_activation_out_dtypes(out_dtype, activation):
    M, N, K = 300, 512, 1024
    qa, qb, sa, sb, ref = operands(M, N, K, "row", 3, magnitude=1 / 32)  # results within fp16's range
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16) * ref.abs().mean().item()
    out = poisoned_call(lambda: pingpong.scaled_mm(qa, qb, sa, sb, bias=bias, out_dtype=out_dtype,
                                                   activation=activation), (M, N), out_dtype)
    act = {None: lambda z: z, "gelu_erf": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}[activation]
    want = act(ref + bias.double())
    assert out.dtype == out_dtype and not out.isnan().any()
    # fp32 output: the bound is the fp8 wgmma's own accumulation (about 13 mantissa bits inside
    # a 128-deep block, as torch._scaled_mm's), not the output's rounding
    tol = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-3}[out_dtype]
    assert ((out.double() - want).norm() / want.norm()).item() < tol
    assert ((out.double() - want).abs() <= 8 * tol * want.abs() + 1e-2 * want.abs().max()).all()


def torch_quantized(x, granularity, dtype, tensor_amax=None):
    """torch's own (scale, q) of x's rows, the scale broadcast to x's shape (block128x128: x's
    first row is a multiple of 128 from the tensor's; tensor: the whole tensor's amax given)."""
    xf = x.float()
    M, K = xf.shape
    fmax = torch.finfo(dtype).max
    if granularity == "tensor":
        amax = (xf.abs().amax() if tensor_amax is None else tensor_amax.float()).expand_as(xf)
    elif granularity == "row":
        amax = xf.abs().amax(1, keepdim=True).expand_as(xf)
    elif granularity == "block":
        amax = xf.view(M, K // 128, 128).abs().amax(2).repeat_interleave(128, 1)
    else:
        pad = torch.zeros(-(-M // 128) * 128, K, device=x.device)
        pad[:M] = xf.abs()
        amax = pad.view(-1, 128, K // 128, 128).amax((1, 3)).repeat_interleave(128, 0)[:M].repeat_interleave(128, 1)
    amax = amax.clamp_min(1e-12)
    # correctly rounded quotients (torch's CUDA division by a scalar multiplies by the
    # reciprocal; fp64 then one rounding to fp32 is the IEEE fp32 quotient)
    return (amax.double() / fmax).float(), (xf * (fmax / amax.double()).float()).clamp(-fmax, fmax).to(dtype)


def broadcast_scale(s, granularity, M, K):
    """quantize_fp8's scale of M rows (from a multiple of 128 for block128x128) at x's shape."""
    if granularity in ("tensor", "row"):
        return s.expand(M, K)
    if granularity == "block":
        return s.repeat_interleave(128, 1)
    return s.repeat_interleave(128, 0)[:M].repeat_interleave(128, 1)


@pytest.mark.parametrize("granularity", ["tensor", "row", "block", "block128x128"])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_quantize_is_torch_cast(granularity, dtype):
    """scale = amax/FP8_MAX of each group (bitwise); q is bitwise torch's rounding of x·(FP8_MAX/amax).
    Three calls of one shape, fresh x each: the first goes through Triton's JIT, the others
    (row and block) through the bound launch (pingpong.quantize.launch)."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(3):
        x = spread(300, 1024, gen).bfloat16()
        q, s = pingpong.quantize_fp8(x, granularity, dtype)
        assert s.shape == {"tensor": (), "row": (300, 1), "block": (300, 8), "block128x128": (3, 8)}[granularity]
        if granularity == "row":
            assert s.is_contiguous()
        if granularity == "block":
            assert s.stride() == (1, 300)
        want_s, want_q = torch_quantized(x, granularity, dtype)
        assert torch.equal(broadcast_scale(s, granularity, 300, 1024), want_s)
        assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))


@pytest.mark.parametrize("granularity", ["row", "block", "block128x128", "tensor"])
def test_quantize_past_2_to_the_31_elements(granularity):
    """(2^19 + 64, 4096) bf16, 2^31 + 2^18 elements (DeepSeek-V3's stacked expert weights are
    3.8·10⁹): row 2^19 starts at element 2^31, where an int32 offset wraps. Rows at the start,
    the middle and across the end (the last 320) are bitwise torch's; q's memory poisoned."""
    M, K = (1 << 19) + 64, 4096
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(M, K, generator=gen, device="cuda", dtype=torch.bfloat16)
    x *= torch.exp2(torch.randint(-4, 5, (M, 1), generator=gen, device="cuda").float()).bfloat16()
    torch.empty(M * K, dtype=torch.uint8, device="cuda").fill_(0x7F)  # NaN; freed: q gets this memory
    q, s = pingpong.quantize_fp8(x, granularity)
    torch.cuda.synchronize()
    tensor_amax = torch.maximum(x.amax(), -x.amin())
    for r0, r1 in ((0, 256), ((1 << 18) - 128, (1 << 18) + 128), ((1 << 19) - 256, M)):  # from multiples of 128
        want_s, want_q = torch_quantized(x[r0:r1], granularity, torch.float8_e4m3fn, tensor_amax)
        rows = s if granularity == "tensor" else s[r0 // 128:-(-r1 // 128)] if granularity == "block128x128" else s[r0:r1]
        assert torch.equal(broadcast_scale(rows, granularity, r1 - r0, K), want_s), (granularity, r0)
        assert torch.equal(q[r0:r1].view(torch.uint8), want_q.view(torch.uint8)), (granularity, r0)


def layer_reference(layer, x):
    """The layer's product through the public functions (the first call's path), as its own
    kept launches must give it, bitwise."""
    q, s = pingpong.quantize_fp8(x.reshape(-1, layer.in_features), "row" if layer.fp8 == "row" else "block")
    y = pingpong.scaled_mm(q, layer.weight_fp8.t(), s, layer.weight_scale.t(), bias=layer.bias, out_dtype=x.dtype)
    return y.reshape(*x.shape[:-1], layer.out_features)


@pytest.mark.parametrize("fp8", ["row", "block"])
def test_float8_linear_keeps_each_input_signatures_launches(fp8, monkeypatch):
    """After a first call per input signature, calls take the layer's kept launches (no
    scaled_mm call), bitwise the public path's result on fresh inputs into NaN-poisoned memory:
    3-D, 2-D with padded rows, 1-D inputs; inside a CUDA graph; after its weight buffer is
    replaced and after a move to the CPU and back."""
    seed = 11
    gen = torch.Generator(device="cuda").manual_seed(seed)
    lin = torch.nn.Linear(1024, 512).cuda().bfloat16()
    layer = Float8Linear.from_linear(lin, fp8)
    public = []
    monkeypatch.setattr(pingpong.fp8, "scaled_mm", lambda *a, **k: public.append(1) or pingpong.scaled_mm(*a, **k))
    fresh = lambda shape: spread(math.prod(shape[:-1]), shape[-1], gen).bfloat16().reshape(shape)  # noqa: E731
    padded = lambda: fresh((33, 1152))[:, :1024]  # noqa: E731  rows 1152 apart
    with torch.no_grad():
        for make in (lambda: fresh((4, 33, 1024)), padded, lambda: fresh((1024,))):
            public.clear()
            for call in range(3):
                x = make()
                y = poisoned_call(lambda: layer(x), (x.numel() // 1024, 512), torch.bfloat16)
                assert torch.equal(y, layer_reference(layer, x)), f"seed {seed}: shape {tuple(x.shape)} call {call}"
            assert len(public) == 1, f"shape {tuple(x.shape)}: {len(public)} validated calls of 3; expected the first"
        x = fresh((4, 33, 1024))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = layer(x)
        x.copy_(fresh((4, 33, 1024)))
        y.fill_(float("nan"))
        graph.replay()
        assert torch.equal(y, layer_reference(layer, x)), f"seed {seed}: graph replay"
        other = Float8Linear.from_linear(torch.nn.Linear(1024, 512).cuda().bfloat16(), fp8)
        layer.weight_fp8, layer.weight_scale, layer.bias = other.weight_fp8, other.weight_scale, other.bias
        x = fresh((4, 33, 1024))
        assert torch.equal(layer(x), layer_reference(other, x)), f"seed {seed}: the replaced weights"
        layer.cpu().cuda()
        public.clear()
        assert torch.equal(layer(x), layer_reference(other, x)) and len(public) == 1, "after a move"


@pytest.mark.parametrize("fp8", ["row", "block"])
def test_float8_linear_and_compile(fp8):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 512))
    model = model.cuda().bfloat16()
    x = torch.randn(4, 33, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        ref = model.double()(x.double())
        model = model.bfloat16()
        report = pingpong.nn.replace_linear(model, fp8=fp8)
        assert report.replaced == ["0", "2"] and all(isinstance(model[i], Float8Linear) for i in (0, 2))
        y = model(x)
        err = ((y.double() - ref).norm() / ref.norm()).item()
        assert y.shape == (4, 33, 512) and y.dtype == torch.bfloat16 and err < 0.08, err
        y2 = torch.compile(model, fullgraph=True)(x)
        torch.testing.assert_close(y2, y, rtol=0, atol=0)
    with pytest.raises(pingpong.PingpongError, match="requires grad"):
        model(x.requires_grad_())
