"""Where async TP's time goes in the sequence-parallel training step: torch's model against
pingpong's, on 2 GPUs (NCCL, symmetric memory).

    torchrun --nproc-per-node 2 benchmarks/async_tp_probe.py                 # hidden 4096, both parts
    torchrun --nproc-per-node 2 benchmarks/async_tp_probe.py --parts ops     # the fused ops only (~20 s)
    python benchmarks/async_tp_probe.py --selection "NVIDIA H200"            # CPU: pingpong's chunk configs

Both models run the same implementations of the fused ops (torch.distributed._symmetric_memory's
_fused_all_gather_matmul_impl / _fused_matmul_reduce_scatter_impl: the same chunks, streams,
barriers and peer copies); only the product each chunk runs differs: aten.mm.out (cuBLAS) in
torch's ops, pingpong.integration.async_tp.mm_out in pingpong's. So each part is measured three
ways: torch, pingpong, and pingpong's ops with aten.mm.out as their chunk product ("pp+cublas":
pingpong's pass, graph and layers, cuBLAS in the chunks).

Part "ops": each fused op of one block at dist_llama's shapes (`fused_ops`: batch × seq tokens,
each rank's weights), eager, and each op's chunk products alone (no communication): per call,
the GPU's ms in a loop of calls (the slowest rank's) and the host's µs to issue one.

Part "step": dist_llama's compiled SP + async TP training step (its models, plan and optimizer,
not its checks), ms per step timed three ways: interleaved (dist_llama's method: each step
follows a step of the other model, no wait between them), each model in a loop of its own steps
(synchronized before and after), and each step alone (synchronized before and after: its
latency), and the profiler's kernel ms per step by class (`kernel_split`: GEMMs, copies,
barriers and NCCL, the last two waits as much as work). The interleaved time of a step is its host's issue time plus the GPU work it leaves
queued minus what the step before it left: where one model leaves more queued, that shows in
the interleaved ratio and not in the loops.

Output: a table on rank 0; the rows in $OUT/async_tp_probe.json (or --json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist

import dist_llama as dl
from pingpong.integration import async_tp, direct
from pingpong.runtime.spec import NO_ARGS
from pingpong.tools.timing import interleaved, summarize

VARIANTS = ("torch", "pingpong", "pp+cublas")


def fused_ops(c: "dl.Config", batch: int, seq: int, world: int) -> list[dict]:
    """The fused ops of one block of the sequence-parallel step, as each rank runs them: name,
    kind ("ag": all-gather then products, "rs": product then reduce-scatter), the operand's
    shape (gathered or scattered along dim 1), the B operands' (K, N) and layouts ("nt": a
    weight's transpose, "nn": a weight as stored), and the chunk products' (M, N, K)."""
    hd = c.hidden // c.heads
    q, kv, inter = c.heads * hd // world, c.kv_heads * hd // world, c.inter // world
    rows = batch * seq // world  # one chunk: one rank's part of the sequence
    ag = lambda name, bs: dict(name=name, kind="ag", a=(batch, seq // world, c.hidden), bs=bs,  # noqa: E731
                               chunks=[(rows, n, k) for k, n, _ in bs])
    rs = lambda name, k, b: dict(name=name, kind="rs", a=(batch, seq, k), bs=[b],  # noqa: E731
                                 chunks=[(rows, b[1], k)])
    return [ag("fwd attn in: q, k, v", [(c.hidden, q, "nt"), (c.hidden, kv, "nt"), (c.hidden, kv, "nt")]),
            rs("fwd o_proj out", q, (q, c.hidden, "nt")),
            ag("fwd mlp in: gate, up", [(c.hidden, inter, "nt"), (c.hidden, inter, "nt")]),
            rs("fwd down_proj out", inter, (inter, c.hidden, "nt")),
            ag("bwd down_proj dx", [(c.hidden, inter, "nn")]),
            ag("bwd o_proj dx", [(c.hidden, q, "nn")])]


def describe_config(M: int, N: int, K: int, layout: str, device) -> str:
    """pingpong's selection for an M × N × K bf16 product of `layout` on `device` (a
    select.Device): the tile, schedule, split-K, work units and waves, and where it came from."""
    from pingpong.hopper.host.select import choose, idle_waves, tile_count
    from pingpong.hopper.host.splits import effective_splits

    config, source = choose(M, N, K, ("bf16", "bf16"), layout, device)
    splits = effective_splits(K, config.block_k, config.split_k)
    units = tile_count(config, M, N) * splits
    return (f"{config.block_m}x{config.block_n}x{config.block_k} {config.schedule} split {splits}"
            f"{' swap-AB' if config.swap_ab else ''}{' stream-K' if config.stream_k else ''}: {units} units, "
            f"{units / device.sms:.2f} waves (idle x{idle_waves(config, M, N, K, device.sms):.2f}), "
            f"{'heuristic' if source == 'heuristic' else 'table'}")


def selection(c: "dl.Config", batch: int, seq: int, world: int, device) -> list[str]:
    """One line per chunk product of `fused_ops`: pingpong's selection for the chunk and for
    the same product unchunked (all ranks' rows: what the step without async TP runs)."""
    lines = []
    for op in fused_ops(c, batch, seq, world):
        for (m, n, k), (_, _, layout) in zip(op["chunks"], op["bs"]):
            lines.append(f"{op['name']:24s} {m}x{n}x{k} {layout}: {describe_config(m, n, k, layout, device)}"
                         f" | unchunked {m * world}x{n}x{k}: {describe_config(m * world, n, k, layout, device)}")
    return lines


def _aten_mm_out(a, b, *, bias=None, activation=None, out) -> None:
    """async_tp.mm_out's signature on aten.mm.out (the probe's ops take no bias or activation)."""
    if bias is not None or activation not in (None, "none"):
        raise ValueError("pp+cublas: the probe's cuBLAS chunk product takes no bias or activation")
    torch.mm(a, b, out=out)


@contextlib.contextmanager
def chunk_product(variant: str):
    """pingpong's fused ops with cuBLAS chunk products while the variant is "pp+cublas"."""
    if variant != "pp+cublas":
        yield
        return
    before = async_tp.mm_out
    async_tp.mm_out = _aten_mm_out
    try:
        yield
    finally:
        async_tp.mm_out = before


def _operand(shape, along):
    """A bf16 operand of `shape` laid out as the pass's force_stride_order lays it: dim `along`
    outermost (its movedim to 0 contiguous)."""
    order = [along] + [d for d in range(len(shape)) if d != along]
    t = torch.randn([shape[d] for d in order], dtype=torch.bfloat16, device="cuda") / 8
    return t.permute([order.index(d) for d in range(len(shape))])


def _b(k, n, layout):
    w = torch.randn((n, k) if layout == "nt" else (k, n), dtype=torch.bfloat16, device="cuda") / 64
    return w.t() if layout == "nt" else w


def _op_call(op, variant, group):
    a, bs = _operand(op["a"], 1), [_b(*b) for b in op["bs"]]
    if op["kind"] == "ag":
        if variant == "torch":
            return lambda: torch.ops.symm_mem.fused_all_gather_matmul(a, bs, 1, group, return_A=True)
        nones = [None] * len(bs)
        return lambda: torch.ops.pingpong.all_gather_gemm(a, bs, nones, nones, 1, group, True)
    if variant == "torch":
        return lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, bs[0], "sum", 1, group)
    return lambda: torch.ops.pingpong.gemm_reduce_scatter(a, bs[0], None, "sum", 1, group)


def _chunks_call(op, variant):
    """The op's chunk products alone, into preallocated outputs (each rank's: no communication)."""
    work = []
    for (m, n, k), (bk, bn, layout) in zip(op["chunks"], op["bs"]):
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda") / 8
        work.append((a, _b(bk, bn, layout), torch.empty(m, n, dtype=torch.bfloat16, device="cuda")))
    if variant == "pingpong":
        return lambda: [direct.gemm(a, b, NO_ARGS, out.dtype, out=out) for a, b, out in work]
    return lambda: [torch.mm(a, b, out=out) for a, b, out in work]


def _sync():
    dist.barrier()
    torch.cuda.synchronize()


def _slowest(values):
    t = torch.tensor(values, dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def loop_ms(fn, calls: int) -> tuple[float, float]:
    """(GPU ms per call over a loop of `calls`, host µs to issue one), after a barrier and a
    synchronize: CUDA events around the loop, the host's clock until the loop is issued."""
    _sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    host_us = (time.perf_counter() - t0) * 1e6 / calls
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls, host_us


def part_ops(c, args, group) -> list[dict]:
    rows = []
    for op in fused_ops(c, args.batch, args.seq, dist.get_world_size()):
        for what, make in (("fused op", lambda v: _op_call(op, v, group)), ("chunks alone", lambda v: _chunks_call(op, v))):
            variants = VARIANTS if what == "fused op" else ("torch", "pingpong")
            calls = {v: make(v) for v in variants}
            times = {v: [] for v in variants}
            for r in range(args.rounds):
                for v in (variants if r % 2 == 0 else variants[::-1]):
                    with chunk_product(v):
                        calls[v]()  # warm-up / plan
                        times[v].append(_slowest(loop_ms(calls[v], args.op_calls)))
            row = dict(part="ops", name=op["name"], what=what, chunks=op["chunks"])
            for v in variants:
                row[v] = dict(gpu_ms=statistics.median(t[0] for t in times[v]),
                              host_us=statistics.median(t[1] for t in times[v]))
            rows.append(row)
    return rows


def part_step(c, args, env, meshes) -> list[dict]:
    arch = dl.Arch("llama")
    (ids,) = dl.tokens(1, c.vocab, args.batch, args.seq, env.device, seed=1)
    steps = {}
    for name in ("torch", "pingpong"):
        model = dl.make_model(arch, c, "tp-train", True, name == "pingpong", meshes, env)
        opt = dl.adamw(model, 0.064 / c.hidden, "tp-train")

        def step(model=model, opt=opt):
            arch.loss(model, ids).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps[name] = step

    def cublas_chunks():
        with chunk_product("pp+cublas"):
            steps["pingpong"]()

    steps["pp+cublas"] = cublas_chunks
    for fn in steps.values():
        for _ in range(3):  # compile, warm up
            fn()
    _sync()
    rows = []
    for other in ("pingpong", "pp+cublas"):
        times = interleaved(steps["torch"], steps[other], args.step_reps, args.rounds, settle=_sync).times
        paired = summarize([tuple(_slowest(list(t))) for t in times])
        rows.append(dict(part="step", how="interleaved", pair=["torch", other], ratio=paired.ratio,
                         iqr_pct=paired.iqr_pct, ms=[statistics.median(t[i] for t in paired.times) for i in (0, 1)]))
    own = {v: [] for v in VARIANTS}
    alone = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for v in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
            own[v].append(_slowest(loop_ms(steps[v], args.step_reps))[0])
            for _ in range(2):
                _sync()
                t0 = time.perf_counter()
                steps[v]()
                issued = time.perf_counter()
                torch.cuda.synchronize()
                done = time.perf_counter()
                alone[v].append(_slowest([(done - t0) * 1e3, (issued - t0) * 1e3]))
    for v in VARIANTS:
        rows.append(dict(part="step", how="own loop / alone", variant=v, loop_ms=statistics.median(own[v]),
                         alone_ms=statistics.median(t[0] for t in alone[v]),
                         alone_host_ms=statistics.median(t[1] for t in alone[v]), kernels_ms=kernel_split(steps[v], env)))
    return rows


#: kernel name pieces of each class in `kernel_split` (the first class that matches)
KERNEL_CLASSES = (("nccl", ("nccl",)), ("barrier", ("barrier_kernel",)), ("copy", ("Memcpy", "Memset")),
                  ("gemm", ("gemm", "nvjet", "cutlass", "cublas")))


def kernel_split(fn, env, steps: int = 2) -> dict:
    """Profiler kernel ms per step of `fn` (every rank's step started at once, dist_llama's
    `aligned`) by class: NCCL and symmetric-memory barriers (waits for the other rank as much as
    work), copies, GEMMs (pingpong's and cuBLAS's), the rest; each the slowest rank's."""
    from pingpong.tools.timing import kernel_us

    _sync()
    sums = dict.fromkeys([name for name, _ in KERNEL_CLASSES] + ["other"], 0.0)
    for kernel, us in kernel_us(dl.aligned(fn, env), steps).items():
        kind = next((name for name, pieces in KERNEL_CLASSES if any(p in kernel for p in pieces)), "other")
        sums[kind] += us / 1e3
    return dict(zip(sums, (round(v, 3) for v in _slowest(list(sums.values())))))


def table(rows) -> str:
    out = []
    for r in rows:
        if "error" in r:
            out.append(f"part {r['part']}: {r['error']}")
        elif r["part"] == "ops":
            cells = "  ".join(f"{v} {r[v]['gpu_ms'] * 1e3:7.1f} us gpu {r[v]['host_us']:6.1f} us host"
                              for v in VARIANTS if v in r)
            out.append(f"{r['name']:24s} {r['what']:12s} {cells}")
        elif r["how"] == "interleaved":
            out.append(f"step interleaved {r['pair'][0]} / {r['pair'][1]}: {r['ms'][0]:.2f} / {r['ms'][1]:.2f} ms, "
                       f"ratio {r['ratio']:.3f} (IQR {r['iqr_pct']:.1f}%)")
        else:
            out.append(f"step {r['variant']:10s} own loop {r['loop_ms']:.2f} ms, alone {r['alone_ms']:.2f} ms "
                       f"(issued in {r['alone_host_ms']:.2f} ms); kernel ms {r['kernels_ms']}")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=4096, choices=(2048, 4096))
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--parts", default="ops,step")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--op-calls", type=int, default=20)
    p.add_argument("--step-reps", type=int, default=4)
    p.add_argument("--json", default=None)
    p.add_argument("--selection", default=None, metavar="GPU",
                   help="no GPU needed: print pingpong's selection for each chunk product and unchunked on this GPU's"
                        " tuning table and SMs, e.g. 'NVIDIA H200' (132 SMs), and exit")
    args = p.parse_args(argv)
    if args.selection:
        from pingpong.hopper.host.select import Device

        c = dl.config(argparse.Namespace(cpu_smoke=False, hidden=args.hidden, quick=False, layers=args.layers))
        print("\n".join(selection(c, args.batch, args.seq, 2, Device(args.selection, 132))))
        return 0
    parts = args.parts.split(",")
    if not set(parts) <= {"ops", "step"}:
        p.error(f"--parts: a comma-separated subset of ops,step, got {args.parts!r}")
    import torch._dynamo

    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, 64)  # as dist_llama: each model's blocks compile the same code
    rank, world, device = dl.setup(cpu=False)
    env = dl.Env(rank, world, device, torch.bfloat16, "inductor", sequence_parallel=True, async_tp=True)
    meshes = dl.meshes_for(world, device)
    dl.enable_async_tp(meshes["tp"])
    c = dl.config(argparse.Namespace(cpu_smoke=False, hidden=args.hidden, quick=False, layers=args.layers))
    group = meshes["tp"].get_group().group_name
    rows = []
    paths = [x for x in (args.json, os.environ.get("OUT") and os.path.join(os.environ["OUT"], "async_tp_probe.json"))
             if x]
    for part in parts:  # the JSON after each part: a run stopped by its time limit keeps what it measured
        try:
            rows += part_ops(c, args, group) if part == "ops" else part_step(c, args, env, meshes)
        except Exception:  # the other part still runs; the error is in the results
            rows.append(dict(part=part, error=traceback.format_exc()))
        if rank == 0:
            for path in paths:
                with open(path, "w") as f:
                    json.dump(dict(args=vars(args), torch=torch.__version__, world=world, rows=rows), f, indent=1)
    if rank == 0:
        print(table(rows), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
