"""benchmarks/async_tp_probe.py on the CPU: the fused ops it times (`fused_ops`) are the ones a
compiled block of dist_llama's sequence-parallel step makes (pingpong's pass on torch's fake
process group: each op's gathered or scattered operand, its B operands' shapes and layouts), and
its cuBLAS chunk product replaces pingpong's mm_out only while asked."""

import collections
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available in this torch build", allow_module_level=True)

import torch.distributed as dist  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def probe():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the probe imports dist_llama
    try:
        spec = importlib.util.spec_from_file_location("async_tp_probe", ROOT / "benchmarks" / "async_tp_probe.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _layout(t) -> str:
    return "t" if t.stride(-1) != 1 else "n"


def _val(node):
    """A node's value; for the nodes the pass adds without one: the restrided operand's
    (force_stride_order keeps the shape) and the transposed weight (permute [1, 0])."""
    if "val" in node.meta:
        return node.meta["val"]
    if node.target is torch.ops.aten.permute.default and list(node.args[1]) == [1, 0]:
        return _val(node.args[0]).t()
    return _val(node.args[0])


def fused_nodes(graph) -> list:
    """(kind, operand shape, [(K, N, "n" + B's layout)…]) of each pingpong fused op in a graph."""
    out = []
    for n in graph.nodes:
        if n.target is torch.ops.pingpong.all_gather_gemm.default:
            shard, bs = _val(n.args[0]), [_val(b) for b in n.args[1]]
            out.append(("ag", tuple(shard.shape), tuple((*b.shape, "n" + _layout(b)) for b in bs)))
        elif n.target is torch.ops.pingpong.gemm_reduce_scatter.default:
            a, b = _val(n.args[0]), _val(n.args[1])
            out.append(("rs", tuple(a.shape), ((*b.shape, "n" + _layout(b)),)))
    return out


def test_the_probe_times_the_fused_ops_of_the_step(probe, mesh, interpreted_kernels, monkeypatch):
    """One block of dist_llama's Llama (pingpong's Linears, the sequence-parallel plan, DTensor
    stream) compiled with pingpong's pass, forward and backward: its fused ops are the probe's,
    shape for shape (the chunk products' (M, N, K) follow: rows of one rank × each B's N × K)."""
    import torch.distributed._symmetric_memory as symm_mem
    from torch._inductor import config

    import pingpong.distributed

    dl = sys.modules["dist_llama"]
    c = dl.Config(vocab=64, hidden=64, inter=128, layers=1, heads=8, kv_heads=4, max_pos=64)
    batch, seq = 2, 16
    seen = []

    class Grab:
        def __init__(self, first):
            self.first = first

        def __call__(self, graph):
            self.first(graph)
            seen.extend(fused_nodes(graph))

        def uuid(self):
            return None

    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(config, "_micro_pipeline_tp", True)
    monkeypatch.setattr(config, "post_grad_custom_post_pass", None)
    pingpong.distributed.enable_async_tp()
    monkeypatch.setattr(config, "post_grad_custom_post_pass", Grab(config.post_grad_custom_post_pass))
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = dl.Llama(c).to(torch.float16)
    dl.swap(model)
    dl.sequence_parallel(model, mesh, True)
    model.layers[0].compile(dynamic=False)
    ids = torch.randint(0, c.vocab, (batch, seq), generator=torch.Generator().manual_seed(1))
    with symm_mem._test_mode():
        model(ids).float().sum().backward()
    torch._dynamo.reset()

    want = [(op["kind"], tuple(op["a"]), tuple(tuple(b) for b in op["bs"])) for op in probe.fused_ops(c, batch, seq, 2)]
    assert collections.Counter(seen) == collections.Counter(want), (seen, want)
    for op in probe.fused_ops(c, batch, seq, 2):
        assert op["chunks"] == [(batch * seq // 2, n, k) for k, n, _ in op["bs"]], op


def test_the_cublas_chunk_product_is_patched_in_only_while_asked(probe):
    from pingpong.integration import async_tp

    mine = async_tp.mm_out
    with probe.chunk_product("pingpong"):
        assert async_tp.mm_out is mine
    with pytest.raises(RuntimeError):
        with probe.chunk_product("pp+cublas"):
            assert async_tp.mm_out is probe._aten_mm_out
            a, b = torch.randn(4, 8), torch.randn(8, 3)
            out = torch.empty(4, 3)
            async_tp.mm_out(a, b, out=out)
            torch.testing.assert_close(out, a @ b)
            raise RuntimeError("left by an error")
    assert async_tp.mm_out is mine
    with pytest.raises(ValueError, match="bias"):
        probe._aten_mm_out(a, b, bias=torch.zeros(3), out=out)


def test_selection_lists_each_chunk_product_and_its_unchunked_config(probe, capsys):
    """--selection (no GPU): one line per chunk product of the step's fused ops, the chunk's
    config beside the unchunked product's; the k / v chunks (2048 × 512 × 4096) split K in two
    where the unchunked product does not (128 tiles fill a wave by themselves)."""
    assert probe.main(["--selection", "NVIDIA H200"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    c = sys.modules["dist_llama"].config(type("A", (), dict(cpu_smoke=False, hidden=4096, quick=False, layers=4)))
    assert len(lines) == sum(len(op["chunks"]) for op in probe.fused_ops(c, 2, 2048, 2)) == 9
    kv = [line for line in lines if "2048x512x4096" in line]
    assert len(kv) == 2 and all("split 2" in line.split(" | ")[0] and "split 1" in line.split(" | ")[1] for line in kv)
