"""pingpong in torch's async TP (pingpong.integration.async_tp, docs/distributed.md "Async TP"), on the CPU.

- The post-grad pass: a sequence-parallel MLP of pingpong Linears (SequenceParallel norm,
  ColwiseParallel(input_layouts=Shard(1)), RowwiseParallel(output_layouts=Shard(1))) compiled
  with inductor on torch's fake process group (world size 2); its forward and backward graphs
  after the pass hold pingpong's fused ops and no all-gather or reduce-scatter. The pass's
  conditions on the CPU: NCCL's availability is patched to True and torch's symmetric-memory
  test mode stands for "enabled for the group" (both only in the test that needs them).
- The mm-out callable: chunks of an output written as torch's implementations write them
  (row chunks in place, a column chunk through a copy), the rest untouched, against float64.
- The fused ops' fake implementations: pingpong's checks on the gathered shapes.

pingpong's kernels are the portable kernel under Triton's interpreter (conftest), fp16.
"""

import collections

import pytest
import torch

if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available in this torch build", allow_module_level=True)

import torch.distributed as dist  # noqa: E402

from closeness import AUTOGRAD, assert_close64  # noqa: E402
from pingpong import PingpongError  # noqa: E402


def randn(*shape, seed, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


class MLP(torch.nn.Module):
    """relu after up's Linear, or fused into it (`fused`: pingpong's backward then makes up's
    dx from the activation's derivative, rows that are no reshape of the gathered gradient)."""

    def __init__(self, fused=False, hidden=16, inner=32):
        import pingpong

        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden, dtype=torch.float16)
        self.up = pingpong.nn.Linear(hidden, inner, dtype=torch.float16, activation="relu" if fused else None)
        self.down = pingpong.nn.Linear(inner, hidden, dtype=torch.float16)
        self.fused = fused

    def forward(self, x):
        h = self.up(self.norm(x))
        return self.down(h if self.fused else torch.relu(h))


def sequence_parallel_mlp(mesh, fused=False):
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    torch.manual_seed(0)
    model = MLP(fused)
    return parallelize_module(model, mesh, {"norm": SequenceParallel(), "up": ColwiseParallel(input_layouts=Shard(1)),
                                            "down": RowwiseParallel(output_layouts=Shard(1))})


def compiled_graphs(model, x, monkeypatch, micro_pipeline_tp=True):
    """(forward, backward) post-grad graphs as strings' node targets, after inductor's passes
    with pingpong's enabled, and the compiled step's output."""
    import torch.distributed._symmetric_memory as symm_mem
    from torch._inductor import config

    import pingpong.distributed

    graphs = []

    def grab(graph):
        graphs.append(collections.Counter(str(n.target) for n in graph.nodes if n.op == "call_function"))

    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)  # the pass's condition, as on NCCL
    monkeypatch.setattr(config, "_micro_pipeline_tp", micro_pipeline_tp)
    monkeypatch.setattr(config, "post_grad_custom_post_pass", None)
    pingpong.distributed.enable_async_tp()
    monkeypatch.setattr(config, "post_grad_custom_post_pass", _Chain(config.post_grad_custom_post_pass, grab))
    torch._dynamo.reset()
    with symm_mem._test_mode():  # torch's stand-in for "symmetric memory enabled for the group"
        out = torch.compile(model)(x)
        out.float().sum().backward()
    assert len(graphs) == 2, f"{len(graphs)} graphs (a forward and a backward expected)"
    return graphs, out


class _Chain:
    """One custom pass (torch 2.11 takes one): what enable_async_tp set (one pass or a list),
    then the test's grab."""

    def __init__(self, first, then):
        self.passes = [*(first if isinstance(first, list) else [first]), then]

    def __call__(self, graph):
        for p in self.passes:
            p(graph)

    def uuid(self):
        return None


GATHER, SCATTER = "_c10d_functional.all_gather_into_tensor.default", "_c10d_functional.reduce_scatter_tensor.default"
FUSED_AG, FUSED_RS = "pingpong.all_gather_gemm.default", "pingpong.gemm_reduce_scatter.default"


@pytest.mark.slow
@pytest.mark.parametrize("fused", [False, True], ids=["relu_after", "relu_fused"])
def test_the_pass_fuses_a_sequence_parallel_mlp(mesh, interpreted_kernels, monkeypatch, fused):
    """Forward: the gathered x feeds pingpong.linear (up), and down's linear feeds the
    reduce-scatter; backward: the gathered gradient feeds down's dx (reshape, pingpong.mm,
    reshape) and up's dx feeds the reduce-scatter (pingpong.mm of rows then a reshape). Each
    becomes one fused op; no all-gather or reduce-scatter is left, and the compiled step runs
    (the ops' unfused CPU path)."""
    import pingpong.integration.async_tp as async_tp
    from torch.distributed.tensor import DTensor, Shard

    model = sequence_parallel_mlp(mesh, fused)
    x = DTensor.from_local(randn(2, 4, 16, seed=1).requires_grad_(), mesh, [Shard(1)])
    async_tp.FUSED.clear()
    (forward, backward), out = compiled_graphs(model, x, monkeypatch)
    for name, graph in (("forward", forward), ("backward", backward)):
        assert graph[FUSED_AG] == 1 and graph[FUSED_RS] == 1, (name, graph)
        assert graph[GATHER] == 0 and graph[SCATTER] == 0, (name, graph)
    assert forward["pingpong.linear.default"] == 0, forward  # both linears were taken into the fused ops
    assert backward["pingpong.mm.default"] == 2, backward  # the two dW products stay (no collective next to them)
    assert async_tp.FUSED == {"all_gather_gemm": 2, "gemm_reduce_scatter": 2}, async_tp.FUSED
    seen = list(async_tp.GRAPHS)[-2:]  # the pass's own account of the two graphs
    assert [(c["pingpong.all_gather_gemm"], c["pingpong.gemm_reduce_scatter"], c["all_gather"]) for c in seen] == [
        (1, 1, 0)] * 2, seen
    assert out.shape == (2, 4, 16)


@pytest.mark.slow
def test_without_torch_switch_or_symmetric_memory_nothing_is_fused(mesh, interpreted_kernels, monkeypatch):
    """The pass acts only with torch._inductor.config._micro_pipeline_tp on and symmetric
    memory enabled for the group (outside torch's test mode it is not, here)."""
    import torch.distributed._symmetric_memory as symm_mem
    import pingpong.integration.async_tp as async_tp
    from torch.distributed.tensor import DTensor, Shard

    model = sequence_parallel_mlp(mesh)
    x = DTensor.from_local(randn(2, 4, 16, seed=2).requires_grad_(), mesh, [Shard(1)])
    async_tp.FUSED.clear()
    (forward, backward), _ = compiled_graphs(model, x, monkeypatch, micro_pipeline_tp=False)
    assert forward[GATHER] == 1 and forward[FUSED_AG] == 0 and not async_tp.FUSED, forward
    monkeypatch.setattr(symm_mem, "_test_mode", lambda: __import__("contextlib").nullcontext())
    (forward, backward), _ = compiled_graphs(model, x, monkeypatch)
    assert forward[GATHER] == 1 and backward[SCATTER] == 1 and not async_tp.FUSED, (forward, backward)


def test_a_weight_made_after_the_gather_is_raised_before_the_fused_op(mesh, monkeypatch):
    """A linear's weight computed after the all-gather (a cast, a scale: any node, not a graph
    input): the fused op takes the weight's transpose, made before the op, so the weight's
    nodes must come before it too; the graph stays in topological order."""
    import torch.distributed._symmetric_memory as symm_mem
    from torch.fx.experimental.proxy_tensor import make_fx

    import pingpong.distributed  # noqa: F401  (the ops)
    import pingpong.integration.async_tp as async_tp

    group, c10d = dist.group.WORLD.group_name, torch.ops._c10d_functional

    def step(x, w0, bias):  # the gathered pattern DTensor traces for Shard(1) -> Replicate()
        rows = c10d.wait_tensor(c10d.all_gather_into_tensor(x, 2, group))
        gathered = torch.cat(torch.ops.aten.split.Tensor(rows, 2), dim=1)
        return torch.ops.pingpong.linear(gathered, w0 * 2, bias, None)

    gm = make_fx(step, tracing_mode="fake")(randn(2, 4, 16, seed=1), randn(24, 16, seed=2), randn(24, seed=3))
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    async_tp.FUSED.clear()
    with symm_mem._test_mode():
        async_tp.fuse(gm.graph)
    assert async_tp.FUSED == {"all_gather_gemm": 1}, async_tp.FUSED
    gm.graph.lint()  # every node after its inputs


def test_enable_keeps_the_users_pass(monkeypatch):
    from torch._inductor import config

    import pingpong.distributed

    seen = []

    def mine(graph):
        seen.append(graph)

    monkeypatch.setattr(config, "post_grad_custom_post_pass", mine)
    pingpong.distributed.enable_async_tp()
    pingpong.distributed.enable_async_tp()  # idempotent
    current = config.post_grad_custom_post_pass
    passes = current if isinstance(current, list) else [current]
    assert len(passes) <= 2 and (mine in passes or getattr(current, "before", None) is mine), passes
    for p in passes:
        p(torch.fx.Graph())
    assert len(seen) == 1
    pingpong.distributed.disable_async_tp()
    assert config.post_grad_custom_post_pass is mine


@pytest.mark.parametrize("seed", [11, 12])
def test_mm_out_writes_the_chunks_torch_hands_it(interpreted_kernels, seed):
    """As _fused_all_gather_matmul_impl calls it: each rank's rows into its row chunk of the
    output (in place); as _fused_matmul_reduce_scatter_impl's last-dim path: a column chunk (not
    contiguous: through a copy). Bias and activation per chunk; what no chunk covers stays NaN."""
    from pingpong.integration.async_tp import mm_out

    world, M, K, N = 2, 24, 32, 40
    a, b, bias = randn(world * M, K, seed=seed), randn(K, N, seed=seed + 100), randn(N, seed=seed + 200)
    ref = torch.relu(a.double() @ b.double() + bias.double())
    out = torch.full((world * M, N), float("nan"), dtype=torch.float16)
    for rank, (rows, chunk) in enumerate(zip(a.chunk(world), out.chunk(world))):
        assert chunk.is_contiguous()
        mm_out(rows, b, bias=bias, activation="relu", out=chunk)
        done = out[:(rank + 1) * M]
        assert_close64(done, ref[:(rank + 1) * M], f"rows of ranks 0..{rank}", AUTOGRAD)
        assert out[(rank + 1) * M:].isnan().all(), f"rank {rank}'s chunk wrote past its rows"
    cols = torch.full((world * M, N), float("nan"), dtype=torch.float16)
    chunk = cols.chunk(2, dim=1)[1]
    assert not chunk.is_contiguous()
    mm_out(a, b[:, N // 2:], out=chunk)
    assert_close64(chunk, a.double() @ b.double()[:, N // 2:], "column chunk", AUTOGRAD)
    assert cols[:, :N // 2].isnan().all()


def test_fused_ops_check_the_gathered_shapes(mesh):
    """The fake implementations (meta tensors): the gathered / scattered shapes and layouts of
    torch's implementations, and pingpong's argument errors on the gathered shapes."""
    import pingpong.integration.async_tp  # noqa: F401

    group = dist.group.WORLD.group_name
    ag, rs = torch.ops.pingpong.all_gather_gemm.default, torch.ops.pingpong.gemm_reduce_scatter.default
    meta = dict(device="meta", dtype=torch.float16)
    x, w = torch.empty(2, 4, 16, **meta), torch.empty(16, 24, **meta)
    a, (y,) = ag(x, [w], [None], ["relu"], 1, group)
    assert a.shape == (2, 8, 16) and y.shape == (2, 8, 24)
    assert y.stride() == (24, 48, 1)  # torch's layout: the gathered dim leads in memory
    assert rs(torch.empty(2, 8, 24, **meta), w.t(), torch.empty(16, **meta), "sum", 1, group).shape == (2, 4, 16)
    with pytest.raises(PingpongError, match="b: .*"):
        ag(x, [torch.empty(8, 24, **meta)], [None], [None], 1, group)  # K 16 against 8
    with pytest.raises(PingpongError, match="gather_dim: 2 "):
        ag(x, [w], [None], [None], 2, group)
    with pytest.raises(PingpongError, match="activation"):
        ag(x, [w], [None], ["tanhh"], 1, group)
    with pytest.raises(PingpongError, match="does not split over the 2 ranks"):
        rs(torch.empty(2, 7, 24, **meta), w.t(), None, "sum", 1, group)
    with pytest.raises(PingpongError, match="reduce_op"):
        rs(torch.empty(2, 8, 24, **meta), w.t(), None, "max", 1, group)
