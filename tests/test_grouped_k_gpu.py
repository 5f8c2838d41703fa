"""GPU: the Hopper ragged-K kernel (pingpong.hopper.kernels.grouped_k, the MoE weight gradient)
against a float64 per-group reference (norm and elementwise bounds, outputs poisoned with NaN
first): K ranges of 0, 1, 17, 255 and 1000 rows (and reversed) on every tile config, every
operand layout the backward produces, rows outside every group holding NaN (they must never
be read), fp16 in / fp32 out with 256 groups, graph capture with offsets changed between
replays, bitwise repeatability, and the gradients that take this path."""


import pytest
import torch

import pingpong
from fused_reference import check, matrix, new_seed, poisoned, offsets as group_ends
from pingpong import KernelConfig
from pingpong import grouped as gm
from pingpong.hopper.host import grouped_k as hk
from pingpong.portable import grouped as portable_grouped
from pingpong.runtime import plan as plan_mod

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
SIZES = [0, 1, 17, 255, 1000]
CONFIGS = {
    "cooperative_128x256": KernelConfig(128, 256, 64, schedule="cooperative"),
    "cooperative_128x128": KernelConfig(128, 128, 64, schedule="cooperative"),
    "pingpong_128x128": KernelConfig(128, 128, 64, schedule="pingpong"),
    "pingpong_64x256": KernelConfig(64, 256, 64, schedule="pingpong"),
}


def offsets(sizes):
    return group_ends(sizes, "cuda")


@pytest.fixture
def hopper_only(monkeypatch):
    """Ragged-K products must run on the Hopper kernel: any portable call fails the test."""

    def refuse(*args, **kw):
        raise AssertionError("the grouped product fell back to the portable kernel")

    monkeypatch.setattr(portable_grouped, "grouped", refuse)


def use_config(monkeypatch, name):
    monkeypatch.setattr(hk, "select_ragged_k_config", lambda M, N, T, G: CONFIGS[name])
    monkeypatch.setattr(plan_mod, "PLANS", type(plan_mod.PLANS)())  # a plan keeps the tile it was planned with


def operands(T, M, N, a_t, b_t, gen, dtype=BF16, tail_nan=0):
    """a (M, T): x.t() of row-major tokens x (T, M) (a_t, the backward's) or row-major (T
    contiguous); b (T, N): row-major (the backward's dY) or the view of a (N, T) row-major
    (T contiguous). The last `tail_nan` rows of T (in no group) hold NaN."""
    x = matrix((), T, M, dtype, not a_t, gen, "cuda")  # x (T, M)
    y = matrix((), T, N, dtype, b_t, gen, "cuda")
    if tail_nan:
        x[T - tail_nan:] = float("nan")
        y[T - tail_nan:] = float("nan")
    return x.t(), y


def check_groups(out, a, b, offs, seed):
    ends = offs.tolist()
    for g, (s, e) in enumerate(zip([0] + ends[:-1], ends)):
        if e > s:
            check(out[g], a[:, s:e].double() @ b[s:e].double(), e - s, seed)
        else:
            assert (out[g] == 0).all(), f"empty group {g} must give zeros (seed {seed})"


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("a_t,b_t", [(True, False), (False, False), (True, True), (False, True)])
@pytest.mark.parametrize("order", ["up", "down"])
def test_ragged_k_every_layout(monkeypatch, hopper_only, config, a_t, b_t, order):
    """K ranges of 0, 1, 17, 255, 1000 rows (or reversed: the last group empty), 7 rows of NaN
    past the last end; M, N not tile multiples; every storage order of a and b."""
    use_config(monkeypatch, config)
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sizes = SIZES[::-1] if order == "down" else SIZES
    T, M, N = sum(sizes) + 7, 136, 328
    a, b = operands(T, M, N, a_t, b_t, gen, tail_nan=7)
    offs = offsets(sizes)
    out = gm._compute(a, b, offs, BF16, out=poisoned((len(sizes), M, N), BF16, "cuda"))
    check_groups(out, a, b, offs, seed)


@pytest.mark.parametrize("config", CONFIGS)
def test_many_groups_fp16_and_fp32_out(monkeypatch, hopper_only, config):
    """256 groups (DeepSeek-V3's experts), random sizes with empty ones, fp16 in, fp32 out."""
    use_config(monkeypatch, config)
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sizes = (torch.randint(0, 90, (256,), generator=gen, device="cuda")
             * (torch.rand(256, generator=gen, device="cuda") > 0.2)).tolist()
    T, M, N = sum(sizes), 192, 264
    a, b = operands(T, M, N, True, False, gen, torch.float16)
    offs = offsets(sizes)
    out = gm._compute(a, b, offs, torch.float32, out=poisoned((256, M, N), torch.float32, "cuda"))
    check_groups(out, a, b, offs, seed)


def test_bad_offsets_stay_inside(hopper_only):
    """An end past T is clipped to T, a decreasing end is an empty group (device data, no sync)."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    T, M, N = 300, 128, 256
    a, b = operands(T, M, N, True, False, gen)
    offs = torch.tensor([100, 50, 250, 10**6], dtype=torch.int32, device="cuda")
    out = gm._compute(a, b, offs, BF16, out=poisoned((4, M, N), BF16, "cuda"))
    check(out[0], a[:, :100].double() @ b[:100].double(), 100, seed)
    assert (out[1] == 0).all()
    check(out[2], a[:, 50:250].double() @ b[50:250].double(), 200, seed)
    check(out[3], a[:, 250:].double() @ b[250:].double(), 50, seed)


def test_graph_capture_with_offsets_changed_between_replays(hopper_only):
    """One capture, replays with other K ranges written into the same offs tensor (all empty
    included): the kernel reads them on the device each time."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    T, M, N = 1300, 256, 512
    a, b = operands(T, M, N, True, False, gen)
    offs = offsets(SIZES[::-1])
    pingpong.grouped_mm(a, b, offs)  # compile and bind outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pingpong.grouped_mm(a, b, offs)
    for sizes in (SIZES, [300, 0, 0, 1000, 0], [0, 0, 1, 1, 1298], [0, 0, 0, 0, 0]):
        offs.copy_(offsets(sizes))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_groups(out, a, b, offs, seed)


@pytest.mark.parametrize("config", CONFIGS)
def test_bitwise_repeatable(monkeypatch, hopper_only, config):
    use_config(monkeypatch, config)
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, b = operands(sum(SIZES), 512, 768, True, False, gen)
    offs = offsets(SIZES)
    first = pingpong.grouped_mm(a, b, offs)
    for _ in range(3):
        assert torch.equal(pingpong.grouped_mm(a, b, offs), first), f"seed {seed}"


def test_gradients_columns_ragged_k_input_gradient(hopper_only):
    """3-D × 2-D (offs along N): dA = grouped(dY, bᵀ) is ragged K with both operands' T
    contiguous (copied for the kernel)."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sizes = [17, 0, 255, 1000, 1]
    G, M, K = len(sizes), 136, 200
    Ntot = sum(sizes) + 7  # 1280: out.t() rows are 16-byte multiples (TMA-legal)
    a = matrix((G,), M, K, BF16, False, gen, "cuda").requires_grad_()
    b = matrix((), K, Ntot, BF16, False, gen, "cuda").requires_grad_()
    offs = offsets(sizes)
    out = pingpong.grouped_mm(a, b, offs)
    g = torch.randn(out.shape, generator=gen, device="cuda").to(BF16)
    g[:, sum(sizes):] = 0
    (da,) = torch.autograd.grad(out, (a,), g)
    ends = offs.tolist()
    for grp, (s, e) in enumerate(zip([0] + ends[:-1], ends)):
        if e > s:
            check(da[grp], g[:, s:e].double() @ b[:, s:e].double().t(), e - s, seed)
        else:
            assert (da[grp] == 0).all()
