"""The ranks of tests/test_distributed.py: world size 2, gloo, CPU tensors, pingpong's kernels
replaced by the portable kernel under Triton's interpreter (conftest.interpret_plans), fp16.

    python tests/distributed_ranks.py OUTDIR [SCENARIO ...]

spawns two ranks; each runs the scenarios (all by default) and writes OUTDIR/rank<r>.json:
{scenario: "ok" (or "ok: " and a note, e.g. the loss curves) or the traceback}. Each scenario checks pingpong on DTensors against the float64
reference (norm and elementwise bounds) and against torch's own ops on the same DTensors
(placements, values). Shapes are tiny: the interpreter is slow.
"""

from __future__ import annotations

import collections
import json
import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

from closeness import AUTOGRAD, FP8_TRAINING_NORM, assert_close64, rel_norm

WORLD = 2
HERE = os.path.dirname(os.path.abspath(__file__))




def randn(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).half()


def dtensor(full, mesh, placement, rank):
    """full as a DTensor of one placement; a Partial one holds unequal parts that sum to full."""
    from torch.distributed.tensor import DTensor, Partial, distribute_tensor

    if isinstance(placement, Partial):
        part = (full.float() * (0.25 if rank == 0 else 0.75)).to(full.dtype)  # sums to full up to one rounding
        return DTensor.from_local(part, mesh, [placement], run_check=False)
    return distribute_tensor(full.clone(), mesh, [placement])  # a copy: gemm_ writes it


# ----------------------------------------------------------------------------- scenarios


def scenario_products(mesh, rank, runs):
    """matmul / gemm / gemm_ / linear on DTensors of each placement: torch's placements, the
    float64 values, and pingpong's kernel ran on the local tensors."""
    import pingpong
    from torch.distributed.tensor import Partial, Replicate, Shard

    R, P = Replicate(), Partial()
    a, b = randn(8, 6, seed=1), randn(6, 4, seed=2)
    ref = a.double() @ b.double()
    for pa, pb in [(R, R), (Shard(0), R), (R, Shard(1)), (Shard(1), Shard(0)), (Shard(0), Shard(0)), (Shard(1), R),
                   (P, R), (Shard(0), Shard(1)), (R, P)]:
        da, db = dtensor(a, mesh, pa, rank), dtensor(b, mesh, pb, rank)
        before = len(runs)
        got, want = pingpong.matmul(da, db), torch.mm(da, db)
        assert len(runs) > before, f"matmul {pa} {pb}: pingpong's kernel did not run"
        assert got.placements == want.placements, f"matmul {pa} {pb}: {got.placements} (torch.mm: {want.placements})"
        assert_close64(got.full_tensor(), ref, f"matmul {pa} {pb}", AUTOGRAD)
        f32 = pingpong.matmul(da, db, out_dtype=torch.float32)
        assert f32.dtype == torch.float32 and f32.to_local().dtype == torch.float32, "out_dtype"
        assert_close64(f32.full_tensor(), ref, f"matmul fp32 {pa} {pb}", AUTOGRAD)

    # batched a with a shared weight, split along the batch
    a3 = randn(4, 3, 6, seed=3)
    got = pingpong.matmul(dtensor(a3, mesh, Shard(0), rank), dtensor(b, mesh, R, rank))
    want = torch.matmul(dtensor(a3, mesh, Shard(0), rank), dtensor(b, mesh, R, rank))
    assert got.placements == want.placements == (Shard(0),), f"batched: {got.placements} / {want.placements}"
    assert_close64(got.full_tensor(), a3.double() @ b.double(), "batched", AUTOGRAD)

    # gemm: alpha, bias (per column), beta·c; the contracted dim split (bias and c Partial)
    bias, c = randn(4, seed=4), randn(8, 4, seed=5)
    full = 2.0 * ref + bias.double() + 0.5 * c.double()
    for pa, pb, pc in [(Shard(1), Shard(0), R), (Shard(0), R, Shard(0)), (R, Shard(1), R)]:
        da, db, dc = dtensor(a, mesh, pa, rank), dtensor(b, mesh, pb, rank), dtensor(c, mesh, pc, rank)
        dbias = dtensor(bias, mesh, R, rank)
        got = pingpong.gemm(da, db, dc, alpha=2.0, beta=0.5, bias=dbias)
        want = torch.addmm(dc, da, db, beta=0.5, alpha=2.0)
        assert got.placements == want.placements, f"gemm {pa} {pb} {pc}: {got.placements} (addmm {want.placements})"
        assert_close64(got.full_tensor(), full, f"gemm {pa} {pb} {pc}", AUTOGRAD)
    # an activation: rows split, the sum complete on each rank
    got = pingpong.gemm(dtensor(a, mesh, Shard(0), rank), dtensor(b, mesh, R, rank), bias=dtensor(bias, mesh, R, rank),
                        activation="gelu_tanh")
    assert got.placements == (Shard(0),), got.placements
    assert_close64(got.full_tensor(), F.gelu(ref + bias.double(), approximate="tanh"), "gemm gelu_tanh", AUTOGRAD)

    # gemm_: c keeps its placement
    for pc, pa, pb in [(Shard(0), Shard(0), R), (R, R, R), (Shard(1), R, Shard(1)), (P, Shard(1), Shard(0))]:
        dc = dtensor(c, mesh, pc, rank)
        out = pingpong.gemm_(dc, dtensor(a, mesh, pa, rank), dtensor(b, mesh, pb, rank), beta=1.0)
        assert out is dc and dc.placements == (pc,), f"gemm_ {pc}: {dc.placements}"
        assert_close64(dc.full_tensor(), ref + c.double(), f"gemm_ {pc} {pa} {pb}", AUTOGRAD)

    # linear: x (…, K), weight (N, K), bias (N,): colwise, rowwise, sequence split
    x, w, lb = randn(2, 3, 6, seed=6), randn(4, 6, seed=7), randn(4, seed=8)
    full = x.double() @ w.double().t() + lb.double()
    for px, pw, pbias, out in [(R, Shard(0), Shard(0), Shard(2)), (Shard(2), Shard(1), R, P), (Shard(1), R, R, Shard(1)),
                               (R, R, R, R)]:
        args = dtensor(x, mesh, px, rank), dtensor(w, mesh, pw, rank), dtensor(lb, mesh, pbias, rank)
        got = pingpong.linear(*args)
        assert got.placements == (out,), f"linear {px} {pw} {pbias}: {got.placements}, expected {out}"
        try:  # torch 2.11's F.linear refuses x split along a leading dim (its reshape cannot flatten it)
            want = F.linear(*args).placements
        except RuntimeError:
            want = None
        assert want in (None, got.placements), f"linear {px} {pw} {pbias}: {got.placements} (F.linear {want})"
        assert_close64(got.full_tensor(), full, f"linear {px} {pw} {pbias}", AUTOGRAD)


def scenario_autograd(mesh, rank, runs):
    """Gradients through the ops on DTensors: torch's placements, float64 values."""
    import pingpong
    from torch.distributed.tensor import Replicate, Shard

    a, b, g = randn(8, 6, seed=11), randn(6, 4, seed=12), randn(8, 4, seed=13)
    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    (a64 @ b64).backward(g.double())
    for pa, pb in [(Shard(0), Replicate()), (Replicate(), Shard(1)), (Shard(1), Shard(0))]:
        grads = []
        for fn in (pingpong.matmul, torch.mm):
            da = dtensor(a, mesh, pa, rank).requires_grad_()
            db = dtensor(b, mesh, pb, rank).requires_grad_()
            (fn(da, db).full_tensor() * g).sum().backward()
            grads.append((da.grad, db.grad))
        (ga, gb), (ta, tb) = grads
        assert (ga.placements, gb.placements) == (ta.placements, tb.placements), \
            f"grads {pa} {pb}: {ga.placements} {gb.placements} (torch {ta.placements} {tb.placements})"
        assert_close64(ga.full_tensor(), a64.grad, f"dA {pa} {pb}", AUTOGRAD)
        assert_close64(gb.full_tensor(), b64.grad, f"dB {pa} {pb}", AUTOGRAD)

    # linear on a sequence-split x (…, S, K) with a replicated weight: the backward folds x's
    # leading dims on DTensors (torch 2.11's view rule refuses that fold; 2.13 takes it)
    x, w, gy = randn(2, 4, 6, seed=14), randn(5, 6, seed=15), randn(2, 4, 5, seed=16)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    (x64 @ w64.t()).backward(gy.double())
    dx_, dw_ = dtensor(x, mesh, Shard(1), rank).requires_grad_(), dtensor(w, mesh, Replicate(), rank).requires_grad_()
    y = pingpong.linear(dx_, dw_)
    assert y.placements == (Shard(1),), y.placements
    (y.full_tensor() * gy).sum().backward()
    assert_close64(dx_.grad.full_tensor(), x64.grad, "linear dX (sequence split)", AUTOGRAD)
    assert_close64(dw_.grad.full_tensor(), w64.grad, "linear dW (sequence split)", AUTOGRAD)


def _mlp_pair(seed, dtype, act_fused: bool):
    """The same MLP twice: torch's (Linear, ReLU, Linear) and pingpong's (Linear with the relu
    fused, Linear), equal parameters."""
    import pingpong

    torch.manual_seed(seed)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8)).to(dtype)
    pp = torch.nn.Sequential(pingpong.nn.Linear(8, 16, activation="relu" if act_fused else None, dtype=dtype),
                             pingpong.nn.Linear(16, 8, dtype=dtype))
    with torch.no_grad():
        for mine, theirs in ((pp[0], ref[0]), (pp[1], ref[2])):
            mine.weight.copy_(theirs.weight)
            mine.bias.copy_(theirs.bias)
    return ref, pp


def scenario_tensor_parallel(mesh, rank, runs):
    """parallelize_module with ColwiseParallel / RowwiseParallel on pingpong Linears (replaced
    first, then parallelized): forward and backward match torch's model, parallelized the same
    way, and the float64 reference."""
    import pingpong
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    ref, pp = _mlp_pair(21, torch.float16, act_fused=True)
    ref64 = [t.detach().double().requires_grad_() for t in (ref[0].weight, ref[0].bias, ref[2].weight, ref[2].bias)]
    parallelize_module(ref, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    parallelize_module(pp, mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
    x, g = randn(2, 3, 8, seed=22), randn(2, 3, 8, seed=23)
    before = len(runs)
    y_pp, y_ref = pp(x), ref(x)
    assert len(runs) > before, "pingpong's kernel did not run"
    w0, b0, w1, b1 = ref64
    y64 = F.linear(F.relu(F.linear(x.double(), w0, b0)), w1, b1)
    assert_close64(y_pp, y64, "TP forward (pingpong)", AUTOGRAD)
    assert_close64(y_ref, y64, "TP forward (torch)", AUTOGRAD)
    y_pp.backward(g)
    y_ref.backward(g)
    y64.backward(g.double())
    for mine, theirs, want, what in ((pp[0].weight, ref[0].weight, w0, "w0"), (pp[0].bias, ref[0].bias, b0, "b0"),
                                      (pp[1].weight, ref[2].weight, w1, "w1"), (pp[1].bias, ref[2].bias, b1, "b1")):
        assert mine.grad.placements == theirs.grad.placements, f"{what}.grad: {mine.grad.placements} ({theirs.grad.placements})"
        assert_close64(mine.grad.full_tensor(), want.grad, f"TP {what}.grad (pingpong)", AUTOGRAD)
        assert_close64(theirs.grad.full_tensor(), want.grad, f"TP {what}.grad (torch)", AUTOGRAD)
    # parallelize, then replace: refused (the hooks stay on the old module)
    report = pingpong.nn.replace_linear(ref)
    assert report.replaced == [] and "replace the Linears first" in report.skipped["0"], report


def scenario_fsdp2(mesh, rank, runs):
    """fully_shard (FSDP2, fp16 compute, fp32 master weights and gradient reduction) on an MLP of
    pingpong Linears trains, and its loss curve follows torch's on the same data and seed."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    curves, kernel_runs = [], []
    for model in _mlp_pair(31, torch.float32, act_fused=True):
        start = len(runs)
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        curves.append(_train(model, 1000 + rank, 8))  # each rank its own batch of one task
        kernel_runs.append(len(runs) - start)
    assert kernel_runs[0] == 0 < kernel_runs[1], f"pingpong kernel runs (torch model, pingpong model): {kernel_runs}"
    return _curves_agree(*curves)


def _train(model, data_seed, steps, foreach=None) -> list[float]:
    """Adam on a batch of the tanh-teacher task (x from data_seed): the loss of each step."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=foreach)
    teacher = torch.randn(8, 8, generator=torch.Generator().manual_seed(999)) / 3
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(data_seed))
    target = torch.tanh(x @ teacher)
    losses = []
    for step in range(steps):
        loss = F.mse_loss(model(x).float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _curves_agree(theirs, mine) -> str:
    """torch's and pingpong's loss curves step by step within 0.2%, pingpong's falling."""
    for step, (l_pp, l_ref) in enumerate(zip(mine, theirs)):
        assert abs(l_pp - l_ref) <= 2e-3 * abs(l_ref) + 1e-4, f"step {step}: pingpong {mine} vs torch {theirs}"
    assert mine[-1] < 0.7 * mine[0], f"loss does not fall: {mine}"
    return "losses pingpong " + " ".join(f"{l:.4f}" for l in mine) + " / torch " + " ".join(f"{l:.4f}" for l in theirs)


def scenario_fsdp2_tp_stale_spec(mesh, rank, runs):
    """FSDP2 × TP (a 1 × 2 mesh: FSDP2 over "dp" of one rank, TP over the two) with fp32 master
    weights and fp16 compute, with torch 2.11's FSDP2 behaviour restored where torch has the fix
    (the unsharded TP parameter keeps the fp32 parameter's spec around its fp16 local tensor):
    pingpong's Linears see the stale spec, rebuild it (pingpong.distributed.respec), and train as
    torch's model does on the same data and seed."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import pingpong.distributed

    mesh2 = init_device_mesh("cpu", (1, WORLD), mesh_dim_names=("dp", "tp"))
    policy = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    fixed = FSDPParam.__dict__.get("_get_unsharded_dtensor_spec")
    if fixed is not None:  # torch 2.11: the all-gathered fp16 tensor in the fp32 parameter's spec
        FSDPParam._get_unsharded_dtensor_spec = lambda self, unsharded: self._unsharded_dtensor_spec
    curves, stale_seen = [], []
    try:
        for model in _mlp_pair(41, torch.float32, act_fused=True):
            names = [n for n, m in model.named_children() if isinstance(m, torch.nn.Linear)]
            linears = [model.get_submodule(n) for n in names]
            parallelize_module(model, mesh2["tp"], {names[0]: ColwiseParallel(), names[1]: RowwiseParallel()})
            for layer in linears:
                fully_shard(layer, mesh=mesh2["dp"], mp_policy=policy)
                layer.register_forward_pre_hook(
                    lambda m, args: stale_seen.append(pingpong.distributed.stale(m.weight)))
            fully_shard(model, mesh=mesh2["dp"], mp_policy=policy)
            curves.append(_train(model, 1000, 6, foreach=False))  # one batch: the TP ranks see the same x
    finally:
        if fixed is not None:
            FSDPParam._get_unsharded_dtensor_spec = fixed
    assert stale_seen and all(stale_seen), f"the stale spec was not reproduced: {stale_seen}"
    return _curves_agree(*curves)


def scenario_grouped(mesh, rank, runs):
    """grouped_mm (2-D × 3-D, ragged rows) on DTensors: the offsets' rows and the groups never
    split; N split follows b, K split gives a Partial sum; float64 per group."""
    import functools

    import pingpong
    from pingpong import grouped
    from torch.distributed.tensor import Partial, Replicate, Shard

    grouped._compute = functools.partial(grouped._compute, interpret=True)  # the portable kernel, interpreted
    R = Replicate()
    a, b = randn(12, 6, seed=11), randn(3, 6, 4, seed=12)
    offs = torch.tensor([3, 7, 12], dtype=torch.int32)
    ref = torch.cat([a[s:e].double() @ b[g].double() for g, (s, e) in enumerate(zip([0, 3, 7], [3, 7, 12]))])
    for pa, pb, out in [(R, R, R), (R, Shard(2), Shard(1)), (Shard(1), Shard(1), Partial())]:
        got = pingpong.grouped_mm(dtensor(a, mesh, pa, rank), dtensor(b, mesh, pb, rank), dtensor(offs, mesh, R, rank))
        assert got.placements == (out,), f"grouped_mm {pa} {pb}: {got.placements}, expected {out}"
        assert_close64(got.full_tensor(), ref, f"grouped_mm {pa} {pb}", AUTOGRAD)


def _fp8_mlp(seed, dtype, recipe="row"):
    """An MLP of FP8 training layers (32 -> 64 -> 32, relu between), and its unsharded copy."""
    import copy

    import pingpong

    torch.manual_seed(seed)
    model = torch.nn.Sequential(pingpong.nn.Float8TrainingLinear(32, 64, dtype=dtype, recipe=recipe), torch.nn.ReLU(),
                                pingpong.nn.Float8TrainingLinear(64, 32, dtype=dtype, recipe=recipe))
    return model, copy.deepcopy(model)


#: two FP8 quantizations of one product differ by e4m3's rounding: test_fp8_training's bound of
#: one product against float64 (relative norm) holds for the two
FP8_TOL = FP8_TRAINING_NORM
#: a product whose every scale is the unsharded model's: equal up to fp16 sums in another order
SAME_TOL = 2e-3


def _close(got, want, what, tol):
    """Relative Frobenius error within tol."""
    err = rel_norm(got, want)
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.0e}"
    return err


def scenario_fp8_tensor_parallel(mesh, rank, runs):
    """FP8 training layers (recipe "row") under ColwiseParallel / RowwiseParallel, and a
    token-split x on a replicated weight: forward, dx and each parameter's gradient against the
    unsharded FP8 model. A product whose contraction is whole on each rank has the unsharded
    model's scales: the colwise layer's output is the unsharded layer's columns exactly, and
    every weight gradient, the rowwise dX and the token split's y, dx and dbias equal the
    unsharded model's (SAME_TOL). A product whose contraction is split (the rowwise forward,
    the colwise dX, the token split's dW) quantizes each rank's part along its own share of
    the contraction, so it differs from the unsharded model's by FP8 rounding (FP8_TOL), not by
    a missing or doubled part (an error of 50% or more)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import pingpong.distributed
    from fp8_emulation import RecordedPlan

    tp, ref = _fp8_mlp(51, torch.float16)
    parallelize_module(tp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x, g = randn(2, 3, 32, seed=52), randn(2, 3, 32, seed=53)
    xs, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    before = len(RecordedPlan.runs)
    y_tp = tp(xs)
    shapes = [(tuple(a.shape), tuple(b.shape)) for a, b, *_ in RecordedPlan.runs[before:]]
    assert shapes == [((6, 32), (32, 32))] * 2, shapes  # each rank's shard: N, then K halved (unsharded: 64)
    y_ref = ref(xr)
    cols = tp[0](x)  # ColwiseParallel hands back the local columns
    assert torch.equal(cols, ref[0](x)[..., rank * 32:(rank + 1) * 32]), "colwise forward: not the unsharded columns"
    errors = [_close(y_tp, y_ref, "TP forward", FP8_TOL)]
    y_tp.backward(g)
    y_ref.backward(g)
    errors.append(_close(xs.grad, xr.grad, "TP dx", FP8_TOL))
    placements = {"0.weight": (Shard(0),), "0.bias": (Shard(0),), "2.weight": (Shard(1),), "2.bias": (Replicate(),)}
    for (name, p), q in zip(tp.named_parameters(), ref.parameters()):
        assert p.grad.placements == placements[name], f"{name}.grad: {p.grad.placements}"
        errors.append(_close(p.grad.full_tensor(), q.grad, f"TP {name}.grad", SAME_TOL))

    # x split along the tokens, the weight replicated: y and dx split alike, dW a Partial sum
    w, bias = randn(64, 32, seed=54), randn(64, seed=55)
    gy = randn(2, 4, 64, seed=56)
    x = randn(2, 4, 32, seed=57)
    want = []
    for sharded in (True, False):
        wt, bt = (distribute_tensor(t.clone(), mesh, [Replicate()]) if sharded else t.clone() for t in (w, bias))
        wt.requires_grad_(), bt.requires_grad_()
        xt = (distribute_tensor(x, mesh, [Shard(1)]) if sharded else x.clone()).requires_grad_()
        y = pingpong.fp8_training.fp8_linear(xt, wt, bt)
        y.backward(distribute_tensor(gy, mesh, [Shard(1)]) if sharded else gy)
        got = [y, xt.grad, wt.grad, bt.grad]
        if sharded:
            assert [t.placements for t in got] == [(Shard(1),), (Shard(1),), (Partial(),), (Partial(),)], \
                [t.placements for t in got]
            assert isinstance(y, DTensor)
            got = [t.full_tensor() for t in got]
        want.append(got)
    assert torch.equal(want[0][0], want[1][0]), "token split forward: not the unsharded rows"
    for what, a, b, tol in zip(["y", "dx", "dw", "dbias"], *want, [SAME_TOL, SAME_TOL, FP8_TOL, SAME_TOL]):
        errors.append(_close(a, b, f"token split {what}", tol))
    return "relative errors against the unsharded FP8 model " + " ".join(f"{e:.1e}" for e in errors)


def scenario_fp8_fsdp2(mesh, rank, runs):
    """fully_shard (FSDP2, fp32) on an MLP of FP8 training layers: the layers see plain tensors
    (FSDP2 all-gathers each weight before the forward, so every scale is the whole weight's),
    and one training step equals the single-rank model's on both ranks' batches (their
    gradients averaged), parameter by parameter."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    model, ref = _fp8_mlp(61, torch.float32)
    start = [p.detach().clone() for p in ref.parameters()]
    seen = []
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
        layer.register_forward_pre_hook(lambda m, args: seen.append(isinstance(m.weight, DTensor)))
    fully_shard(model, mesh=mesh)
    batches = [torch.randn(8, 32, generator=torch.Generator().manual_seed(62 + r)) for r in range(WORLD)]
    target = torch.randn(8, 32, generator=torch.Generator().manual_seed(64))
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, ref))
    F.mse_loss(model(batches[rank]), target).backward()
    opt.step()
    for x in batches:
        (F.mse_loss(ref(x), target) / WORLD).backward()
    ref_opt.step()
    assert seen == [False, False], f"the layers saw DTensor weights: {seen}"
    for (name, p), q, q0 in zip(model.named_parameters(), ref.parameters(), start):
        assert not torch.equal(q.detach(), q0), f"{name}: the step did not change it"
        torch.testing.assert_close(p.full_tensor(), q.detach(), rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")


def emulated_symmetric_memory_pipelines(group_name, calls):
    """CPU stand-ins (gloo collectives) for the two pipelines of torch's fused async-TP
    implementations, as their docstrings define them: the all-gather hands each rank's rows of
    the gathered output to the consumer, the all-to-all gives rank r the chunk every rank
    produced for r. With them torch's _fused_all_gather_matmul_impl and
    _fused_matmul_reduce_scatter_impl run on the CPU, calling pingpong's mm_out on their chunks
    (their layouts, chunk order and reductions, as on CUDA). `calls` counts each pipeline's runs."""
    c10d = torch.ops._c10d_functional

    def all_gather_and_consume(shard, consumer, ag_out, name, ag_out_needed=True):
        assert name == group_name
        calls["all_gather"] += 1
        ag_out.copy_(c10d.wait_tensor(c10d.all_gather_into_tensor(shard.contiguous(), WORLD, name)))
        for src, rows in enumerate(ag_out.chunk(WORLD)):
            consumer(rows, src)

    def produce_and_all2all(producer, output, name, out_chunk_dim=0):
        assert name == group_name and out_chunk_dim == 0, out_chunk_dim  # pingpong's ops: a dim before the last
        calls["reduce_scatter"] += 1
        chunks = torch.empty(WORLD, *output.chunk(WORLD)[0].shape, dtype=output.dtype)
        for dst in range(WORLD):
            producer(dst, chunks[dst])
        rows = [chunks.shape[1]] * WORLD
        output.copy_(c10d.wait_tensor(c10d.all_to_all_single(chunks.flatten(0, 1), rows, rows, name))
                     .view(output.shape))

    return {"_pipelined_all_gather_and_consume": all_gather_and_consume,
            "_pipelined_produce_and_all2all": produce_and_all2all}


def scenario_async_tp(mesh, rank, runs):
    """A sequence-parallel MLP of pingpong Linears (relu fused into the first) compiled under
    async TP with pingpong's pass (NCCL's availability patched, torch's symmetric-memory test
    mode standing for "enabled for the group"): output, input and parameter gradients as the
    eager model's, and the forward and backward hold the fused ops (pingpong.integration.async_tp.FUSED).
    Twice: the fused ops unfused (their CPU path), and through torch's fused implementations
    (the CUDA path: emulated_symmetric_memory_pipelines), where the backward's fused products
    take their chunks as on the GPUs."""
    import torch.distributed._symmetric_memory as symm_mem
    import torch._inductor.config as inductor_config
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    import pingpong
    import pingpong.integration.async_tp as async_tp
    import pingpong.distributed

    def build():
        torch.manual_seed(41)
        model = torch.nn.Sequential(torch.nn.LayerNorm(16, dtype=torch.float16),
                                    pingpong.nn.Linear(16, 32, activation="relu", dtype=torch.float16),
                                    pingpong.nn.Linear(32, 16, dtype=torch.float16))
        return parallelize_module(model, mesh, {"0": SequenceParallel(), "1": ColwiseParallel(input_layouts=Shard(1)),
                                                "2": RowwiseParallel(output_layouts=Shard(1))})

    x, g = randn(2, 8, 16, seed=42), randn(2, 4, 16, seed=43 + rank)
    shard = x[:, rank * 4:(rank + 1) * 4].contiguous()
    group_name = mesh.get_group().group_name
    results, calls = {}, collections.Counter()
    for how in ("eager", "unfused", "torch_impl"):
        model = build()
        leaf = shard.clone().requires_grad_()
        xd = DTensor.from_local(leaf, mesh, [Shard(1)])
        if how == "eager":
            y = model(xd)
            y.backward(g)
        else:
            saved = {"is_nccl_available": (dist, dist.is_nccl_available)}
            dist.is_nccl_available = lambda: True
            if how == "torch_impl":
                fused, async_tp._fused = async_tp._fused, lambda t: True
                for name, fn in emulated_symmetric_memory_pipelines(group_name, calls).items():
                    saved[name] = (symm_mem, getattr(symm_mem, name))
                    setattr(symm_mem, name, fn)
            inductor_config._micro_pipeline_tp = True
            pingpong.distributed.enable_async_tp()
            async_tp.FUSED.clear()
            torch._dynamo.reset()
            try:
                with symm_mem._test_mode():
                    y = torch.compile(model)(xd)
                    y.backward(g)
            finally:
                for name, (owner, fn) in saved.items():
                    setattr(owner, name, fn)
                if how == "torch_impl":
                    async_tp._fused = fused
                inductor_config._micro_pipeline_tp = False
                pingpong.distributed.disable_async_tp()
            if how == "unfused":  # the pass's rewrites (the second compile may come from inductor's cache)
                assert async_tp.FUSED == {"all_gather_gemm": 2, "gemm_reduce_scatter": 2}, async_tp.FUSED
            else:  # forward and backward each ran one fused op of each kind through torch's implementations
                assert calls == {"all_gather": 2, "reduce_scatter": 2}, calls
        grads = [leaf.grad] + [p.grad for p in model.parameters()]
        assert all(t is not None for t in grads), f"{how}: a missing gradient"
        results[how] = [y.to_local() if isinstance(y, DTensor) else y, leaf.grad] + [p.grad.to_local() for p in
                                                                                    model.parameters()]
    for how in ("unfused", "torch_impl"):
        for what, got, want in zip(["y", "dx", "norm w", "norm b", "w0", "b0", "w1", "b1"], results[how],
                                   results["eager"]):
            assert_close64(got, want.double(), f"async TP ({how}) {what} against eager", AUTOGRAD)


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items() if name.startswith("scenario_")}


# ----------------------------------------------------------------------------- the ranks


def rank_main(rank, port, outdir, names):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        sys.path.insert(0, HERE)
        from conftest import interpret_plans

        import pingpong.portable
        from torch.distributed.device_mesh import init_device_mesh

        runs = []
        kernel = pingpong.portable.portable_gemm

        def counted(*args, **kwargs):
            runs.append(1)
            return kernel(*args, **kwargs)

        pingpong.portable.portable_gemm = counted  # interpret_plans binds it now
        interpret_plans(setattr)
        from fp8_emulation import emulate_fp8

        emulate_fp8(setattr)  # the FP8 scenarios' kernels (the others launch no scaled product)
        mesh = init_device_mesh("cpu", (WORLD,))
        record(outdir, rank, {name: SCENARIOS[name] for name in names}, mesh, rank, runs)
    finally:
        dist.destroy_process_group()


def record(outdir, rank, scenarios, *args) -> None:
    """Each scenario(*args) in turn; OUTDIR/rank<r>.json: {name: "ok…" or the traceback}."""
    results = {}
    try:
        for name, scenario in scenarios.items():
            try:
                note = scenario(*args)
                results[name] = "ok" + (f": {note}" if note else "")
            except Exception:
                results[name] = traceback.format_exc()
    finally:
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    import torch.multiprocessing as mp

    outdir, names = argv[0], argv[1:] or list(SCENARIOS)
    mp.spawn(rank_main, args=(free_port(), outdir, names), nprocs=WORLD)


if __name__ == "__main__":
    main(sys.argv[1:])
