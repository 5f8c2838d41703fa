"""pingpong under torch.distributed with a transformers Llama (random weights, nothing is
downloaded): tensor parallelism (parallelize_module, ColwiseParallel / RowwiseParallel) and
FSDP2 (fully_shard), the model with pingpong Linears against the same model on torch.

    torchrun --nproc-per-node 2 benchmarks/dist_llama.py       # the 2-GPU targets (hidden 4096)
    python benchmarks/dist_llama.py                              # one GPU: world size 1
    python benchmarks/dist_llama.py --cpu-smoke                  # CPU, gloo, tiny, interpreted kernels

For each mode (tp, fsdp2) rank 0 prints, and writes to --json:
- correctness: TP logits against a float32 copy of the model (pingpong's error at most 1.5x
  torch's + 1e-3, test_transformers_gpu.py's bound), and the training loss curves of the two
  models on the same learnable batches (every step within 2% of torch's);
- time: prefill (forward, no grad) and one training step (forward, backward, AdamW), torch's
  time over pingpong's (> 1: pingpong faster), in alternating rounds in one process. Every rank
  runs the same fixed number of repetitions (the collectives need it; triton's do_bench picks
  its own count), timed with CUDA events after a barrier.

Order: pingpong.nn.replace_linear first, then parallelize_module / fully_shard
(docs/distributed.md). FSDP2 keeps fp32 master weights and computes in bf16
(MixedPrecisionPolicy); replace_linear skips fp32 layers, so the script swaps them with
pingpong.nn.Linear.from_linear.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

import pingpong

TP_PLAN = {"self_attn.q_proj": "col", "self_attn.k_proj": "col", "self_attn.v_proj": "col", "self_attn.o_proj": "row",
           "mlp.gate_proj": "col", "mlp.up_proj": "col", "mlp.down_proj": "row"}


def setup(cpu: bool):
    if "RANK" not in os.environ:  # one process: world size 1
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29561")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if cpu:
        dist.init_process_group("gloo")
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    from torch.distributed.device_mesh import init_device_mesh

    return rank, world, device, init_device_mesh(device.type, (world,))


def config(smoke: bool):
    import transformers

    if smoke:
        return transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                                        tie_word_embeddings=False)
    return transformers.LlamaConfig(vocab_size=1000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
                                    tie_word_embeddings=False)


def build(cfg, device, dtype, seed=0):
    import transformers

    torch.manual_seed(seed)  # the same weights on every rank
    with torch.device(device):
        model = transformers.LlamaForCausalLM(cfg)
    return model.to(dtype)


def swap(model) -> int:
    """Every nn.Linear of `model` as a pingpong Linear (parameters shared), any dtype."""
    n = 0
    for name, m in list(model.named_modules()):
        if type(m) is torch.nn.Linear:
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent), attr, pingpong.nn.Linear.from_linear(m))
            n += 1
    return n


def parallelize(model, mesh):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    style = {"col": ColwiseParallel, "row": RowwiseParallel}
    for i in range(len(model.model.layers)):
        parallelize_module(model.model.layers[i], mesh, {k: style[v]() for k, v in TP_PLAN.items()})


def batches(n, vocab, batch, seq, device, seed=1):
    """Learnable sequences: a random start, then each token the previous + 7 (mod vocab)."""
    g = torch.Generator(device=device).manual_seed(seed)
    steps = torch.arange(seq, device=device) * 7
    return [(torch.randint(0, vocab, (batch, 1), device=device, generator=g) + steps) % vocab for _ in range(n)]


def rel(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


def adamw(model, lr):
    """AdamW; fp16 parameters (the CPU smoke test) take an eps fp16 can hold."""
    fp16 = next(model.parameters()).dtype == torch.float16
    # foreach=False: a TP model mixes DTensor (parallelized) and plain parameters, which torch
    # 2.11's foreach kernels refuse (torch's model as much as pingpong's)
    return torch.optim.AdamW(model.parameters(), lr=lr, eps=1e-4 if fp16 else 1e-8, foreach=False)


def train(model, data, lr=1e-3):
    opt = adamw(model, lr)
    losses = []
    for ids in data:
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def timed(fn, reps, device) -> float:
    """Median ms of `reps` calls after 2 warm-up calls; the same count on every rank."""
    for _ in range(2):
        fn()
    if device.type != "cuda":
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(samples)
    dist.barrier()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def compare_times(fns: dict, rounds, reps, device) -> dict:
    """Alternating rounds (the order flips each round); torch/pingpong per round, median."""
    times = {name: [] for name in fns}
    for r in range(rounds):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            times[name].append(timed(fns[name], reps, device))
    ratios = [t / p for t, p in zip(times["torch"], times["pingpong"])]
    return dict(torch_ms=[round(t, 4) for t in times["torch"]], pingpong_ms=[round(t, 4) for t in times["pingpong"]],
                ratio_torch_over_pingpong=round(statistics.median(ratios), 4))


def step_fn(model, ids):
    opt = adamw(model, 1e-5)

    def step():
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def run_tp(cfg, mesh, device, dtype, args, log):
    ref32 = build(cfg, device, torch.float32)
    theirs = copy.deepcopy(ref32).to(dtype)
    ours = copy.deepcopy(theirs)
    report = pingpong.nn.replace_linear(ours)  # replace first, then parallelize
    if device.type != "cuda":
        swap(ours)  # CPU layers are skipped by replace_linear: the smoke test swaps them itself
    else:
        assert not report.skipped, report.skipped
    parallelize(theirs, mesh)
    parallelize(ours, mesh)
    out = {}
    (ids,) = batches(1, cfg.vocab_size, args.batch, args.seq, device, seed=7)
    with torch.no_grad():
        want = ref32(ids).logits
        out["logits_rel_err_torch"] = rel(theirs(ids).logits, want)
        out["logits_rel_err_pingpong"] = rel(ours(ids).logits, want)
    del ref32
    out["logits_ok"] = out["logits_rel_err_pingpong"] <= 1.5 * out["logits_rel_err_torch"] + 1e-3
    data = batches(args.steps, cfg.vocab_size, args.batch, args.seq, device)
    want_l, got_l = train(copy.deepcopy(theirs), data), train(copy.deepcopy(ours), data)
    out["loss_torch"], out["loss_pingpong"] = want_l, got_l
    out["loss_ok"] = all(abs(g - w) <= 0.02 * w for w, g in zip(want_l, got_l)) and got_l[-1] < want_l[0]
    log("tp correctness", out)
    if args.rounds:
        def prefill(m):
            def f():
                with torch.no_grad():
                    m(ids)
            return f

        out["prefill"] = compare_times({"torch": prefill(theirs), "pingpong": prefill(ours)}, args.rounds, args.reps, device)
        log("tp prefill", out["prefill"])
        out["train_step"] = compare_times({"torch": step_fn(theirs, ids), "pingpong": step_fn(ours, ids)},
                                          args.rounds, args.reps, device)
        log("tp train step", out["train_step"])
    return out


def run_fsdp2(cfg, mesh, device, dtype, args, log):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    models = {}
    for name in ("torch", "pingpong"):
        m = build(cfg, device, torch.float32)
        if name == "pingpong":
            assert swap(m) == 7 * cfg.num_hidden_layers + 1
        for layer in m.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(m, mesh=mesh, mp_policy=policy)
        models[name] = m
    data = batches(args.steps, cfg.vocab_size, args.batch, args.seq, device)
    out = {}
    want_l, got_l = train(models["torch"], data), train(models["pingpong"], data)
    out["loss_torch"], out["loss_pingpong"] = want_l, got_l
    out["loss_ok"] = all(abs(g - w) <= 0.02 * w for w, g in zip(want_l, got_l)) and got_l[-1] < 0.85 * got_l[0]
    log("fsdp2 correctness", out)
    if args.rounds:
        (ids,) = batches(1, cfg.vocab_size, args.batch, args.seq, device, seed=3)
        out["train_step"] = compare_times({n: step_fn(m, ids) for n, m in models.items()}, args.rounds, args.reps, device)
        log("fsdp2 train step", out["train_step"])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu-smoke", action="store_true", help="CPU, gloo, tiny model, interpreted kernels (fp16)")
    p.add_argument("--modes", default="tp,fsdp2")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    smoke = args.cpu_smoke
    if smoke:
        args.seq, args.rounds, args.reps = min(args.seq, 16), min(args.rounds, 1), min(args.reps, 2)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        from conftest import interpret_plans

        interpret_plans(setattr)
    rank, world, device, mesh = setup(smoke)
    dtype = torch.float16 if smoke else torch.bfloat16

    def log(what, obj):
        if rank == 0:
            print(f"[{what}] {json.dumps(obj)}", flush=True)

    results = dict(world=world, torch=torch.__version__, device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                   date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), args=vars(args))
    cfg = config(smoke)
    for mode in args.modes.split(","):
        t0 = time.time()
        try:
            results[mode] = {"tp": run_tp, "fsdp2": run_fsdp2}[mode](cfg, mesh, device, dtype, args, log)
        except Exception:  # the other mode still runs; the error is in the results
            results[mode] = {"error": traceback.format_exc()}
            log(f"{mode} error", results[mode])
        results[mode]["wall_s"] = round(time.time() - t0, 1)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if rank == 0:
        print(json.dumps(results, indent=1))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
