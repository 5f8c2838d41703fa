"""Host cost of a tensor-parallel Linear on DTensors, pingpong's against torch's, on the CPU.

    PYTHONPATH=src python benchmarks/dist_host.py [--calls 1000] [--rounds 9] [--profile]

torch's fake process group (world size 2, rank 0: collectives do nothing), a ColwiseParallel
and a RowwiseParallel Linear (16 → 32 → 16, bf16, x (2, 4, 16): batch, sequence, hidden) of
pingpong.nn.Linear against the same of torch.nn.Linear, each through parallelize_module (its
input and output hooks). The launch of pingpong's kernel is a no-op (benchmarks/host_cpu.py's
stub: the real call path down to Triton's C launcher); torch's model runs its CPU kernels, at
sizes where they cost little. Prints µs per call, the fastest of `rounds` loops of `calls`
calls, torch's and pingpong's loops alternated (a loaded machine slows both alike): forward
under grad mode, and forward + backward; and the Python function calls of one forward +
backward (cProfile's count: unmoved by the machine's load). Compare two trees by running this under each one's
PYTHONPATH, alternately. --profile: where pingpong's column layer's forward + backward goes.

    PYTHONPATH=src python benchmarks/dist_host.py --compiled [--profile]

instead: one training step (forward + backward) of a compiled (inductor, on the CPU; fullgraph)
ColwiseParallel / RowwiseParallel MLP (64 → 128, ReLU, 128 → 64, fp16, x (2, 16, 64)) of
pingpong.nn.Linear against the same of Float8TrainingLinear (recipe "row"), the GEMM and
quantization launches no-ops: per step, the Python function calls (cProfile's count), the
direct calls from inductor's code (pingpong.integration.inductor.CALLS), the graphs and graph
breaks, and µs (the fastest of `rounds` loops; the launches' outputs are left unwritten, so
the µs are the host's path only). --profile: the FP8 step's functions by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

import host_cpu
import pingpong


def pair(mesh, style, n_in, n_out):
    from torch.distributed.tensor.parallel import parallelize_module

    torch.manual_seed(0)
    theirs = torch.nn.Linear(n_in, n_out, dtype=torch.bfloat16)
    mine = pingpong.nn.Linear.from_linear(torch.nn.Linear(n_in, n_out, dtype=torch.bfloat16))
    return {"torch": parallelize_module(theirs, mesh, style()), "pingpong": parallelize_module(mine, mesh, style())}


def loops(fns: dict, calls: int, rounds: int) -> dict:
    """µs per call of each function: the fastest of `rounds` loops, the functions alternated."""
    for fn in fns.values():
        for _ in range(50):
            fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter_ns() - t) / calls / 1000)
    return best


def python_calls(fn) -> int:
    """Python function calls (cProfile's count, C functions included) of one call of fn: a
    measure of host work that a loaded machine does not disturb."""
    fn()
    prof = cProfile.Profile()
    prof.runcall(fn)
    return sum(stat[1] for stat in pstats.Stats(prof).stats.values())


def stub_quantize() -> None:
    """quantize_fp8's and quantize_fp8_pair's launches no-ops, the GPU-only checks passed (CPU
    tensors stand in for CUDA ones, as host_cpu.stub_launches does for the GEMMs)."""
    from pingpong import fp8, quantize

    quantize.interpreter_enabled = lambda: True  # (fp16: the interpreter's bf16 refusal does not apply)
    quantize.launch = quantize.launch_pair = lambda *args: None
    fp8.check_gpu = lambda a, b: None


def compiled_steps(mesh, calls: int, rounds: int, profile: bool) -> None:
    """--compiled: one compiled TP training step of pingpong's bf16 MLP and of its FP8 one."""
    from torch._dynamo.utils import counters
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from pingpong.integration import inductor

    stub_quantize()
    steps = {}
    for name, layer in (("bf16", pingpong.nn.Linear), ("fp8", pingpong.nn.Float8TrainingLinear)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(layer(64, 128, dtype=torch.float16), torch.nn.ReLU(),
                                    layer(128, 64, dtype=torch.float16))
        parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        compiled = torch.compile(model, fullgraph=True)
        x = torch.randn(2, 16, 64, dtype=torch.float16, requires_grad=True)

        def step(model=model, compiled=compiled, x=x):
            compiled(x).sum().backward()
            x.grad = None
            for q in model.parameters():
                q.grad = None

        counters.clear()
        for _ in range(3):
            step()
        inductor.CALLS.clear()
        step()
        print(f"{name}: graphs {counters['stats']['unique_graphs']}, graph breaks"
              f" {sum(counters['graph_break'].values())},"
              f" direct calls per step {dict(inductor.CALLS)}, Python calls per step {python_calls(step)}",
              flush=True)
        steps[name] = step
    best = loops(steps, calls, rounds)
    print(f"µs per step: bf16 {best['bf16']:.1f}  fp8 {best['fp8']:.1f}  (2 linears each)")
    if profile:
        prof = cProfile.Profile()
        prof.runcall(lambda: [steps["fp8"]() for _ in range(100)])
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


def main(argv=None) -> int:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--compiled", action="store_true", help="a compiled TP training step, pingpong's bf16 and FP8")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    host_cpu.stub_launches()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    if args.compiled:
        compiled_steps(mesh, args.calls // 10, args.rounds, args.profile)
        dist.destroy_process_group()
        return 0
    print(f"pingpong from {pingpong.__file__}, torch {torch.__version__}; µs per call, pingpong's launch stubbed")
    for style, n_in, n_out, x_in in ((ColwiseParallel, 16, 32, 16), (RowwiseParallel, 32, 16, 16)):
        layers = pair(mesh, style, n_in, n_out)
        x = torch.randn(2, 4, x_in, dtype=torch.bfloat16, requires_grad=True)  # Rowwise: this rank's half of K

        def forward(layer):
            return lambda: layer(x)

        def forward_backward(layer):
            def step():
                y = layer(x)
                y.backward(torch.ones_like(y))
                x.grad = None
                for q in layer.parameters():
                    q.grad = None
            return step

        fwd = loops({k: forward(v) for k, v in layers.items()}, args.calls, args.rounds)
        both = loops({k: forward_backward(v) for k, v in layers.items()}, args.calls // 2, args.rounds)
        calls = {k: python_calls(forward_backward(v)) for k, v in layers.items()}
        print(f"{style.__name__:<16} forward: torch {fwd['torch']:6.1f}  pingpong {fwd['pingpong']:6.1f}"
              f"   forward + backward: torch {both['torch']:6.1f}  pingpong {both['pingpong']:6.1f}"
              f"   Python calls per forward + backward: torch {calls['torch']}  pingpong {calls['pingpong']}",
              flush=True)
        if args.profile and style is ColwiseParallel:
            prof = cProfile.Profile()
            step = forward_backward(layers["pingpong"])
            prof.runcall(lambda: [step() for _ in range(300)])
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
