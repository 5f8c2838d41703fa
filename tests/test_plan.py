"""The call plan (pingpong.runtime.plan), on the CPU: keys, the cache, path_for = the executed path,
aliasing refusals. GPU execution of every path is in tests/test_gemm_gpu.py."""

import collections
import types

import pytest
import torch

import pingpong
from pingpong import api, fp8, fp8_grouped, grouped, quantize
from pingpong.integration import direct
from pingpong import portable
from pingpong.runtime import plan, spec
from pingpong.hopper.host import backend as hopper_backend
from pingpong.hopper.host.config import KernelConfig
from pingpong.runtime.addressing import addressable
from pingpong.errors import PingpongError
from pingpong.streaming import api as streaming_api

BF16 = torch.bfloat16


def t(*shape, dtype=BF16):
    return torch.randn(*shape).to(dtype)


def key(a, b, c=None, beta=0.0, out_dtype=BF16, inplace=False, config=None, bias=None, activation=None):
    return spec.build(a, b, c, beta, out_dtype, bias, activation, inplace=inplace, config=config)

def build(a, b, c, beta, out_dtype, inplace, config, bias=None, activation="none"):
    """The plan of a validated call, uncached (the spec, then the backends' decision)."""
    return plan.plan_for(spec.build(a, b, c, beta, out_dtype, bias, activation, inplace=inplace, config=config))



def test_identical_calls_share_a_key_and_differences_do_not():
    a, b = t(64, 32), t(32, 48)
    base = key(a, b)
    assert key(t(64, 32), t(32, 48)) == base  # fresh tensors, same properties: a hit
    variants = {
        "dtype": key(t(64, 32, dtype=torch.float16), t(32, 48, dtype=torch.float16)),
        "shape": key(t(64, 32), t(32, 40)),
        "orientation": key(t(32, 64).t(), b),
        "row stride": key(t(64, 40)[:, :32], b),
        "alignment": key(t(64 * 32 + 1)[1:].view(64, 32), b),
        "out dtype": key(a, b, out_dtype=torch.float32),
        "c read": key(a, b, c=t(64, 48), beta=1.0),
        "c given, not read": key(a, b, c=t(64, 48), beta=0.0),
        "in place": key(a, b, c=t(64, 48), inplace=True),
        "config": key(a, b, config=KernelConfig(128, 128, 64)),
    }
    assert all(v != base for v in variants.values())
    assert len(set(variants.values())) == len(variants)


@pytest.fixture
def hopper(monkeypatch):
    """Plans built as on a Hopper GPU (device -1 stands for the CPU tensors' device); the
    launch records what it would launch on instead of launching."""
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda device: True)

    class Launched(list):
        ptrs = []  # the base addresses each launch was given, beside its JIT inputs

    launched = Launched()
    launched.ptrs = []
    monkeypatch.setattr(hopper_backend.HopperPlan, "_jit_args", lambda self, *args: args)
    monkeypatch.setattr(hopper_backend.CachedLaunch, "__call__",
                        lambda self, device, ptrs, dyn, prepare, *inputs: (launched.append(inputs),
                                                                           launched.ptrs.append(ptrs)))
    return launched


CASES = {  # name: (a, b, c or None, inplace, beta); M = 128: the one-kernel plan (no split, no swap)
    "nt": lambda: (t(128, 32), t(48, 32).t(), None, False, 0.0),
    "nn": lambda: (t(128, 32), t(32, 48), None, False, 0.0),
    "tn": lambda: (t(32, 128).t(), t(48, 32).t(), None, False, 0.0),
    "tt": lambda: (t(32, 128).t(), t(32, 48), None, False, 0.0),
    "K=17 (34-byte rows)": lambda: (t(128, 17), t(48, 17).t(), None, False, 0.0),
    "w.t() with odd N": lambda: (t(128, 32), t(47, 32).t(), None, False, 0.0),
    "misaligned a (x[1:])": lambda: (t(128 * 32 + 1)[1:].view(128, 32), t(48, 32).t(), None, False, 0.0),
    "misaligned c read": lambda: (t(128, 32), t(48, 32).t(), t(128 * 48 + 1)[1:].view(128, 48), False, 1.0),
    "misaligned c in place": lambda: (t(128, 32), t(48, 32).t(), t(128 * 48 + 1)[1:].view(128, 48), True, 0.5),
    "column-major c in place": lambda: (t(128, 32), t(48, 32).t(), t(48, 128).t(), True, 1.0),
    "aligned c in place": lambda: (t(128, 32), t(48, 32).t(), t(128, 48), True, 1.0),
    "batched": lambda: (t(3, 64, 32), t(3, 48, 32).transpose(1, 2), t(3, 64, 48), False, 1.0),
    "batched, shared weight": lambda: (t(3, 64, 32), t(48, 32).t(), None, False, 0.0),
    "batched, weight of batch stride 0": lambda: (t(3, 64, 32), t(32, 48).expand(3, 32, 48), t(64, 48), False, 1.0),
    "batched, odd N": lambda: (t(3, 64, 32), t(3, 32, 47), None, False, 0.0),
    "batched, 16-byte-odd batch stride": lambda: (t(3 * 64 * 32 + 8).as_strided((3, 64, 32), (64 * 32 + 4, 32, 1)),
                                                  t(3, 32, 48), None, False, 0.0),
    "batched in place": lambda: (t(3, 64, 32), t(3, 32, 48), t(3, 64, 48), True, 1.0),
}


@pytest.mark.parametrize("case", CASES)
def test_path_is_the_executed_path(hopper, case):
    a, b, c, inplace, beta = CASES[case]()
    p = build(a, b, c, beta, BF16, inplace, None)
    out = c if inplace else torch.empty(spec.result_shape(a, b), dtype=BF16)
    before = out.clone()
    p.run(a, b, out, spec.EpilogueArgs(c, 1.0, beta))
    (a_k, b_k, target, cin, _), = hopper
    (ptrs,) = hopper.ptrs  # a direct launch reads and writes the very tensors the JIT launch was given
    assert ptrs[:4] == (a_k.data_ptr(), b_k.data_ptr(), target.data_ptr(),
                        (cin if cin is not None else target).data_ptr()), case
    copied = [a_k.data_ptr() != a.data_ptr(), b_k.data_ptr() != b.data_ptr(), target.data_ptr() != out.data_ptr(),
              cin is not None and c is not None and cin.data_ptr() != c.data_ptr()]
    assert p.path == ("hopper-padded" if any(copied) else "hopper"), copied
    for x in (a_k, b_k, target) + ((cin,) if cin is not None else ()):
        assert hopper_backend.tma_matrices(x) is not None, "the kernel only ever sees TMA-legal tensors"
    if inplace and beta != 0.0 and target.data_ptr() != out.data_ptr():
        assert torch.equal(target, before), "in place on a padded copy: the copy holds c's values"


def test_expected_paths(hopper):
    expect = {"nt": "hopper", "nn": "hopper", "tn": "hopper", "tt": "hopper", "K=17 (34-byte rows)": "hopper-padded",
              "w.t() with odd N": "hopper-padded", "misaligned a (x[1:])": "hopper-padded",
              "misaligned c read": "hopper-padded", "misaligned c in place": "hopper-padded",
              "column-major c in place": "hopper-padded", "aligned c in place": "hopper", "batched": "hopper",
              "batched, shared weight": "hopper", "batched, weight of batch stride 0": "hopper",
              "batched, odd N": "hopper-padded", "batched, 16-byte-odd batch stride": "hopper-padded",
              "batched in place": "hopper"}
    for name, want in expect.items():
        a, b, c, inplace, beta = CASES[name]()
        assert build(a, b, c, beta, BF16, inplace, None).path == want, name


def test_empty_problems_plan_no_kernel(hopper):
    p = build(t(0, 32), t(32, 8), None, 0.0, BF16, False, None)
    assert p.path == "empty"
    c = t(4, 8)
    out = torch.full((4, 8), float("nan"), dtype=BF16)
    build(t(4, 0), t(0, 8), c, 0.5, BF16, False, None).run(t(4, 0), t(0, 8), out, spec.EpilogueArgs(c, 1.0, 0.5))
    assert torch.equal(out, (c.float() * 0.5).to(BF16)) and not hopper


def test_empty_k_with_bias_and_activation_is_act_of_bias_plus_residual(hopper):
    """K = 0: α·(a@b) is the empty sum, so out = act(0 + bias) + β·c (per row and per column)."""
    import torch.nn.functional as F

    c = t(2, 4, 8, dtype=torch.float32)
    for bias in (torch.randn(8), torch.randn(4, 1)):
        out = torch.full((2, 4, 8), float("nan"))
        p = build(t(2, 4, 0), t(0, 8), c, 0.5, torch.float32, False, None, bias, "silu")
        p.run(t(2, 4, 0), t(0, 8), out, spec.EpilogueArgs(c, 1.0, 0.5, bias))
        assert p.path == "empty" and not hopper
        torch.testing.assert_close(out, F.silu(bias.expand(2, 4, 8)) + 0.5 * c)


def test_epilogue_is_in_the_key():
    a, b = t(64, 32), t(32, 48)
    keys = {key(a, b), key(a, b, bias=t(48), activation=None),
            key(a, b, bias=t(48, dtype=torch.float32), activation=None),
            key(a, b, bias=t(64, 1), activation=None),
            key(a, b, bias=None, activation="relu"),
            key(a, b, bias=None, activation="silu"),
            key(t(2, 64, 32), b)}
    assert len(keys) == 7


def test_a_refused_call_caches_no_plan():
    plan.PLANS.clear()
    with pytest.raises(pingpong.PingpongError, match="CUDA/ROCm"):
        pingpong.matmul(t(8, 8), t(8, 4))  # CPU tensors: refused after the argument checks
    with pytest.raises(pingpong.PingpongError):
        pingpong.gemm(t(8, 8), t(8, 4), t(8, 5), beta=1.0)
    assert not plan.PLANS


def test_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(plan, "PLAN_CACHE_SIZE", 3)
    plan.PLANS.clear()
    for i in range(5):
        plan.store(("k", i), plan.EmptyPlan(0, False))
    assert list(plan.PLANS) == [("k", 2), ("k", 3), ("k", 4)]


# ----------------------------------------------------------------------------- aliasing


@pytest.mark.parametrize("make_c, what", [
    (lambda: t(1, 48).expand(64, 48), "overlap or interleave"),
    (lambda: torch.as_strided(t(200), (64, 48), (1, 1)), "overlap or interleave"),
])
def test_gemm_refuses_self_overlapping_c(make_c, what):
    c = make_c()
    before = c.clone()
    with pytest.raises(pingpong.PingpongError, match=what):
        pingpong.gemm_(c, t(64, 32), t(32, 48), beta=1.0)
    assert torch.equal(c, before)


def test_gemm_refuses_c_overlapping_a_or_b_by_address(portable_runs):  # as on a GPU
    base = t(64 * 48 + 64 * 32)
    c = base[: 64 * 48].view(64, 48)
    a = base[64 * 48 - 32:][: 64 * 32].view(64, 32)  # shares its first elements with c's last row
    before = c.clone()
    with pytest.raises(pingpong.PingpongError, match="share memory with a"):
        pingpong.gemm_(c, a, t(32, 48))
    # a second storage over the same memory (through numpy): still caught (compared by address)
    b = torch.from_numpy(base.view(torch.int16).numpy()).view(BF16)[: 32 * 48].view(32, 48)
    assert b.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert b.untyped_storage() is not base.untyped_storage()
    with pytest.raises(pingpong.PingpongError, match="share memory with b"):
        pingpong.gemm_(c, t(64, 32), b)
    assert torch.equal(c, before)


def test_self_overlap_rule():
    assert spec.self_overlapping(t(1, 8).expand(4, 8))
    assert not spec.self_overlapping(t(4, 8))
    assert not spec.self_overlapping(t(8, 4).t())
    assert not spec.self_overlapping(t(4, 16)[:, :8])
    assert not spec.self_overlapping(t(1, 8))  # extent-1 dimensions never overlap
    assert spec.self_overlapping(torch.as_strided(t(64), (4, 8), (4, 1)))


def test_in_place_plan_from_path_for_serves_gemm_(portable_runs):
    """path_for(..., inplace=True) builds the plan gemm_ then hits: it carries the byte
    extents gemm_'s per-call overlap check reads."""
    runs = portable_runs
    a, b, c = t(64, 32), t(32, 48), t(64, 48)
    assert pingpong.path_for(a, b, c, beta=1.0, inplace=True) == "portable"
    assert pingpong.gemm_(c, a, b, beta=1.0) is c and len(runs) == 1
    base = t(64 * 48 + 64 * 32)
    c2, a2 = base[: 64 * 48].view(64, 48), base[64 * 48 - 32:][: 64 * 32].view(64, 32)
    with pytest.raises(pingpong.PingpongError, match="share memory with a"):
        pingpong.gemm_(c2, a2, b, beta=1.0)  # a plan hit: the fast overlap check
    assert len(runs) == 1


def test_tensors_past_the_tma_range_take_the_portable_kernel(monkeypatch):
    """An operand whose column stride is 2**40 bytes: TMA cannot describe it, the portable
    kernel (64-bit offsets) can. Meta tensors make the huge stride free."""
    monkeypatch.setattr(hopper_backend, "is_hopper", lambda device: True)
    meta = dict(dtype=BF16, device="meta")
    a = torch.empty(64, 32, **meta)
    assert build(a, torch.empty(32, 48, **meta), None, 0.0, BF16, False, None).path == "hopper"
    far = torch.empty(2**39 + 64, **meta).as_strided((32, 2), (1, 2**39))
    assert not addressable("hopper", far) and addressable("portable", far)
    assert build(torch.empty(64, 32, **meta), far, None, 0.0, BF16, False, None).path == "portable"
    with pytest.raises(pingpong.PingpongError, match="config: the Hopper kernel cannot address"):
        build(torch.empty(64, 32, **meta), far, None, 0.0, BF16, False, KernelConfig(128, 128, 64))


def test_batched_calls_take_the_one_kernel_path_fused_ones_keep_split(hopper):
    """Decode-shaped (M = 16) problems plan swap-AB + split-K; a fused one keeps that plan (its
    reduction applies bias and activation); a batched one takes the one-kernel path."""
    a, w8 = t(16, 8192), t(2048, 8192)
    assert isinstance(build(a, w8.t(), None, 0.0, BF16, False, None), hopper_backend.SplitPlan)
    for bias, act in ((t(2048), "none"), (None, "silu")):
        p = build(a, w8.t(), None, 0.0, BF16, False, None, bias, act)
        assert isinstance(p, hopper_backend.SplitPlan) and p.activation == act
    p = build(t(2, 8, 8192), w8.t(), None, 0.0, BF16, False, None)  # 16 rows in all: decode's swap-AB + split-K
    assert type(p) is hopper_backend.HopperPlan and p.config.split_k == 1 and not p.config.swap_ab
    w = t(2048, 1024)
    assert type(p) is hopper_backend.HopperPlan and p.config.split_k == 1 and not p.config.swap_ab
    with pytest.raises(pingpong.PingpongError, match="config: split_k=2"):
        build(t(2, 16, 1024), w.t(), None, 0.0, BF16, False, KernelConfig(128, 128, 64, split_k=2))
    with pytest.raises(pingpong.PingpongError, match="block_n=192 .two column pieces. runs 2-D products only"):
        build(t(2, 512, 1024), w.t(), None, 0.0, BF16, False, KernelConfig(128, 192, 64))
    assert hopper_backend.one_kernel_config(KernelConfig(128, 192, 64, split_k=2)) == KernelConfig(128, 128, 64)
    pair = KernelConfig(128, 128, 64, schedule="pingpong", cluster_m=2)
    with pytest.raises(pingpong.PingpongError, match="cluster_m=2 .2-CTA clusters. runs 2-D products only"):
        build(t(2, 512, 1024), w.t(), None, 0.0, BF16, False, pair)
    assert hopper_backend.one_kernel_config(pair) == KernelConfig(128, 128, 64, schedule="pingpong")  # a tuned pair, batched
    assert build(t(512, 1024), w.t(), None, 0.0, BF16, False, pair).config.cluster_m == 2
    # 4 × 32 = 128 rows select the mid-size tile, which batched takes as is: two k-steps a slot
    p = build(t(4, 32, 1024), t(4096, 1024).t(), None, 0.0, BF16, False, None)
    assert (p.config.block_m, p.config.schedule, p.config.block_k) == (64, "pingpong", 128)
    assert build(t(512, 1024), w.t(), None, 0.0, BF16, False, KernelConfig(128, 192, 64)).config.block_n == 192


@pytest.mark.parametrize("config, plan, at", [(None, hopper_backend.SplitPlan, 4),
                                              (KernelConfig(128, 16, 64, swap_ab=True), hopper_backend.HopperPlan, 2)])
def test_swap_plans_pass_bias_and_activation_to_the_kernel(hopper, monkeypatch, config, plan, at):
    """A swap-AB launch (the selection's decode tile: the fix-up's pointers; an unsplit cooperative
    one: the staged transposed store's) gets the
    bias pointer, the activation, and the bias's orientation in the kernel's product: under
    swap-AB (M = 16 here) that is Cᵀ, so the caller's per-column bias is per row there.
    `at`: the EpilogueOperands' place among the kernel's arguments."""
    calls = []
    monkeypatch.setattr(hopper_backend.CachedLaunch, "__call__",
                        lambda self, device, ptrs, dyn, prep, *inputs: calls.append((ptrs, prep, inputs)))
    a, w, bias = t(16, 1024), t(2048, 1024), t(2048)
    p = build(a, w.t(), None, 0.0, BF16, False, config, bias, "gelu_tanh")
    assert type(p) is plan and p.config.swap_ab
    p.run(a, w.t(), torch.empty(16, 2048, dtype=BF16), spec.EpilogueArgs(bias=bias))
    ((ptrs, prep, inputs),) = calls
    assert ptrs[at + 2] == bias.data_ptr()  # after A, B (and the split's workspace, counters): out, C, bias
    from pingpong.runtime import compile as cc

    monkeypatch.undo()  # the fixture's stand-in for HopperPlan._jit_args: the plan's own now
    with cc.offline("sm_90a"):
        fn, args, kwargs, grid = p._jit_args(*inputs)
    assert args[at].bias.data_ptr() == bias.data_ptr()  # the epilogue operands (hopper.epilogue.EpilogueOperands)
    assert kwargs["CFG"].EPI.BIAS == "row" and kwargs["CFG"].EPI.ACTIVATION == "gelu_tanh"


@pytest.mark.parametrize("read, inplace, bias", [(False, False, False), (True, False, True), (True, True, False),
                                                 (False, True, True)])
def test_one_launch_passes_what_the_general_path_passes(read, inplace, bias):
    """A Hopper plan without copies launches at once (HopperPlan.one_launch); the addresses,
    scalars and JIT arguments are those of the general path (copies, then the launch)."""
    calls = []
    a, b, out = t(64, 32), t(32, 48), t(64, 48)
    c = out if inplace else t(64, 48)
    args = spec.EpilogueArgs(c, 1.5, 0.5 if read else 0.0, t(48) if bias else None)
    for one in (True, False):
        p = hopper_backend.HopperPlan(0, KernelConfig(128, 128, 64), False, False, False, False, read, sms=132)
        p.launch = lambda device, ptrs, dyn, prepare, *inputs: calls.append((device, ptrs, dyn, prepare.__func__, inputs))
        p.one_launch = one
        p.run(a, b, out, args)
    (*fast, fast_inputs), (*general, general_inputs) = calls
    assert fast == general and len(fast_inputs) == len(general_inputs)
    assert all(x is y for x, y in zip(fast_inputs, general_inputs))
    assert fast[1][3] == (c if read else out).data_ptr()  # C's address where it is read


@pytest.mark.parametrize("make", [lambda: hopper_backend.HopperPlan(0, KernelConfig(128, 128, 64), False, False, False,
                                                                    False, False, sms=132),
                                  lambda: portable.PortablePlan(0, False)], ids=["hopper", "portable"])
@pytest.mark.parametrize("bias", [True, False])
def test_run_ptrs_makes_the_views_only_on_the_jit_path(monkeypatch, make, bias):
    """A launch from base addresses hands the views function and its arguments down; they are
    called only when the launch goes through Triton's JIT, and give the JIT its arguments."""
    p, seen, launches = make(), [], []
    monkeypatch.setattr(type(p), "_jit_args", lambda self, *args: seen.append(args) or "prepared")
    p.launch = lambda device, ptrs, dyn, prepare, *inputs: launches.append((ptrs, dyn, prepare, inputs))
    a, b, out, vec = t(64, 32), t(32, 48), t(64, 48), t(48) if bias else None
    p.run_ptrs(11, 22, 33, 44 if bias else 0, lambda *tensors: tensors, a, b, out, vec)
    [(ptrs, dyn, prepare, inputs)] = launches
    assert ptrs == (11, 22, 33, 33, 44 if bias else 33) and dyn == (1.0, 0.0) and not seen
    assert prepare(*inputs) == "prepared" and seen == [(a, b, out, None, spec.EpilogueArgs(bias=vec))]


# ----------------------------------------------------------------------------- plan
# gemm_'s per-call overlap check on a plan hit covers b as well as a (CPU; the kernel run is
# replaced by a recorder).

@pytest.mark.parametrize("operand", ["a", "b"])
def test_plan_hit_refuses_c_overlapping_an_operand(portable_runs, operand):
    runs = portable_runs
    a, b, c = t(64, 32), t(32, 48), t(64, 48)
    assert pingpong.gemm_(c, a, b, beta=1.0) is c and len(runs) == 1  # builds and caches the plan
    base = t(64 * 48 + 64 * 48)
    c2 = base[: 64 * 48].view(64, 48)
    shared = base[64 * 48 - 16:]  # its first 16 elements are c2's last 16
    a2 = shared[: 64 * 32].view(64, 32) if operand == "a" else a
    b2 = shared[: 32 * 48].view(32, 48) if operand == "b" else b
    before = c2.clone()
    with pytest.raises(pingpong.PingpongError, match=f"share memory with {operand}"):
        pingpong.gemm_(c2, a2, b2, beta=1.0)  # same signature: a plan hit, the fast check
    assert len(runs) == 1 and torch.equal(c2, before)


# ----------------------------------------------------------------------------- cache hits
# Validation on every path (issue 44): a cached plan is only a shortcut for inputs a first call
# validated. For every public op, a refused call is refused again, and still refused after its
# valid twin (the same call but for the fault; where it can, a twin with the same plan-cache key)
# was accepted and cached. CPU tensors: the device checks are lifted and every plan records its
# runs instead of launching (`recorded`).

H, F32 = torch.float16, torch.float32
E4 = torch.float8_e4m3fn


class _Recorded(plan.Plan):
    pointer_launch = False

    def __init__(self, runs):
        self.runs, self.path, self.device, self.activation, self.extents = runs, "recorded", -1, "none", None

    def run(self, *args):
        self.runs.append(args)


@pytest.fixture
def recorded(monkeypatch):
    """Every public op plans and 'runs' CPU tensors: the GPU-only checks lifted, one backend
    whose plans record their runs, quantize_fp8's launch recorded; caches of the test's own."""
    runs = []
    backend = types.SimpleNamespace(NAME="recorded", CONFIGURABLE=True, can_implement=lambda s: None,
                                    plan=lambda s: _Recorded(runs))
    for mod in (spec, grouped):
        monkeypatch.setattr(mod, "check_gpu", lambda *a, **k: None)
    monkeypatch.setattr(fp8, "check_gpu", lambda a, b: None)
    monkeypatch.setattr(fp8_grouped, "check_gpu", lambda device: None)
    monkeypatch.setattr(quantize, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(streaming_api, "interpreter_enabled", lambda: True)
    monkeypatch.setattr(quantize, "launch", lambda *args: runs.append(args))
    monkeypatch.setattr(plan, "BACKENDS", [backend])
    monkeypatch.setattr(plan, "PLANS", collections.OrderedDict())
    monkeypatch.setattr(direct, "LAYERS", collections.OrderedDict())
    return runs


def h(*shape, dtype=H, grad=False):
    return torch.randn(*shape).to(dtype).requires_grad_(grad)


def fp8_operands(m=32, n=32, k=64):
    return torch.randn(m, k).to(E4), torch.randn(n, k).to(E4).t()


def overlapping(shape_c, shape_a):
    """(c, a): a starts inside c's last elements; a disjoint twin of c with c's layout."""
    nc = shape_c[0] * shape_c[1]
    base = h(nc + shape_a[0] * shape_a[1])
    return base[:nc].view(shape_c), base[nc - 8:nc - 8 + shape_a[0] * shape_a[1]].view(shape_a)


def nested():
    return torch.nested.nested_tensor([torch.randn(2, 16), torch.randn(3, 16)]).to(H)


def scaled(scale_a_grad=False, scale_b_grad=False, bias=None, fast=False, a_none=False):
    x, w = fp8_operands()
    one = torch.tensor(1.0)
    sa, sb = one.clone().requires_grad_(scale_a_grad), one.clone().requires_grad_(scale_b_grad)
    return pingpong.scaled_mm(None if a_none else x, w, sa, sb, bias=bias, use_fast_accum=fast)


def scaled_grouped(scale_b_grad=False):
    x = torch.randn(32, 64).to(E4)
    w = torch.randn(2, 32, 64).to(E4).transpose(1, 2)
    sb = torch.ones(2, 32).requires_grad_(scale_b_grad)
    return pingpong.scaled_grouped_mm(x, w, torch.ones(32), sb, torch.tensor([16, 32], dtype=torch.int32))


_LAYER = []


def layer():
    """One Float8Linear for the table (made on first use, under `recorded`)."""
    if not _LAYER:
        _LAYER.append(fp8.Float8Linear(h(32, 64), None))
    return _LAYER[0]


def _gemm_inplace(alias: bool, bias_in_c=False, c_grad=False):
    c, a = overlapping((16, 8), (16, 16))
    if not alias:
        a = h(16, 16)
    if c_grad:
        c = h(16, 8, grad=True)
    return pingpong.gemm_(c, a, h(16, 8), bias=c[0] if bias_in_c else None)


def _path_for_inplace(alias: bool):
    c, a = overlapping((16, 8), (16, 16))
    return pingpong.path_for(a if alias else h(16, 16), h(16, 8), c, beta=1.0, inplace=True)


CACHE_CASES = [
    # (id, the refused call, its valid twin or None, the message)
    ("matmul out_dtype", lambda: pingpong.matmul(h(16, 16), h(16, 8), out_dtype=torch.int8),
     lambda: pingpong.matmul(h(16, 16), h(16, 8), out_dtype=F32), "out_dtype"),
    ("matmul nested", lambda: pingpong.matmul(nested(), h(16, 8)), None, "a: nested tensors"),
    ("gemm activation", lambda: pingpong.gemm(h(16, 16), h(16, 8), activation="tanh"),
     lambda: pingpong.gemm(h(16, 16), h(16, 8), activation="relu"), "activation"),
    ("gemm bias dtype", lambda: pingpong.gemm(h(16, 16), h(16, 8), bias=torch.ones(8, dtype=torch.int64)),
     lambda: pingpong.gemm(h(16, 16), h(16, 8), bias=torch.ones(8)), "bias: dtype"),
    ("gemm beta without c", lambda: pingpong.gemm(h(16, 16), h(16, 8), beta=0.5),
     lambda: pingpong.gemm(h(16, 16), h(16, 8)), "beta: 0.5 scales c, but no c was given"),
    ("gemm c dtype", lambda: pingpong.gemm(h(16, 16), h(16, 8), h(16, 8, dtype=F32), beta=1.0),
     lambda: pingpong.gemm(h(16, 16), h(16, 8), h(16, 8), beta=1.0), "c: expected dtype"),
    ("gemm_ c overlaps a", lambda: _gemm_inplace(True), lambda: _gemm_inplace(False), "share memory with a"),
    ("gemm_ bias inside c", lambda: _gemm_inplace(False, bias_in_c=True), lambda: _gemm_inplace(False),
     "bias must not share memory with c"),
    ("gemm_ c requires grad", lambda: _gemm_inplace(False, c_grad=True), lambda: _gemm_inplace(False),
     "c: requires grad"),
    ("path_for in place c overlaps a", lambda: _path_for_inplace(True), lambda: _path_for_inplace(False),
     "share memory with a"),
    ("path_for inplace not a bool", lambda: pingpong.path_for(h(16, 16), h(16, 8), h(16, 8), inplace="no"),
     lambda: pingpong.path_for(h(16, 16), h(16, 8), h(16, 8), inplace=False), "inplace: expected a bool"),
    ("matmul_tiled config", lambda: pingpong.matmul_tiled(h(16, 16), h(16, 8), pingpong.KernelConfig(block_m=100)),
     lambda: pingpong.matmul_tiled(h(16, 16), h(16, 8), pingpong.KernelConfig()), "multiple of the wgmma M"),
    # equal to the valid twin by value (128.0 == 128, 0 == False): KernelConfig compares types too
    ("matmul_tiled float block_m", lambda: pingpong.matmul_tiled(h(16, 16), h(16, 8), pingpong.KernelConfig(128.0, 128, 64)),
     lambda: pingpong.matmul_tiled(h(16, 16), h(16, 8), pingpong.KernelConfig(128, 128, 64)), "block_m must be a positive int"),
    ("matmul_tiled stream_k 0", lambda: pingpong.matmul_tiled(h(16, 16), h(16, 8), pingpong.KernelConfig(stream_k=0)),
     lambda: pingpong.matmul_tiled(h(16, 16), h(16, 8), pingpong.KernelConfig(stream_k=False)), "stream_k"),
    ("linear bias dtype", lambda: pingpong.linear(h(4, 16), h(8, 16), torch.ones(8, dtype=torch.int64)),
     lambda: pingpong.linear(h(4, 16), h(8, 16), torch.ones(8)), "bias: dtype"),
    ("linear weight nested", lambda: pingpong.linear(h(4, 16), nested()), None, "weight: nested tensors"),
    ("scaled_mm scale_a requires grad", lambda: scaled(scale_a_grad=True), scaled, "scale_a: requires grad"),
    ("scaled_mm scale_b requires grad", lambda: scaled(scale_b_grad=True), scaled, "scale_b: requires grad"),
    ("scaled_mm bias requires grad", lambda: scaled(bias=torch.ones(32, requires_grad=True)),
     lambda: scaled(bias=torch.ones(32)), "bias: requires grad"),
    ("scaled_mm use_fast_accum 1", lambda: scaled(fast=1), lambda: scaled(fast=True), "use_fast_accum"),
    ("scaled_mm a None", lambda: scaled(a_none=True), scaled, "a: expected a torch.Tensor"),
    ("scaled_grouped_mm scale_b requires grad", lambda: scaled_grouped(scale_b_grad=True), scaled_grouped,
     "scale_b: requires grad"),
    ("quantize_fp8 x requires grad", lambda: pingpong.quantize_fp8(h(8, 16, grad=True)),
     lambda: pingpong.quantize_fp8(h(8, 16)), "x: requires grad"),
    ("quantize_fp8 x nested", lambda: pingpong.quantize_fp8(nested()), None, "x: nested tensors"),
    ("grouped_mm offs dtype", lambda: pingpong.grouped_mm(h(32, 16), h(2, 16, 8), torch.tensor([16, 32])),
     lambda: pingpong.grouped_mm(h(32, 16), h(2, 16, 8), torch.tensor([16, 32], dtype=torch.int32)), "offs: dtype"),
    ("grouped_mm offs strided", lambda: pingpong.grouped_mm(h(32, 16), h(2, 16, 8),
                                                            torch.tensor([16, 0, 32, 0], dtype=torch.int32)[::2]),
     lambda: pingpong.grouped_mm(h(32, 16), h(2, 16, 8), torch.tensor([16, 32], dtype=torch.int32)), "offs: must be contiguous"),
    ("grouped_mm a None", lambda: pingpong.grouped_mm(None, h(2, 16, 8), torch.tensor([16, 32], dtype=torch.int32)),
     None, "a: expected a torch.Tensor"),
    # a negated view's memory holds -x: the same key as x's, so only a check on the key's path refuses it
    ("matmul a negated", lambda: pingpong.matmul(torch._neg_view(h(16, 16)), h(16, 8)),
     lambda: pingpong.matmul(h(16, 16), h(16, 8)), "a: a negated view"),
    ("gemm c negated", lambda: pingpong.gemm(h(16, 16), h(16, 8), torch._neg_view(h(16, 8)), beta=1.0),
     lambda: pingpong.gemm(h(16, 16), h(16, 8), h(16, 8), beta=1.0), "c: a negated view"),
    ("gemm bias negated", lambda: pingpong.gemm(h(16, 16), h(16, 8), bias=torch._neg_view(torch.ones(8))),
     lambda: pingpong.gemm(h(16, 16), h(16, 8), bias=torch.ones(8)), "bias: a negated view"),
    ("linear weight negated", lambda: pingpong.linear(h(4, 16), torch._neg_view(h(8, 16))),
     lambda: pingpong.linear(h(4, 16), h(8, 16)), "weight: a negated view"),
    ("grouped_mm b negated", lambda: pingpong.grouped_mm(h(32, 16), torch._neg_view(h(2, 16, 8)),
                                                         torch.tensor([16, 32], dtype=torch.int32)),
     lambda: pingpong.grouped_mm(h(32, 16), h(2, 16, 8), torch.tensor([16, 32], dtype=torch.int32)),
     "b: a negated view"),
    ("quantize_fp8 x negated", lambda: pingpong.quantize_fp8(torch._neg_view(h(8, 16))),
     lambda: pingpong.quantize_fp8(h(8, 16)), "x: a negated view"),
    ("vector_add out overlaps a", lambda: (lambda buf: pingpong.vector_add(buf[:8], h(8), buf[4:]))(h(12)), None,
     "out: partially overlaps a"),
    ("vector_add nested", lambda: pingpong.vector_add(nested(), nested()), None, "a: nested tensors"),
    ("Float8Linear x requires grad", lambda: layer()(h(4, 64, grad=True)), lambda: layer()(h(4, 64)),
     "x: requires grad, but Float8Linear is inference only"),
    ("Float8Linear x None", lambda: layer()(None), None, "x: expected a torch.Tensor"),
]


@pytest.mark.parametrize("name, bad, good, needle", CACHE_CASES, ids=[c[0] for c in CACHE_CASES])
def test_a_refused_call_stays_refused_after_its_valid_twin_is_cached(recorded, name, bad, good, needle):
    with pytest.raises(PingpongError, match=needle):
        bad()
    with pytest.raises(PingpongError, match=needle):  # a refusal cached nothing
        bad()
    if good is not None:
        good()
        assert plan.PLANS or recorded, "the valid twin was planned (and ran)"
        runs = len(recorded)
        with pytest.raises(PingpongError, match=needle):  # the twin's plan is no shortcut for it
            bad()
        assert len(recorded) == runs, "nothing ran for the refused call"


def test_scaled_mm_repeat_keeps_the_gradient_refused_not_dropped(recorded):
    """The issue's case: a plan cached by a valid call; the same call with a scale that requires
    grad must not run (it would return an output without a grad_fn: the gradient dropped)."""
    scaled()
    with pytest.raises(PingpongError, match="scale_a: requires grad"):
        scaled(scale_a_grad=True)
    with torch.no_grad():  # nothing records: accepted
        scaled(scale_a_grad=True)


def _plan_classes() -> list:
    """Every Plan class of the package (each backend imported), subclasses included."""
    import pingpong.amd.backend  # noqa: F401
    import pingpong.hopper.host.fp8_grouped  # noqa: F401
    import pingpong.hopper.host.fp8_launch  # noqa: F401

    found, todo = [], [plan.Plan]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [c for c in found if c.__module__.startswith("pingpong.")]


def test_every_plan_runs_through_one_entry_point():
    """A reader follows any operand from the front end to the launch through one call,
    plan.run(a, b, out, args): every plan takes its epilogue operands (C, α, β, bias, scales,
    offs) as one EpilogueArgs, none positionally, and no plan has an entry of its own."""
    import inspect

    classes = _plan_classes()
    assert {"Fp8Plan", "Fp8GroupedPlan", "HopperPlan", "SplitPlan", "PortablePlan", "AmdPlan", "EmptyPlan",
            "GroupedHopperPlan"} <= {c.__name__ for c in classes}
    for cls in classes:
        params = list(inspect.signature(cls.run).parameters)
        assert params == ["self", "a", "b", "out", "args"], (cls.__name__, params)
        assert not [n for n in vars(cls) if n.startswith("run_") and n != "run_ptrs"], cls.__name__


def test_epilogue_args_reach_the_launch_by_name():
    """The operands of EpilogueArgs reach the launch whichever field they sit in: a scaled
    product's scales and bias and a grouped product's offs, by address, in their slots."""
    from pingpong.hopper.host import fp8_grouped as hfg
    from pingpong.hopper.host import fp8_launch

    calls = []
    E4 = torch.float8_e4m3fn
    a, w, bias = torch.randn(64, 128).to(E4), torch.randn(96, 128).to(E4), torch.randn(96)
    sa, sb = torch.rand(64, 1) + 0.5, torch.rand(1, 96) + 0.5
    p = fp8_launch.Fp8Plan(0, "row", 1, True, KernelConfig(128, 128, 128), "none", sms=132)
    p.launch = lambda device, ptrs, dyn, prepare, *inputs: calls.append(ptrs)
    p.run(a, w.t(), torch.empty(64, 96, dtype=torch.bfloat16), spec.EpilogueArgs(bias=bias, scale_a=sa, scale_b=sb))
    (ptrs,) = calls
    assert ptrs[-3:] == (bias.data_ptr(), sa.data_ptr(), sb.data_ptr())
    G, T = 4, 64
    ga, gw, offs = torch.randn(T, 128).to(E4), torch.randn(G, 96, 128).to(E4), torch.tensor([8, 16, 40, 64],
                                                                                            dtype=torch.int32)
    gsa, gsb = torch.rand(T) + 0.5, torch.rand(G, 96) + 0.5
    gp = hfg.Fp8GroupedPlan(0, True, KernelConfig(128, 128, 128), 132)
    gp.launch = p.launch
    gout = torch.empty(T, 96, dtype=torch.bfloat16)
    gp.run(ga, gw.transpose(1, 2), gout, spec.EpilogueArgs(scale_a=gsa, scale_b=gsb, offs=offs))
    assert calls[1] == (ga.data_ptr(), gw.data_ptr(), gout.data_ptr(), gout.data_ptr(), offs.data_ptr(),
                        gsa.data_ptr(), gsb.data_ptr())
