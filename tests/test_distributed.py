"""pingpong under torch.distributed (pingpong.distributed, docs/distributed.md), on the CPU.

- Two gloo ranks in subprocesses (tests/distributed_ranks.py, one launch for the module): the
  ops on DTensors of each placement, their gradients, tensor parallelism (parallelize_module)
  and FSDP2 (fully_shard) against torch and the float64 reference.
- In this process, torch's fake process group (world size 2, rank 0: collectives do nothing, so
  only placements and refusals are checked here): the refusals before any work, the rule
  cache, the rule table itself.
- A fresh interpreter: `import pingpong` does not load torch.distributed.tensor, and the rules
  register on the first call with a DTensor.

pingpong's kernels are the portable kernel under Triton's interpreter (conftest), fp16.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available in this torch build", allow_module_level=True)

import torch.distributed as dist  # noqa: E402

import distributed_ranks  # noqa: E402
from closeness import AUTOGRAD, assert_close64  # noqa: E402
from conftest import interpret_plans  # noqa: E402
from pingpong import PingpongError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------- two gloo ranks


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Each rank's {scenario: "ok…" or traceback}, from one launch of the two ranks."""
    out = tmp_path_factory.mktemp("ranks")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "distributed_ranks.py"), str(out)],
                          capture_output=True, text=True, timeout=480)
    results = []
    for r in range(distributed_ranks.WORLD):
        path = out / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no results (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        results.append(json.loads(path.read_text()))
    return results


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(distributed_ranks.SCENARIOS))
def test_two_ranks(ranks, scenario):
    for r, results in enumerate(ranks):
        got = results.get(scenario, "not run")
        assert got.startswith("ok"), f"rank {r}, {scenario}:\n{got}"


# ----------------------------------------------------------------------------- the fake process group


# `mesh` (conftest): torch's fake process group, world size 2, and its 1-D mesh


@pytest.fixture
def runs(monkeypatch):
    """The interpreted kernels (conftest), each launch recorded."""
    import pingpong.portable

    launched, kernel = [], pingpong.portable.portable_gemm

    def counted(*args, **kwargs):
        launched.append(1)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(pingpong.portable, "portable_gemm", counted)
    interpret_plans(monkeypatch.setattr)
    return launched


def dt(mesh, shape, placement, seed, dtype=torch.float16):
    from torch.distributed.tensor import DTensor, Shard

    local = list(shape)
    if isinstance(placement, Shard):
        local[placement.dim] //= 2
    g = torch.Generator().manual_seed(seed)
    return DTensor.from_local(torch.randn(*local, generator=g).to(dtype), mesh, [placement], run_check=False)


def test_a_plain_tensor_mixed_in_is_refused_as_torch_refuses_it(mesh, runs):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.experimental import implicit_replication

    import pingpong

    a, b = dt(mesh, (8, 6), Shard(0), 1), torch.randn(6, 4).half()
    with pytest.raises(RuntimeError, match="mixed torch.Tensor and DTensor"):
        torch.mm(a, b)
    with pytest.raises(PingpongError, match=r"b: a plain torch.Tensor mixed with DTensor a .*DTensor.from_local\(b"):
        pingpong.matmul(a, b)
    with pytest.raises(PingpongError, match="bias: a plain torch.Tensor"):
        pingpong.linear(dt(mesh, (3, 6), Replicate(), 2), dt(mesh, (4, 6), Shard(0), 3), torch.randn(4).half())
    assert runs == []
    with implicit_replication():  # torch then treats it as replicated: so does pingpong
        assert pingpong.matmul(a, b).placements == torch.mm(a, b).placements == (Shard(0),)
    assert runs


def test_two_meshes_are_refused(mesh, runs):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate

    import pingpong

    other = init_device_mesh("cpu", (1, 2))  # the same two ranks as a 1×2 mesh: another mesh
    a = dt(mesh, (8, 6), Replicate(), 1)
    b = DTensor.from_local(torch.randn(6, 4).half(), other, [Replicate(), Replicate()], run_check=False)
    with pytest.raises(PingpongError, match=r"b: on the cpu mesh of ranks \[\[0, 1\]\], but a is on the cpu mesh of"
                                            r" ranks \[0, 1\]; .* one DeviceMesh"):
        pingpong.matmul(a, b)
    assert runs == []


def test_an_activation_on_a_split_contraction_is_refused(mesh, runs):
    """A fused activation needs the complete sum: K split (RowwiseParallel) or Partial operands
    are refused with the supported alternatives, before any work."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

    import pingpong

    a, b = dt(mesh, (8, 6), Shard(1), 1), dt(mesh, (6, 4), Shard(0), 2)
    with pytest.raises(PingpongError, match=r"a: placement Shard\(dim=1\) on mesh dim 0 splits the contracted dim .*"
                                            r"activation 'relu' must see the complete sum. Supported: activation=None"):
        pingpong.gemm(a, b, activation="relu")
    with pytest.raises(PingpongError, match=r"a: placement Partial\(sum\) .* holds partial sums"):
        pingpong.gemm(dt(mesh, (8, 6), Partial(), 1), dt(mesh, (6, 4), Replicate(), 2), activation="silu")
    layer = pingpong.nn.Linear(6, 4, activation="gelu_tanh", dtype=torch.float16)
    parallelize_module(layer, mesh, RowwiseParallel())
    with pytest.raises(PingpongError, match=r"x: placement Shard\(dim=1\) .*ColwiseParallel"):
        layer(torch.randn(3, 3).half())  # RowwiseParallel: this rank's half of x's K
    assert runs == []
    assert pingpong.gemm(a, b).placements == (Partial(),)  # without the activation: a partial sum


def test_an_in_place_output_the_product_cannot_take_is_refused(mesh, runs):
    from torch.distributed.tensor import Partial, Replicate, Shard

    import pingpong

    c = dt(mesh, (8, 4), Partial(), 3)
    before = c.to_local().clone()
    a, b = dt(mesh, (8, 6), Shard(0), 1), dt(mesh, (6, 4), Replicate(), 2)
    with pytest.raises(PingpongError, match=r"c: pingpong.gemm_ writes c in place, so it keeps its placement Partial\(sum\)"
                                            r" .* under activation 'relu'. Supported placements of c: Replicate\(\),"
                                            r" Shard\(0\), Shard\(1\)\. Or use pingpong.gemm"):
        pingpong.gemm_(c, a, b, activation="relu")
    assert runs == [] and torch.equal(c.to_local(), before) and c.placements == (Partial(),)
    pingpong.gemm_(c, a, b, beta=1.0)  # without the activation the product can be a partial sum
    assert c.placements == (Partial(),) and runs


def test_argument_errors_are_pingpong_errors_on_global_shapes(mesh, runs):
    from torch.distributed.tensor import Replicate, Shard

    import pingpong

    with pytest.raises(PingpongError, match="a: dtype torch.float32 is not supported"):
        pingpong.matmul(dt(mesh, (8, 6), Shard(0), 1, torch.float32), dt(mesh, (6, 4), Replicate(), 2, torch.float32))
    with pytest.raises(PingpongError, match=r"shape mismatch|a.shape\[-1\]|do not"):
        pingpong.matmul(dt(mesh, (8, 6), Shard(0), 1), dt(mesh, (5, 4), Replicate(), 2))
    # grouped_mm checks the global shapes: b's K is 12, though each rank's (3, 6, 4) shard of it
    # matches a's K of 6
    offs = dt(mesh, (3,), Replicate(), 3, torch.int32)
    with pytest.raises(PingpongError, match=r"b: its K \(12, b.shape\[-2\]\) must equal a's \(6"):
        pingpong.grouped_mm(dt(mesh, (12, 6), Replicate(), 4), dt(mesh, (3, 12, 4), Shard(1), 5), offs)
    # scaled_mm's checks come from its fake implementation (distributed.fake_check), on meta
    # tensors of the global shapes: K is 512 in b, 256 in a, though b's local shard has 256 rows
    f8, f32 = torch.float8_e4m3fn, torch.float32
    a8 = dt(mesh, (16, 256), Replicate(), 6, f8)
    b8 = dt(mesh, (32, 512), Shard(1), 7, f8).t()  # K-major (512, 32), split along K
    one = dt(mesh, (1,), Replicate(), 8, f32)
    with pytest.raises(PingpongError, match=r"shapes \(16, 256\) and \(512, 32\) cannot be multiplied"):
        pingpong.scaled_mm(a8, b8, one, one)
    assert runs == []


def test_the_rule_cache_keys_every_argument(mesh, runs):
    """DTensor caches a rule's result per call: an activation passed by keyword must not reuse
    the strategies of a call without it (that would apply relu to partial sums)."""
    from torch.distributed.tensor import Partial, Replicate

    import pingpong.distributed  # noqa: F401  (torch.ops.pingpong.* called directly: the rules by import)

    a, b = dt(mesh, (8, 6), Partial(), 1), dt(mesh, (6, 4), Replicate(), 2)
    gemm = torch.ops.pingpong.gemm.default
    assert gemm(a, b).placements == (Partial(),)
    assert not gemm(a, b, activation="relu").placements[0].is_partial()  # a reduced first


def test_placements_on_a_2d_mesh_follow_torch(mesh, runs):
    """Two mesh dims (a 1×2 mesh of the two ranks, as DP×TP would be): each dim's strategy is
    chosen as torch.mm's is."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    import pingpong

    mesh2 = init_device_mesh("cpu", (1, 2))
    R = Replicate()

    def on(shape, placements, seed):
        local = list(shape)
        for p, n in zip(placements, mesh2.shape):
            if isinstance(p, Shard):
                local[p.dim] //= n
        g = torch.Generator().manual_seed(seed)
        return DTensor.from_local(torch.randn(*local, generator=g).half(), mesh2, placements, run_check=False)

    for pa, pb in [((Shard(0), Shard(1)), (R, Shard(0))), ((R, Shard(0)), (Shard(1), R)), ((Shard(1), R), (R, Shard(1))),
                   ((R, Partial()), (R, R))]:
        a, b = on((8, 6), pa, 1), on((6, 4), pb, 2)
        assert pingpong.matmul(a, b).placements == torch.mm(a, b).placements, (pa, pb)
    assert runs


def compiled_tp(model, x, tol):
    """model(x) and its backward of the float sum, eager and then compiled (fullgraph, AOT
    autograd): no graph break, one forward and one backward graph, the compiled values and
    gradients (local shards) within `tol` of eager's. Returns each graph's calls as (target,
    the shapes of its tensor arguments)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.utils import counters

    want = model(x)
    want.float().sum().backward()
    want_grads = [p.grad.to_local().clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)

    graphs = []

    def grab(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    counters.clear()
    got = torch.compile(model, backend=aot_autograd(fw_compiler=grab, bw_compiler=grab), fullgraph=True)(x)
    got.float().sum().backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert len(graphs) == 2, f"{len(graphs)} graphs (a forward and a backward expected)"
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    for p, g in zip(model.parameters(), want_grads):
        torch.testing.assert_close(p.grad.to_local(), g, rtol=tol, atol=tol)

    def calls(gm):
        return [(str(n.target), [tuple(a.meta["val"].shape) for a in n.args
                                 if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)])
                for n in gm.graph.nodes if n.op == "call_function"]

    return map(calls, graphs)


def test_a_compiled_tensor_parallel_model_keeps_the_rules_in_one_graph(mesh, runs):
    """torch.compile (fullgraph, AOT autograd) of a ColwiseParallel / RowwiseParallel MLP of
    pingpong Linears: one graph, no break; the traced forward runs pingpong.linear on each rank's
    shard (weights (8, 8) of (16, 8) Shard(0) and (8, 16) Shard(1)), the row layer's bias
    divided over the ranks (a Partial addend) and one all-reduce after it, no other collective;
    the backward runs pingpong.mm on the shards with no collective; values as eager's."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import pingpong

    torch.manual_seed(0)
    model = torch.nn.Sequential(pingpong.nn.Linear(8, 16, activation="relu", dtype=torch.float16),
                                pingpong.nn.Linear(16, 8, dtype=torch.float16))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
    forward, backward = compiled_tp(model, torch.randn(2, 3, 8).half(), 1e-3)
    assert [s for t, s in forward if t == "pingpong.linear.default"] == [[(2, 3, 8), (8, 8), (8,)]] * 2, forward
    assert [t for t, _ in forward if "_c10d_functional" in t and "wait" not in t] == [
        "_c10d_functional.all_reduce.default"], forward
    assert ("aten.div.Tensor", [(8,)]) in forward, forward  # the Partial bias: b / 2 on each rank
    grads = [s for t, s in backward if t == "pingpong.mm.default"]
    assert len(grads) == 3 and all(max(max(shape) for shape in s) <= 8 for s in grads), backward
    assert not [t for t, _ in backward if "_c10d_functional" in t], backward
    assert runs


@pytest.fixture
def fp8_runs(monkeypatch):
    """The FP8 kernels emulated (tests/fp8_emulation.py) after the interpreted plans: each
    quantization and each scaled product recorded, in one list."""
    from fp8_emulation import emulate_fp8

    from pingpong import quantize

    interpret_plans(monkeypatch.setattr)
    launched = emulate_fp8(monkeypatch.setattr)
    cast = quantize.launch_pair
    monkeypatch.setattr(quantize, "launch_pair", lambda *a: (launched.append("quantize"), cast(*a))[1])
    return launched


def fp8_mlp():
    """A ColwiseParallel / RowwiseParallel MLP of FP8 training layers (32 -> 64 -> 32), fp16."""
    import pingpong

    torch.manual_seed(0)
    return torch.nn.Sequential(pingpong.nn.Float8TrainingLinear(32, 64, dtype=torch.float16), torch.nn.ReLU(),
                               pingpong.nn.Float8TrainingLinear(64, 32, dtype=torch.float16))


def test_a_compiled_fp8_tensor_parallel_model_is_one_graph_of_local_fp8_linears(mesh, fp8_runs):
    """torch.compile (fullgraph, AOT autograd) of a ColwiseParallel / RowwiseParallel MLP of FP8
    training layers: one graph, no break; the forward runs pingpong::fp8_linear_train (after its
    x's pingpong::quantize_fp8_pair) on each rank's shard (weights (32, 32) of (64, 32) Shard(0) and (32, 64) Shard(1)) and one
    all-reduce after the row layer; the backward's FP8 products (the row layer's dX, both
    dW; the 6 tokens padded to 16) take the shards, with no collective; values as eager's."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    model = parallelize_module(fp8_mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(2, 3, 32, generator=torch.Generator().manual_seed(1)).half()
    forward, backward = compiled_tp(model, x, 0)
    linears = [s for t, s in forward if t == "pingpong.fp8_linear_train.default"]
    x_pair = [(6, 32), (6, 1), (32, 16), (32, 1)]  # each rank's x quantized first: q, s, qt (6 tokens padded), st
    assert linears == [[(2, 3, 32), (32, 32), *x_pair, (32,)]] * 2, forward
    assert [s for t, s in forward if t == "pingpong.quantize_fp8_pair.default"] == [[(6, 32)]] * 2, forward
    assert [t for t, _ in forward if "_c10d_functional" in t and "wait" not in t] == [
        "_c10d_functional.all_reduce.default"], forward
    products = [s for t, s in backward if t == "pingpong.scaled_mm.default"]
    assert products == [[(6, 32), (32, 32), (6, 1), (1, 32)], *[[(32, 16), (16, 32), (32, 1), (1, 32)]] * 2], \
        products  # dX of the row layer, dW of each (x takes no gradient): K and N the shards' 32
    assert not [t for t, _ in backward if "_c10d_functional" in t], backward


#: reads of a tensor's values on the host (each a device sync on a GPU)
HOST_READS = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.equal", "aten.is_nonzero")


def collectives_and_host_reads(layer, x):
    """({collective: count} of layer(x)'s forward, of its backward (of the float sum)), and the
    host reads (HOST_READS) of both, after one untimed step."""
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Reads(TorchDispatchMode):
        seen: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if str(func.overloadpacket) in HOST_READS:
                self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    layer(x).float().sum().backward()
    reads = Reads()
    with reads, CommDebugMode() as forward:
        y = layer(x)
    with reads, CommDebugMode() as backward:
        y.float().sum().backward()
    counts = [{str(k): v for k, v in mode.get_comm_counts().items()} for mode in (forward, backward)]
    return counts, reads.seen


def test_an_fp8_tensor_parallel_layer_runs_the_collectives_of_a_bf16_one_and_reads_nothing_on_the_host(
        mesh, fp8_runs):
    """One training step (forward and backward, x taking a gradient) of an FP8 layer on DTensors
    of each layout runs exactly the collectives of the same layer of pingpong.nn.Linear (which
    are torch's): ColwiseParallel none in the forward, dX's all-reduce in the backward (x's
    Replicate() from its Partial sum); RowwiseParallel y's all-reduce in the forward, none in the
    backward; tokens split with the weight Replicate() none (dW stays Partial). No amax
    all-reduce: every scale is constant along its product's contraction on the rank's own
    shard (each rank dequantizes its partial product before the sum). And nothing read on the
    host (no device sync)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import pingpong

    AR = "c10d_functional.all_reduce"
    g = torch.Generator().manual_seed(3)
    cases = {  # layout -> (in, out features, the plan or None (x split along the tokens), x's local shape, counts)
        "colwise": (32, 64, ColwiseParallel(), (2, 3, 32), [{}, {AR: 1}]),
        "rowwise": (64, 32, RowwiseParallel(), (2, 3, 32), [{AR: 1}, {}]),
        "tokens": (32, 32, None, (2, 3, 32), [{}, {}]),
    }
    for name, (fin, fout, plan, shape, want) in cases.items():
        for bias in (False, True):
            got = {}
            for kind in ("bf16", "fp8"):
                torch.manual_seed(0)
                cls = pingpong.nn.Float8TrainingLinear if kind == "fp8" else pingpong.nn.Linear
                layer = cls(fin, fout, bias=bias, dtype=torch.float16)
                x = torch.randn(*shape, generator=g).half().requires_grad_()
                if plan is None:
                    for p_name, p in list(layer.named_parameters()):
                        setattr(layer, p_name, torch.nn.Parameter(DTensor.from_local(p.detach(), mesh, [Replicate()])))
                    x = DTensor.from_local(x.detach(), mesh, [Shard(0)]).requires_grad_()
                else:
                    layer = parallelize_module(layer, mesh, plan)
                before = len(fp8_runs)
                got[kind], reads = collectives_and_host_reads(layer, x)
                assert reads == [], (name, kind, bias, reads)
                assert (len(fp8_runs) > before) == (kind == "fp8"), (name, kind)  # the FP8 kernels ran
            assert got["fp8"] == got["bf16"] == want, (name, bias, got)


def test_fp8_placements_it_cannot_take_are_refused_before_any_work(mesh, fp8_runs):
    """An FP8 linear on DTensors: a Partial operand, a split that leaves a rank features the
    recipe cannot take, a plain tensor mixed in and the recipe's own argument errors (global
    shapes) are PingpongErrors naming the argument, the placements and what is supported,
    before any quantization or product; every time (the check cache)."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    import pingpong
    from pingpong.fp8_training import fp8_linear

    x, w = dt(mesh, (4, 32), Replicate(), 1), dt(mesh, (64, 32), Shard(0), 2)
    narrow = parallelize_module(pingpong.nn.Float8TrainingLinear(32, 16, dtype=torch.float16), mesh, ColwiseParallel())
    bad = {
        "a Partial x": (lambda: fp8_linear(dt(mesh, (4, 32), Partial(), 1), w),
                        r"x: placement Partial\(sum\) on mesh dim 0 holds partial sums.* Redistribute x first.*"
                        r" Supported: ColwiseParallel \(weight Shard\(0\), x Replicate\(\)\), RowwiseParallel"),
        "a Partial weight": (lambda: fp8_linear(x, dt(mesh, (64, 32), Partial(), 2)), r"weight: placement Partial"),
        "8 columns a rank": (lambda: narrow(torch.randn(4, 32).half()),
                             r"weight: placements \(Shard\(dim=0\),\) .* split out_features=16 over 2 ranks:"
                             r" in_features=32, out_features=8: FP8 needs multiples of 16 .* Supported: features"),
        "K of 24 a rank": (lambda: fp8_linear(dt(mesh, (4, 48), Shard(1), 1), dt(mesh, (64, 48), Replicate(), 2)),
                           r"split in_features=48 over 2 ranks: in_features=24"),
        "a plain tensor": (lambda: fp8_linear(x, torch.randn(64, 32).half()), r"weight: a plain torch.Tensor mixed"),
        "a global shape": (lambda: fp8_linear(dt(mesh, (4, 64), Shard(1), 1), w), r"x: last dim must be in_features = 32"),
    }
    for what, (call, match) in bad.items():
        for _ in range(2):
            with pytest.raises(PingpongError, match=match):
                call()
    assert fp8_runs == []
    assert fp8_linear(x, w).placements == (Shard(1),) and fp8_runs  # the supported form runs


def test_the_fp8_layout_table():
    """fp8_layouts: the weight's placement decides (x's where the weight is Replicate())."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    from pingpong.distributed import fp8_layouts

    R, P, S = Replicate(), Partial(), Shard
    rows = {  # (x, weight) given -> (x, weight, bias wanted, y, grads of x, weight, bias, bias shared)
        (R, S(0)): (R, S(0), S(0), S(2), (P, S(0), S(0)), False),
        (S(2), S(0)): (R, S(0), S(0), S(2), (P, S(0), S(0)), False),
        (R, S(1)): (S(2), S(1), R, P, (S(2), S(1), R), True),
        (S(2), R): (S(2), S(1), R, P, (S(2), S(1), R), True),
        (S(1), R): (S(1), R, R, S(1), (S(1), P, P), False),
        (R, R): (R, R, R, R, (R, R, R), False),
    }
    for (px, pw), want in rows.items():
        (lay,) = fp8_layouts([px], [pw], 3)
        assert (lay.x, lay.weight, lay.bias, lay.y, lay.grads, lay.share_bias) == want, (px, pw, lay)


def stale_parameter(mesh, shape, placement, seed):
    """A Parameter as torch 2.11's FSDP2 leaves a TP parameter under a param_dtype policy: an
    fp16 local tensor in the spec of the fp32 parameter (tensor_meta dtype float32)."""
    from torch.distributed.tensor import DTensor

    fp32 = dt(mesh, shape, placement, seed, torch.float32)
    return torch.nn.Parameter(DTensor(fp32.to_local().half(), fp32._spec, requires_grad=False))


def test_a_stale_spec_parameter_is_rebuilt_and_any_other_stale_dtensor_is_refused(mesh, runs):
    """A DTensor whose spec says float32 around an fp16 local tensor: a Parameter (FSDP2 × TP
    on torch 2.11) is rebuilt from its local tensor by pingpong.linear, forward and backward
    (values of the local product, in float64); any other such DTensor, and gemm_'s written c,
    get the PingpongError naming the argument and the cause, before any work, every time."""
    from torch.distributed.tensor import Replicate, Shard

    import pingpong
    from pingpong import distributed

    w = stale_parameter(mesh, (8, 6), Shard(0), 1)
    assert distributed.stale(w) and w._spec.tensor_meta.dtype == torch.float32
    x = dt(mesh, (3, 6), Replicate(), 2).requires_grad_()
    for bad in range(2):  # the second call hits the check's cache: still refused
        with pytest.raises(PingpongError, match=r"w: a DTensor whose local tensor is torch.float16 while its spec says"
                                                r" torch.float32: torch 2.11's FSDP2 .* pingpong.linear rebuilds such a"
                                                r" DTensor .* only where it is a Parameter, and w is not one. Fixes: torch"
                                                r" 2.13"):
            pingpong.linear(x, w.detach())
        with pytest.raises(PingpongError, match=r"c: a DTensor whose local tensor is torch.float16 while its spec says"
                                                r" torch.float32.* pingpong.gemm_ does not rebuild it"):
            pingpong.gemm_(stale_parameter(mesh, (3, 8), Shard(1), 3).detach(), x.detach(), w.detach().t())
    assert runs == []
    g = torch.randn(3, 4, generator=torch.Generator().manual_seed(4)).half()  # this rank's columns of dy
    for call in range(2):
        y = pingpong.linear(x, w)
        assert y.placements == (Shard(1),) and y.dtype == torch.float16 and runs
        x64, w64 = x.to_local().double(), w.to_local().double()
        assert_close64(y.to_local(), x64 @ w64.T, f"y, call {call}", AUTOGRAD)
        y.backward(dt(mesh, (3, 8), Shard(1), 4))
        assert_close64(w.grad.to_local(), g.double().T @ x64, f"dw, call {call}", AUTOGRAD)
        w.grad = x.grad = None


def test_a_compiled_layer_rebuilds_a_stale_spec_parameter(mesh, runs):
    """torch.compile (fullgraph) of a pingpong Linear whose weight is a stale-spec Parameter:
    the parameter enters the graph with the float32 spec, is rebuilt in the graph, and the
    compiled forward and backward give eager's values."""
    from torch.distributed.tensor import Replicate, Shard

    import pingpong

    layer = pingpong.nn.Linear(6, 8, bias=False, activation="relu", dtype=torch.float16)
    layer.weight = stale_parameter(mesh, (8, 6), Shard(0), 1)
    x = dt(mesh, (3, 6), Replicate(), 2)
    want = layer(x)
    want.backward(torch.ones_like(want))
    want_grad, layer.weight.grad = layer.weight.grad.to_local().clone(), None
    torch._dynamo.reset()
    got = torch.compile(layer, backend="aot_eager", fullgraph=True)(x)
    got.backward(torch.ones_like(got))
    torch.testing.assert_close(got.to_local(), want.to_local(), rtol=0, atol=0)
    torch.testing.assert_close(layer.weight.grad.to_local(), want_grad, rtol=0, atol=0)
    assert got.placements == (Shard(1),) and runs


def test_the_check_cache_refuses_what_it_did_not_pass(mesh, runs, monkeypatch):
    """pingpong.distributed.check remembers a call that passed (a call alike costs one lookup,
    the full checks do not run again); a call that differs in any checked respect (dtype,
    placement under an activation, mesh, a plain tensor mixed in, the activation) is checked
    in full and refused, every time, before any work."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    import pingpong
    from pingpong import distributed

    full = []
    monkeypatch.setattr(distributed, "_check", lambda *a, _c=distributed._check: (full.append(1), _c(*a))[1])
    x, w = dt(mesh, (3, 6), Replicate(), 1), dt(mesh, (4, 6), Shard(0), 2)
    pingpong.linear(x, w, activation="relu")
    checked = len(full)
    pingpong.linear(dt(mesh, (3, 6), Replicate(), 3), dt(mesh, (4, 6), Shard(0), 4), activation="relu")
    assert len(full) == checked, "a call alike was checked again"
    before = len(runs)
    bad = {
        "a dtype": ((dt(mesh, (3, 6), Replicate(), 1, torch.float32), w, "relu"), r"x: dtype torch.float32"),
        "a K split under an activation": ((dt(mesh, (3, 6), Shard(1), 1), dt(mesh, (4, 6), Shard(1), 2), "relu"),
                                          r"x: placement Shard\(dim=1\) .* splits the contracted dim"),
        "another mesh": ((x, DTensor.from_local(torch.randn(4, 6).half(), init_device_mesh("cpu", (1, 2)),
                                                [Replicate(), Shard(0)], run_check=False), "relu"), r"one DeviceMesh"),
        "a plain tensor": ((x, torch.randn(4, 6).half(), "relu"), r"w: a plain torch.Tensor mixed"),
        "an activation": ((x, w, "tanh"), r"activation"),
    }
    for what, (args, match) in bad.items():
        for _ in range(2):
            with pytest.raises(PingpongError, match=match):
                pingpong.linear(*args[:2], activation=args[2])
    assert len(runs) == before, "a refused call ran the kernel"


def test_the_check_cache_misses_a_call_that_differs_in_one_respect(mesh, monkeypatch):
    """The checks' lookup (pingpong.distributed.checked: the routes of matmul, gemm, linear and
    each backward GEMM; `check`) hits only a call alike: a call that differs from one that
    passed in one respect the checks read (the op, a placement, a global shape, a local dtype,
    another argument's value, a keyword's name) is checked in full; an argument that does not
    hash is checked every time."""
    from torch.distributed.tensor import Replicate, Shard

    from pingpong import distributed

    monkeypatch.setattr(distributed, "_PASSED", {})
    full = []
    monkeypatch.setattr(distributed, "_check", lambda *a, _c=distributed._check: (full.append(1), _c(*a))[1])
    mm, gemm, linear = (getattr(torch.ops.pingpong, n).default for n in ("mm", "gemm", "linear"))
    a, b = dt(mesh, (4, 6), Replicate(), 1), dt(mesh, (6, 8), Shard(1), 2)
    distributed.checked(mm, (a, b, None))
    distributed.checked(mm, (dt(mesh, (4, 6), Replicate(), 3), dt(mesh, (6, 8), Shard(1), 4), None))
    assert len(full) == 1, "a call alike was checked again"
    differing = {
        "the op": (gemm, (a, b)),
        "a placement": (mm, (a, dt(mesh, (6, 8), Shard(0), 2), None)),
        "a global shape": (mm, (a, dt(mesh, (6, 10), Shard(1), 2), None)),
        "a local dtype": (mm, (dt(mesh, (4, 6), Replicate(), 1, torch.bfloat16),
                               dt(mesh, (6, 8), Shard(1), 2, torch.bfloat16), None)),
        "another argument's value": (mm, (a, b, torch.float32)),
    }
    for what, (op, args) in differing.items():
        before = len(full)
        distributed.checked(op, args)
        assert len(full) == before + 1, f"a call differing in {what} hit the cache"
    w = dt(mesh, (8, 6), Shard(0), 5)
    distributed.check(linear, a, w, bias=None)
    before = len(full)
    distributed.check(linear, a, w, activation=None)
    assert len(full) == before + 1, "a call differing in a keyword's name hit the cache"
    monkeypatch.setattr(distributed, "_check", lambda *a: full.append(1))  # the lookup alone
    before = len(full)
    for _ in range(2):
        distributed.check(mm, a, b, [None])
    assert len(full) == before + 2, "a call with an argument that does not hash was not checked every time"


def test_the_ops_take_their_dtensors_flat(mesh):
    """pingpong's ops (no list among their arguments) are registered as taking their tensors
    flat, so DTensor skips pytree's flatten on each call."""
    from torch.distributed.tensor import DTensor

    from pingpong import distributed

    infos = DTensor._op_dispatcher.sharding_propagator.op_to_schema_info
    for op in distributed.LAYOUTS:
        assert not infos[op].needs_pytree, op


def test_parallelize_then_replace_is_refused(mesh):
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    import pingpong

    layer = torch.nn.Linear(6, 4)
    parallelize_module(layer, mesh, ColwiseParallel())
    with pytest.raises(PingpongError, match="layer: its parameters are DTensors.*replace the Linears first"):
        pingpong.nn.Linear.from_linear(layer)


def test_the_rule_table():
    """The strategies of one mesh dim, as aten.mm's einsum rule lists them; none that split K or
    keep a Partial under an activation; none that split a WHOLE letter or a WHOLE operand."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    from pingpong import distributed as d

    R, S = Replicate(), Shard
    shaped = [torch.empty(8, 6, device="meta"), torch.empty(6, 4, device="meta")]
    table = [(o, (i["a"], i["b"])) for o, i in d.rules(d._mm_layout(*shaped))]
    assert table == [(R, (R, R)), (Partial(), (S(1), S(0))), (S(0), (S(0), R)), (S(1), (R, S(1))),
                     *[(Partial(op), p) for op in d.LINEAR_REDUCE_OPS for p in ((Partial(op), R), (R, Partial(op)))]]
    relu = d._gemm_layout(*shaped, bias=torch.empty(4, device="meta"), activation="relu")
    assert [(o, i["bias"]) for o, i in d.rules(relu)] == [(R, R), (S(0), R), (S(1), S(0))]
    grouped = d.Layout("mn", {"a": d.OperandDims("mk"), "b": d.OperandDims("gkn"), "offs": d.OperandDims("g", d.WHOLE)},
                       whole="mg")
    for out, ins in d.rules(grouped):
        assert out != S(0) and ins["offs"] == R and ins["b"] != S(0), (out, ins)
    # grouped_mm's registered layouts: the offsets' concatenated dim and the group dim never split
    meta = lambda *s, dtype=torch.bfloat16: torch.empty(s, device="meta", dtype=dtype)  # noqa: E731
    offs = meta(3, dtype=torch.int32)
    forms = {(meta(12, 6), meta(3, 6, 4)): ("mn", "mg"), (meta(3, 8, 6), meta(6, 12)): ("mn", "gn"),
             (meta(8, 12), meta(12, 4)): ("gmn", "gk")}
    for (a, b), (out, whole) in forms.items():
        lay = d._grouped_layout(a, b, offs)
        assert (lay.out, lay.whole, lay.operands["offs"].role) == (out, whole, d.WHOLE)
        for o, ins in d.rules(lay):
            assert ins["offs"] == R and all(not isinstance(p, Shard) or lay.operands[n].dims[p.dim] not in whole
                                            for n, p in ins.items() if n != "offs"), (o, ins)
    assert d._grouped_layout(meta(3, 8, 6), meta(3, 6, 4)).out == "Amn"  # equal groups: a batch
    # scaled_mm: row-wise scales follow their rows / columns; block-wise scales keep K (and a
    # 128×128 grid's N) whole, so no strategy splits K or leaves a Partial sum of blocks
    a8, b8 = meta(8, 256, dtype=torch.float8_e4m3fn), meta(256, 384, dtype=torch.float8_e4m3fn)
    row = d._scaled_mm_layout(a8, b8, meta(8, 1, dtype=torch.float32), meta(1, 384, dtype=torch.float32))
    assert (row.operands["scale_a"].dims, row.operands["scale_b"].dims, row.whole) == ("m1", "1n", "")
    assert (S(0), {"a": S(0), "b": R, "scale_a": S(0), "scale_b": R}) in d.rules(row)
    block = d._scaled_mm_layout(a8, b8, meta(8, 2, dtype=torch.float32), meta(2, 3, dtype=torch.float32))
    assert block.whole == "kn"
    for o, ins in d.rules(block):
        assert o != S(1) and ins["a"] != S(1) and not isinstance(ins["b"], Shard), (o, ins)  # K, N whole
    assert (S(0), {"a": S(0), "b": R, "scale_a": S(0), "scale_b": R}) in d.rules(block)
    # K = 128: the block scales (8, 1) and (1, 3) carry no K letter; still K and N whole (a
    # rank's columns would take another block's scale, or a K split a partial block)
    a128, b128 = meta(8, 128, dtype=torch.float8_e4m3fn), meta(128, 384, dtype=torch.float8_e4m3fn)
    assert d._scaled_mm_layout(a128, b128, meta(8, 1, dtype=torch.float32), meta(1, 3, dtype=torch.float32)).whole == "kn"
    assert d._scaled_mm_layout(a128, b128, meta(8, 1, dtype=torch.float32), meta(1, 384, dtype=torch.float32)).whole == ""
    tensor = d._scaled_mm_layout(a8, b8, meta(dtype=torch.float32), meta(dtype=torch.float32))
    assert tensor.operands["scale_a"].dims == "" and Partial() in [o for o, _ in d.rules(tensor)]
    assert d.product((4, 1, 8, 6), (3, 6, 5)) == ("A1mk", "Bkn", "ABmn")
    assert d.follow("ABmn", (8, 1)) == "m1" and d.follow("ABmn", (5,)) == "n"


@pytest.mark.slow
def test_import_pingpong_after_torch_distributed_tensor_registers_the_rules():
    """The API loads on its first use (`import pingpong` alone loads no torch): from then on the
    sharding rules are registered."""
    code = ("import sys, torch.distributed.tensor, pingpong; pingpong.matmul; "
            "assert 'pingpong.distributed' in sys.modules, 'the rules are not registered'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.slow
def test_import_pingpong_does_not_load_torch_distributed_and_a_first_dtensor_call_registers_the_rules():
    code = f"""
import sys
sys.path.insert(0, {HERE!r})
import pingpong
pingpong.matmul  # the API loaded before torch.distributed.tensor
assert "torch.distributed.tensor" not in sys.modules and "pingpong.distributed" not in sys.modules
import torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.distributed.tensor import DTensor, Shard, Replicate, init_device_mesh
from conftest import interpret_plans
interpret_plans(setattr)
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
mesh = init_device_mesh("cpu", (2,))
a = DTensor.from_local(torch.randn(4, 6).half(), mesh, [Shard(0)])
b = DTensor.from_local(torch.randn(6, 4).half(), mesh, [Replicate()])
assert "pingpong.distributed" not in sys.modules
assert pingpong.matmul(a, b).placements == (Shard(0),)
assert "pingpong.distributed" in sys.modules
dist.destroy_process_group()
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
