"""CPU tests of pingpong.streaming: input validation (nothing written on error), the portable
kernel under Triton's interpreter, the grid-stride scheduler, the ring schedule, the config."""

import pytest
import torch

from pingpong.errors import ConfigError, PingpongError
from pingpong.hopper.pipeline import ring_index, ring_phase
from pingpong.streaming import vector_add
from pingpong.streaming.api import kernel_path
from pingpong.streaming.bench import format_table
from pingpong.streaming.grid_stride import tile_of, tiles_of_program
from pingpong.streaming.hopper import DEFAULT, SMALL, StreamConfig, choose_config

ODD_LENGTHS = (1, 255, 4097, 2**20 + 3)


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture
def no_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def poisoned(like):
    return torch.full_like(like, float("nan"))


# --------------------------------------------------------------------------- validation


def _expect_error(match, a, b, out):
    before = out.clone() if out is not None else None
    with pytest.raises(PingpongError, match=match):
        vector_add(a, b, out)
    if out is not None:
        assert torch.equal(out.isnan(), before.isnan()), "out was written despite the error"


@pytest.mark.usefixtures("interpreter")
class TestValidation:
    """Run with the interpreter enabled, so only the input itself can cause the errors."""

    def test_shape_mismatch(self):
        a = torch.randn(16)
        _expect_error(r"^b: shape \(17,\)", a, torch.randn(17), poisoned(a))
        _expect_error(r"^out: shape \(4, 4\)", a, torch.randn(16), torch.full((4, 4), float("nan")))

    def test_dtype_mismatch(self):
        a = torch.randn(16)
        _expect_error(r"^b: dtype torch.float16", a, torch.randn(16).half(), poisoned(a))
        _expect_error(r"^out: dtype torch.float16", a, torch.randn(16), poisoned(a).half())

    @pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
    def test_unsupported_dtype(self, dtype):
        a = torch.ones(8, dtype=dtype)
        with pytest.raises(PingpongError, match="^a: dtype"):
            vector_add(a, a.clone())

    def test_different_devices(self):
        a = torch.randn(16)
        _expect_error(r"^b: on device meta", a, torch.empty(16, device="meta"), poisoned(a))

    def test_non_contiguous(self):
        a = torch.randn(8, 8)
        _expect_error(r"^b: must be contiguous", a, torch.randn(8, 8).t(), poisoned(a))
        _expect_error(r"^a: must be contiguous", torch.randn(32)[::2], torch.randn(16), poisoned(torch.randn(16)))
        out = torch.full((8, 16), float("nan"))[:, :8]
        _expect_error(r"^out: must be contiguous", a, torch.randn(8, 8), out)

    def test_not_a_tensor(self):
        with pytest.raises(PingpongError, match="^b: expected a torch.Tensor"):
            vector_add(torch.randn(4), [1.0, 2.0, 3.0, 4.0])

    def test_partial_overlap(self):
        buf = torch.full((17,), float("nan"))
        a, out = buf[:16], buf[1:]
        a.copy_(torch.randn(16))
        before = buf.clone()
        with pytest.raises(PingpongError, match="^out: partially overlaps a"):
            vector_add(a, torch.randn(16), out)
        assert torch.equal(buf[:16], before[:16]) and buf[16].isnan()

    def test_bf16_refused_by_interpreter(self):
        a = torch.randn(8).bfloat16()
        _expect_error("bfloat16 is not supported under TRITON_INTERPRET", a, a.clone(), poisoned(a))


@pytest.mark.usefixtures("no_interpreter")
def test_cpu_tensors_need_the_opt_in():
    a = torch.randn(16)
    _expect_error(r"^a: is a CPU tensor.*TRITON_INTERPRET=1", a, torch.randn(16), poisoned(a))


# --------------------------------------------------------------------------- portable kernel, interpreted


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("n", ODD_LENGTHS)
def test_interpreter_bitwise_equal(n, dtype):
    a, b = torch.randn(n).to(dtype), torch.randn(n).to(dtype)
    out = poisoned(a)
    assert vector_add(a, b, out) is out
    assert kernel_path(a, b, out) == "interpreter"
    assert torch.equal(out, torch.add(a, b))


@pytest.mark.usefixtures("interpreter")
def test_interpreter_shapes_and_aliasing():
    a, b = torch.randn(3, 5, 7).half(), torch.randn(3, 5, 7).half()
    expect = torch.add(a, b)
    assert torch.equal(vector_add(a, b), expect)
    vector_add(a, b, a)  # out is a
    assert torch.equal(a, expect)
    c = torch.randn(300)
    expect = c + c
    vector_add(c, c, c)  # a, b and out all one tensor
    assert torch.equal(c, expect)
    assert vector_add(torch.empty(0), torch.empty(0)).numel() == 0


# --------------------------------------------------------------------------- scheduler and ring


@pytest.mark.parametrize("num_tiles", [0, 1, 5, 132, 133, 1000])
@pytest.mark.parametrize("nprog", [1, 4, 132])
def test_grid_stride_covers_every_tile_once(num_tiles, nprog):
    seen = [tile_of.fn(p, nprog, i) for p in range(nprog) for i in range(tiles_of_program.fn(num_tiles, p, nprog))]
    assert sorted(seen) == list(range(num_tiles))


@pytest.mark.parametrize("stages", [2, 3])
def test_ring_schedule_never_overwrites_unread_slot(stages, ahead=2):
    """Replay one program's fill/take order (vector_add_tma_kernel): a fill reuses a slot only
    after its previous tile was taken, and take(i) waits on the parity its fill completes."""
    count = 11
    taken, fills_per_slot, events = set(), [0] * stages, []
    fill = lambda j: events.append(("fill", j)) if j < count else None  # noqa: E731
    for j in range(ahead):
        fill(j)
    for i in range(count):
        if stages > ahead:
            fill(i + ahead)
        events.append(("take", i))
        if stages == ahead:
            fill(i + ahead)
    for kind, j in events:
        s = ring_index.fn(j, stages)
        if kind == "fill":
            assert j < stages or j - stages in taken, f"fill({j}) overwrote slot {s} before take({j - stages})"
            fills_per_slot[s] += 1
        else:
            # the k-th fill of a slot completes mbarrier phase k-1, parity (k-1) & 1
            assert ring_phase.fn(j, stages) == (fills_per_slot[s] - 1) & 1
            assert fills_per_slot[s] == j // stages + 1
            taken.add(j)
    assert taken == set(range(count))


# --------------------------------------------------------------------------- config and bench table


def test_stream_config():
    assert DEFAULT.validate().block(4) == 4096 and DEFAULT.block(2) == 8192
    assert DEFAULT.shared_bytes == 128 * 1024
    for bad, match in [(dict(stages=1), "ahead"), (dict(ahead=4), "ahead"), (dict(tile_bytes=3000), "tile_bytes"),
                       (dict(tile_bytes=64 * 1024), "shared memory"), (dict(out_bufs=0), "out_bufs")]:
        with pytest.raises(ConfigError, match=match):
            StreamConfig(**bad).validate()
    assert choose_config(2**28, 4, 132) is DEFAULT
    assert choose_config(2**20, 4, 132) is DEFAULT  # 256 tiles of 16 KB: every SM busy
    assert choose_config(2**16, 4, 132) is SMALL


def test_format_table():
    row = dict(n=2**28, dtype="float32", bytes=3 * 2**30, path="hopper-tma", correct=True, ms_ours=1.0,
               ms_torch=1.1, ms_copy=0.95, gbps_ours=3221.2, gbps_torch=2928.4, gbps_copy=3390.8,
               vs_torch=1.1, vs_copy=0.95, device="NVIDIA H100", torch="2.11", triton="3.6.0")
    text = format_table([row])
    assert "NVIDIA H100" in text and "ours/copy" in text and "268435456" in text and "3221" in text
    assert format_table([]) == "(no rows)"
