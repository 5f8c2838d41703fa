"""The one launch mechanism (pingpong.runtime.launcher) on the GEMM, checked on the CPU: a direct
launch hands Triton's C launcher exactly the arguments Triton's own launch path would, for
a kernel with four TMA descriptors of different boxes, a bias pointer and per-call scalars α, β.
Also the launch-cache keys and guards only the GPU path uses, tested as functions."""

import dataclasses

import pytest

import fake_launcher
import torch

from pingpong import quantize
from pingpong.errors import ConfigError, PingpongError
from pingpong.fp8 import Float8Linear
from pingpong.fp8_grouped import check_scaled_grouped_mm
from pingpong.hopper.host import launch as hl, table as tables
from pingpong.hopper.host.config import KernelConfig
from pingpong.hopper.device.epilogue import EpilogueConstants, EpilogueOperands
from pingpong.hopper.host.select import choose
from pingpong.runtime import compile as cc, launcher
from pingpong.runtime.spec import EpilogueArgs
from pingpong.runtime.launcher import CachedLaunch, DirectLaunch, bind_jit_args, hooks_idle, launch_key, \
    launch_ready


def _operands(col_major_a: bool, with_c: bool, batch: tuple = ()):
    """Batched (`batch` = (B,)): a, c and out are (B, ·, ·), the weight is shared (rank-2)."""
    M, N, K = 384, 520, 320
    a = torch.empty(*batch, K, M, dtype=torch.bfloat16).transpose(-1, -2) if col_major_a else \
        torch.empty(*batch, M, K, dtype=torch.bfloat16)
    w = torch.empty(N, K, dtype=torch.bfloat16)
    out = torch.empty(*batch, M, N, dtype=torch.bfloat16)
    c = torch.empty(*batch, M, N, dtype=torch.bfloat16) if with_c else None
    return a, w.t(), out, c


@pytest.mark.parametrize("col_major_a, with_c, with_bias, batch",
                         [(False, True, False, ()), (True, False, True, ()), (True, True, True, (3,))])
def test_gemm_direct_launch_passes_what_triton_passes(monkeypatch, col_major_a, with_c, with_bias, batch):
    a, b, out, c = _operands(col_major_a, with_c, batch)
    bias = torch.empty(out.shape[-1], dtype=torch.bfloat16) if with_bias else None
    config = KernelConfig(128, 128, 64, schedule="pingpong")
    epilogue = EpilogueArgs(c, 1.5, 0.25 if with_c else 0.0, bias)
    fn, args, kwargs, grid = hl.prepare(a, b, out, epilogue, config, sms=132,
                                        activation="gelu_tanh" if with_bias else "none")
    assert isinstance(args[2], EpilogueOperands)  # the epilogue's tensors: one argument
    with cc.offline("sm_90a"):
        calls, kernel = _run_as_triton(monkeypatch, fn, args, kwargs, grid)
        direct = DirectLaunch.from_kernel(kernel)
        assert direct is not None and len(direct.encodings) == 4
        bound = bind_jit_args(direct, fn, args, kwargs, dynamic=("alpha", "beta"))
        cin = c if with_c else out
        ptrs = (a.data_ptr(), b.data_ptr(), out.data_ptr(), cin.data_ptr(), (bias if with_bias else out).data_ptr())
        assert ptrs[2:] == hl.operand_pointers(out, epilogue, cin)  # what HopperPlan derives
        made = launcher.ENCODED
        bound((grid[0], 1, 1), 99, ptrs, (1.5, 0.25 if with_c else 0.0))
        assert launcher.ENCODED - made == 4  # a map per descriptor, counted (model_bench reads the count)
    theirs, ours = calls
    bound((grid[0], 1, 1), 99, ptrs, (1.5, 0.25 if with_c else 0.0))
    bound((grid[0], 1, 1), 99, (ptrs[0] + 4096, *ptrs[1:]), (1.5, 0.25 if with_c else 0.0))
    assert launcher.ENCODED - made == 5  # cached by address: again none, then one for A's new address
    (head, hooks, tail, args), (t_head, _, t_tail, t_args) = fake_launcher.parts(ours), fake_launcher.parts(theirs)
    assert head == t_head and tail == t_tail  # grid, stream, function, flags, packed metadata, scratch, signature
    assert hooks == (None, None, None)  # no launch metadata and no hooks
    assert args == t_args
    maps = [x for x in args if isinstance(x, tuple) and x[:1] == ("map",)]
    assert [m[1] for m in maps] == list(ptrs[:4])  # one CUtensorMap per descriptor, at its address
    assert [len(m[6]) for m in maps] == ([3, 2, 3, 3] if batch else [2] * 4)  # rank-3 batched, rank-2 shared
    assert ptrs[4] in args  # the bias pointer (never read without a bias)
    cfg = [x for x in ours[15] if isinstance(x, hl.KernelConstants)]  # every constexpr: one argument (unpacked)
    assert len(cfg) == 1 and (cfg[0].BM, cfg[0].BN, cfg[0].BK, cfg[0].PINGPONG) == (128, 128, 64, True)
    assert cfg[0].EPI == EpilogueConstants(HAS_C=with_c, BIAS="col" if with_bias else "none",
                                           ACTIVATION="gelu_tanh" if with_bias else "none", BUFS=cfg[0].EPI.BUFS)


def _c_args(v):
    """A launch argument as Triton's C launcher reads it: a tensor as its address, a tuple's fields likewise."""
    if isinstance(v, tuple):
        return type(v)(*map(_c_args, v)) if hasattr(v, "_fields") else tuple(map(_c_args, v))
    return v.data_ptr() if isinstance(v, torch.Tensor) else v


def _run_as_triton(monkeypatch, fn, args, kwargs, grid):
    """Compile offline, then launch once as Triton's own path does, into the fake launcher:
    (recorded calls, the compiled kernel)."""
    from triton.runtime import driver

    fake_launcher.annotations(monkeypatch)
    kernel = fn.warmup(*args, grid=grid, **kwargs)
    calls = fake_launcher.install(driver.active)
    monkeypatch.setattr(kernel, "_run", None)
    monkeypatch.setattr(kernel, "module", None)
    values = list(args) + [kwargs[n] for n in fn.arg_names[len(args):]]
    kernel.run(*grid, 1, 1, 99, kernel.function, kernel.packed_metadata, None, None, None, *map(_c_args, values))
    return calls, kernel


@pytest.mark.parametrize("stream_k, with_c, with_bias", [(True, True, True), (False, False, True), (True, False, False)])
def test_split_direct_launch_binds_the_epilogue_operands_flat(monkeypatch, stream_k, with_c, with_bias):
    """The split-K / stream-K launch: `ops` (out, C, bias pointers; stream-K's two tile
    descriptors) sits after the workspace and counters; the plan's pointer tuple lists its
    fields there (hopper.backend.SplitPlan), and the direct launch packs what Triton packs."""
    a, b, out, c = _operands(False, with_c)
    bias = torch.empty(out.shape[-1], dtype=torch.bfloat16) if with_bias else None
    config = KernelConfig(128, 128, 64, stream_k=True) if stream_k else KernelConfig(128, 128, 64, split_k=2)
    M, K, N = a.shape[0], a.shape[1], b.shape[1]
    ws = torch.empty(hl.workspace_shape(M, N, K, config, sms=132), dtype=torch.float32)
    counters = torch.zeros(max(1, hl.counter_count(M, N, config)), dtype=torch.int32)
    epilogue = EpilogueArgs(c, 1.5, 0.25 if with_c else 0.0, bias)
    fn, args, kwargs, grid = hl.prepare_split(a, b, out, epilogue, config, 132, ws, counters)
    ops = args[4]
    assert isinstance(ops, EpilogueOperands) and ops.out is out and ops.cin is (c if with_c else out)
    assert (ops.tile_out is not None) == stream_k and ops.sa is None
    with cc.offline("sm_90a"):
        calls, kernel = _run_as_triton(monkeypatch, fn, args, kwargs, grid)
        direct = DirectLaunch.from_kernel(kernel)
        assert direct is not None and len(direct.encodings) == (4 if stream_k else 2)
        bound = bind_jit_args(direct, fn, args, kwargs, dynamic=("alpha", "beta"))
        cin = c if with_c else out
        tiles = (out.data_ptr(), cin.data_ptr()) if stream_k else ()
        ptrs = (a.data_ptr(), b.data_ptr(), ws.data_ptr(), counters.data_ptr(), out.data_ptr(), cin.data_ptr(),
                (bias if with_bias else out).data_ptr(), *tiles)  # SplitPlan._launch's order
        assert ptrs[4:] == hl.operand_pointers(out, epilogue, cin, stream_k)  # what the plan derives
        bound((grid[0], 1, 1), 99, ptrs, (1.5, 0.25 if with_c else 0.0))
    theirs, ours = calls
    (head, _, tail, args_), (t_head, _, t_tail, t_args) = fake_launcher.parts(ours), fake_launcher.parts(theirs)
    assert head == t_head and tail == t_tail and args_ == t_args
    assert [m[1] for m in args_ if isinstance(m, tuple) and m[:1] == ("map",)] == [ptrs[0], ptrs[1], *tiles]


@pytest.mark.parametrize("cin, tiles, scales", [("c", False, False), ("out", True, False), (None, False, True),
                                                 (None, True, True), ("c", True, False)])
@pytest.mark.parametrize("given", [False, True])
def test_operand_pointers_are_the_epilogue_operands_bases(cin, tiles, scales, given):
    """A plan's pointer tuple (hl.operand_pointers, written out for speed) lists the base
    addresses of epilogue_operands' fields, in order, None fields skipped, with every tensor
    operand of EpilogueArgs given (each its own tensor) or none: a fused operand added to one
    and not the other fails here."""
    out = torch.empty(8, 16)
    tensors = [f for f, kind in EpilogueArgs.__annotations__.items() if "Tensor" in str(kind)]
    args = EpilogueArgs(**{f: torch.empty(16) for f in tensors}) if given else EpilogueArgs()
    cin = {"c": torch.empty(8, 16), "out": out, None: None}[cin]
    sa, sb = (torch.empty(8, 1), torch.empty(1, 16)) if scales else (None, None)
    ops = hl.epilogue_operands(out, args, None, cin, out if tiles else None, cin if tiles else None, sa, sb)
    assert hl.operand_pointers(out, args, cin, tiles, sa, sb) == tuple(t.data_ptr() for t in ops if t is not None)


def test_bind_flattens_a_tuple_argument_by_its_fields():
    """A NamedTuple argument binds as its fields in order, None fields dropped (no kernel
    parameter), named arg.i; the dynamic scalars after it still found by name."""
    direct = DirectLaunch.__new__(DirectLaunch)
    direct.encodings = ()
    direct.function, direct.cooperative, direct.pdl, direct.packed = 1, False, False, None
    direct.annotations, direct.signature = (), b""

    class _Fn:
        arg_names = ["x", "ops", "n", "alpha", "CFG"]
        params = [type("P", (), {"is_constexpr": n == "CFG", "default": None})() for n in arg_names]

    t = torch.empty(4)
    ops = EpilogueOperands(out=t, cin=None, bias=t)
    bound = bind_jit_args(direct, _Fn, (t, ops, 7, 2.0), dict(CFG="cfg"), dynamic=("alpha",))
    assert bound.slots == [None, None, None] and bound._template == [None, None, None, 7, "cfg"]
    assert bound._dyn == 4


def test_constexpr_bundles_key_a_kernel_by_value():
    """Triton's JIT keys a compiled kernel by (constexpr value, str of the specialization):
    equal bundles must be equal and hash alike, different ones must differ in both."""
    a = EpilogueConstants(HAS_C=True, BIAS="col", ACTIVATION="relu", BUFS=2)
    b = EpilogueConstants(HAS_C=True, BIAS="col", ACTIVATION="relu", BUFS=2)
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    for other in (dataclasses.replace(a, BUFS=1), dataclasses.replace(a, HAS_C=False),
                  dataclasses.replace(a, BIAS="row"), dataclasses.replace(a, ACTIVATION="silu"),
                  dataclasses.replace(a, SWAP=True)):
        assert other != a and repr(other) != repr(a)
    # the kernel's whole bundle (layouts included) keys alike from equal configs, and apart otherwise
    d, d2 = KernelConfig(128, 128, 64).derive(), KernelConfig(128, 128, 64, stages=3).derive()
    k, k2 = hl.kernel_constants(d, a), hl.kernel_constants(KernelConfig(128, 128, 64).derive(), b)
    assert k == k2 and hash(k) == hash(k2) and repr(k) == repr(k2)
    k3 = hl.kernel_constants(d2, a)
    assert k3 != k and repr(k3) != repr(k)


def test_bind_refuses_a_wrong_slot_count():
    direct = DirectLaunch.__new__(DirectLaunch)
    direct.encodings = ((0, 2, 1, [8, 8]),)
    direct.function, direct.cooperative, direct.pdl, direct.packed = 1, False, False, None
    with pytest.raises(ValueError, match="1 TMA descriptors"):
        direct.bind([("tma", [8, 8], [8, 1]), ("tma", [8, 8], [8, 1])])


class _Kernel:
    """A stand-in JIT function: records launches, returns a 'compiled' token."""

    arg_names = ["x_ptr", "n", "alpha", "K"]
    params = []

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kw: self.launches.append((grid, args, kw)) or "compiled"


def test_cached_launch_jits_once_then_launches_directly(monkeypatch):
    from triton import knobs

    calls = []

    class _Direct:
        def bind(self, slots, pre=(), post=()):
            assert slots == ["ptr"] and pre == (10,) and post == (4,)
            return lambda grid, stream, ptrs, dyn=(): calls.append((grid, stream, ptrs, dyn))

    monkeypatch.setattr(DirectLaunch, "from_kernel", classmethod(lambda cls, k: _Direct() if k == "compiled" else None))
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda d: 77, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)

    class _Guard:
        def __init__(self, d):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *e):
            return False

    monkeypatch.setattr(torch.cuda, "device", _Guard)
    k = _Kernel()
    x = torch.empty(10)
    prepare = lambda alpha: (k, (x, 10, alpha), {"K": 4}, (3,))  # noqa: E731
    launch = CachedLaunch(dynamic=("alpha",))
    launch(0, (x.data_ptr(),), (2.0,), prepare, 2.0)
    assert len(k.launches) == 1 and not calls and launch.key == launch_key()
    launch(0, (x.data_ptr(),), (3.0,), prepare, 3.0)
    assert len(k.launches) == 1 and calls == [((3, 1, 1), 77, (x.data_ptr(),), (3.0,))]
    monkeypatch.setattr(knobs.runtime, "debug", True)  # a knob the JIT re-reads: the bound launch is stale
    launch(0, (x.data_ptr(),), (4.0,), prepare, 4.0)
    assert len(k.launches) == 2 and len(calls) == 1
    knobs.runtime.launch_enter_hook.add(print)  # a profiler's hook: every launch through the JIT
    try:
        launch(0, (x.data_ptr(),), (5.0,), prepare, 5.0)
    finally:
        knobs.runtime.launch_enter_hook.remove(print)
    assert len(k.launches) == 3 and len(calls) == 1


def test_launch_ready_is_hooks_idle_and_the_launch_key(monkeypatch):
    """The per-launch check reads what hooks_idle() and launch_key() read, in one call."""
    from triton import knobs

    key = launch_key()
    assert launch_ready(key) and not launch_ready(None) and not launch_ready(key[:2] + ("other mode",))
    with monkeypatch.context() as m:
        m.setattr(knobs.runtime, "debug", not knobs.runtime.debug)
        assert not launch_ready(key) and launch_ready(launch_key())
    for chain in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        chain.add(print)
        try:
            assert not hooks_idle() and not launch_ready(key)
        finally:
            chain.remove(print)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", print)  # any other object there counts as a hook
    assert not hooks_idle() and not launch_ready(key)


def test_portable_direct_launch_passes_what_triton_passes(monkeypatch):
    """The plain-Triton kernel through the same mechanism: leading pointers as "ptr" slots
    (addresses per call), α and β per call; Triton's launcher gets the tensors themselves,
    ours their addresses."""
    import torch

    from pingpong import portable

    a, b, out, c = _operands(False, True)
    bias = torch.empty(out.shape[1], dtype=torch.float32)
    args = None
    with cc.offline("sm_90a"):
        from triton.runtime import driver

        monkeypatch.setattr(portable, "_device_shared_limit", lambda device: (232448, False))
        monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
        fn, args, kwargs, grid = portable.prepare(a, b, out, c, 1.5, 0.25, bias, "relu")
        kernel = fn.warmup(*args, grid=grid, **kwargs)
        calls = fake_launcher.install(driver.active)
        monkeypatch.setattr(kernel, "_run", None)
        monkeypatch.setattr(kernel, "module", None)
        values = list(args) + [kwargs[n] for n in fn.arg_names[len(args):]]
        kernel.run(*grid, 1, 99, kernel.function, kernel.packed_metadata, None, None, None, *values)
        direct = DirectLaunch.from_kernel(kernel)
        assert direct is not None and direct.encodings == ()
        bound = bind_jit_args(direct, fn, args, kwargs, dynamic=("alpha", "beta"))
        ptrs = tuple(t.data_ptr() for t in args[:5])
        bound((grid[0], grid[1], 1), 99, ptrs, (1.5, 0.25))
    theirs, ours = calls
    (head, _, tail, args), (t_head, _, t_tail, t_args) = fake_launcher.parts(ours), fake_launcher.parts(theirs)
    t_args = [x.data_ptr() if isinstance(x, torch.Tensor) else x for x in t_args]
    assert head == t_head and tail == t_tail and args == t_args
    assert args[:5] == list(ptrs)


@pytest.mark.parametrize("granularity, M, K", [("row", 40, 4096), ("row", 3, 20000), ("block", 40, 1024),
                                               ("block128x128", 200, 512)])
def test_quantize_direct_launch_passes_what_triton_passes(monkeypatch, granularity, M, K):
    """quantize_fp8's row and block kernels (pingpong.quantize.launch's CachedLaunch): three
    pointer slots (x, q, the scales), then the sizes, strides and constexprs as Triton's JIT
    passes them."""
    import torch

    from pingpong import quantize

    x = torch.empty(M, K, dtype=torch.bfloat16)
    q = torch.empty(M, K, dtype=torch.float8_e4m3fn)
    s = quantize.scale_like(x, granularity)
    with cc.offline("sm_90a"):
        from triton.runtime import driver

        monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
        fn, args, kwargs, grid = quantize.prepare(x, q, s, granularity)
        assert [id(t) for t in args[:3]] == [id(x), id(q), id(s)]  # the order of launch's addresses
        calls = fake_launcher.install(driver.active)
        ptrs = (x.data_ptr(), q.data_ptr(), s.data_ptr())
        args, t_args = _launched_both_ways(monkeypatch, calls, fn, args, kwargs, grid, ptrs)
    assert args == t_args
    assert args[:3] == list(ptrs) and args[3:5] == [M, K]


def _launched_both_ways(monkeypatch, calls, fn, args, kwargs, grid, ptrs, dyn=(), dynamic=()):
    """A kernel of a 1-D grid launched through Triton's JIT, then bound (bind_jit_args, the
    parameters named in `dynamic` passed per launch as `dyn`) with the base addresses `ptrs`,
    both into the fake launcher (`calls`, installed; offline compile, tensors taken as CUDA
    ones): (our arguments, Triton's, its tensors as addresses), their launch heads and tails
    checked equal."""
    kernel = fn.warmup(*args, grid=grid, **kwargs)
    monkeypatch.setattr(kernel, "_run", None)
    monkeypatch.setattr(kernel, "module", None)
    values = list(args) + [kwargs[n] for n in fn.arg_names[len(args):]]
    kernel.run(*grid, 1, 1, 99, kernel.function, kernel.packed_metadata, None, None, None, *values)
    direct = DirectLaunch.from_kernel(kernel)
    assert direct is not None and direct.encodings == ()
    bind_jit_args(direct, fn, args, kwargs, dynamic)((grid[0], 1, 1), 99, ptrs, dyn)
    theirs, ours = calls[-2:]
    (head, _, tail, got), (t_head, _, t_tail, want) = fake_launcher.parts(ours), fake_launcher.parts(theirs)
    assert head == t_head and tail == t_tail
    return got, [v.data_ptr() if isinstance(v, torch.Tensor) else v for v in want]


@pytest.mark.parametrize("granularity, M, K", [("row", 40, 4096), ("row", 17, 256), ("tensor", 40, 1024),
                                               ("block", 200, 512), ("block128x128", 200, 512)])
@pytest.mark.parametrize("rows", [True, False])
def test_quantize_pair_direct_launch_passes_what_triton_passes(monkeypatch, granularity, M, K, rows):
    """quantize_fp8_pair's kernels (pingpong.quantize.launch_pair's CachedLaunches): each step's
    addresses (`pair_steps`: x, the outputs, the amax buffer and its columns' part) then the
    sizes, strides and constexprs, as Triton's JIT passes them; q and s empty when not asked for."""
    import torch

    pad = 128 if granularity.startswith("block") else 16
    x = torch.empty(M, K, dtype=torch.bfloat16)
    q, s, qt, st = quantize.pair_like(x, granularity, E4, pad, rows, True)
    mode = quantize._PAIR_MODES[granularity]
    inputs = (x, q, s, qt, st, *quantize.amax_slots(x, granularity), granularity, rows, True)
    steps = quantize.pair_steps(*inputs)
    assert len(steps) == (2 if mode < 2 else 1)
    with cc.offline("sm_90a"):
        from triton.runtime import driver

        monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
        calls = fake_launcher.install(driver.active)
        for prepare_step, ptrs, dyn in steps:
            dynamic = ("words",) if prepare_step is quantize.prepare_pair_cast else ()
            got, want = _launched_both_ways(monkeypatch, calls, *prepare_step(*inputs), ptrs, dyn, dynamic)
            assert got == want, (prepare_step.__name__, got, want)
            assert got[:len(ptrs)] == list(ptrs)


@pytest.mark.parametrize("M, K", [(40, 1024), (17, 300), (16384, 4608)])
def test_quantize_tensor_direct_launches_pass_what_triton_passes(monkeypatch, M, K):
    """Tensor-wise quantize_fp8's two kernels (pingpong.quantize._launch_tensor's CachedLaunches):
    each step's addresses (`tensor_steps`: the amax pass's x and partials; the cast's x, q, s and
    the partials, or past TENSOR_PARTIALS (16384 × 4608) the one after them) then the sizes,
    strides and constexprs, as Triton's JIT passes them."""
    x = torch.empty(M, K, dtype=torch.bfloat16)
    q, s = quantize.rows_like(x, "tensor", E4)
    P = quantize._tensor_partials(M, K)
    partial = torch.empty(P + (P > quantize.TENSOR_PARTIALS))
    steps = quantize.tensor_steps(x, q, s, partial)
    assert steps[1][1][3] == partial.data_ptr() + (4 * P if M == 16384 else 0)
    with cc.offline("sm_90a"):
        from triton.runtime import driver

        monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
        calls = fake_launcher.install(driver.active)
        for prepare_step, ptrs in steps:
            got, want = _launched_both_ways(monkeypatch, calls, *prepare_step(x, q, s, partial), ptrs)
            assert got == want, (prepare_step.__name__, got, want)
            assert got[:len(ptrs)] == list(ptrs)


# ----------------------------------------------------------------------------- launch keys
# Launch-cache keys and guards that only the GPU path uses, tested as functions on the CPU
# (issue 44): a wrong key reuses a kernel compiled for another dtype or alignment (wrong
# numbers); a wrong guard skips a profiler's hook or a tuned entry's shape rule.

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
BF, H = torch.bfloat16, torch.float16


def _quant_args(x_dtype=BF, q_dtype=E4, offset=0, granularity="row"):
    buf = torch.zeros(64 * 256 + 8, dtype=x_dtype)
    x = buf[offset:offset + 64 * 256].view(64, 256)
    q = torch.empty(64, 256, dtype=q_dtype)
    return x, q, quantize.scale_like(x, granularity), granularity


def test_quantize_bound_launch_is_keyed_by_every_dtype_and_alignment():
    """One CachedLaunch per compiled kernel: x bf16 vs fp16 (the load), q e4m3 vs e5m2 (FP8_MAX
    and the cast), an x base off 16 bytes (Triton specializes pointers on alignment)."""
    quantize._LAUNCHES.clear()
    try:
        base = quantize.bound_launch(*_quant_args())
        assert quantize.bound_launch(*_quant_args()) is base  # the same signature: the same launch
        for other in (_quant_args(x_dtype=H), _quant_args(q_dtype=E5), _quant_args(offset=1),
                      _quant_args(granularity="block")):
            assert quantize.bound_launch(*other) is not base, other[0].dtype
        keys = {quantize.launch_key(*args) for args in (_quant_args(), _quant_args(x_dtype=H), _quant_args(q_dtype=E5),
                                                       _quant_args(offset=1))}
        assert len(keys) == 4
    finally:
        quantize._LAUNCHES.clear()


def _pair_args(x_dtype=BF, offset=0, granularity="row", rows=True, M=64):
    buf = torch.zeros(M * 256 + 8, dtype=x_dtype)
    x = buf[offset:offset + M * 256].view(M, 256)
    q, s, qt, st = quantize.pair_like(x, granularity, E4, 16 if granularity in ("row", "tensor") else 128, rows, True)
    return x, q, s, qt, st, *quantize.amax_slots(x, granularity), granularity, rows, True


def test_quantize_pair_bound_launch_is_keyed_by_every_dtype_alignment_and_output():
    """One pair of CachedLaunches (amax pass, cast) per compiled pair: x bf16 vs fp16, an x base
    off 16 bytes, another granularity, q asked for or not, another row count (the cast's
    scalars, the grid); the same call shape shares its launches, and none is a quantize_fp8's."""
    quantize._LAUNCHES.clear()
    try:
        base = quantize.bound_pair(*_pair_args())
        assert quantize.bound_pair(*_pair_args()) is base and len(base) == 2
        others = [quantize.bound_pair(*args) for args in (_pair_args(x_dtype=H), _pair_args(offset=1),
                  _pair_args(granularity="tensor"), _pair_args(rows=False), _pair_args(M=65))]
        assert len({id(o) for o in [base, *others]}) == 6
        assert quantize.bound_launch(*_quant_args()) not in (base, *others)
    finally:
        quantize._LAUNCHES.clear()


def test_float8_linear_keeps_runs_per_dtype_and_alignment():
    buf = torch.zeros(4 * 64 + 8, dtype=BF)
    x = buf[:256].view(4, 64)
    sig = Float8Linear.signature(x)
    assert Float8Linear.signature(buf[:256].view(4, 64)) == sig
    assert Float8Linear.signature(x.to(H)) != sig  # another input dtype: another quantize kernel
    assert Float8Linear.signature(buf[1:257].view(4, 64)) != sig  # a base off 16 bytes
    assert Float8Linear.signature(x.t().contiguous().t()) != sig  # strides


@pytest.mark.parametrize("which", ["launch_enter_hook", "launch_exit_hook"])
def test_launch_ready_declines_with_any_hook(monkeypatch, which):
    """A profiler's hook, in a HookChain or set as a plain function, enter or exit: every launch
    goes through Triton's JIT so the hook sees it."""
    from triton import knobs

    key = launch_key()
    assert hooks_idle() and launch_ready(key)
    getattr(knobs.runtime, which).add(print)
    try:
        assert not hooks_idle() and not launch_ready(key)
    finally:
        getattr(knobs.runtime, which).remove(print)
    assert launch_ready(key)
    monkeypatch.setattr(knobs.runtime, which, print)  # not a HookChain: still a hook
    assert not hooks_idle() and not launch_ready(key)


def test_tuned_entry_answers_its_exact_shape_and_near_ones_only_by_the_rule(tuning_cache):
    """A 128×256 tile tuned at 1024×4500×4096 idles more of the last wave there than the
    heuristic (1.83 vs 1.38 of the units' time): the exact shape still takes it (it was
    measured there), a shape of the same buckets differing only in K does not (the near rule,
    pingpong.hopper.host.select.tabled)."""
    from pingpong.hopper.host.select import Device

    h100 = Device("NVIDIA H100 80GB HBM3", 132)
    tuned = KernelConfig(128, 256, 64)
    t = tables.Table(tables.TableKey.current(h100.name, h100.sms))
    t.add(1024, 4500, 4096, "bf16", "bf16", "nt", tuned, us=1.0)
    path = tables.write(t, tables.user_table_path(t.key))
    assert choose(1024, 4500, 4096, device=h100) == (tuned, str(path))
    assert choose(1024, 4500, 4000, device=h100)[1] == "heuristic"
    assert choose(1024, 4500, 4096, ("fp16", "fp16"), device=h100)[1] == "heuristic"  # another dtype


@pytest.mark.parametrize("epilogue_n, out_bytes, ok", [
    (8, 2, True),  # 16 bytes: one TMA box row, the narrowest legal
    (4, 4, True),  # fp32 out: 16 bytes
    (8, 4, True),
    (4, 2, False),  # 8 bytes
    (2, 4, False),
    (128, 2, True),
])
def test_epilogue_subtile_width_is_checked_in_bytes_of_the_output(epilogue_n, out_bytes, ok):
    cfg = KernelConfig(128, 128, 64, epilogue_n=epilogue_n)
    if ok:
        cfg.validate(2, out_bytes)
    else:
        with pytest.raises(ConfigError, match=f"epilogue_n={epilogue_n}"):
            cfg.validate(2, out_bytes)


def test_fp8_grouped_refuses_expanded_expert_weights():
    """b = one weight expanded over G groups (stride 0): TMA cannot read a zero stride, and a copy
    per call is refused, not made; one group (G = 1) has no group stride to read."""
    T, K, N, G = 64, 256, 128, 4
    a = torch.zeros(T, K).to(E4)
    w = torch.zeros(1, N, K).to(E4)
    sa, offs = torch.ones(T), torch.tensor([16, 32, 48, 64], dtype=torch.int32)
    with pytest.raises(PingpongError, match="b: expected K-major"):
        check_scaled_grouped_mm(a, w.expand(G, N, K).transpose(1, 2), sa, torch.ones(G, N), offs, torch.bfloat16,
                                False, device_checks=False)
    assert check_scaled_grouped_mm(a, w.transpose(1, 2), sa, torch.ones(1, N), offs[-1:], torch.bfloat16, False,
                                   device_checks=False) == ("row", "row")
