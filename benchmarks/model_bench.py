"""A transformers Llama (by default 12 layers, hidden 2048, intermediate 8192, random bf16 weights) with
every nn.Linear swapped by `pingpong.nn.replace_linear`, against the same model on torch, in
each execution mode users run, and the logits error of each against an fp32 copy.

    PYTHONPATH=src python benchmarks/model_bench.py [--layers 12] [--rounds 7] [--hidden 2048
        --intermediate 8192 --heads 16 --kv-heads 16 --train-seq 512]
        [--modes eager,graph,compiled,reduce-overhead,dynamic] [--workloads decode,prefill,train]
        [--fp8 tensor|row|row_gw_hp] [--micro-batches N [--keep]]

`--fp8 RECIPE`: pingpong's model is swapped by `replace_linear(model, fp8=RECIPE,
training=True)` instead (pingpong.fp8_training: FP8 forward and gradients; the logits error
is then FP8's). `--modes compiled --workloads train --fp8 row` times FP8 training steps against
the bf16 torch model; a Llama-3-8B-shaped stack at 4 × 2048 tokens: `--hidden 4096
--intermediate 14336 --heads 32 --kv-heads 8 --layers 4 --train-seq 2048`. With `--baseline
torchao` and one of torchao's recipe names (`--fp8 tensorwise|rowwise|rowwise_with_gw_hp`: pingpong
runs them with the same arithmetic, the forward fast-accumulated) the peer (the "torch" columns)
is the same model under torchao's float8 training of that recipe (`convert_to_float8_training`)
instead of bf16 torch: pingpong's FP8 layers against torchao's.

Workloads (same tensors for both models):
    decode    forward of 32 sequences × 1 token (no KV cache: a decode-sized, host-bound call)
    prefill   forward of 4 × 1024 tokens, no grad
    train     forward + cross-entropy + backward + SGD step on 4 × --train-seq tokens; with
              `--micro-batches N`, N forward + backward passes (gradient accumulation) before
              the step, and with `--keep` pingpong's inside `pingpong.kept.keep_quantized_weights`
              (its FP8 weights quantized once per step, not per micro-batch; the peer has no such
              block)
Modes:
    eager            the models as they are
    graph            the eager forward captured once in a CUDA graph, then replayed
    compiled         torch.compile(model) (default mode: inductor, static shapes)
    reduce-overhead  torch.compile(model, mode="reduce-overhead") (CUDA graphs replay the step)
    dynamic          torch.compile(model) after it saw two other sequence lengths (dynamo's
                     automatic dynamic shapes); the recompilations the third length caused
                     are counted (0 expected)

Each workload is timed in rounds of `--iters` calls of each model, interleaved (torch pingpong
torch ..., pingpong first every other round; `pingpong.tools.timing.interleaved`, garbage
collector off while timing), each call timed by CUDA events around it with no wait between
calls (timed in blocks of calls instead, a host-bound step ran slower when its block came first
in a round). Reported: the median ms per call of each, the median over pairs of rounds (one of
each order) of the pair's ratio torch / pingpong (> 1: pingpong faster) with the pairs' range
and interquartile range; then the same ratio with each model's calls back to back ("loop": a
block of `--iters` calls of one model timed from the host, blocks alternated, pairs of rounds
of each order as above), as a loop serving one model runs them, and the TMA
descriptors pingpong's launches encoded per call in each (its map caches are keyed by address:
an activation at a new address costs a host-side encode; 0 expected once warm); and for
compiled modes, from torch.profiler on calls separate from the timing: the median host µs
of an outermost GEMM-op call over three profiled calls of each model, alternated
(`aten::mm`/`aten::addmm`/`aten::_scaled_mm` in torch's compiled graph, `pingpong::*` in
pingpong's; an op called inside another, e.g. a quantization inside an FP8 linear, counts as
part of it) and the GPU kernel ms per call (all kernels / the GEMM kernels), which says whether a gap is the
host's or the kernels'; with --profile also those GEMM calls by kind (the op, the plan a
pingpong op ran, the input shapes), dearest first, to find which products' calls cost the
host most. Needs the `test-model` extra (transformers).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import statistics
import sys
import time

import torch

import pingpong
from pingpong.runtime import launcher
from pingpong.tools import bench
from pingpong.tools.timing import alternated, interleaved, kernel_us


def llama(transformers, args, dtype):
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=args.hidden, intermediate_size=args.intermediate,
                                   num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                   num_key_value_heads=args.kv_heads, max_position_embeddings=max(2048, args.train_seq),
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to(device="cuda", dtype=dtype).eval()


def per_call(fn, iters: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters * 1e3


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


WORKLOADS = ("decode", "prefill", "train")
MODES = ("eager", "graph", "compiled", "reduce-overhead", "dynamic")


def ratios(fns: dict, rounds: int, iters: int) -> dict:
    """Median ms per call of each callable after two warm-up calls each, timed call by call,
    interleaved (`pingpong.tools.timing.interleaved`, CUDA events around each call), and the
    median, range and interquartile range (%) over pairs of rounds of the ratio torch / pingpong;
    then the same ratio in loops (`loop`, its range `loop_lo`-`loop_hi`): each model's `iters`
    calls back to back, timed as a block (`per_call`), in rounds of alternated order
    (`pingpong.tools.timing.alternated`); and the TMA descriptors pingpong's launches had to
    encode per pingpong call in each (`maps`: the launcher's address-keyed map caches missed,
    `pingpong.runtime.launcher.ENCODED`)."""
    for fn in fns.values():
        per_call(fn, 2)

    made = launcher.ENCODED
    p = interleaved(fns["torch"], fns["pingpong"], iters, rounds, settle=torch.cuda.synchronize)
    made, interleaved_maps = launcher.ENCODED, launcher.ENCODED - made
    loop = alternated(lambda: per_call(fns["torch"], iters), lambda: per_call(fns["pingpong"], iters), rounds)
    forwards = len(p.times) * iters  # pingpong's timed calls in each (interleaved: and half as many lead-ins)
    return {"torch": statistics.median(t for t, _ in p.times), "pingpong": statistics.median(q for _, q in p.times),
            "ratio": p.ratio, "lo": p.lo, "hi": p.hi, "iqr_pct": p.iqr_pct,
            "loop": loop.ratio, "loop_lo": loop.lo, "loop_hi": loop.hi,
            "maps": (interleaved_maps / (forwards + len(p.times) // 2), (launcher.ENCODED - made) / forwards)}


def is_gemm_op(name: str) -> bool:
    return name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_mm") or name.startswith("pingpong::")


def gemm_calls(events) -> dict[str, list[float]]:
    """The outermost GEMM-op calls among torch.profiler events (is_gemm_op, not inside another
    one), CPU µs each, by kind (`gemm_kind`)."""
    kinds = collections.defaultdict(list)
    for e in events:
        if not is_gemm_op(e.name):
            continue
        parent = e.cpu_parent
        while parent is not None and not is_gemm_op(parent.name):
            parent = parent.cpu_parent
        if parent is None:
            kinds[gemm_kind(e)].append(e.cpu_time_total)
    return kinds


def gemm_kind(e) -> str:
    """A GEMM call's kind: the op, the plan a pingpong op ran (its range's "plan" input: kernel
    and config) and the input shapes where recorded (record_shapes=True)."""
    plan = (getattr(e, "kwinputs", None) or {}).get("plan")
    shapes = [list(s) for s in (getattr(e, "input_shapes", None) or []) if s]
    return " ".join(str(part) for part in (e.name, plan, shapes or None) if part is not None)


def host_us_per_gemm(fns: dict, rounds: int = 3, shapes: bool = False) -> dict:
    """{name: (the median CPU µs of the outermost GEMM-op calls of fns[name], its calls by
    kind)} over `rounds` profiled calls of each callable, the callables alternated (in the
    given order in even rounds, reversed in odd ones): a host-bound workload's host speed moves
    within a process, so each side is profiled in every round and its median call reported
    (`gemm_calls`; shapes: record the input shapes into the kinds)."""
    from torch.profiler import ProfilerActivity, profile

    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    kinds = {name: collections.defaultdict(list) for name in fns}
    for r in range(rounds):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof:
                fns[name]()
                torch.cuda.synchronize()
            for kind, us in gemm_calls(prof.events()).items():
                kinds[name][kind] += us
    return {name: (statistics.median([u for us in k.values() for u in us]) if k else float("nan"), dict(k))
            for name, k in kinds.items()}


def kinds_table(kinds: dict, rows: int = 12) -> str:
    """The GEMM calls by kind, dearest in all first: calls, µs per call, µs in all."""
    lines = [f"    {'calls':>5} {'µs/call':>8} {'µs all':>8}  kind"]
    for kind, us in sorted(kinds.items(), key=lambda kv: -sum(kv[1]))[:rows]:
        lines.append(f"    {len(us):>5} {sum(us) / len(us):>8.1f} {sum(us):>8.0f}  {kind}")
    return "\n".join(lines)


GEMM_KERNELS = ("gemm", "xmma", "cutlass", "wgmma", "sm90_", "splitk", "split_k")


def gpu_ms(fn) -> tuple[float, float]:
    """GPU kernel ms of one call of fn (torch.profiler; a call separate from the timing and
    from the host profile): all kernels, and those whose name says GEMM (cuBLAS's and
    pingpong's)."""
    kernels = kernel_us(fn)
    gemm = sum(us for name, us in kernels.items() if any(k in name.lower() for k in GEMM_KERNELS))
    return sum(kernels.values()) / 1e3, gemm / 1e3


def torchao_float8(model, recipe: str):
    """model with torchao's float8 training layers of `recipe`, one of torchao's recipe names,
    which pingpong runs with the same arithmetic (pingpong.fp8_training.TORCHAO_NAMES: the
    forward fast-accumulated); every nn.Linear, as replace_linear swaps them (torchao skips none
    of this model's)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from pingpong.fp8_training import TORCHAO_NAMES

    if recipe not in TORCHAO_NAMES:
        same = {ours: name for name, ours in TORCHAO_NAMES.items()}.get(recipe)
        raise SystemExit(f"--fp8 {recipe}: not one of torchao's recipes {tuple(TORCHAO_NAMES)}"
                         + (f"; torchao's of the same scales is {same!r} (its forward fast-accumulated)" if same else ""))
    print(f"baseline: torchao float8 training, recipe {recipe}")
    return convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=16)
    p.add_argument("--train-seq", type=int, default=512, help="the train workload's tokens per sequence (batch 4)")
    p.add_argument("--micro-batches", type=int, default=1,
                   help="train: forward + backward passes accumulated per optimizer step")
    p.add_argument("--keep", action="store_true",
                   help="train: pingpong's micro-batches inside keep_quantized_weights (with --fp8)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    p.add_argument("--fp8", default=None, help="swap for FP8 training layers with this recipe (tensor, row,"
                   " row_gw_hp)")
    p.add_argument("--baseline", default="torch", choices=("torch", "torchao"),
                   help="the peer: bf16 torch, or (with --fp8) torchao's float8 training of the same recipe")
    p.add_argument("--profile", action="store_true", help="torch.profiler's CPU table of one eager decode forward"
                   " each, and in the compiled modes the GEMM calls' host µs by kind (op, plan, shapes)")
    args = p.parse_args(argv)
    modes, workloads = args.modes.split(","), args.workloads.split(",")
    for name, got, known in (("--modes", modes, MODES), ("--workloads", workloads, WORKLOADS)):
        if not set(got) <= set(known):
            p.error(f"{name}: expected a comma-separated list of {', '.join(known)}, got {','.join(got)}")
    if args.micro_batches < 1:
        p.error(f"--micro-batches: expected a positive count, got {args.micro_batches}")
    if args.keep and args.fp8 is None:
        p.error("--keep: needs --fp8 RECIPE (it keeps the FP8 copies of the weights)")
    if args.baseline == "torchao" and args.fp8 is None:
        p.error("--baseline torchao: needs --fp8 RECIPE (torchao's float8 training of that recipe is the peer)")
    if bench.skipped_without_gpu():
        return 2
    try:
        import transformers
    except ImportError:
        print("skipped: the test-model extra (transformers) is not installed", file=sys.stderr)
        return 2
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {transformers.__version__},"
          f" Llama {args.layers} layers hidden {args.hidden} intermediate {args.intermediate} heads {args.heads}/{args.kv_heads},"
          f" train 4 × {args.train_seq} × {args.micro_batches} micro-batches{' (kept)' if args.keep else ''}, bf16,"
          f" rounds {args.rounds} × {args.iters} calls")
    ref32 = llama(transformers, args, torch.float32)
    theirs = copy.deepcopy(ref32).to(torch.bfloat16)
    ours = copy.deepcopy(theirs)
    swap = {} if args.fp8 is None else dict(fp8=args.fp8, training=True)
    report = pingpong.nn.replace_linear(ours, **swap)
    if args.baseline == "torchao":
        theirs = torchao_float8(theirs, args.fp8)
    print(f"fp8 {args.fp8}: " if args.fp8 else "", end="")
    print(f"replaced {len(report.replaced)} layers, skipped {report.skipped}")

    g = torch.Generator(device="cuda").manual_seed(1)
    ids = {"decode": torch.randint(0, 32000, (32, 1), device="cuda", generator=g),
           "prefill": torch.randint(0, 32000, (4, 1024), device="cuda", generator=g),
           "train": torch.randint(0, 32000, (4, args.train_seq), device="cuda", generator=g)}
    others = [torch.randint(0, 32000, (4, n), device="cuda", generator=g) for n in (384, 448)]

    def forward(model, x):
        def run():
            with torch.no_grad():
                return model(input_ids=x, use_cache=False).logits
        return run

    def step(model, x, keep):
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)
        block = (lambda: pingpong.kept.keep_quantized_weights(model)) if keep else contextlib.nullcontext

        def run():
            with block():
                for _ in range(args.micro_batches):
                    logits = model(input_ids=x, use_cache=False).logits
                    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), x[:, 1:].flatten())
                    loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return run

    def runner(model, work, x, keep=False):
        return step(model, x, keep) if work == "train" else forward(model, x)

    rows = []
    for mode in modes:
        for work in workloads:
            if mode == "graph" and work == "train":
                continue
            fns, host = {}, {}
            try:
                for name, model in (("torch", theirs), ("pingpong", ours)):
                    keep = args.keep and name == "pingpong"
                    if mode in ("eager", "graph"):
                        fn = runner(model, work, ids[work], keep)
                        fns[name] = graphed(fn) if mode == "graph" else fn
                        continue
                    torch._dynamo.reset()
                    compiled = torch.compile(model, mode="reduce-overhead" if mode == "reduce-overhead" else None)
                    if mode == "dynamic":
                        for x in others:  # two other lengths: dynamo marks the length dynamic
                            runner(compiled, work, x)()
                    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
                    fn = runner(compiled, work, ids[work], keep)
                    fn()
                    if mode == "dynamic":
                        host[f"{name} recompiles"] = torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames
                    if mode != "reduce-overhead":  # graph replays: no host work per GEMM
                        host[f"{name} gpu"] = gpu_ms(fn)
                    fns[name] = fn
                if mode in ("compiled", "dynamic"):
                    for name, (us, kinds) in host_us_per_gemm(fns, shapes=args.profile).items():
                        host[f"{name} host"] = us
                        if args.profile:
                            print(f"  {mode} {work}, {name}: host µs of the GEMM calls by kind\n{kinds_table(kinds)}")
                iters = max(args.iters // 2, 3) if work == "train" else args.iters
                t = ratios(fns, args.rounds, iters)
            except Exception as e:  # noqa: BLE001  (reported, not hidden)
                print(f"{mode} {work}: failed: {type(e).__name__}: {str(e)[:300]}")
                continue
            t.update(host)
            rows.append((mode, work, t))
            print(f"  {row(mode, work, t)}", flush=True)
    torch._dynamo.reset()

    # the SGD steps above moved both bf16 models (equally, from the same weights); the error is
    # measured on fresh copies of the initial weights
    theirs = copy.deepcopy(ref32).to(torch.bfloat16)
    ours = copy.deepcopy(theirs)
    pingpong.nn.replace_linear(ours, **swap)
    if args.baseline == "torchao":
        theirs = torchao_float8(theirs, args.fp8)
    with torch.no_grad():
        want = ref32(input_ids=ids["prefill"], use_cache=False).logits.double()
        for name, model in (("torch bf16", theirs), ("pingpong bf16", ours), ("torch compiled", torch.compile(theirs)),
                            ("pingpong compiled", torch.compile(ours))):
            got = model(input_ids=ids["prefill"], use_cache=False).logits.double()
            print(f"logits error {name:<18} ‖Δ‖/‖ref‖ = {((got - want).norm() / want.norm()).item():.5f}"
                  f"   max |Δ| = {(got - want).abs().max().item():.4f}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        for name, model in (("torch", theirs), ("pingpong", ours)):
            run = forward(model, ids["decode"])
            run()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    run()
                torch.cuda.synchronize()
            print(f"--- {name}: eager decode forward ×5, CPU self time")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=50))

    print(f"\n{'mode':<16} {'workload':<8} {'torch ms':>9} {'pingpong ms':>11} {'torch/pp':>8} {'round range':>13} {'IQR %':>5}"
          f" {'loop torch/pp':>21} {'TMA maps/call il, loop':>22} {'host µs/op torch, pp':>22} {'GPU ms all/GEMM torch; pp':>27} {'recompiles':>10}")
    for mode, work, t in rows:
        print(row(mode, work, t))
    return 0


def row(mode: str, work: str, t: dict) -> str:
    """One line of the final table."""
    host = f"{t['torch host']:.1f}, {t['pingpong host']:.1f}" if "torch host" in t else "-"
    gpu = (f"{t['torch gpu'][0]:.2f}/{t['torch gpu'][1]:.2f}; {t['pingpong gpu'][0]:.2f}/{t['pingpong gpu'][1]:.2f}"
           if "torch gpu" in t else "-")
    again = f"{t['torch recompiles']}, {t['pingpong recompiles']}" if "torch recompiles" in t else "-"
    return (f"{mode:<16} {work:<8} {t['torch']:9.3f} {t['pingpong']:11.3f} {t['ratio']:8.3f}"
            f" {t['lo']:6.3f}-{t['hi']:.3f} {t['iqr_pct']:5.1f} {t['loop']:7.3f} ({t['loop_lo']:.3f}-{t['loop_hi']:.3f})"
            f" {t['maps'][0]:10.1f}, {t['maps'][1]:9.1f}"
            f" {host:>22} {gpu:>27} {again:>10}")


if __name__ == "__main__":
    sys.exit(main())
