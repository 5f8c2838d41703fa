"""A transformers Llama (12 layers, hidden 2048, random bf16 weights) with every nn.Linear
swapped by `pingpong.nn.replace_linear`, against the same model on torch: eager and
CUDA-graph-replayed, and the logits error of each against an fp32 copy.

    PYTHONPATH=src python benchmarks/model_bench.py [--layers 12] [--rounds 7] [--no-graphs]

Workloads (same tensors for both models):
    decode    forward of 32 sequences × 1 token (no KV cache: a decode-sized, host-bound call)
    prefill   forward of 4 × 1024 tokens
    train     forward + cross-entropy + backward + SGD step on 4 × 256 tokens

Each workload is timed in alternating rounds (torch, pingpong, torch, ...), each round the
mean of `--iters` back-to-back calls between two synchronizations; reported: the median per
call of each and the ratio torch / pingpong (> 1: pingpong faster). "graph": the forward
captured once in a CUDA graph, then replayed (kernels only, no host work).
Logits: ‖logits − logits_fp32‖ / ‖logits_fp32‖ for the prefill input (bf16 models against an
fp32 copy of the same weights). Needs the `test-model` extra (transformers).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time

import torch

import pingpong
from pingpong.tools import bench


def llama(transformers, layers: int, dtype):
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                   num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=16,
                                   max_position_embeddings=2048, tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to(device="cuda", dtype=dtype).eval()


def per_call(fn, iters: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters * 1e3


def alternate(fns: dict, rounds: int, iters: int) -> dict:
    """Median ms per call of each callable, timed in alternating rounds after one warm-up round."""
    for fn in fns.values():
        per_call(fn, 2)
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            times[k].append(per_call(fn, iters))
    return {k: statistics.median(v) for k, v in times.items()}


def graphed(fn):
    """fn captured in a CUDA graph (static inputs), returned as its replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--no-graphs", action="store_true")
    p.add_argument("--profile", action="store_true", help="torch.profiler's CPU table of one eager decode forward each")
    args = p.parse_args(argv)
    if bench.skipped_without_gpu():
        return 2
    try:
        import transformers
    except ImportError:
        print("skipped: the test-model extra (transformers) is not installed", file=sys.stderr)
        return 2
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {transformers.__version__},"
          f" Llama {args.layers} layers hidden 2048, bf16, rounds {args.rounds} × {args.iters} calls")
    ref32 = llama(transformers, args.layers, torch.float32)
    theirs = copy.deepcopy(ref32).to(torch.bfloat16)
    ours = copy.deepcopy(theirs)
    report = pingpong.nn.replace_linear(ours)
    print(f"replaced {len(report.replaced)} layers, skipped {report.skipped}")

    g = torch.Generator(device="cuda").manual_seed(1)
    decode = torch.randint(0, 32000, (32, 1), device="cuda", generator=g)
    prefill = torch.randint(0, 32000, (4, 1024), device="cuda", generator=g)
    train = torch.randint(0, 32000, (4, 256), device="cuda", generator=g)

    def forward(model, ids):
        def run():
            with torch.no_grad():
                return model(input_ids=ids, use_cache=False).logits
        return run

    def step(model):
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)

        def run():
            logits = model(input_ids=train, use_cache=False).logits
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), train[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return run

    rows = []
    for name, ids in (("decode 32×1", decode), ("prefill 4×1024", prefill)):
        t = alternate({"torch": forward(theirs, ids), "pingpong": forward(ours, ids)}, args.rounds, args.iters)
        rows.append((f"{name} eager", t))
        if not args.no_graphs:
            try:
                t = alternate({"torch": graphed(forward(theirs, ids)), "pingpong": graphed(forward(ours, ids))},
                              args.rounds, args.iters)
                rows.append((f"{name} graph", t))
            except Exception as e:  # noqa: BLE001  (reported, not hidden)
                print(f"{name} graph: capture failed: {type(e).__name__}: {e}")
    t = alternate({"torch": step(theirs), "pingpong": step(ours)}, args.rounds, max(args.iters // 2, 3))
    rows.append(("train step 4×256 eager", t))

    print(f"{'workload':<26} {'torch ms':>10} {'pingpong ms':>12} {'torch/pingpong':>15}")
    for name, t in rows:
        print(f"{name:<26} {t['torch']:10.3f} {t['pingpong']:12.3f} {t['torch'] / t['pingpong']:15.3f}")

    # the SGD steps above moved both bf16 models (equally, from the same weights); the error is
    # measured on fresh copies of the initial weights
    theirs = copy.deepcopy(ref32).to(torch.bfloat16)
    ours = copy.deepcopy(theirs)
    pingpong.nn.replace_linear(ours)
    with torch.no_grad():
        want = ref32(input_ids=prefill, use_cache=False).logits.double()
        logits = {}
        for name, model in (("torch bf16", theirs), ("pingpong bf16", ours)):
            got = logits[name] = model(input_ids=prefill, use_cache=False).logits.double()
            print(f"logits error {name:<14} ‖Δ‖/‖ref‖ = {((got - want).norm() / want.norm()).item():.5f}"
                  f"   max |Δ| = {(got - want).abs().max().item():.4f}")
        d = logits["pingpong bf16"] - logits["torch bf16"]
        print(f"pingpong vs torch bf16: ‖Δ‖/‖torch‖ = {(d.norm() / logits['torch bf16'].norm()).item():.5f},"
              f" {(d != 0).double().mean().item():.3f} of the logits differ")
    from pingpong.runtime import launcher

    encoded = [0]
    encode = launcher.BoundLaunch.tensor_map

    def counting(self, i, ptr):
        encoded[0] += 1
        return encode(self, i, ptr)

    launcher.BoundLaunch.tensor_map = counting
    run = forward(ours, decode)
    run()
    encoded[0] = 0
    for _ in range(5):
        run()
    launcher.BoundLaunch.tensor_map = encode
    print(f"TMA descriptors encoded per eager decode forward (after one warm-up): {encoded[0] / 5:.1f}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        for name, model in (("torch", theirs), ("pingpong", ours)):
            run = forward(model, decode)
            run()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    run()
                torch.cuda.synchronize()
            print(f"--- {name}: eager decode forward ×5, CPU self time")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=50))
    return 0


if __name__ == "__main__":
    sys.exit(main())
