"""pingpong's ops on DTensors on one Hopper GPU: a one-rank NCCL process group, DTensor's mesh
of that one device, bf16 through the real Hopper kernel. Each placement's result against the
float64 reference (norm and elementwise bounds) and against torch's ops on the same DTensors
(placements). Two-GPU runs: benchmarks/dist_llama.py under torchrun (docs/distributed.md)."""

import pytest
import torch

import pingpong
from closeness import RANKS_BF16, assert_close64

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def mesh():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("nccl", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield init_device_mesh("cuda", (1,))
    finally:
        dist.destroy_process_group()




def randn(*shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g).bfloat16()


def test_products_on_a_one_gpu_mesh(mesh):
    import torch.nn.functional as F
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    a, b, bias = randn(256, 512, seed=1), randn(512, 384, seed=2), randn(384, seed=3)
    assert pingpong.path_for(a, b) == "hopper"
    ref = a.double() @ b.double()
    R = Replicate()
    for pa, pb in [(R, R), (Shard(0), R), (R, Shard(1)), (Shard(1), Shard(0))]:
        da, db = distribute_tensor(a, mesh, [pa]), distribute_tensor(b, mesh, [pb])
        got, want = pingpong.matmul(da, db), torch.mm(da, db)
        assert got.placements == want.placements, (pa, pb, got.placements, want.placements)
        assert_close64(got.full_tensor(), ref, f"matmul {pa} {pb}", RANKS_BF16)
    da, db = distribute_tensor(a, mesh, [Shard(1)]), distribute_tensor(b, mesh, [Shard(0)])
    assert pingpong.gemm(da, db, bias=distribute_tensor(bias, mesh, [R])).placements == (Partial(),)
    got = pingpong.gemm(distribute_tensor(a, mesh, [Shard(0)]), distribute_tensor(b, mesh, [R]),
                        bias=distribute_tensor(bias, mesh, [R]), activation="silu")
    assert_close64(got.full_tensor(), F.silu(ref + bias.double()), "gemm silu", RANKS_BF16)
    x, w = randn(2, 128, 512, seed=4), randn(384, 512, seed=5)
    dx, dw, dbias = (distribute_tensor(t, mesh, [p]) for t, p in ((x, R), (w, Shard(0)), (bias, Shard(0))))
    dx.requires_grad_()
    dw.requires_grad_()
    y = pingpong.linear(dx, dw, dbias)
    assert y.placements == F.linear(dx, dw, dbias).placements == (Shard(2),)
    assert_close64(y.full_tensor(), x.double() @ w.double().t() + bias.double(), "linear colwise", RANKS_BF16)
    g = randn(2, 128, 384, seed=6)
    (y.full_tensor() * g).sum().backward()
    assert_close64(dw.grad.full_tensor(), g.double().reshape(-1, 384).t() @ x.double().reshape(-1, 512), "dW", RANKS_BF16)
    assert_close64(dx.grad.full_tensor(), g.double() @ w.double(), "dX", RANKS_BF16)


@pytest.mark.parametrize("recipe", ["row", "tensor", "block"])
def test_fp8_training_linear_on_a_one_gpu_mesh(mesh, recipe):
    """pingpong.fp8_training.fp8_linear on DTensors (pingpong.distributed.fp8_linear) through the
    real FP8 kernels: colwise, rowwise and a token split on the one-GPU mesh equal the plain
    call (one rank holds every shard, so every scale is the unsharded one), forward and both
    gradients, with the placements of docs/distributed.md's FP8 table."""
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    from pingpong.fp8_training import fp8_linear

    R = Replicate()
    x, w, bias, g = randn(2, 128, 512, seed=7), randn(384, 512, seed=8), randn(384, seed=9), randn(2, 128, 384, seed=10)
    plain = [t.clone().requires_grad_() for t in (x, w, bias)]
    want = fp8_linear(*plain, recipe)
    want.backward(g)
    for px, pw, py, grads in [(R, Shard(0), Shard(2), (Partial(), Shard(0), Shard(0))),
                              (Shard(2), Shard(1), Partial(), (Shard(2), Shard(1), R)),
                              (Shard(1), R, Shard(1), (Shard(1), Partial(), Partial()))]:
        pb = Shard(0) if pw == Shard(0) else R
        args = [distribute_tensor(t.clone(), mesh, [p]).requires_grad_() for t, p in ((x, px), (w, pw), (bias, pb))]
        y = fp8_linear(*args, recipe)
        assert y.placements == (py,), (px, pw, y.placements)
        y.backward(distribute_tensor(g, mesh, [py if py != Partial() else R]))
        assert tuple(a.grad.placements[0] for a in args) == grads, (px, pw, [a.grad.placements for a in args])
        torch.testing.assert_close(y.full_tensor(), want, rtol=0, atol=0)
        for a, p in zip(args, plain):
            torch.testing.assert_close(a.grad.full_tensor(), p.grad, rtol=1e-2, atol=1e-2)
