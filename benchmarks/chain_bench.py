"""A transformer layer's products back to back in one CUDA graph: pingpong against torch.matmul.

`pingpong bench` times each product alone, after an L2 flush, on an otherwise idle GPU. A model
runs them back to back: each launch follows the kernel before it (the gap between them is what
programmatic dependent launch shortens), the inputs are the previous kernel's output, still in
L2, and the clocks are those of a GPU under sustained load. This script times the products that
way, without the rest of a model:

    layer chain  per layer: a = x·Wqᵀ, b = x·Wkᵀ, c = x·Wvᵀ, h = (a + b + c)·Woᵀ,
                 t = silu(h·Wgᵀ) · (h·Wuᵀ), x = t·Wdᵀ   (the sum and SiLU·up on torch, both sides)
    --products   each product kind alone, `layers` × 4 calls back to back (each layer's own
                 weights, as in a model: they do not stay in L2); with `--configs C ...` also
                 on each config C (benchmarks/schedules.py's notation) instead of the rule's pick

each captured once in a CUDA graph for pingpong.matmul and once for torch.matmul (the same
weights and input), replayed `--replays` times per measurement in alternated rounds
(`pingpong.tools.timing.alternated`: pairs of rounds in both orders). Reported per row: torch /
pingpong (median over pairs, range), ms per replay, and each side's SM clock (MHz) and power
(W) read right after its measurements (torch.cuda.clock_rate, torch.cuda.power_draw), which
say whether a gap is the kernels' or the clocks'.

    python benchmarks/chain_bench.py [--rows 32 4096] [--layers 12] [--hidden 2048]
        [--intermediate 8192] [--rounds 6] [--replays 20] [--products [--configs C ...]]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

import pingpong
from pingpong.tools import bench
from pingpong.tools.timing import alternated

sys.path.insert(0, __import__("os").path.dirname(__file__))
from model_bench import graphed  # noqa: E402
from schedules import parse_config  # noqa: E402


def weights(layers: int, hidden: int, intermediate: int, gen) -> list[list[torch.Tensor]]:
    """Each layer's (q, k, v, o, gate, up, down) weights, N × K bf16, scaled to keep activations O(1)."""
    def w(n, k):
        return (torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5).to(torch.bfloat16)
    return [[w(hidden, hidden) for _ in range(4)] + [w(intermediate, hidden), w(intermediate, hidden),
                                                    w(hidden, intermediate)] for _ in range(layers)]


def layer_chain(mm, x, ws):
    """The layer chain of the module docstring on matmul `mm`."""
    def run():
        h = x
        for q, k, v, o, gate, up, down in ws:
            h = mm(mm(h, q.t()) + mm(h, k.t()) + mm(h, v.t()), o.t())
            h = mm(torch.nn.functional.silu(mm(h, gate.t())) * mm(h, up.t()), down.t())
        return h
    return run


def product_chain(mm, x, ws):
    """`x @ wᵀ` for each w of `ws` in turn, back to back."""
    def run():
        for w in ws:
            out = mm(x, w.t())
        return out
    return run


def timed(replay, replays: int, state: list):
    """A measurement: ms per replay of `replays` back-to-back replays; the SM clock and power
    right after it appended to `state`."""
    def run() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            replay()
        end.record()
        end.synchronize()
        state.append((torch.cuda.clock_rate(), torch.cuda.power_draw() / 1000))
        return start.elapsed_time(end) / replays
    return run


def compare(name: str, ours, theirs, args) -> str:
    ours, theirs = graphed(ours), graphed(theirs)
    state = {"torch": [], "pingpong": []}
    p = alternated(timed(theirs, args.replays, state["torch"]), timed(ours, args.replays, state["pingpong"]),
                   args.rounds)
    med = lambda xs: statistics.median(xs)  # noqa: E731
    t_ms, o_ms = med(a for a, _ in p.times), med(b for _, b in p.times)
    (t_mhz, t_w), (o_mhz, o_w) = ((med(c for c, _ in state[k]), med(w for _, w in state[k])) for k in ("torch", "pingpong"))
    return (f"{name:<34} {t_ms:9.4f} {o_ms:11.4f} {p.ratio:8.4f} {p.lo:6.4f}-{p.hi:.4f}"
            f" {t_mhz:6.0f} {o_mhz:6.0f} {t_w:6.0f} {o_w:6.0f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[32, 4096], help="tokens M of each chain")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--products", action="store_true", help="also each product kind alone, back to back")
    p.add_argument("--configs", nargs="+", type=parse_config, default=[],
                   help="--products: also each kind on these configs (schedules.py's notation)")
    args = p.parse_args(argv)
    if args.configs and not args.products:
        p.error("--configs: times the product kinds, so it needs --products")
    for config in args.configs:
        try:
            config.validate()
        except pingpong.ConfigError as e:
            p.error(f"--configs: {config.name()}: {e}")
    for name in ("rows", "layers", "hidden", "intermediate", "rounds", "replays"):
        values = getattr(args, name)
        if min(values if isinstance(values, list) else [values]) < 1:
            p.error(f"--{name}: expected positive integers, got {values}")
    if bench.skipped_without_gpu():
        return 2
    gen = torch.Generator(device="cuda").manual_seed(0)
    ws = weights(args.layers, args.hidden, args.intermediate, gen)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; {args.layers} layers, hidden"
          f" {args.hidden}, intermediate {args.intermediate}; {args.rounds} rounds × {args.replays} replays")
    print(f"{'chain':<34} {'torch ms':>9} {'pingpong ms':>11} {'torch/pp':>8} {'pair range':>13}"
          f" {'MHz t':>6} {'MHz pp':>6} {'W t':>6} {'W pp':>6}")
    for M in args.rows:
        x = torch.randn(M, args.hidden, device="cuda", generator=gen).to(torch.bfloat16)
        print(compare(f"layers, M {M}", layer_chain(pingpong.matmul, x, ws), layer_chain(torch.matmul, x, ws), args),
              flush=True)
        if not args.products:
            continue
        kinds = (("q/k/v/o", [w for layer in ws for w in layer[:4]], args.hidden),
                 ("gate/up", [w for layer in ws for w in layer[4:6]] * 2, args.hidden),
                 ("down", [layer[6] for layer in ws] * 4, args.intermediate))
        for kind, kind_ws, K in kinds:
            a = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
            shape = f"{M}x{kind_ws[0].shape[0]}x{K}"
            print(compare(f"  {kind} {shape}", product_chain(pingpong.matmul, a, kind_ws),
                          product_chain(torch.matmul, a, kind_ws), args), flush=True)
            for config in args.configs:
                tiled = lambda x, w, c=config: pingpong.matmul_tiled(x, w, c)  # noqa: E731
                print(compare(f"    {config.name()}", product_chain(tiled, a, kind_ws),
                              product_chain(torch.matmul, a, kind_ws), args), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
