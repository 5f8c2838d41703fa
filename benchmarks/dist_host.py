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


def main(argv=None) -> int:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    host_cpu.stub_launches()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
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
