"""GPU: grouped_mm against a float64 per-group reference (norm and elementwise bounds,
outputs poisoned with NaN first): ragged groups of 0, 1, 17, 255 and 1000 rows on every
tile config of the Hopper grouped kernel, every storage order of a and b, the transposed
(3-D × 2-D) and ragged-K products, 256 groups, graph capture with offsets changed between
replays, bitwise repeatability, and the gradients."""


import pytest
import torch

import pingpong
from fused_reference import check, matrix, new_seed, poisoned, offsets as group_ends
from pingpong import KernelConfig
from pingpong import grouped as gm
from pingpong.portable import grouped as portable_grouped
from pingpong.runtime import plan as plan_mod
from pingpong.hopper.host import grouped as hg

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
SIZES = [0, 1, 17, 255, 1000]
CONFIGS = {
    "cooperative_128x256": KernelConfig(128, 256, 64, schedule="cooperative"),
    "cooperative_128x128": KernelConfig(128, 128, 64, schedule="cooperative"),
    "pingpong_64x128": KernelConfig(64, 128, 64, schedule="pingpong"),
}


def offsets(sizes):
    return group_ends(sizes, "cuda")


def reference(a, b, offs, mode):
    a, b = a.double(), b.double()
    ends = offs.tolist()
    starts = [0] + ends[:-1]
    if mode == gm.ROWS:
        return [(slice(s, e), a[s:e] @ b[g]) for g, (s, e) in enumerate(zip(starts, ends))]
    if mode == gm.COLS:
        return [((slice(None), slice(s, e)), a[g] @ b[:, s:e]) for g, (s, e) in enumerate(zip(starts, ends))]
    return [(g, a[:, s:e] @ b[s:e]) for g, (s, e) in enumerate(zip(starts, ends))]


def check_groups(out, a, b, offs, mode, k, seed):
    for where, want in reference(a, b, offs, mode):
        if want.numel():
            check(out[where], want, k, seed)


@pytest.fixture
def hopper_only(monkeypatch):
    """Ragged rows must run on the Hopper kernel: the portable fallback fails the test."""
    original = portable_grouped.grouped

    def only_ragged_k(*args, ragged_k, **kw):
        assert ragged_k, "ragged rows fell back to the portable kernel"
        return original(*args, ragged_k=ragged_k, **kw)

    monkeypatch.setattr(portable_grouped, "grouped", only_ragged_k)


def use_config(monkeypatch, name):
    monkeypatch.setattr(hg, "select_grouped_config", lambda T, G, N: CONFIGS[name])
    monkeypatch.setattr(plan_mod, "PLANS", type(plan_mod.PLANS)())  # a plan keeps the tile it was planned with


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("a_t,b_t", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("order", ["up", "down"])
def test_ragged_rows_every_layout(monkeypatch, hopper_only, config, a_t, b_t, order):
    """2-D × 3-D: groups of 0, 1, 17, 255, 1000 rows (or the reverse: the last group empty;
    + 7 rows past the last end, left unwritten); a row-major or a transposed view (copied to
    K-major for the kernel); b (G, K, N) row-major or the transposed view of (G, N, K)."""
    use_config(monkeypatch, config)
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sizes = SIZES[::-1] if order == "down" else SIZES
    T, K, N, G = sum(sizes) + 7, 264, 1000, len(sizes)
    a = matrix((), T, K, BF16, a_t, gen, "cuda")
    b = matrix((G,), K, N, BF16, b_t, gen, "cuda")
    offs = offsets(sizes)
    out = gm._compute(a, b, offs, BF16, out=poisoned((T, N), BF16, "cuda"))
    check_groups(out, a, b, offs, gm.ROWS, K, seed)
    assert out[sum(sizes):].isnan().all(), "rows past the last end are not written"


@pytest.mark.parametrize("config", CONFIGS)
def test_ragged_columns_transposed_store(monkeypatch, hopper_only, config):
    """3-D × 2-D (offs along N): the 2-D × 3-D kernel on transposed views, out written transposed."""
    use_config(monkeypatch, config)
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    Ntot, K, M, G = sum(SIZES) + 7, 200, 304, len(SIZES)  # 16-byte rows of out.t(); 7 columns past the end
    a = matrix((G,), M, K, BF16, False, gen, "cuda")
    b = matrix((), K, Ntot, BF16, False, gen, "cuda")
    offs = offsets(SIZES)
    out = gm._compute(a, b, offs, BF16, out=poisoned((M, Ntot), BF16, "cuda"))
    check_groups(out, a, b, offs, gm.COLS, K, seed)


@pytest.mark.parametrize("a_t", [False, True])
def test_ragged_k(a_t):
    """2-D × 2-D (weight gradients): K ranges of 0, 1, 17, 255, 1000; an empty one gives zeros."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    Kt, M, N = sum(SIZES) + 5, 130, 300
    a = matrix((), M, Kt, BF16, a_t, gen, "cuda")
    b = matrix((), Kt, N, BF16, not a_t, gen, "cuda")
    offs = offsets(SIZES)
    out = gm._compute(a, b, offs, BF16, out=poisoned((len(SIZES), M, N), BF16, "cuda"))
    check_groups(out, a, b, offs, gm.RAGGED_K, 1000, seed)
    assert (out[0] == 0).all()


def test_many_groups_fp16_and_fp32_out(hopper_only):
    """256 groups (DeepSeek-V3's experts), random sizes with empty ones, fp16 in, fp32 out."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sizes = torch.randint(0, 40, (256,), generator=gen, device="cuda") * (torch.rand(256, generator=gen,
                                                                                         device="cuda") > 0.2)
    sizes = sizes.tolist()
    T, K, N = sum(sizes), 256, 384
    a = matrix((), T, K, torch.float16, False, gen, "cuda")
    b = matrix((256,), K, N, torch.float16, True, gen, "cuda")
    offs = offsets(sizes)
    out = gm._compute(a, b, offs, torch.float32, out=poisoned((T, N), torch.float32, "cuda"))
    check_groups(out, a, b, offs, gm.ROWS, K, seed)


def test_batched_3d_3d():
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = matrix((4,), 100, 64, BF16, False, gen, "cuda")
    b = matrix((4,), 64, 72, BF16, True, gen, "cuda")
    check(pingpong.grouped_mm(a, b), a.double() @ b.double(), 64, seed)


def test_graph_capture_with_offsets_changed_between_replays(hopper_only):
    """One capture, three replays with other group sizes written into the same offs tensor:
    the kernel reads them on the device each time (no host sync was captured)."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    T, K, N, G = 1300, 256, 512, 5
    a = matrix((), T, K, BF16, False, gen, "cuda")
    b = matrix((G,), K, N, BF16, True, gen, "cuda")
    offs = offsets(SIZES[::-1])
    pingpong.grouped_mm(a, b, offs)  # compile and bind outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pingpong.grouped_mm(a, b, offs)
    for sizes in (SIZES, [300, 0, 0, 1000, 0], [0, 0, 1, 1, 1298]):
        offs.copy_(offsets(sizes))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_groups(out, a, b, offs, gm.ROWS, K, seed)


def test_bitwise_repeatable():
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = matrix((), sum(SIZES), 512, BF16, False, gen, "cuda")
    b = matrix((5,), 512, 768, BF16, True, gen, "cuda")
    offs = offsets(SIZES)
    first = pingpong.grouped_mm(a, b, offs)
    for _ in range(3):
        assert torch.equal(pingpong.grouped_mm(a, b, offs), first), f"seed {seed}"
    g = pingpong.grouped_mm(a.t(), first, offs)  # ragged K
    assert torch.equal(pingpong.grouped_mm(a.t(), first, offs), g)


def test_gradients_rows():
    """The MoE forward's autograd: dA = grouped(dY, bᵀ) (tail zeroed), dB = grouped(aᵀ, dY) (ragged K;
    on Hopper the ragged-K kernel), against float64 autograd; the empty expert's dW is zero."""
    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sizes = [0, 17, 255, 1000, 1]
    T, K, N = sum(sizes) + 3, 192, 320
    a = matrix((), T, K, BF16, False, gen, "cuda").requires_grad_()
    w = matrix((5,), N, K, BF16, False, gen, "cuda").requires_grad_()
    offs = offsets(sizes)
    out = pingpong.grouped_mm(a, w.transpose(1, 2), offs)
    g = torch.randn(out.shape, generator=gen, device="cuda").to(BF16)
    g[sum(sizes):] = 0
    da, dw = torch.autograd.grad(out, (a, w), g)
    a64, w64 = a.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = torch.zeros(T, N, dtype=torch.float64, device="cuda")
    for grp, (s, e) in enumerate(zip([0] + offs.tolist()[:-1], offs.tolist())):
        ref[s:e] = a64[s:e] @ w64[grp].t()
    ra, rw = torch.autograd.grad(ref, (a64, w64), g.double())
    check(da, ra, N, seed)
    check(dw, rw, max(sizes), seed)
    assert (dw[0] == 0).all(), "the empty expert's gradient is zero"


def test_compiled_forward_and_gradients_equal_eager(hopper_only):
    """torch.compile (inductor, fullgraph): the forward and both gradient products are direct
    calls of the plans (pingpong.integration.inductor, counted), bitwise the eager results; the rows past
    offs[-1] (unset in the forward) are left out of the comparison and the gradient."""
    from pingpong.integration import inductor

    seed = new_seed()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    total = sum(SIZES)
    a = matrix((), total + 8, 512, BF16, False, gen, "cuda").requires_grad_()
    b = matrix((5,), 512, 768, BF16, True, gen, "cuda").requires_grad_()
    offs = offsets(SIZES)
    g = torch.randn(total + 8, 768, generator=gen, device="cuda").to(BF16)
    g[total:] = 0

    def step(a, b):
        return pingpong.grouped_mm(a, b, offs)

    want = step(a, b)
    want_grads = torch.autograd.grad(want, (a, b), g)
    torch._dynamo.reset()
    inductor.CALLS.clear()
    got = torch.compile(step, fullgraph=True)(a, b)
    got_grads = torch.autograd.grad(got, (a, b), g)
    torch._dynamo.reset()
    assert torch.equal(got[:total], want[:total]), f"seed {seed}"
    for name, gg, ww in zip("ab", got_grads, want_grads):
        assert torch.equal(gg, ww), f"seed {seed}: d{name}"
    assert dict(inductor.CALLS) == {"grouped_mm": 3}, (seed, dict(inductor.CALLS))
