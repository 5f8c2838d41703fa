"""GPU correctness of the Hopper GEMM (marker `gpu`: skipped with a reason where no Hopper is).

Every check: fresh random inputs (the generator's seed is printed, so a failure shows it),
output poisoned with NaN before the run, compared with a float64 reference by the larger of
‖out − ref‖ / ‖ref‖ and the elementwise max |out − ref| / (|ref| + rms(ref)): a norm bound
alone lets a small wrong block through (NaN never passes either).
"""

import itertools

import pytest
import torch

import pingpong
from closeness import GEMM_BOUND, rel_err
from pingpong import KernelConfig
from pingpong.api import _gemm_into
from pingpong.hopper.host.select import select_config

pytestmark = pytest.mark.gpu

SCHEDULES = {
    "persistent": KernelConfig(128, 256, 64, schedule="persistent"),
    "cooperative": KernelConfig(128, 256, 64, schedule="cooperative"),
    "pingpong": KernelConfig(128, 128, 64, schedule="pingpong"),
    # two column pieces (128 + 64, config.column_pieces) on both warp-specialized schedules
    "cooperative-192": KernelConfig(128, 192, 64, schedule="cooperative"),
    "pingpong-192": KernelConfig(64, 192, 64, schedule="pingpong"),
    "pingpong-96": KernelConfig(64, 96, 64, schedule="pingpong"),  # 64 + 32: select's mid-size tile
    "pingpong-64x32": KernelConfig(64, 32, 64, schedule="pingpong"),  # 12 stages: select's 64-row tile
    "pingpong-64x64": KernelConfig(64, 64, 64, schedule="pingpong"),  # select's 128-row tile at N = 4096
    "pingpong-64x128": KernelConfig(64, 128, 64, schedule="pingpong"),  # select's few-tile tile (1024³)
    # two 64-element k-steps per ring slot (select's small tiles: SMALL_TILE_K_BYTES)
    "pingpong-64x32x128": KernelConfig(64, 32, 128, schedule="pingpong"),
    "pingpong-96x128": KernelConfig(64, 96, 128, schedule="pingpong"),
}
def operand(rows, cols, dtype, col_major, gen):
    """A (rows, cols) tensor, stored row-major or as the transpose of a row-major tensor."""
    if col_major:
        return torch.randn(cols, rows, dtype=torch.float32, device="cuda", generator=gen).to(dtype).t()
    return torch.randn(rows, cols, dtype=torch.float32, device="cuda", generator=gen).to(dtype)


def poisoned(m, n, dtype):
    return torch.full((m, n), float("nan"), dtype=dtype, device="cuda")


def run(a, b, config, out_dtype=None, c=None, alpha=1.0, beta=0.0):
    out = poisoned(a.shape[0], b.shape[1], out_dtype or a.dtype)
    return _gemm_into(out, a, b, c, alpha, beta, config)


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    print(f"generator seed {g.seed()}")  # fresh inputs every run; shown with a failure
    return g


ODD = (1, 17, 255, 1000, 4097)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("m,n,k", list(itertools.product(ODD, ODD, ODD)))
def test_odd_shapes_transpose_b(schedule, m, n, k, gen):
    a = operand(m, k, torch.bfloat16, False, gen)
    b = operand(k, n, torch.bfloat16, True, gen)  # b = w.t(): the headline layout
    out = run(a, b, SCHEDULES[schedule])
    assert rel_err(out, a.double() @ b.double()) < GEMM_BOUND[torch.bfloat16]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("a_col,b_col", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_layouts_and_dtypes(schedule, a_col, b_col, dtype, gen):
    m, n, k = 1000, 1032, 520
    a, b = operand(m, k, dtype, a_col, gen), operand(k, n, dtype, b_col, gen)
    for out_dtype in (dtype, torch.float32):
        out = run(a, b, SCHEDULES[schedule], out_dtype=out_dtype)
        assert out.dtype == out_dtype
        assert rel_err(out, a.double() @ b.double()) < GEMM_BOUND[out_dtype if dtype == torch.bfloat16 else torch.float16]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("out_dtype", (torch.bfloat16, torch.float32))
def test_alpha_beta(schedule, out_dtype, gen):
    m, n, k = 777, 1056, 1000
    a, b = operand(m, k, torch.bfloat16, False, gen), operand(k, n, torch.bfloat16, True, gen)
    c = torch.randn(m, n, device="cuda", generator=gen).to(out_dtype)
    out = run(a, b, SCHEDULES[schedule], out_dtype=out_dtype, c=c, alpha=1.5, beta=-0.75)
    ref = 1.5 * (a.double() @ b.double()) - 0.75 * c.double()
    assert rel_err(out, ref) < GEMM_BOUND[out_dtype if out_dtype == torch.float32 else torch.bfloat16]


EPILOGUES = [KernelConfig(128, 256, 64, schedule="cooperative", epilogue_n=e) for e in (256, 128, 32)] + [
    KernelConfig(128, 128, 64, schedule="pingpong", epilogue_n=e) for e in (128, 16)] + [
    KernelConfig(128, 256, 64, schedule="persistent", epilogue_n=e) for e in (256, 64)] + [
    KernelConfig(128, 192, 64, schedule="cooperative", epilogue_n=e) for e in (64, 32, 16)]


@pytest.mark.parametrize("config", EPILOGUES, ids=lambda c: f"{c.schedule}-{c.block_m}x{c.block_n}-e{c.epilogue_n}")
@pytest.mark.parametrize("out_dtype", (torch.bfloat16, torch.float32))
def test_epilogue_subtiles(config, out_dtype, gen):
    """Sub-tile widths from whole-tile to 16 columns, with β·C, ragged edges in M and N."""
    m, n, k = 1000, 1000, 600
    a, b = operand(m, k, torch.bfloat16, False, gen), operand(k, n, torch.bfloat16, True, gen)
    c = torch.randn(m, n, device="cuda", generator=gen).to(out_dtype)
    out = run(a, b, config, out_dtype=out_dtype, c=c, alpha=0.5, beta=2.0)
    ref = 0.5 * (a.double() @ b.double()) + 2.0 * c.double()
    assert rel_err(out, ref) < GEMM_BOUND[out_dtype if out_dtype == torch.float32 else torch.bfloat16]


def test_public_api_paths(gen):
    m, n, k = 300, 200, 17  # K=17 bf16: 34-byte rows, not TMA-legal -> padded copy
    a, b = operand(m, k, torch.bfloat16, False, gen), operand(k, n, torch.bfloat16, False, gen)
    assert pingpong.path_for(a, b) == "hopper-padded"
    assert rel_err(pingpong.matmul(a, b), a.double() @ b.double()) < 1e-2
    a2, w = operand(512, 256, torch.bfloat16, False, gen), operand(384, 256, torch.bfloat16, False, gen)
    assert pingpong.path_for(a2, w.t()) == "hopper"
    ref = a2.double() @ w.t().double()
    assert rel_err(pingpong.matmul(a2, w.t()), ref) < 1e-2
    c = torch.randn(512, 384, device="cuda", generator=gen).to(torch.bfloat16)
    out = pingpong.gemm(a2, w.t(), c, alpha=2.0, beta=0.5)
    assert rel_err(out, 2.0 * ref + 0.5 * c.double()) < 1e-2
    odd_n = operand(256, 45, torch.bfloat16, False, gen)  # N=45: output computed padded, copied back
    out = pingpong.matmul(a2, odd_n)
    assert out.shape == (512, 45) and out.is_contiguous()
    assert rel_err(out, a2.double() @ odd_n.double()) < 1e-2


def test_gemm_in_place(gen):
    m, n, k = 640, 384, 256
    a, b = operand(m, k, torch.bfloat16, False, gen), operand(k, n, torch.bfloat16, True, gen)
    c = torch.randn(m, n, device="cuda", generator=gen)
    ref = 0.5 * (a.double() @ b.double()) + 2.0 * c.double()
    assert pingpong.gemm_(c, a, b, alpha=0.5, beta=2.0) is c
    assert rel_err(c, ref) < 1e-4 * 50  # fp32 output of bf16 products
    c_t = torch.randn(n, m, device="cuda", generator=gen).t()  # column-major c: temporary + copy
    ref = a.double() @ b.double() + c_t.double()
    pingpong.gemm_(c_t, a, b, beta=1.0)
    assert rel_err(c_t, ref) < 5e-3
    poisoned_c = poisoned(m, n, torch.float32)  # beta = 0: c must not be read
    pingpong.gemm_(poisoned_c, a, b)
    assert rel_err(poisoned_c, a.double() @ b.double()) < 5e-3


def test_empty_and_k_zero():
    a = torch.randn(0, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)
    assert pingpong.matmul(a, b).shape == (0, 32)
    a0 = torch.randn(8, 0, device="cuda", dtype=torch.bfloat16)
    b0 = torch.randn(0, 16, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(pingpong.matmul(a0, b0), torch.zeros(8, 16, device="cuda", dtype=torch.bfloat16))
    c = torch.randn(8, 16, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(pingpong.gemm(a0, b0, c, beta=2.0), (c.float() * 2.0).to(torch.bfloat16))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_layout_probe(schedule):
    """Layout probe: exact products with recognisable structure catch transposes and
    lane/row mapping errors that a norm bound could blur."""
    m = n = k = 320  # not a tile multiple
    i = torch.arange(m, device="cuda").view(-1, 1)
    j = torch.arange(k, device="cuda").view(1, -1)
    pattern = ((i * 7 + j * 3) % 17 - 8).float()  # small integers: exact in bf16 and in fp32 sums
    eye = torch.eye(k, device="cuda")
    for a, b, expect in ((pattern, eye, pattern), (eye, pattern, pattern)):
        for b_col in (False, True):
            bb = b.to(torch.bfloat16)
            bb = bb.t().contiguous().t() if b_col else bb
            out = run(a.to(torch.bfloat16), bb, SCHEDULES[schedule], out_dtype=torch.float32)
            bad = (out != expect).nonzero()
            assert bad.numel() == 0, f"first wrong element at {bad[0].tolist()}: {out[tuple(bad[0])]} vs {expect[tuple(bad[0])]}"
    rowcol = (i * 1000 + torch.arange(n, device="cuda").view(1, -1)).float()  # C[i,j] = 1000 i + j
    ones_k = torch.zeros(m, 16, device="cuda")
    ones_k[:, 0] = 1
    sel = torch.zeros(16, n, device="cuda")
    sel[0] = 1
    out = run(ones_k.to(torch.bfloat16), sel.to(torch.bfloat16), SCHEDULES[schedule], out_dtype=torch.float32,
              c=rowcol, beta=1.0)
    assert torch.equal(out, rowcol + 1), "β·C epilogue misplaces elements"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_repeatable_bitwise(schedule, gen):
    """A race shows as a moving result: 20 runs on the same inputs must agree bitwise."""
    a = operand(4096, 4096, torch.bfloat16, False, gen)
    b = operand(4096, 4096, torch.bfloat16, True, gen)
    first = run(a, b, SCHEDULES[schedule])
    for _ in range(19):
        assert torch.equal(run(a, b, SCHEDULES[schedule]), first)


CLAMPED = {name: SCHEDULES[name] for name in ("cooperative", "persistent", "pingpong-96", "cooperative-192")} | {
    # 16-bit split-K: the last row only; two tiles' partials of the rows they share go to the
    # same workspace rows, and each tile half's arrival counter is its first row's
    "cooperative-k3": KernelConfig(128, 128, 64, schedule="cooperative", split_k=3),
    "pingpong-64x64-k2": KernelConfig(64, 64, 64, schedule="pingpong", split_k=2),
    "swap-k2": KernelConfig(128, 64, 64, schedule="cooperative", split_k=2, swap_ab=True),  # N on rows (712: moved)
}


@pytest.mark.parametrize("schedule", CLAMPED)
@pytest.mark.parametrize("M", [90, 406, 448, 320])  # 320 rows: a 128-row tile moved by half a tile, then 16 less
def test_clamped_last_row_of_tiles(schedule, M, gen):
    """The data-parallel kernels move their last row (column) of tiles back to end at row M
    (column N; scheduler.tile_offset), and the 16-bit split-K kernels their last row, so rows
    of the row of tiles before it are computed and stored twice: both times the same. The
    M × N product is bitwise the first M × N of the same product with A and B padded to whole
    tiles (where no tile moves), close to float64, and 20 runs agree bitwise. An epilogue that
    reads C does not move its tiles (it may read C in place, as here: a row stored before its
    second read would add β·C twice)."""
    config = CLAMPED[schedule]
    K, N = 1024, 712  # N: 200, 40 and 136 columns past the last whole 256-, 96- and 192-wide tile
    padded = operand(-(-M // 256) * 256, K, torch.bfloat16, False, gen)
    padded_b = operand(K, 768, torch.bfloat16, True, gen)
    a, b = padded[:M], padded_b[:, :N]
    whole = run(padded, padded_b, config)[:M, :N]
    out = run(a, b, config)
    assert rel_err(out, a.double() @ b.double()) < GEMM_BOUND[torch.bfloat16]
    assert torch.equal(out, whole), "a row computed by two tiles differs from the unmoved tile's"
    for _ in range(19):
        assert torch.equal(run(a, b, config), out)
    c = torch.randn(M, N, device="cuda", generator=gen).bfloat16()  # β·C in place: no tile moves
    want = a.double() @ b.double() + c.double()
    _gemm_into(c, a, b, c, 1.0, 1.0, config)
    assert rel_err(c, want) < GEMM_BOUND[torch.bfloat16]


@pytest.mark.parametrize("M, config", [
    (32, None),  # the decode rule's swap-AB ping-pong: a few CTAs, the next kernel's fit beside them
    (32, KernelConfig(128, 64, 64, split_k=4)),  # split-K: the workspace and its arrival counters
    (1000, None),  # the rule's tile over most SMs
    (1000, KernelConfig(128, 128, 64, stream_k=True)),  # stream-K: every tile shared by two programs
])
def test_back_to_back_kernels_wait_for_the_one_before(M, config, gen):
    """Programmatic dependent launch (launch_options, kernel_start): a chain of products on one
    stream, each reading the one before's result (read after write) and writing the buffer the
    one before read (write after read), eagerly and replayed from a CUDA graph, is bitwise the
    same chain with a synchronize after every product. A kernel that touched memory before its
    griddepcontrol.wait would start beside the one before and read its stale or NaN result."""
    K = 1024
    ws = [operand(K, K, torch.bfloat16, False, gen) / K**0.5 for _ in range(8)]
    x = operand(M, K, torch.bfloat16, False, gen)
    bufs = [poisoned(M, K, torch.bfloat16), poisoned(M, K, torch.bfloat16)]

    def chain(sync):
        bufs[0].copy_(x)
        bufs[1].fill_(float("nan"))
        for i, w in enumerate(ws):
            _gemm_into(bufs[(i + 1) % 2], bufs[i % 2], w.t(), None, 1.0, 0.0, config)
            if sync:
                torch.cuda.synchronize()
        return bufs[len(ws) % 2].clone()

    want = chain(sync=True)
    ref = x.double()
    for w in ws:
        ref = ref @ w.double().t()
    assert rel_err(want, ref) < 8 * GEMM_BOUND[torch.bfloat16]  # eight bf16 roundings along the chain
    for i in range(3):
        assert torch.equal(chain(sync=False), want), ("eager", i)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        chain(sync=False)  # warm-up off the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain(sync=False)
    for i in range(3):
        bufs[0].fill_(float("nan"))
        graph.replay()
        assert torch.equal(bufs[len(ws) % 2], want), ("graph", i)


@pytest.mark.parametrize("m", (1, 17, 33, 77, 127))
@pytest.mark.parametrize("a_col,b_col", list(itertools.product((False, True), repeat=2)))
def test_launch_bound_selection(m, a_col, b_col, gen):
    """The selection's launch-bound tiles (decode's swap-AB 64×16/32, the mid-size 64×32/64 ping-pong),
    unsplit: ragged M, N and K, every layout, α and β·C."""
    n, k = 1000, 600
    config = select_config(m, n, k, device=torch.cuda.current_device())
    assert config.block_m == 64 and config.split_k == 1, config  # the tiles this test is for
    a, b = operand(m, k, torch.bfloat16, a_col, gen), operand(k, n, torch.bfloat16, b_col, gen)
    c = torch.randn(m, n, device="cuda", generator=gen).to(torch.bfloat16)
    out = run(a, b, None, c=c, alpha=0.5, beta=2.0)
    assert rel_err(out, 0.5 * (a.double() @ b.double()) + 2.0 * c.double()) < GEMM_BOUND[torch.bfloat16]
