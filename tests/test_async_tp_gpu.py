"""pingpong's fused async-TP ops on two GPUs (NCCL, symmetric memory), bf16 through the Hopper
kernel: each against the unfused collective and product, and against float64; a compiled
sequence-parallel MLP of pingpong Linears under torch's async TP: its graphs hold the fused ops
and no all-gather or reduce-scatter, its output and gradients as eager's.

    python -m pytest -q tests/test_async_tp_gpu.py        # spawns the two ranks
    python tests/test_async_tp_gpu.py OUTDIR               # the ranks alone: OUTDIR/rank<r>.json

Without NVLink multicast: NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 (set here when
unset; torch's implementations copy chunks between peers, they need no multicast).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from closeness import RANKS_BF16, RANKS_COMPILED, assert_close64

pytestmark = pytest.mark.gpu
WORLD = 2
HERE = os.path.dirname(os.path.abspath(__file__))




def randn(*shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g).bfloat16()


# ----------------------------------------------------------------------------- scenarios (each rank)


def scenario_all_gather_gemm(rank, group):
    """x (2, 2·S, K) split along the sequence: all_gather_gemm's gathered x equals the
    all-gather's bit for bit; each product (two weights, a bias, silu) within float64 bounds and
    no further from float64 than the unfused product on the gathered x."""
    import torch.nn.functional as F

    import pingpong
    import pingpong.integration.async_tp  # noqa: F401  (defines the two ops)

    S, K, N = 512, 1024, 768
    x = randn(2, WORLD * S, K, seed=1)  # the same on every rank: the reference
    ws, bias = [randn(N, K, seed=2), randn(2 * N, K, seed=3)], randn(N, seed=4)
    shard = x[:, rank * S:(rank + 1) * S].contiguous()
    a, ys = torch.ops.pingpong.all_gather_gemm(shard, [w.t() for w in ws], [bias, None], ["silu", None], 1,
                                                group.group_name)
    torch.cuda.synchronize()
    assert torch.equal(a, x), "the gathered x differs from the all-gather"
    refs = [F.silu(x.double() @ ws[0].double().t() + bias.double()), x.double() @ ws[1].double().t()]
    unfused = [pingpong.linear(x, ws[0], bias, "silu"), pingpong.linear(x, ws[1])]
    for i, (y, ref, plain) in enumerate(zip(ys, refs, unfused)):
        err = assert_close64(y, ref, f"product {i}", RANKS_BF16)
        plain_err = assert_close64(plain, ref, f"unfused product {i}", RANKS_BF16)
        assert err <= 1.5 * plain_err + 1e-4, f"product {i}: {err:.2e} against the unfused {plain_err:.2e}"
    a, _ = torch.ops.pingpong.all_gather_gemm(shard, [ws[0].t()], [None], [None], 1, group.group_name, return_a=False)
    assert a is None


def scenario_gemm_reduce_scatter(rank, group):
    """Each rank's partial product (its K columns of h, its rows of w) reduce-scattered along the
    sequence: this rank's rows of the full product, within float64 bounds and no further from
    float64 than the unfused reduce-scatter."""
    import torch.distributed._functional_collectives as funcol

    import pingpong
    import pingpong.integration.async_tp  # noqa: F401  (defines the two ops)

    S, K, N = 512, 2048, 1024
    h, w, bias = randn(2, WORLD * S, K, seed=5), randn(N, K, seed=6), randn(N, seed=7)
    k = K // WORLD
    h_part, w_part = h[..., rank * k:(rank + 1) * k].contiguous(), w[:, rank * k:(rank + 1) * k].contiguous()
    got = torch.ops.pingpong.gemm_reduce_scatter(h_part, w_part.t(), bias / WORLD, "sum", 1,
                                                 group.group_name)
    plain = funcol.wait_tensor(funcol.reduce_scatter_tensor(
        pingpong.linear(h_part, w_part, bias / WORLD).movedim(1, 0).contiguous(), "sum", 0, group))
    plain = plain.movedim(0, 1)
    ref = (h.double() @ w.double().t() + bias.double())[:, rank * S:(rank + 1) * S]
    assert got.shape == ref.shape, (got.shape, ref.shape)
    err, plain_err = assert_close64(got, ref, "fused", RANKS_BF16), assert_close64(plain, ref, "unfused", RANKS_BF16)
    assert err <= 1.5 * plain_err + 1e-4, f"{err:.2e} against the unfused {plain_err:.2e}"


def scenario_compiled_sequence_parallel_mlp(rank, group):
    """torch.compile of a sequence-parallel MLP of pingpong Linears with torch's async TP on and
    pingpong's pass enabled: forward and backward graphs each hold one all_gather_gemm and one
    gemm_reduce_scatter and no all-gather or reduce-scatter; output, input gradient and every
    parameter's gradient as the eager model's (same weights), within bf16 bounds of it. The
    gradients are read from the leaves: DTensor.from_local's result is not one (its .grad stays
    None), the local tensor it was made from is."""
    import torch._inductor.config as inductor_config
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    import pingpong
    import pingpong.integration.async_tp as async_tp
    import pingpong.distributed

    H, I, S = 1024, 2048, 512
    mesh = DeviceMesh("cuda", list(range(WORLD)))

    def build():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.LayerNorm(H), pingpong.nn.Linear(H, I, activation="silu"),
                                    pingpong.nn.Linear(I, H)).cuda().bfloat16()
        return parallelize_module(model, mesh, {"0": SequenceParallel(), "1": ColwiseParallel(input_layouts=Shard(1)),
                                                "2": RowwiseParallel(output_layouts=Shard(1))})

    x = randn(2, WORLD * S, H, seed=8)
    shard = x[:, rank * S:(rank + 1) * S].contiguous()
    g = randn(2, S, H, seed=9 + rank)
    eager, compiled = build(), build()
    leaf_e, leaf_c = shard.clone().requires_grad_(), shard.clone().requires_grad_()
    ye = eager(DTensor.from_local(leaf_e, mesh, [Shard(1)]))
    (ye.float() * g.float()).sum().backward()
    inductor_config._micro_pipeline_tp = True
    inductor_config.fx_graph_cache = False
    pingpong.distributed.enable_async_tp()
    async_tp.GRAPHS.clear()
    try:
        yc = torch.compile(compiled)(DTensor.from_local(leaf_c, mesh, [Shard(1)]))
        (yc.float() * g.float()).sum().backward()
        torch.cuda.synchronize()
    finally:
        inductor_config._micro_pipeline_tp = False
        pingpong.distributed.disable_async_tp()
    graphs = list(async_tp.GRAPHS)
    assert len(graphs) == 2, graphs
    for counts in graphs:
        assert counts["pingpong.all_gather_gemm"] == 1 and counts["pingpong.gemm_reduce_scatter"] == 1, counts
        assert counts["all_gather"] == 0 and counts["reduce_scatter"] == 0, counts
    ye, yc = (t.to_local() if isinstance(t, DTensor) else t for t in (ye, yc))
    assert_close64(yc, ye.double(), "output", RANKS_COMPILED)
    grads = [("dx", leaf_c.grad, leaf_e.grad)] + [
        (f"d{name}", pc.grad, pe.grad) for (name, pc), pe in zip(compiled.named_parameters(), eager.parameters())]
    for what, got, want in grads:
        assert got is not None and want is not None, f"{what}: no gradient (compiled {got is not None}, " \
                                                     f"eager {want is not None})"
        got, want = (t.full_tensor() if isinstance(t, DTensor) else t for t in (got, want))  # a Partial one summed
        assert_close64(got, want.double(), what, RANKS_COMPILED)
    return f"graphs {[dict(c) for c in graphs]}"


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items() if name.startswith("scenario_")}


# ----------------------------------------------------------------------------- the ranks


def rank_main(rank, port, outdir, names):
    import warnings

    import torch.distributed as dist

    from distributed_ranks import record

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=WORLD, device_id=torch.device("cuda", rank))
    try:
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group

        group = dist.group.WORLD
        with warnings.catch_warnings():  # deprecated on torch 2.13; its async-TP pass still checks it
            warnings.simplefilter("ignore", FutureWarning)
            enable_symm_mem_for_group(group.group_name)
        record(outdir, rank, {name: SCENARIOS[name] for name in names}, rank, group)
    finally:
        dist.destroy_process_group()


def main(argv):
    import torch.multiprocessing as mp

    from distributed_ranks import free_port

    outdir, names = argv[0], argv[1:] or list(SCENARIOS)
    mp.spawn(rank_main, args=(free_port(), outdir, names), nprocs=WORLD)


# ----------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    if torch.cuda.device_count() < WORLD:
        pytest.skip(f"needs {WORLD} GPUs, {torch.cuda.device_count()} here")
    out = tmp_path_factory.mktemp("async_tp_ranks")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(out)], capture_output=True, text=True,
                          timeout=600)
    results = []
    for r in range(WORLD):
        path = out / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no results (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        results.append(json.loads(path.read_text()))
    return results


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_two_gpus(ranks, scenario):
    for r, results in enumerate(ranks):
        got = results.get(scenario, "not run")
        assert got.startswith("ok"), f"rank {r}, {scenario}:\n{got}"


if __name__ == "__main__":
    sys.path[:0] = [HERE, os.path.join(HERE, "..", "src")]
    main(sys.argv[1:])
