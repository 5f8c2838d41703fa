"""Host cost of a call: back-to-back calls with no synchronization between them.

    python -m pingpong.tools.overhead [--sizes 64 1024 2048] [--calls 2000] [--rounds 3]

For each size (M = N = K, bf16, a @ wᵀ) and each op, `calls` calls are issued in a loop and
timed twice: until the loop returns (host µs per call: what Python, validation, the plan
lookup and the launch cost) and until the GPU is done (wall µs per call: the larger of the
host cost and the kernel). Ops: ours (`matmul`, `gemm` with β·C, `gemm_`), `torch.matmul`
(cuBLAS), and our `matmul` kernel replayed from a CUDA graph (the launch without any
Python). Rounds alternate the ops; the table shows each op's median over rounds and
ours/torch.matmul. A ratio ≤ 1.2 at 64³ means our call path costs at most 20% more host
time than cuBLAS's.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from .timing import call_us


def ops(n: int) -> dict:
    import pingpong

    a = torch.randn(n, n, device="cuda").bfloat16()
    w = torch.randn(n, n, device="cuda").bfloat16()
    c = torch.randn(n, n, device="cuda").bfloat16()
    wt = w.t()
    graph = torch.cuda.CUDAGraph()
    pingpong.matmul(a, wt)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        pingpong.matmul(a, wt)
    return {
        "pingpong.matmul": lambda: pingpong.matmul(a, wt),
        "torch.matmul": lambda: torch.matmul(a, wt),
        "pingpong.gemm β·C": lambda: pingpong.gemm(a, wt, c, alpha=1.0, beta=0.5),
        "pingpong.gemm_": lambda: pingpong.gemm_(c, a, wt, alpha=1.0, beta=0.0),
        "graph replay (ours)": graph.replay,
    }


def measure(sizes, calls: int, rounds: int) -> list[dict]:
    rows = []
    for n in sizes:
        fns = ops(n)
        for fn in fns.values():  # warm-up: compile, bind, fill the allocator's cache
            for _ in range(20):
                fn()
        samples = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                samples[name].append(call_us(fn, calls))
        ref_host = statistics.median(h for h, _ in samples["torch.matmul"])
        ref_wall = statistics.median(w for _, w in samples["torch.matmul"])
        for name, s in samples.items():
            host = statistics.median(h for h, _ in s)
            wall = statistics.median(w for _, w in s)
            rows.append(dict(size=n, op=name, host_us=host, wall_us=wall, host_ratio=host / ref_host,
                             wall_ratio=wall / ref_wall))
    return rows


def table(rows) -> str:
    lines = [f"{'M=N=K':>6} {'op':<22} {'host µs/call':>12} {'wall µs/call':>12} {'host ÷ torch':>12} {'wall ÷ torch':>12}"]
    for r in rows:
        lines.append(f"{r['size']:>6} {r['op']:<22} {r['host_us']:>12.1f} {r['wall_us']:>12.1f} "
                     f"{r['host_ratio']:>12.2f} {r['wall_ratio']:>12.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pingpong.tools.overhead", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 1024, 2048])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("pingpong.tools.overhead: no CUDA GPU here; it times calls on a GPU")
        return 2
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(table(measure(args.sizes, args.calls, args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
