"""benchmarks/dist_llama.py on the CPU: its first-step gradient check (gradient_errors), without a
process group: models whose gradients are the reference's up to rounding pass it, one whose
gradient has two row chunks swapped (a fused product's chunk in the wrong place) fails it, named
as the worst parameter; a parameter without a gradient is an error naming it. Its
--host-profile file names, and its --cpu-smoke path with --fp8 under torchrun (two gloo ranks)."""

import sys
from pathlib import Path

import pytest
import torch

from bench_scripts import load

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dist_llama():
    return load("dist_llama")


def model_with_grads(d, c, ref, seed, rounding):
    """The model of `ref`'s parameters, each gradient the reference's rounded to bf16 and
    perturbed by `rounding` relative noise (fresh per seed)."""
    torch.manual_seed(0)
    m = d.Llama(c)
    g = torch.Generator().manual_seed(seed)
    for name, p in m.named_parameters():
        want = ref[name]
        p.grad = (want * (1 + rounding * torch.randn(want.shape, generator=g))).bfloat16().float()
    return m


@pytest.mark.parametrize("seed", [3, 4])
def test_a_wrong_chunk_fails_the_gradient_check(dist_llama, seed):
    d = dist_llama
    c = d.Config(vocab=64, hidden=32, inter=64, layers=2, heads=4, kv_heads=2, max_pos=64)
    torch.manual_seed(0)
    ref_model = d.Llama(c)
    ids = torch.randint(0, c.vocab, (2, 16), generator=torch.Generator().manual_seed(seed))
    d.Arch("llama").loss(ref_model, ids).backward()
    ref = {name: p.grad for name, p in ref_model.named_parameters()}
    assert all(g is not None and g.abs().sum() > 0 for g in ref.values())

    check, torch_grads = {}, {}
    check.update(d.gradient_errors("torch", model_with_grads(d, c, ref, seed, 1e-3), ref, torch_grads))
    good = d.gradient_errors("pingpong", model_with_grads(d, c, ref, seed + 100, 1e-3), ref, torch_grads)
    assert 0 < check["grad_err_torch"] < 1e-2 and good["grad_err_pingpong"] <= 1.5 * check["grad_err_torch"] + 1e-3, \
        (seed, check, good)
    assert good["grad_rel_pingpong_torch"] < 1e-2, (seed, good)

    bad = model_with_grads(d, c, ref, seed + 100, 1e-3)
    w = bad.get_submodule("layers.1.mlp.down_proj").weight
    w.grad = torch.cat(w.grad.chunk(2, dim=0)[::-1])  # two ranks' rows in each other's place
    got = d.gradient_errors("pingpong", bad, ref, torch_grads)
    assert got["grad_err_pingpong"] > 1.5 * check["grad_err_torch"] + 1e-3, (seed, check, got)
    assert got["grad_worst_pingpong"][0] == "layers.1.mlp.down_proj.weight", (seed, got)

    bad.get_submodule("layers.0.mlp.up_proj").weight.grad = None
    with pytest.raises(RuntimeError, match="layers.0.mlp.up_proj.weight has no gradient"):
        d.gradient_errors("pingpong", bad, ref, torch_grads)


def test_host_profiles_of_runs_with_other_flags_have_other_names(dist_llama):
    """--host-profile's file of a row names the variant: runs that differ in --fp8, its recipe,
    --sequence-parallel, --sp-stream or --async-tp do not overwrite each other's profiles."""
    import itertools
    import types

    names = set()
    flags = itertools.product((None, "row", "tensor"), (False, True), ("auto", "local"), (False, True))
    for fp8, sp, stream, async_tp in flags:
        if (stream != "auto" or async_tp) and not sp:
            continue  # (those flags act with --sequence-parallel only)
        env = types.SimpleNamespace(fp8=fp8, sequence_parallel=sp, sp_stream=stream, async_tp=async_tp)
        names.add(dist_llama.Env.variant.fget(env))
    assert len(names) == 3 * (1 + 2 * 2) and "bf16" in names and "fp8-row-sp-auto-async-tp" in names, names


@pytest.mark.slow
def test_cpu_smoke_trains_the_fp8_model_under_tp_and_fsdp2():
    """`--cpu-smoke --fp8 row` on two gloo ranks (the FP8 kernels emulated): pingpong's model of
    FP8 training layers against torch's 16-bit one, the TP and FSDP2 training rows (eager), every
    check passed (exit 0)."""
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(port), str(ROOT / "benchmarks" / "dist_llama.py"), "--cpu-smoke", "--fp8", "row",
                           "--workloads", "tp-train,fsdp2-train", "--modes", "eager"],
                          capture_output=True, text=True, timeout=600)
    table = proc.stdout[proc.stdout.rfind("workload"):]
    assert proc.returncode == 0, (table or proc.stdout[-3000:]) + proc.stderr[-3000:]
    assert table.count("| ok") == 2, table


@pytest.mark.parametrize("kernel, comm", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", True),
    ("c10d::symmetric_memory::barrier_kernel(unsigned int**, int, int, int, unsigned long)", True),
    ("Memcpy PtoP (Device -> Device)", True),
    ("warp_specialized_gemm", False),
    ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", False),
    ("Memcpy DtoD (Device -> Device)", False),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::BFloat16,", False),
])
def test_gpu_ms_sets_apart_the_kernels_that_wait_for_other_ranks(dist_llama, kernel, comm):
    """Async TP's symmetric-memory barriers wait for the peer: counted as work, they made two
    steps whose GEMMs took the same time look 6 ms apart."""
    assert dist_llama.communication(kernel) is comm


def test_step_products_puts_each_product_in_its_own_row(dist_llama, interpreted_kernels):
    """--products' grouping on a CPU profile: torch's aten::mm at two shapes (one called twice,
    one with a transposed B) and pingpong's direct calls of compiled code (mm, linear: the
    interpreted plan as their plan), each product a row with its shapes, layouts, strides and
    calls per step."""
    from torch.profiler import ProfilerActivity, profile

    from pingpong.integration import inductor

    f16 = torch.float16
    a, b, bt, w = torch.randn(8, 16), torch.randn(16, 12), torch.randn(12, 32).t(), torch.randn(24, 16, dtype=f16)
    ha, hb, out = torch.randn(8, 16, dtype=f16), torch.randn(16, 12, dtype=f16), torch.empty(8, 12, dtype=f16)

    def step():
        torch.mm(a, b)
        torch.mm(a, b)
        torch.mm(torch.randn(8, 32), bt)
        inductor.KERNELS["mm"](ha, hb, out=out)
        inductor.KERNELS["linear"](ha.view(2, 4, 16), w, bias=False, activation="none",
                                   out=torch.empty(2, 4, 24, dtype=f16))

    step()  # pingpong's plans made: a profiled call names the plan it ran
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):  # two steps
            step()
    rows = {(r["op"], r["M"], r["N"], r["K"]): r for r in dist_llama.step_products(prof.events(), 2, device=False)}
    assert set(rows) == {("aten::mm", 8, 12, 16), ("aten::mm", 8, 12, 32), ("pingpong::mm", 8, 12, 16),
                         ("pingpong::linear", 8, 24, 16)}, rows
    nn_, nt = rows["aten::mm", 8, 12, 16], rows["aten::mm", 8, 12, 32]
    assert (nn_["calls"], nn_["layout"], nn_["strides"], nn_["dtype"], nn_["plan"]) == (2, "nn", [[16, 1], [12, 1]],
                                                                                         "float", None)
    assert (nt["calls"], nt["layout"], nt["strides"]) == (1, "nt", [[32, 1], [1, 32]])
    pp, lin = rows["pingpong::mm", 8, 12, 16], rows["pingpong::linear", 8, 24, 16]
    assert (pp["calls"], pp["plan"], pp["layout"], pp["dtype"]) == (1, "interpreted", "nn", "Half")
    assert (lin["plan"], lin["layout"], lin["strides"]) == ("interpreted", "nt", [[64, 16, 1], [16, 1]])
    assert all(r["ms"] > 0 for r in rows.values())


def test_step_products_counts_each_kernel_for_the_gemm_that_launched_it(dist_llama):
    """On CUDA a product's ms are its kernels': joined to the launching op by the profiler's
    correlation id, through ops inside a GEMM event (a padded plan's copy) up to it, the
    innermost GEMM event where they nest (a DTensor's op over its local op); user annotations
    and the kernels of other ops are not counted; a kernel whose op the profile lacks has a row
    of its own (synthetic events)."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    def cpu(id, name, start, end, parent=None, shapes=(), strides=(), kw=None):
        e = FunctionEvent(id, name, thread=1, start_us=start, end_us=end, input_shapes=[list(s) for s in shapes],
                          structured_input_strides=[list(s) for s in strides], input_dtypes=["c10::BFloat16"] * 3,
                          kwinputs=kw)
        if parent is not None:
            e.cpu_parent = parent
            parent.cpu_children.append(e)
        return e

    def kernel(id, name, us, op, annotation=False):
        return FunctionEvent(id, name, thread=2, start_us=0, end_us=us, input_shapes=[], device_type=DeviceType.CUDA,
                             linked_correlation_id=op.id, is_user_annotation=annotation)

    mm = ((4096, 4096), (4096, 1024)), ((4096, 1), (1, 4096))  # x @ weightᵀ, FSDP2's weight as a transposed view
    outer = cpu(1, "aten::mm", 0, 10, shapes=mm[0], strides=mm[1])
    inner = cpu(2, "aten::mm", 1, 9, outer, shapes=mm[0], strides=mm[1])
    range_ = cpu(3, "pingpong::mm", 20, 30, shapes=mm[0], strides=mm[1], kw={"plan": "hopper cooperative:128x256x64/g8"})
    copy = cpu(4, "aten::copy_", 21, 22, range_)
    add = cpu(5, "aten::add", 40, 41)
    events = [outer, inner, range_, copy, add,
              kernel(11, "nvjet_sm90_tst_128x256", 300.0, inner), kernel(12, "pingpong::mm", 500.0, range_, True),
              kernel(13, "warp_specialized_gemm", 400.0, range_), kernel(14, "copy_kernel", 20.0, copy),
              kernel(15, "add_kernel", 50.0, add)]
    rows = dist_llama.step_products(events, 1, device=True)
    assert [r["op"] for r in rows].count("(no launching op)") == 0
    orphan = kernel(16, "warp_specialized_gemm", 70.0, cpu(99, "unrecorded", 0, 1))  # its op not in the profile
    (lost,) = [r for r in dist_llama.step_products(events + [orphan], 1, device=True) if r["M"] is None]
    assert (lost["op"], lost["calls"], lost["ms"], lost["kernels"]) == ("(no launching op)", 1, 0.07,
                                                                       ["warp_specialized_gemm"])
    assert [(r["op"], r["M"], r["N"], r["K"], r["layout"], r["calls"], r["ms"], r["kernels"], r["plan"])
            for r in rows] == [
        ("pingpong::mm", 4096, 1024, 4096, "nt", 1, 0.42, ["warp_specialized_gemm", "copy_kernel"],
         "hopper cooperative:128x256x64/g8"),
        ("aten::mm", 4096, 1024, 4096, "nt", 1, 0.3, ["nvjet_sm90_tst_128x256"], None)]


def test_timeline_summary_counts_the_compute_streams_busy_and_idle_time(dist_llama):
    """--trace's summary per step: a compute stream of 3 kernels (10 µs each, 20 and 40 µs apart)
    and an NCCL kernel on another stream, over 2 steps: per step a span of 45 µs, 1.5 launches,
    15 µs busy, 30 idle and 10 of communication (in ms); a trace without kernels gives nothing."""
    def kernel(name, ts, dur, stream):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}

    events = [kernel("fp8_gemm", 0, 10, 7), kernel("_pair_amax_kernel", 30, 10, 7), kernel("fp8_gemm", 80, 10, 7),
              kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 50, 20, 17),
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 500}]
    got = dist_llama.timeline_summary(events, 2)
    assert got == dict(span_ms=0.045, launches=1.5, busy_ms=0.015, idle_ms=0.03, comm_ms=0.01), got
    assert dist_llama.timeline_summary(events[-1:], 2) == {}
