"""CPU tests of pingpong.streaming: input validation (nothing written on error), the portable
kernel under Triton's interpreter, the grid-stride scheduler, the ring schedule, the config."""

import pytest
import torch

import pingpong
from pingpong.errors import ConfigError, PingpongError
from pingpong.toolchain import KERNEL_OPTIONS
from pingpong.hopper.device.pipeline import ring_index, ring_phase
from pingpong.streaming import api, vector_add
from pingpong.streaming.api import kernel_path
from pingpong.tools import bench_streaming as sbench
from pingpong.tools.bench_streaming import format_table
from pingpong.streaming.grid_stride import tile_of, tiles_of_program
from pingpong.streaming import hopper
from pingpong.streaming.hopper import CANDIDATES, DEFAULT, PERSISTENT, StreamConfig

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
    assert PERSISTENT.validate().block(4) == 4096 and PERSISTENT.block(2) == 8192
    assert PERSISTENT.shared_bytes == 128 * 1024
    assert DEFAULT.validate().block(4) == 512 and DEFAULT.shared_bytes == 3 * 2048  # a, b, out: one tile each
    for bad, match in [(dict(stages=1), "ahead"), (dict(ahead=4), "ahead"), (dict(ahead=0), "ahead"), (dict(tile_bytes=3000), "tile_bytes"),
                       (dict(tile_bytes=64 * 1024), "shared memory"), (dict(out_bufs=0), "out_bufs")]:
        with pytest.raises(ConfigError, match=match):
            StreamConfig(**bad).validate()


def test_stream_config_limits_and_spec():
    for bad, match in [(dict(programs_per_sm=2), "programs_per_sm"), (dict(programs_per_sm=-1), "programs_per_sm"),
                       (dict(box="3d"), "box"), (dict(num_warps=3), "num_warps")]:
        with pytest.raises(ConfigError, match=match):
            StreamConfig(**bad).validate()
    assert PERSISTENT.spec == "16k/3/2/2/4" and DEFAULT.spec == "2k/1/1/1/4/0"
    assert StreamConfig(stages=2, out_bufs=1, programs_per_sm=2).spec == "16k/2/2/1/4/2"
    one_per_tile = StreamConfig(tile_bytes=4096, stages=1, ahead=1, out_bufs=1, programs_per_sm=0).validate()
    assert one_per_tile.spec == "4k/1/1/1/4/0" and StreamConfig.parse("4k/1/1/1/4/0") == one_per_tile
    assert one_per_tile.grid(2**20 + 3, 4, 132) == 2**10 + 1  # one program per 1024-element tile
    assert StreamConfig(box="2d").spec == "16k/3/2/2/4/1/2d"
    assert StreamConfig.parse(" 32k/3/2/1/8 ") == StreamConfig(tile_bytes=32768, out_bufs=1, num_warps=8)
    assert StreamConfig.parse("16384/4/3/2/4/1/2d") == CANDIDATES["2d-ahead3"]
    assert StreamConfig.parse("2cta") is CANDIDATES["2cta"]
    for bad in ("16k/3/2", "x/3/2/2/4", "16k/3/2/2/4/1/1/1", "nonsense"):
        with pytest.raises(ConfigError, match="stream config"):
            StreamConfig.parse(bad)
    with pytest.raises(ConfigError, match="shared memory"):
        StreamConfig.parse("64k/3/2/2/4")


def test_block_shape_and_grid():
    two_d = StreamConfig(box="2d")
    assert two_d.block_shape(2**20, 4) == [16, 256] and two_d.block_shape(2**20, 2) == [32, 256]
    assert two_d.block_shape(2**20 + 3, 4) == [4096]  # n % 256 != 0: the 1-D form
    assert PERSISTENT.block_shape(2**20, 4) == [4096]
    # 4 KB fp32 = 4 rows: with 8 warps 4 of them stack over rows -> fits; 16 warps would not
    assert StreamConfig(tile_bytes=4096, num_warps=8, box="2d").block_shape(2**20, 4) == [4, 256]
    assert StreamConfig(tile_bytes=4096, num_warps=16, box="2d").block_shape(2**20, 4) == [1024]
    assert PERSISTENT.grid(2**28, 4, 132) == 132 and PERSISTENT.grid(2**20, 4, 132) == 132
    assert DEFAULT.grid(2**20, 4, 132) == 2**11 and DEFAULT.grid(5, 4, 132) == 1  # one program per tile
    assert CANDIDATES["2cta"].grid(2**20, 4, 132) == 256 and CANDIDATES["2cta"].grid(2**28, 4, 132) == 264


def _doc_lines(text):
    return [ln.strip() for ln in text.strip().splitlines()]


def test_schedule_text_is_the_kernels_docstring():
    """The kernel docstring's table is `schedule_text` of its stated config, and agrees with
    the ring replay below (fills before/after the take by STAGES vs AHEAD)."""
    drawn = _doc_lines(hopper.schedule_text(StreamConfig(stages=3, ahead=2, out_bufs=2)))
    doc = _doc_lines(hopper.vector_add_tma_kernel.fn.__doc__)
    start = doc.index(drawn[0])
    assert doc[start:start + len(drawn)] == drawn
    two_slots = hopper.schedule_text(StreamConfig(stages=2, ahead=2, out_bufs=1)).splitlines()
    assert two_slots[2].split() == ["0", "ready[0]", "parity", "0", "2>s0", "out[0]"]  # refill after the take


def test_docs_name_the_default():
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "streaming.md").read_text()
    assert f"`{DEFAULT.spec}`" in text, "docs/streaming.md must name the current DEFAULT's spec"


# --------------------------------------------------------------------------- launch: JIT once, then direct


class _FakeJit:
    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((grid, args, kwargs)) or "compiled"


class _FakeDirect:
    def __init__(self):
        self.bound = []

    def bind(self, slots, pre=(), post=()):
        calls = []
        self.bound.append(((slots, pre, post), calls))
        return lambda grid, stream, ptrs, dyn=(): calls.append((grid, stream, *ptrs))


def test_launch_goes_direct_after_the_first_call(monkeypatch):
    from triton import knobs

    jit, direct = _FakeJit(), _FakeDirect()
    monkeypatch.setattr(hopper, "vector_add_tma_kernel", jit)
    from_kernel = classmethod(lambda cls, k: direct if k == "compiled" else None)
    monkeypatch.setattr(hopper.DirectLaunch, "from_kernel", from_kernel)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 1234, raising=False)
    cfg = StreamConfig(stages=2)  # a fresh config: empty caches
    a, b, out = torch.empty(2**20), torch.empty(2**20), torch.empty(2**20)
    hopper.launch(a, b, out, 132, cfg, device=0)
    assert len(jit.calls) == 1 and jit.calls[0][0] == (132,) and jit.calls[0][2] == dict(cfg.constexprs, **KERNEL_OPTIONS)
    from pingpong.runtime.launcher import launch_key

    assert cfg.launchers == {(0, torch.float32, False, True, 1, launch_key()): direct} and not cfg.plans
    hopper.launch(a, b, out, 132, cfg, device=0)
    hopper.launch(b, a, out, 132, cfg, device=0)
    assert len(jit.calls) == 1
    (bind_args, calls), = direct.bound
    assert bind_args == ([("tma", (2**20,), (1,))] * 3, (2**20, 2, 2, 2, 4), ())
    assert calls == [((132, 1, 1), 1234, a.data_ptr(), b.data_ptr(), out.data_ptr()),
                     ((132, 1, 1), 1234, b.data_ptr(), a.data_ptr(), out.data_ptr())]
    hopper.launch(a[:1024], b[:1024], out[:1024], 132, cfg, device=0)  # new n, same variant: bound, no JIT
    assert len(jit.calls) == 1 and len(direct.bound) == 2 and len(cfg.plans) == 2
    hopper.launch(a[:1000], b[:1000], out[:1000], 132, cfg, device=0)  # n % 16 != 0: a new variant, JIT once
    assert len(jit.calls) == 2
    knobs.runtime.launch_enter_hook.add(print)  # a profiler's hook: every launch through the JIT
    try:
        hopper.launch(a, b, out, 132, cfg, device=0)
    finally:
        knobs.runtime.launch_enter_hook.remove(print)
    assert len(jit.calls) == 3 and len(direct.bound[0][1]) == 2


def test_launch_keeps_the_jit_when_direct_is_unavailable(monkeypatch):
    jit = _FakeJit()
    monkeypatch.setattr(hopper, "vector_add_tma_kernel", jit)
    monkeypatch.setattr(hopper.DirectLaunch, "from_kernel", classmethod(lambda cls, k: None))
    cfg = StreamConfig(stages=2)
    a = torch.empty(4096)
    for _ in range(3):
        hopper.launch(a, a, a, 132, cfg, device=0)
    assert len(jit.calls) == 3 and list(cfg.launchers.values()) == [False] and not cfg.plans


def test_format_table():
    row = dict(n=2**28, dtype="float32", bytes=3 * 2**30, path="hopper-tma", correct=True, ms_ours=1.0,
               ms_torch=1.1, ms_copy=0.95, gbps_ours=3221.2, gbps_torch=2928.4, gbps_copy=3390.8,
               vs_torch=1.1, vs_torch_min=1.05, vs_torch_max=1.12, vs_copy=0.95, device="NVIDIA H100", torch="2.11",
               triton="3.6.0")
    text = format_table([row])
    assert "NVIDIA H100" in text and "ours/copy" in text and "268435456" in text and "3221" in text
    assert "rounds min" in text and "1.050" in text and "1.120" in text
    assert format_table([]) == "(no rows)"


def test_format_sweep_and_sizes():
    from pingpong.tools.bench_streaming import _parse_size, format_sweep

    row = dict(n=2**20, dtype="float32", bytes=3 * 2**22, kernel="16k/3/2/2/4", name="default", correct=True,
               ms=0.0084, gbps=1492.0, vs_torch=1.0, vs_copy=0.98, host_us=3.2, device="NVIDIA H200", torch="2.11",
               triton="3.6.0")
    text = format_sweep([row, dict(row, kernel="torch.add", name="", ms=0.0091)])
    lines = text.splitlines()
    assert "NVIDIA H200" in lines[0] and lines[1].split()[:4] == ["n", "dtype", "kernel", "name"]
    assert lines[2].split() == ["1048576", "float32", "16k/3/2/2/4", "default", "True", "1492", "1.000", "0.980",
                                "8.40", "3.20"]
    assert len({len(ln) for ln in lines[1:]}) <= 2  # aligned columns (the last may be trimmed)
    assert format_sweep([]) == "(no rows)"
    assert [_parse_size(t) for t in ("2**20", "2^28", "4097")] == [2**20, 2**28, 4097]


def test_sweep_cli_rejects_bad_configs(capsys):
    from pingpong.tools.bench_streaming import main

    with pytest.raises(SystemExit):
        main(["--sweep", "16k/3/9/2/4"])
    assert "ahead" in capsys.readouterr().err


# ----------------------------------------------------------------------------- streaming
# vector_add's missing arguments, and the streaming benches never timing a wrong result (CPU:
# the GPU-only parts are replaced by recorders).

@pytest.mark.parametrize("args, name", [((None, "t"), "a"), (("t", None), "b"), ((None, None), "a"),
                                        ((3.0, "t"), "a"), (("t", [1.0]), "b")])
def test_missing_or_non_tensor_arguments_are_named(args, name):
    t = torch.ones(4)
    a, b = (t if x == "t" else x for x in args)
    with pytest.raises(PingpongError, match=f"^{name}: expected a torch.Tensor, got"):
        pingpong.vector_add(a, b)
    with pytest.raises(PingpongError, match=f"^{name}: "):
        api.kernel_path(a, b)


def test_out_none_still_means_allocate(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    a, b = torch.randn(5), torch.randn(5)
    assert torch.equal(pingpong.vector_add(a, b), a + b)


class Recorder:
    def __init__(self):
        self.timed = []

    def median(self, fn, reps):
        self.timed.append(fn)
        return 1.0

    def host(self, fn, calls=100):
        self.timed.append(fn)
        return 1.0


def _cpu_as_gpu(monkeypatch, rec):
    monkeypatch.setattr(sbench, "_median_ms", rec.median)
    monkeypatch.setattr(sbench, "_host_us", rec.host)
    monkeypatch.setattr(sbench, "kernel_path", lambda *a: "test")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "cpu")


def wrong_add(a, b, out=None):
    out.copy_(a)  # not a + b
    return out


def right_add(a, b, out=None):
    return torch.add(a, b, out=out)


def test_vector_add_bench_times_only_correct_sizes(monkeypatch):
    rec = Recorder()
    _cpu_as_gpu(monkeypatch, rec)
    monkeypatch.setattr(sbench, "vector_add", wrong_add)
    rows = sbench.run_vector_add_bench([16, 32], device="cpu", rounds=2)
    assert [r["correct"] for r in rows] == [False, False]
    assert not rec.timed, "a wrong result was timed"
    assert all(r["ms_ours"] is None and r["vs_torch"] is None for r in rows)
    table = sbench.format_table(rows)
    assert "False" in table and " - " in table

    monkeypatch.setattr(sbench, "vector_add", right_add)
    rows = sbench.run_vector_add_bench([16], device="cpu", rounds=2)
    assert rows[0]["correct"] and rows[0]["ms_ours"] == 1.0 and len(rec.timed) == 2 * 3


def test_stream_sweep_times_only_correct_rows(monkeypatch):
    rec = Recorder()
    _cpu_as_gpu(monkeypatch, rec)
    from pingpong.streaming import portable

    monkeypatch.setattr(sbench, "is_hopper", lambda index: True)
    monkeypatch.setattr(sbench, "sm_count", lambda index: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(portable, "launch", lambda a, b, out, interpret=False: out.copy_(b))  # wrong
    monkeypatch.setattr(sbench, "vector_add", wrong_add)
    rows = sbench.run_stream_sweep({}, [64], [torch.float32], device="cpu", diagnostics=False)
    by = {(r["kernel"], r["name"]): r for r in rows}
    assert not by[("portable", "plain-triton")]["correct"] and by[("portable", "plain-triton")]["ms"] is None
    assert not by[("vector_add", "test")]["correct"] and by[("vector_add", "test")]["vs_torch"] is None
    timed_rows = [r for r in rows if r["ms"] is not None]
    assert {r["kernel"] for r in timed_rows} == {"torch.add", "copy"}
    assert len(rec.timed) == 2 * len(timed_rows)  # do_bench + host time per timed row, none for wrong ones
    assert "-" in sbench.format_sweep(rows)


def test_tma_path_leaves_room_for_the_last_tile():
    """The TMA kernel counts its tiles with gl.cdiv(n, BLOCK) = (n + BLOCK - 1) // BLOCK in
    32 bits: an n within BLOCK of 2**31 wrapped it negative and every program stored nothing
    (out left unwritten). Such n go to the portable kernel (64-bit offsets); the limit leaves
    room for the largest BLOCK a valid StreamConfig has (64 KB tiles of 2-byte elements)."""
    def meta(n, dtype=torch.float16):
        return torch.empty(n, device="meta", dtype=dtype)

    largest_block = max(StreamConfig(tile_bytes=t, stages=1, ahead=1, out_bufs=1).block(2)
                        for t in (2**k for k in range(4, 20))
                        if (2 * 1 + 1) * t <= 227 * 1024)
    for n in (2**31 - 1, 2**31 - largest_block + 1):
        x = meta(n)
        assert not api._tma_ok(x, x, x), n
    n = 2**31 - largest_block
    assert api._tma_ok(meta(n), meta(n), meta(n))
    assert n + largest_block - 1 <= 2**31 - 1  # its tile count fits 32 bits for every valid config
    for cfg in (DEFAULT, PERSISTENT, *CANDIDATES.values()):
        assert hopper.MAX_TMA_ELEMENTS + cfg.block(2) - 1 <= 2**31 - 1, cfg.spec
