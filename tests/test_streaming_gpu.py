"""GPU tests of pingpong.vector_add on Hopper (marker `gpu`: skipped with a reason elsewhere).

Every check: random inputs, output poisoned with NaN before the run, result compared with
torch.add bitwise (torch.equal). Run: python -m pytest -q -m gpu tests/test_streaming_gpu.py
"""

import pytest
import torch

from pingpong.errors import PingpongError
from pingpong.streaming import hopper, vector_add
from pingpong.runtime.device import sm_count
from pingpong.streaming.api import TMA_MIN_ELEMENTS, kernel_path

pytestmark = pytest.mark.gpu

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ODD_LENGTHS = (1, 255, 4097, 2**20 + 3)


def rand(shape, dtype, device="cuda"):
    return torch.randn(shape, device=device, dtype=torch.float32).to(dtype)


def poisoned(like):
    return torch.full_like(like, float("nan"))


def tma_add(a, b, out=None):
    """The Hopper TMA kernel with its default config (what vector_add runs for large n),
    through hopper.launch: its first call JIT-compiles, later ones launch directly."""
    out = torch.empty_like(a) if out is None else out
    hopper.launch(a, b, out, sm_count(torch.cuda.current_device()), hopper.DEFAULT)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ODD_LENGTHS)
def test_odd_lengths_bitwise(n, dtype):
    """Through the API (small n: the portable kernel) and through the TMA kernel directly."""
    a, b = rand(n, dtype), rand(n, dtype)
    out = poisoned(a)
    assert kernel_path(a, b, out) == "portable"  # n < TMA_MIN_ELEMENTS
    assert vector_add(a, b, out) is out
    assert torch.equal(out, torch.add(a, b))
    out = poisoned(a)
    hopper.launch(a, b, out, sm_count(torch.cuda.current_device()), hopper.DEFAULT)
    assert torch.equal(out, torch.add(a, b))


def test_large_sizes_take_the_tma_kernel():
    n = TMA_MIN_ELEMENTS + 5
    a, b = rand(n, torch.float32), rand(n, torch.float32)
    out = poisoned(a)
    assert kernel_path(a, b, out) == "hopper-tma"
    vector_add(a, b, out)
    assert torch.equal(out, torch.add(a, b))
    assert kernel_path(a[: TMA_MIN_ELEMENTS - 1], b[: TMA_MIN_ELEMENTS - 1]) == "portable"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 5, 7), (64, 1024), (2, 3, 4097)])
def test_shapes_and_fresh_output(shape, dtype):
    a, b = rand(shape, dtype), rand(shape, dtype)
    out = vector_add(a, b)
    assert out.shape == a.shape and out.dtype == dtype
    assert torch.equal(out, torch.add(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_many_steps_per_program(dtype):
    """Long grid-stride loops (the persistent config): every slot parity flips many times; a tail."""
    sms = sm_count(torch.cuda.current_device())
    n = 64 * sms * hopper.PERSISTENT.block(torch.empty((), dtype=dtype).element_size()) + 5
    a, b = rand(n, dtype), rand(n, dtype)
    out = poisoned(a)
    hopper.launch(a, b, out, sms, hopper.PERSISTENT)
    assert torch.equal(out, torch.add(a, b))


@pytest.mark.parametrize("which", ["a", "b", "both"])
def test_out_aliases_input(which):
    n = 2**20 + 3
    a, b = rand(n, torch.float32), rand(n, torch.float32)
    if which == "both":
        b = a
    expect = torch.add(a, b)
    out = a if which in ("a", "both") else b
    vector_add(a, b, out)
    assert torch.equal(out, expect)


CONFIGS = {**hopper.CANDIDATES, "small": hopper.StreamConfig(tile_bytes=4 * 1024), "two-slot-ring": hopper.StreamConfig(stages=2),
           "32KB-2-stages": hopper.StreamConfig(tile_bytes=32 * 1024, stages=2)}


ODD, ROWS = 3 * 2**20 + 7, 3 * 2**20 + 3 * 256  # ROWS: n % 256 == 0, a partial last tile (the 2-D view)


@pytest.mark.parametrize("dtype, n", [(torch.float32, ODD), (torch.float32, ROWS), (torch.bfloat16, ROWS),
                                      (torch.float16, ODD)], ids=["fp32-odd", "fp32-rows", "bf16-rows", "fp16-odd"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_config(name, dtype, n):
    """Every candidate config, its first call (JIT) and the next ones (direct launch)."""
    cfg = CONFIGS[name]
    a, b = rand(n, dtype), rand(n, dtype)
    expect = torch.add(a, b)
    for _ in range(3):
        out = poisoned(a)
        hopper.launch(a, b, out, sm_count(torch.cuda.current_device()), cfg)
        assert torch.equal(out, expect)


def test_direct_launch_on_new_tensors_and_streams():
    """Later calls run from cached plans and tensor maps: new tensors of the same length (new
    addresses), the same tensors again, and a side stream all give torch.add's bits."""
    n = 2**20 + 16
    for _ in range(3):
        a, b = rand(n, torch.float32), rand(n, torch.float32)
        assert torch.equal(tma_add(a, b), torch.add(a, b))
    side = torch.cuda.Stream()
    a, b = rand(n, torch.float32), rand(n, torch.float32)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        out = tma_add(a, b)
    side.synchronize()
    assert torch.equal(out, torch.add(a, b))


def test_launch_hook_sees_every_launch():
    from triton import knobs

    seen = []
    hook = lambda metadata: seen.append(metadata)  # noqa: E731
    a, b = rand(4096 * 200, torch.float32), rand(4096 * 200, torch.float32)
    tma_add(a, b)  # compiled and planned
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        out = tma_add(a, b)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert torch.equal(out, torch.add(a, b)) and len(seen) == 1


def test_cuda_graph_capture():
    a, b = rand(2**20, torch.float32), rand(2**20, torch.float32)
    out = poisoned(a)
    tma_add(a, b, out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tma_add(a, b, out)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, torch.add(a, b))


def test_unaligned_views_take_the_portable_path():
    base = rand(4097 + 1, torch.float32)
    a = base[1:]  # 4 bytes past a 16-byte boundary: no TMA
    b = rand(4097, torch.float32)
    out = poisoned(b)
    assert kernel_path(a, b, out) == "portable"
    vector_add(a, b, out)
    assert torch.equal(out, torch.add(a, b))


def test_empty():
    a = torch.empty(0, device="cuda")
    assert vector_add(a, a).numel() == 0


# --------------------------------------------------------------------------- bad input: clear error, nothing written


def _expect_error(match, a, b, out):
    before = out.clone()
    with pytest.raises(PingpongError, match=match):
        vector_add(a, b, out)
    torch.cuda.synchronize()
    assert torch.equal(out.isnan(), before.isnan()), "out was written despite the error"


def test_bad_input():
    a = rand(4096, torch.float32)
    out = poisoned(a)
    _expect_error(r"^b: shape", a, rand(4095, torch.float32), out)
    _expect_error(r"^b: dtype", a, rand(4096, torch.float16), out)
    _expect_error(r"^b: on device cpu", a, torch.randn(4096), out)
    _expect_error(r"^b: must be contiguous", a, rand(8192, torch.float32)[::2], out)
    _expect_error(r"^out: dtype", a, rand(4096, torch.float32), poisoned(a).half())
    cpu_out = torch.full((4096,), float("nan"))
    _expect_error(r"^out: on device cpu", a, rand(4096, torch.float32), cpu_out)
    with pytest.raises(PingpongError, match="^a: is a CPU tensor"):
        vector_add(torch.randn(8), torch.randn(8))


def test_bench_rows():
    from pingpong.tools.bench_streaming import format_table, run_vector_add_bench

    rows = run_vector_add_bench([2**20], torch.float32, reps=10)
    assert rows[0]["correct"] and rows[0]["path"] == "portable"  # 2**20 < TMA_MIN_ELEMENTS
    assert rows[0]["gbps_ours"] > 0 and rows[0]["gbps_copy"] > 0
    print(format_table(rows))


def test_sweep_rows():
    from pingpong.tools.bench_streaming import format_sweep, run_stream_sweep

    cfgs = {"tile-2k": hopper.DEFAULT, "2d": hopper.CANDIDATES["2d"]}
    rows = run_stream_sweep(cfgs, [2**20], [torch.float32], reps=5)
    assert all(r["correct"] for r in rows)
    kinds = [(r["kernel"], r["name"]) for r in rows]
    assert kinds[:4] == [("torch.add", ""), ("copy", ""), ("portable", "plain-triton"),
                         ("vector_add", "portable")]
    assert ("16k/3/2/2/4/1/2d", "2d") in kinds and kinds[-1] == ("torch.add", "again")
    print(format_sweep(rows))


def test_bench_adapter_writes_rows(tmp_path, monkeypatch):
    import json
    import types

    from pingpong.tools import bench_streaming as bench

    monkeypatch.setattr(bench, "DEFAULT_SIZES", (4097,))
    settings = types.SimpleNamespace(dtype="bf16", reps=10, rounds=2, csv=str(tmp_path / "va.csv"),
                                     json=str(tmp_path / "va.json"))
    assert bench.bench_vector_add(settings) == 0
    rows = json.loads((tmp_path / "va.json").read_text())
    assert [r["dtype"] for r in rows] == ["float32", "bfloat16"] and all(r["correct"] for r in rows)
    assert (tmp_path / "va.csv").read_text().startswith("n,dtype,bytes")
