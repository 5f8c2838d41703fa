"""A transformers Llama (random weights from a config, nothing downloaded), prefill forward in
bf16 (torch) against the same model after `pingpong.nn.replace_linear(model, fp8="row")`,
both replayed from CUDA graphs; logits error of each against an fp32 copy.

    PYTHONPATH=src python benchmarks/fp8_llama.py [--hidden 4096 --layers 4 --tokens 4096]
    PYTHONPATH=src python benchmarks/fp8_llama.py --eager --tokens 1     # a decode-size eager forward
"""

import argparse
import contextlib
import copy

import torch
import transformers

import pingpong
from pingpong.tools.timing import time_callable


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tokens", type=int, default=4096, help="batch 1 × this many tokens of prefill")
    p.add_argument("--fp8", default="row")
    p.add_argument("--eager-only", action="store_true", help="one eager forward of each model, errors only")
    p.add_argument("--memo", action="store_true",
                   help="also the FP8 model captured with an input memo (input_memo: an experiment)")
    p.add_argument("--profile", action="store_true", help="also print each model's GPU time per kernel (an eager forward)")
    p.add_argument("--eager", action="store_true",
                   help="time eager forwards (wall µs per call back to back: the host's cost shows) instead of graph"
                        " replays; with --tokens 1, a decode-size forward (no KV cache)")
    args = p.parse_args()
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=args.hidden, intermediate_size=args.intermediate,
                                   num_hidden_layers=args.layers, num_attention_heads=args.hidden // 128,
                                   num_key_value_heads=8, max_position_embeddings=args.tokens,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    ref32 = transformers.LlamaForCausalLM(cfg).to("cuda").eval()
    bf16 = copy.deepcopy(ref32).to(torch.bfloat16)
    ours = copy.deepcopy(bf16)
    report = pingpong.nn.replace_linear(ours, fp8=args.fp8)
    ids = torch.randint(0, cfg.vocab_size, (1, args.tokens), device="cuda")

    def graphed(model):
        static = ids.clone()
        with torch.no_grad():
            for _ in range(2):
                model(static)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = model(static).logits
        return g, out, static

    with torch.no_grad():
        want = ref32(ids).logits.double()
        if args.eager_only:
            for name, model in (("bf16 torch", bf16), ("pingpong fp8", ours)):
                out = model(ids).logits
                torch.cuda.synchronize()
                print(name, "eager logits rel.err vs fp32", ((out.double() - want).norm() / want.norm()).item())
            return
    if args.eager:
        return time_eager(bf16, ours, ids, want, args)
    results = {}
    mode = "CUDA-graph replay"
    models = [("bf16 torch", bf16, False), (f"pingpong fp8 {args.fp8}", ours, False)]
    if args.memo:
        models.append((f"pingpong fp8 {args.fp8} input memo", ours, True))
    for name, model, memo in models:
        try:
            with input_memo(memo):
                g, out, static = graphed(model)  # the graph reads `static`: it must outlive the replays
            g.replay()
            fn = lambda g=g, static=static: g.replay()  # noqa: E731
        except RuntimeError as e:  # a forward that syncs cannot be captured: time it eagerly
            print(f"{name}: capture failed ({str(e).splitlines()[0][:160]}); timing eager forwards")
            torch.cuda.synchronize()
            mode = "eager (capture failed)"
            with torch.no_grad():
                out = model(ids).logits
            fn = lambda model=model: model(ids)  # noqa: E731
        torch.cuda.synchronize()
        err = ((out.double() - want).norm() / want.norm()).item()
        results[name] = (fn, err)
    times = {n: [] for n in results}
    for _ in range(3):  # alternate rounds
        for n, (fn, _) in results.items():
            with torch.no_grad():
                times[n].append(time_callable(fn, 30).median_ms)
    base = sorted(times["bf16 torch"])[1]
    print(f"Llama hidden {args.hidden}, intermediate {args.intermediate}, {args.layers} layers, prefill 1×{args.tokens}"
          f" tokens, {mode}; swapped {len(report.replaced)} layers, skipped {report.skipped}")
    for n, (_, err) in results.items():
        t = sorted(times[n])[1]
        print(f"{n:24s} {t:8.3f} ms  speedup vs bf16 torch {base / t:.3f}  logits rel.err vs fp32 {err:.3e}")
    if args.profile:
        for name, model in (("bf16 torch", bf16), (f"pingpong fp8 {args.fp8}", ours)):
            profile(name, model, ids)


def time_eager(bf16, ours, ids, want, args, calls=50):
    """Wall ms per eager forward, back to back (timing.call_us), alternated rounds: on small
    inputs the host's launches, not the kernels, set the pace."""
    from pingpong.tools.timing import call_us

    from pingpong.fp8 import Float8Linear

    models = {"bf16 torch": bf16, f"pingpong fp8 {args.fp8}": ours}
    times = {n: [] for n in models}
    with torch.no_grad():
        errs = {n: ((m(ids).logits.double() - want).norm() / want.norm()).item() for n, m in models.items()}
        for _ in range(3):
            for n, m in models.items():
                times[n].append(call_us(lambda m=m: m(ids), calls))
    base = sorted(t[1] for t in times["bf16 torch"])[1]
    layers = [m for m in ours.modules() if isinstance(m, Float8Linear)]
    kept = sum(1 for m in layers if m._runs)
    print(f"Llama hidden {args.hidden}, {args.layers} layers, eager forward of 1×{args.tokens} tokens (no KV cache),"
          f" ms per call back to back (host: until the loop returns; wall: until the GPU is done); {kept} of"
          f" {len(layers)} FP8 layers kept their launches")
    for n in models:
        host, wall = (sorted(t[i] for t in times[n])[1] / 1e3 for i in (0, 1))
        print(f"{n:24s} wall {wall:8.3f} ms  host {host:8.3f} ms  speedup vs bf16 torch {base / 1e3 / wall:.3f}"
              f"  logits rel.err vs fp32 {errs[n]:.3e}")


@contextlib.contextmanager
def input_memo(on: bool):
    """An experiment, not the library's behaviour: while on (for a capture), quantize_fp8 returns
    the previous call's (q, scale) when asked again for the same tensor (same storage, shape,
    strides and version counter; the memo holds it, so its memory cannot be reused meanwhile)
    the same way: a Llama's q, k and v projections, and the MLP's gate and up, are fed one
    tensor. pingpong.fp8 does not do this: across two CUDA graphs a memo made in one capture
    would be read by the other's replay (`docs/design.md`, FP8)."""
    import pingpong.quantize as qz

    keep = qz.quantize_fp8
    last = {}

    def memo(x, granularity="row", dtype=torch.float8_e4m3fn):
        key = (x.data_ptr(), x.shape, x.stride(), x.dtype, x._version, granularity, dtype)
        if last.get("key") != key:
            last.update(key=key, x=x, out=keep(x, granularity, dtype))
        return last["out"]

    if on:
        qz.quantize_fp8 = memo
    try:
        yield
    finally:
        qz.quantize_fp8 = keep
        last.clear()


def profile(name, model, ids, rows=14):
    """GPU time per kernel of one eager forward (after a warm-up), the longest first."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch.no_grad():
        model(ids)
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            model(ids)
            torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.self_device_time_total for e in events)
    print(f"\n{name}: {total / 1e3:.3f} ms of kernels in one eager forward")
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:rows]:
        print(f"  {e.self_device_time_total / 1e3:8.3f} ms  {e.count:4d}×  {e.key[:110]}")


if __name__ == "__main__":
    main()
