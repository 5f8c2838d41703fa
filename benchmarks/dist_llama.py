"""Tensor parallelism, FSDP2 and 2-D (FSDP2 × TP) under torchrun: a Llama with pingpong Linears
against the same model on torch, eager and compiled, each pair checked before it is timed.

    torchrun --nproc-per-node 2 benchmarks/dist_llama.py --quick           # hidden 2048, a few minutes
    torchrun --nproc-per-node 2 benchmarks/dist_llama.py --hidden 4096     # the target size
    torchrun --nproc-per-node 4 benchmarks/dist_llama.py --quick           # adds 2-D on a 2 × 2 mesh
    torchrun --nproc-per-node 2 benchmarks/dist_llama.py --cpu-smoke       # CPU, gloo, tiny, interpreted kernels
    torchrun --nproc-per-node 2 benchmarks/dist_llama.py --hidden 4096 --workloads tp-prefill,tp-train \
        --modes compiled --sequence-parallel --async-tp                    # async TP, torch's and pingpong's

Model: `Llama` below (RMSNorm, rotary attention with grouped KV heads through
F.scaled_dot_product_attention, SwiGLU MLP; nn.Linear q/k/v/o and gate/up/down named as in
transformers), random weights, nothing downloaded and no package beyond torch. `--arch
hf-llama` / `hf-qwen2` take transformers' LlamaForCausalLM / Qwen2ForCausalLM (sharded q/k/v
biases) of the same sizes instead, when transformers is installed. pingpong's model: every
nn.Linear swapped for pingpong.nn.Linear (parameters shared) before parallelizing; with --fp8
RECIPE for pingpong.nn.Float8TrainingLinear (FP8 forward and gradients; FP8 on DTensors:
docs/distributed.md), torch's model staying bf16.

Workloads (--workloads; 2d-train only where the world size is even and ≥ 4):
- tp-prefill: forward without grad of (batch, seq) tokens, TP over all ranks (q/k/v/gate/up
  ColwiseParallel, o/down RowwiseParallel); with --sequence-parallel (own Llama only) the
  sequence-parallel plan instead: the residual stream a DTensor split along the sequence
  (embedding RowwiseParallel to Shard(1), norms SequenceParallel, attention and MLP inputs
  all-gathered once by PrepareModuleInput, o/down RowwiseParallel(output_layouts=Shard(1)),
  lm_head ColwiseParallel(input_layouts=Shard(1))): all-gathers and reduce-scatters where the
  plain plan all-reduces. Between blocks the stream is each rank's local part, or a DTensor
  (--sp-stream; auto: local for prefill, DTensor for training, the two that compile on torch
  2.13 on the CPU: a compiled prefill fails on a DTensor stream in AOT autograd's subclass
  wrapper, a compiled training step on a local stream in DTensor's redistribute backward,
  torch's model as much as pingpong's). --async-tp (with it, NCCL only): torch's async TP for both models
  (torch._inductor.config._micro_pipeline_tp, symmetric memory enabled for the TP group) and
  pingpong's pass for pingpong's (pingpong.distributed.enable_async_tp); each compiled row
  reports the fused nodes of each model's graphs (torch's symm_mem ops, pingpong's
  all_gather_gemm / gemm_reduce_scatter) and the collectives left unfused, so a model that
  does not overlap shows it;
- tp-decode: forward of one token for each of --decode-batch sequences against a KV cache
  holding --seq tokens (the model's own cache: each rank holds its heads; the step rewrites the
  same slot, so every step is alike; hf-* archs: transformers' DynamicCache, cropped back after
  each step, eager only);
- tp-train: forward, backward and AdamW on bf16 parameters;
- fsdp2-train: fully_shard per block and at the root, fp32 master weights, bf16 compute
  (MixedPrecisionPolicy), a different batch on each rank;
- 2d-train: TP inside pairs of ranks (mesh dim "tp" = 2), FSDP2 across them ("dp"), fp32
  master weights and bf16 compute as fsdp2-train. torch 2.11's FSDP2 hands the TP Linears their
  unsharded weight as a bf16 tensor in the fp32 parameter's DTensor spec (fixed in torch 2.13;
  the JSON's fsdp2_tp_spec_fixed says which this torch is); pingpong's Linears rebuild that
  parameter's spec (pingpong.distributed.respec), torch's ops do not read it: both models keep
  the same parameters and policy.
Modes (--modes): eager, and compiled: each block compiled in place (`block.compile()`,
default mode, static shapes) after TP and FSDP2 were applied; the embedding, final norm and
lm_head eager. Every compiled row runs before the eager ones (torch 2.13's inductor fails on
a compiled 2-D model after an eager 2-D run, torch's model too).

Checks, before timing, for each workload and mode (torch's model and pingpong's built alike
from one seed): prefill and decode logits against a float32 copy of the unsharded model, the
error of pingpong's at most 1.5 × torch's + 1e-3 (with --fp8: + FP8_SLACK, FP8's rounding).
Training: the first step's parameter gradients against a float32 copy of the unsharded model's
(relative Frobenius error over all parameters, pingpong's at most 1.5 × torch's + the same
term; the JSON also has pingpong's against torch's directly and each model's worst
parameter), and the loss curves over --steps steps
(--lr, default 0.064 / hidden, low enough that torch's own curve is smooth: a higher rate
makes it jump from step to step, and two curves then part by chaos, not by error), each step
within 2% of torch's and the loss falling (these steps are also the warm-up and compile). A
failed check is flagged in the table and the exit status, the row still timed.

Timing: after 3 warm-up calls of each model, --rounds rounds (`pingpong.tools.timing.interleaved`):
a round starts with a barrier and a device synchronize on every rank, then runs the two models'
steps interleaved, torch pingpong torch ... (pingpong first every other round), with no wait
between steps, each step timed by CUDA events around it (a GPU-bound step by its kernels, a
host-bound one by the time to issue it); --min-reps (4) or more steps of each, enough for a
round of about --round-ms per model, the same count on every rank. Timed in blocks of steps
instead, the compiled TP training step ran up to 30% slower when its block came first in a
round (both models). A round's time is the slowest rank's. The table gives the median over
pairs of rounds (one of each order) of the pair's ratio torch / pingpong (> 1: pingpong
faster; the geometric mean of its two rounds) and its interquartile range as a percentage of
the median; the JSON keeps every round's ratio, and as position_effect the median time of the
model that led its round over the one that followed. Beside them, per step, measured on separate
steps: GPU ms, the profiler's sum of kernel time excluding communication (`communication`:
NCCL's kernels, torch's symmetric-memory kernels such as async TP's barriers, and peer-to-peer
copies, whose time is mostly waiting or transfer; in the JSON as comm_ms, rank 0's, and
comm_ms_ranks, every rank's: each profiled step is started
by all ranks at once, so that it holds the collectives' own time, not a wait for a late rank),
and host ms, the CPU time to issue one step with the GPU idle at its start (rank 0's; every
rank's in host_ms_ranks): a step whose host ms reaches its wall ms is host-bound. --products: per_step's
products_ms, each model's GEMMs of one step by product (`step_products`: op, M, N, K, the
operands' layouts and strides, dtype, and for pingpong's compiled calls the plan and config
they ran), with calls and GPU ms per step (CPU ms off CUDA) and the kernels' names, from a
record_shapes profile of 3 more steps; rank 0 prints each model's first 10 rows.

Output: one table printed last by rank 0; the rows as JSON in --json, and in
$OUT/dist_llama.json when OUT is set. --host-profile: for each row, every rank's cProfile of
one step of each model (where a host-bound step's time goes), host_profile-<row>-<variant>-<model>-rank<R>.txt
(`Env.variant`: bf16, fp8-<recipe>, then -sp-<stream> and -async-tp where given). --trace:
every rank's profiler timeline of 3 steps of each model, trace-<row>-<variant>-<model>-rank<R>.json,
and per step in the JSON's timeline_ranks (`timeline_summary`, one per rank): the GPU work's
span, the compute stream's launches, busy and idle ms, and communication kernels' ms.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import pingpong
import pingpong.distributed  # noqa: F401  (the sharding rules, before torch.compile traces a pingpong op on DTensors)
from pingpong import fp8_training
from pingpong.tools.timing import interleaved, kernel_us, summarize

TP_PLAN = {"self_attn.q_proj": "col", "self_attn.k_proj": "col", "self_attn.v_proj": "col", "self_attn.o_proj": "row",
           "mlp.gate_proj": "col", "mlp.up_proj": "col", "mlp.down_proj": "row"}
WORKLOADS = ("tp-prefill", "tp-decode", "tp-train", "fsdp2-train", "2d-train")
MODES = ("compiled", "eager")


# ----------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Config:
    vocab: int = 1024
    hidden: int = 2048
    inter: int = 5632
    layers: int = 4
    heads: int = 16
    kv_heads: int = 8
    max_pos: int = 4096

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def rope(x, cos, sin):
    """Rotary embedding of x (B, H, T, D) at the positions of cos / sin (T, D), in fp32."""
    h = x.float()
    x1, x2 = h.chunk(2, -1)
    return (h * cos + torch.cat((-x2, x1), -1) * sin).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

    def forward(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class Attention(nn.Module):
    """Heads found from the projections' widths (-1 in the views): under TP each rank runs its
    own heads."""

    def __init__(self, c: Config):
        super().__init__()
        self.head_dim = c.head_dim
        self.q_proj = nn.Linear(c.hidden, c.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)

    def forward(self, x, cos, sin, cache=None, pos: int = 0):
        B, T, _ = x.shape
        q, k, v = (p(x).view(B, T, -1, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if cache is not None:  # a prompt at position 0, or one token after the cached ones
            ck, cv = cache
            ck[:, :, pos:pos + T] = k
            cv[:, :, pos:pos + T] = v
            k, v = ck[:, :, :pos + T], cv[:, :, :pos + T]
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.inter, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.inter, bias=False)
        self.down_proj = nn.Linear(c.inter, c.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.input_layernorm, self.self_attn = RMSNorm(c.hidden), Attention(c)
        self.post_attention_layernorm, self.mlp = RMSNorm(c.hidden), MLP(c)

    def forward(self, x, cos, sin, cache=None, pos: int = 0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, pos)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)
        inv = 1.0 / 10000.0 ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim)
        freqs = torch.outer(torch.arange(c.max_pos, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), -1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, ids, cache=None, pos: int = 0, eager: bool = False):
        """Logits of ids (B, T) at positions pos..pos+T; `cache` a list of (k, v) per layer;
        `eager`: compiled blocks run uncompiled (a prompt filling the cache)."""
        T = ids.shape[1]
        if T > 1 and pos:
            raise ValueError("pos: several tokens start at position 0 (the causal mask assumes it)")
        x = self.embed_tokens(ids)
        cos, sin = self.cos[pos:pos + T], self.sin[pos:pos + T]
        for i, layer in enumerate(self.layers):  # TP puts no hook on a block itself: forward is the eager call
            x = (layer.forward if eager else layer)(x, cos, sin, None if cache is None else cache[i], pos)
        return self.lm_head(self.norm(x))

    def make_cache(self, batch, length, tp: int):
        c, w = self.config, self.lm_head.weight
        shape = (batch, c.kv_heads // tp, length, c.head_dim)
        return [(torch.zeros(shape, dtype=w.dtype, device=w.device), torch.zeros(shape, dtype=w.dtype, device=w.device))
                for _ in range(c.layers)]


class Arch:
    """The model family: the own Llama, or a transformers model of the same sizes."""

    def __init__(self, name: str):
        self.name = name
        if name != "llama":
            import transformers  # noqa: F401  (fails here, before any model is built)

    def build(self, c: Config, device, dtype, seed=0):
        torch.manual_seed(seed)  # the same weights on every rank, in every copy
        with torch.device(device):
            if self.name == "llama":
                model = Llama(c)
            else:
                import transformers

                kind = {"hf-llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                        "hf-qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[self.name]
                cfg = kind[0](vocab_size=c.vocab, hidden_size=c.hidden, intermediate_size=c.inter,
                              num_hidden_layers=c.layers, num_attention_heads=c.heads, num_key_value_heads=c.kv_heads,
                              max_position_embeddings=c.max_pos, tie_word_embeddings=False, attn_implementation="sdpa")
                model = kind[1](cfg)
        return model.to(dtype)

    def blocks(self, model) -> nn.ModuleList:
        return model.layers if self.name == "llama" else model.model.layers

    def logits(self, model, ids):
        return model(ids) if self.name == "llama" else model(ids, use_cache=False).logits

    def loss(self, model, ids):
        if self.name != "llama":
            return model(ids, labels=ids, use_cache=False).loss
        logits = model(ids)
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())

    def decoder(self, model, prompt, tp: int, compiled: bool):
        """step(token) -> the last position's logits, after the prompt filled the cache; None
        where this arch does not decode in this mode."""
        L = prompt.shape[1]
        if self.name == "llama":
            cache = model.make_cache(prompt.shape[0], L + 1, tp)
            with torch.no_grad():
                model(prompt, cache, 0, eager=True)

            def step(tok):
                return model(tok, cache, L)[:, -1]

            return step
        if compiled:
            return None  # transformers' DynamicCache in a compiled block: not run here
        from transformers import DynamicCache

        cache = DynamicCache()
        with torch.no_grad():
            model(prompt, past_key_values=cache, use_cache=True)

        def step(tok):
            out = model(tok, past_key_values=cache, use_cache=True).logits[:, -1]
            cache.crop(L)
            return out

        return step


# ----------------------------------------------------------------------------- building the pairs


def swap(model, fp8=None) -> int:
    """Every nn.Linear of `model` as a pingpong Linear (parameters shared), any dtype; with `fp8`
    (a training recipe) as pingpong.nn.Float8TrainingLinear where the recipe takes its features
    (replace_linear(fp8=..., training=True)'s layers and rule, which skips fp32 layers: the
    FSDP2 rows' master weights), else a pingpong Linear."""
    n = 0
    for name, m in list(model.named_modules()):
        if type(m) is nn.Linear:
            parent, _, attr = name.rpartition(".")
            fp8_ok = fp8 and not fp8_training.training_shape_reason(m.out_features, m.in_features, fp8)
            new = pingpong.nn.Float8TrainingLinear.from_linear(m, fp8) if fp8_ok else pingpong.nn.Linear.from_linear(m)
            setattr(model.get_submodule(parent), attr, new)
            n += 1
    return n


def tensor_parallel(blocks, mesh):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    style = {"col": ColwiseParallel, "row": RowwiseParallel}
    for block in blocks:
        parallelize_module(block, mesh, {k: style[v]() for k, v in TP_PLAN.items()})


def sequence_parallel(model, mesh, dtensor_stream: bool):
    """The sequence-parallel TP plan of the own Llama: between blocks each rank holds its part
    of the sequence (Shard(1): a DTensor, or its local tensor); each block all-gathers its
    attention's and its MLP's input once and reduce-scatters their outputs."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    parallelize_module(model, mesh, {"embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                                                     use_local_output=not dtensor_stream),
                                     "norm": SequenceParallel(),
                                     "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())})
    gathered = {"self_attn": PrepareModuleInput(input_layouts=(Shard(1), None, None, None, None),
                                                desired_input_layouts=(Replicate(), None, None, None, None)),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "input_layernorm": SequenceParallel(), "post_attention_layernorm": SequenceParallel()}
    split = {"col": ColwiseParallel(), "row": RowwiseParallel(output_layouts=Shard(1), use_local_output=not dtensor_stream)}
    for block in model.layers:
        parallelize_module(block, mesh, {**gathered, **{k: split[v] for k, v in TP_PLAN.items()}})


def make_model(arch, c, workload, compiled, pingpong_layers, meshes, env):
    """One model of a pair: replace, then TP, then FSDP2, then each block compiled in place."""
    sharded = workload in ("fsdp2-train", "2d-train")
    model = arch.build(c, env.device, torch.float32 if sharded else env.dtype)
    if pingpong_layers:
        swap(model, env.fp8)
    blocks = arch.blocks(model)
    if workload.startswith("tp-") and env.sequence_parallel:
        stream = env.sp_stream if env.sp_stream != "auto" else "dtensor" if workload == "tp-train" else "local"
        sequence_parallel(model, meshes["tp"], stream == "dtensor")
    elif workload.startswith("tp-"):
        tensor_parallel(blocks, meshes["tp"])
    elif workload == "2d-train":
        tensor_parallel(blocks, meshes["2d"]["tp"])
    if sharded:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = meshes["dp"] if workload == "fsdp2-train" else meshes["2d"]["dp"]
        policy = MixedPrecisionPolicy(param_dtype=env.dtype, reduce_dtype=torch.float32)
        for block in blocks:
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
    if compiled:
        for block in blocks:
            block.compile(backend=env.backend, dynamic=False)
    return model


def adamw(model, lr, workload):
    """AdamW. foreach=False where the parameters mix DTensors of a TP mesh with plain tensors
    or meshes (TP, 2-D), which torch's foreach kernels refuse; fp16 parameters (CPU smoke) take
    an eps fp16 can hold."""
    fp16 = next(model.parameters()).dtype == torch.float16
    return torch.optim.AdamW(model.parameters(), lr=lr, eps=1e-4 if fp16 else 1e-8,
                             foreach=None if workload == "fsdp2-train" else False)


def tokens(n, vocab, batch, seq, device, seed):
    """Learnable sequences with noise: a random start, then each token the previous + 7 (mod
    vocab), a quarter of the tokens replaced by random ones. The noise keeps the loss well above
    zero (a noiseless sequence is learnt in two steps at hidden 4096, and a loss of 0.0 on both
    models would pass the 2% comparison whatever the gradients were)."""
    g = torch.Generator(device=device).manual_seed(seed)
    steps = torch.arange(seq, device=device) * 7
    out = []
    for _ in range(n):
        ids = (torch.randint(0, vocab, (batch, 1), device=device, generator=g) + steps) % vocab
        noise = torch.rand(ids.shape, device=device, generator=g) < 0.25
        out.append(torch.where(noise, torch.randint(0, vocab, ids.shape, device=device, generator=g), ids))
    return out


def rel(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


# ----------------------------------------------------------------------------- one row


def check_and_steps(arch, c, workload, compiled, meshes, env, args):
    """Both models of a row, checked; returns ({name: step function}, check dict)."""
    pair = {name: make_model(arch, c, workload, compiled, name == "pingpong", meshes, env)
            for name in ("torch", "pingpong")}
    tp = meshes["tp"].size()
    check = {}
    if workload in ("tp-prefill", "tp-decode"):
        ref = arch.build(c, env.device, torch.float32)
        if workload == "tp-prefill":
            (ids,) = tokens(1, c.vocab, args.batch, args.seq, env.device, seed=7)
            with torch.no_grad():
                want = arch.logits(ref, ids)
                for name, m in pair.items():
                    check[f"logits_err_{name}"] = rel(arch.logits(m, ids), want)

            def step_of(name):
                def step():
                    with torch.no_grad():
                        arch.logits(pair[name], ids)
                return step
        elif env.sequence_parallel:
            return None, {"skipped": "one token per step does not split along the sequence (--sequence-parallel)"}
        else:
            (ids,) = tokens(1, c.vocab, args.decode_batch, args.seq + 1, env.device, seed=9)
            prompt, tok = ids[:, :-1], ids[:, -1:]
            with torch.no_grad():
                want = arch.logits(ref, ids)[:, -1]
                decoders = {name: arch.decoder(m, prompt, tp, compiled) for name, m in pair.items()}
                if decoders["torch"] is None:
                    return None, {"skipped": "transformers' DynamicCache is not compiled by this benchmark"}
                for name, step in decoders.items():
                    check[f"logits_err_{name}"] = rel(step(tok), want)

            def step_of(name):
                def step():
                    with torch.no_grad():
                        decoders[name](tok)
                return step
        del ref
        check["ok"] = check["logits_err_pingpong"] <= 1.5 * check["logits_err_torch"] + slack(env)
        return {name: step_of(name) for name in pair}, check

    dp_rank = 0 if workload == "tp-train" else (
        meshes["dp"].get_local_rank() if workload == "fsdp2-train" else meshes["2d"]["dp"].get_local_rank())
    data = tokens(args.steps, c.vocab, args.batch, args.seq, env.device, seed=1 + dp_rank)
    ref = first_step_reference(arch, c, data[0], env)
    steps, torch_grads = {}, {}
    for name, m in pair.items():
        opt = adamw(m, args.lr or 0.064 / c.hidden, workload)
        losses = []
        for i, ids in enumerate(data):
            loss = arch.loss(m, ids)
            loss.backward()
            if i == 0:
                check.update(gradient_errors(name, m, ref, torch_grads))
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        check[f"loss_{name}"] = [round(v, 4) for v in losses]
        ids = data[0]

        def step(m=m, opt=opt, ids=ids):
            arch.loss(m, ids).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps[name] = step
    del ref, torch_grads
    want, got = check["loss_torch"], check["loss_pingpong"]
    check["grads_ok"] = check["grad_err_pingpong"] <= 1.5 * check["grad_err_torch"] + slack(env)
    check["curve_ok"] = all(abs(g - w) <= 0.02 * w for w, g in zip(want, got)) and got[-1] < got[0]
    check["ok"] = check["grads_ok"] and check["curve_ok"]
    return steps, check


#: --fp8: the checks' allowance for FP8's rounding (relative error; one FP8 product's bound
#: against float64 in tests/test_fp8_training.py); a lost or doubled shard is 50% or more
FP8_SLACK = 0.08


def slack(env) -> float:
    """The additive term of the logits and gradient checks: 1e-3, FP8_SLACK with --fp8."""
    return FP8_SLACK if env.fp8 else 1e-3


def first_step_reference(arch, c, ids, env) -> dict:
    """{parameter name: float32 gradient} of the first training step on a float32 copy of the
    unsharded model: the loss averaged over every rank's batch (FSDP2 averages the data-parallel
    ranks' gradients; TP ranks share a batch, so the average is theirs)."""
    every = [torch.empty_like(ids) for _ in range(env.world)]
    dist.all_gather(every, ids.contiguous())
    ref = arch.build(c, env.device, torch.float32)
    for batch in every:
        (arch.loss(ref, batch) / env.world).backward()
    grads = {name: p.grad for name, p in ref.named_parameters()}
    del ref
    return grads


def gradient_errors(name, model, ref, torch_grads) -> dict:
    """The first step's parameter gradients of one model of the pair (whole tensors: DTensors
    gathered) against the float32 reference's: relative Frobenius error over all parameters
    (grad_err_<name>) and the parameter of the largest relative error. torch's model goes
    first and leaves its gradients in torch_grads; pingpong's is then also compared with them
    directly (grad_rel_pingpong_torch): the product error of one step, before training
    amplifies it."""
    from torch.distributed.tensor import DTensor

    diff = norm = pair_diff = pair_norm = 0.0
    worst = ("", 0.0)
    for pname, p in model.named_parameters():
        if pname not in ref:
            raise KeyError(f"{name}'s parameter {pname} has no counterpart in the float32 reference model")
        g = p.grad
        if g is None:
            raise RuntimeError(f"{name}'s parameter {pname} has no gradient after the first step")
        g = (g.full_tensor() if isinstance(g, DTensor) else g).double()
        want = ref[pname].double()
        d, n = (g - want).norm().item() ** 2, want.norm().item() ** 2
        diff, norm = diff + d, norm + n
        if n and (d / n) ** 0.5 > worst[1]:
            worst = (pname, (d / n) ** 0.5)
        if name == "torch":
            torch_grads[pname] = g.float()
        else:
            pair_diff += (g - torch_grads[pname].double()).norm().item() ** 2
            pair_norm += torch_grads[pname].double().norm().item() ** 2
    out = {f"grad_err_{name}": (diff / norm) ** 0.5, f"grad_worst_{name}": [worst[0], round(worst[1], 5)]}
    if name != "torch":
        out["grad_rel_pingpong_torch"] = (pair_diff / pair_norm) ** 0.5
    return out


def all_ranks_ok(ok: bool, env) -> bool:
    t = torch.tensor([1 if ok else 0], device=env.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def sync(env):
    dist.barrier()
    if env.device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, reps, env) -> float:
    """ms per call over `reps` back-to-back calls, after one untimed call and a barrier and a
    synchronize."""
    fn()
    sync(env)
    if env.device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) * 1e3 / reps
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def compare(steps: dict, args, env) -> dict:
    """Interleaved rounds of the pair (warm-up outside; `pingpong.tools.timing.interleaved`):
    per-round ms per step (the slowest rank's) and the ratio torch / pingpong's median and
    interquartile range over pairs of rounds."""
    names = ("torch", "pingpong")
    per_call = []
    for name in names:
        for _ in range(3):
            steps[name]()
        per_call.append(timed(steps[name], 2, env))
    t = torch.tensor([max(per_call)], dtype=torch.float64, device=env.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    reps = max(args.min_reps, min(args.max_reps, math.ceil(args.round_ms / max(t.item(), 1e-3))))
    clock = {} if env.device.type == "cuda" else dict(mark=time.perf_counter, elapsed_ms=lambda t0, t1: (t1 - t0) * 1e3)
    paired = interleaved(steps["torch"], steps["pingpong"], reps, args.rounds, settle=lambda: sync(env), **clock)
    ms = torch.tensor(paired.times, dtype=torch.float64, device=env.device)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)  # a round takes as long as its slowest rank
    paired = summarize(ms.cpu().tolist())
    return dict(reps=reps, rounds=len(paired.times), torch_ms=statistics.median(t for t, _ in paired.times),
                pingpong_ms=statistics.median(p for _, p in paired.times), ratio=paired.ratio,
                iqr_pct=paired.iqr_pct, position_effect=paired.position_effect,
                ratios=[round(t / p, 4) for t, p in paired.times])


def per_step(fn, env, n=3, products=False) -> dict:
    """Outside the timed rounds: host ms (the CPU's time to issue one step, GPU idle at its
    start; median of n) and, on CUDA, the profiler's kernel time per step (NCCL apart), with
    the 12 longest kernels' (rank's own); with `products`, products_ms (`products_ms`: each
    GEMM product's ms per step, GPU ms on CUDA, CPU ms of its calls elsewhere)."""
    host = []
    for _ in range(n):
        sync(env)
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
    out = dict(host_ms=statistics.median(host))
    out["host_ms_ranks"] = every_rank(out["host_ms"], env)  # a rank slower to issue makes the others wait
    if env.device.type == "cuda":
        sync(env)
        kernels = kernel_us(aligned(fn, env), n)
        comm = sum(us for name, us in kernels.items() if communication(name))
        out["gpu_ms"] = (sum(kernels.values()) - comm) / 1e3
        out["comm_ms"] = comm / 1e3
        top = sorted(kernels.items(), key=lambda kv: -kv[1])[:12]  # where a GPU ms difference lies
        out["kernels_ms"] = {name[:90]: round(us / 1e3, 3) for name, us in top}
        out["comm_ms_ranks"] = every_rank(out["comm_ms"], env)
    if products:
        out["products_ms"] = products_ms(fn, env, n)
    return out


def every_rank(value: float, env) -> list:
    """Every rank's `value`, in rank order (one all-reduce; every rank calls it)."""
    every = torch.zeros(env.world, dtype=torch.float64, device=env.device)
    every[env.rank] = value
    dist.all_reduce(every)
    return [round(v, 3) for v in every.tolist()]


#: the profiler events that are one GEMM each, and where their operands are among the event's
#: inputs (record_shapes): (A, B) of a product A @ B; "linear": (x, weight), x @ weightᵀ;
#: "grad": a pingpong layer's eager backward, dx and dweight in one range, only g recorded.
#: torch's ops (eager, and inductor's extern_kernels.mm / addmm, which call them), pingpong's
#: (the direct calls' ranges in compiled code, which also name the plan; its ops through the
#: dispatcher) and pingpong's eager autograd Functions (pingpong.integration.ops).
GEMM_EVENTS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2),
               "pingpong::mm": (0, 1), "pingpong::gemm": (0, 1), "pingpong::linear": "linear",
               "_LayerFunction": "linear", "_LayerFunctionBackward": "grad"}


def layout(stride) -> str:
    """One operand of a product as bench's layouts name it: n (its last dim contiguous:
    row-major), t (its second-last: a transposed view), s (neither), ? (not recorded)."""
    if not stride or len(stride) < 2:
        return "?"
    return "n" if stride[-1] == 1 else "t" if stride[-2] == 1 else "s"


def product(e) -> tuple:
    """(op, M, N, K, batch, layouts, strides, dtype, plan) of a GEMM event (GEMM_EVENTS) from
    its recorded inputs: layouts of A and B in bench's letters, strides as recorded (linear: x's
    and the weight's; grad: g's, K None), plan the `pingpong::<op>` range's (None for torch)."""
    shapes = e.input_shapes or []
    strides = getattr(e, "structured_input_strides", None) or []  # torch >= 2.12; before: layouts "?"
    where = GEMM_EVENTS[e.name]
    at = lambda i, seq: list(seq[i]) if i < len(seq) and isinstance(seq[i], (list, tuple)) else []  # noqa: E731
    first = 0 if isinstance(where, str) else where[0]
    dtype = str((e.input_dtypes or ["?"] * (first + 1))[first]).removeprefix("c10::")
    plan = (e.kwinputs or {}).get("plan")
    if where == "grad":
        g = at(0, shapes)
        return (e.name, math.prod(g[:-1]), g[-1] if g else None, None, 1, "dx+dw", (tuple(at(0, strides)),), dtype,
                plan)
    i, j = (0, 1) if where == "linear" else where
    a, b, sa, sb = at(i, shapes), at(j, shapes), at(i, strides), at(j, strides)
    if where == "linear":  # B = weightᵀ
        M, N, K, batch, lb = math.prod(a[:-1]), b[0] if b else None, a[-1] if a else None, 1, layout(sb[::-1])
    else:
        batch = math.prod(a[:-2]) if len(b) > 2 else 1
        M = a[-2] if len(b) > 2 or len(a) < 3 else math.prod(a[:-1])
        N, K, lb = b[-1] if b else None, a[-1] if a else None, layout(sb)
    return e.name, M, N, K, batch, layout(sa) + lb, (tuple(sa), tuple(sb)), dtype, plan


def step_products(events, steps: int, device: bool) -> list:
    """One row per distinct product of the profiled `steps` steps, by time: its GEMM events
    (GEMM_EVENTS; the innermost where they nest, as a DTensor's op over its local one) grouped
    by `product`, with calls and ms per step. device: ms is GPU time, the device kernels (user
    annotations apart) each counted for the GEMM event that launched it or an op inside one,
    joined by the profiler's correlation ids, with the kernels' names (a kernel whose launching op
    is not in the profile: the row "(no launching op)"); else the events' CPU time."""
    from torch.autograd import DeviceType

    gemms = [e for e in events if e.name in GEMM_EVENTS and e.device_type == DeviceType.CPU]
    outer = set()
    for e in gemms:
        p = e.cpu_parent
        while p is not None:
            outer.add(id(p))
            p = p.cpu_parent
    inner = {id(e): e for e in gemms if id(e) not in outer}
    us = {i: 0.0 if device else e.cpu_time_total for i, e in inner.items()}
    kernels = {i: [] for i in inner}
    lost, lost_us = [], 0.0
    if device:
        ops = {e.id: e for e in events if e.device_type == DeviceType.CPU and not e.linked_correlation_id}
        for k in events:
            if k.device_type == DeviceType.CPU or k.is_user_annotation:
                continue
            op = ops.get(k.linked_correlation_id)
            if op is None:  # no launching op in the profile: a row of its own, so a failed join shows
                lost.append(k.name)
                lost_us += k.time_range.elapsed_us()
            while op is not None and id(op) not in inner:
                op = op.cpu_parent
            if op is not None:
                us[id(op)] += k.time_range.elapsed_us()
                kernels[id(op)].append(k.name)
    rows = {}
    if lost:
        rows["lost"] = dict(op="(no launching op)", M=None, N=None, K=None, batch=1, layout="", strides=[], dtype="",
                            plan=None, calls=len(lost), ms=lost_us / 1e3, kernels=sorted({n[:90] for n in lost})[:12])
    for i, e in inner.items():
        key = product(e)
        row = rows.get(key)
        if row is None:
            op, M, N, K, batch, lay, strides, dtype, plan = key
            row = rows[key] = dict(op=op, M=M, N=N, K=K, batch=batch, layout=lay, strides=[list(x) for x in strides],
                                   dtype=dtype, plan=plan, calls=0, ms=0.0, kernels=[])
        row["calls"] += 1
        row["ms"] += us[i] / 1e3
        row["kernels"] += [n[:90] for n in kernels[i] if n[:90] not in row["kernels"]]
    for row in rows.values():
        row["calls"], row["ms"] = row["calls"] / steps, round(row["ms"] / steps, 4)
        if not device:
            del row["kernels"]
    return sorted(rows.values(), key=lambda r: -r["ms"])


def products_ms(fn, env, n=3) -> list:
    """--products: `step_products` of n profiled steps (record_shapes; on CUDA each step
    started by every rank at once, `aligned`, and timed by its kernels)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = env.device.type == "cuda"
    sync(env)
    step = aligned(fn, env) if cuda else fn
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])],
                 record_shapes=True) as prof:
        for _ in range(n):
            step()
        if cuda:
            torch.cuda.synchronize()
    return step_products(prof.events(), n, cuda)


def products_table(rows, top=10) -> str:
    """The first `top` rows of `step_products`, one line each."""
    lines = []
    for r in rows[:top]:
        mnk = "x".join("?" if v is None else str(v) for v in (r["M"], r["N"], r["K"]))
        lines.append(f"  {r['ms']:9.3f} ms {r['calls']:5g}x {r['op']:<24} {(str(r['batch']) + '*') if r['batch'] > 1 else ''}"
                     f"{mnk:<18} {r['layout']:<5} {r['strides']} {r['dtype']} {r['plan'] or ''}")
    return "\n".join(lines)


def communication(kernel: str) -> bool:
    """A kernel that moves data between GPUs or waits for another rank (set apart from GPU ms):
    NCCL's, torch's symmetric-memory kernels (async TP's barriers and signals), peer copies."""
    name = kernel.lower()
    return "nccl" in name or "symmetric_memory" in name or "memcpy ptop" in name


def aligned(fn, env):
    """fn, each call started by every rank at once: the device idle, then a barrier on the host
    (a gloo group: no NCCL kernel of its own). A collective's kernel runs from its launch until
    every rank has joined it, so a rank that starts a profiled step early (the profiler's start
    takes longer on one rank than on another) would count its wait for the others as NCCL time."""
    def call():
        torch.cuda.synchronize()
        dist.barrier(group=env.host_group)
        fn()
    return call


def trace(fn, env, tag, n=3) -> dict:
    """--trace: every rank's profiler timeline (CPU and CUDA) of n steps run back to back as in
    the timed rounds, trace-<tag>-rank<R>.json (in $OUT when set; chrome://tracing or Perfetto
    shows the ranks' GPU streams side by side): where a rank's GPU idles or waits for the other.
    Returns this rank's `timeline_summary` of it, per step."""
    from torch.profiler import ProfilerActivity, profile

    cuda = env.device.type == "cuda"
    sync(env)
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as prof:
        for _ in range(n):
            fn()
        if cuda:
            torch.cuda.synchronize()
    path = os.path.join(os.environ.get("OUT", "."), f"trace-{tag}-rank{env.rank}.json")
    prof.export_chrome_trace(path)
    sync(env)
    with open(path) as f:
        return timeline_summary(json.load(f)["traceEvents"], n)


def timeline_summary(events, steps: int) -> dict:
    """Per step, from a profiler trace's events: the span of its GPU work (first kernel's start
    to last kernel's end), and on the stream that ran the most kernels (the compute stream) the
    kernels launched, their busy time and the idle time between them; communication kernels'
    time (`communication`) apart. Busy far below span on a rank whose peer waits in NCCL: a
    host-bound rank (benchmarks/results/2026-11-29-i-twenty-fourth-session.md)."""
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    if not kernels:
        return {}
    by_stream: dict = {}
    for e in kernels:
        by_stream.setdefault(e.get("args", {}).get("stream"), []).append(e)
    main = sorted(max(by_stream.values(), key=len), key=lambda e: e["ts"])
    compute = [e for e in main if not communication(e["name"])]
    idle = sum(max(0.0, b["ts"] - (a["ts"] + a["dur"])) for a, b in zip(main, main[1:]))
    span = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
    per = lambda us: round(us / 1e3 / steps, 3)  # noqa: E731  (µs over the steps → ms per step)
    return dict(span_ms=per(span), launches=round(len(main) / steps, 1), busy_ms=per(sum(e["dur"] for e in compute)),
                idle_ms=per(idle), comm_ms=per(sum(e["dur"] for e in kernels if communication(e["name"]))))


def host_profile(fn, env, tag) -> None:
    """--host-profile: every rank's cProfile of one step (GPU idle at its start), the 40 functions
    of most own time and of most cumulative time, in host_profile-<tag>-rank<R>.txt (in $OUT when
    set): a rank that issues its step later than the others makes them wait in the collectives."""
    import cProfile
    import io
    import pstats

    sync(env)
    prof = cProfile.Profile()
    prof.runcall(fn)
    sync(env)
    text = io.StringIO()
    for order in ("tottime", "cumulative"):
        pstats.Stats(prof, stream=text).sort_stats(order).print_stats(40)
    with open(os.path.join(os.environ.get("OUT", "."), f"host_profile-{tag}-rank{env.rank}.txt"), "w") as f:
        f.write(text.getvalue())


def fused_nodes() -> dict:
    """Per model, what async TP made of the graphs compiled since GRAPHS was cleared: its fused
    nodes and the all-gathers / reduce-scatters left unfused (a graph holding pingpong's ops is
    pingpong's model's). Inductor's caches are off under --async-tp, so every compile shows."""
    from pingpong.integration.async_tp import GRAPHS

    out = {"torch": {}, "pingpong": {}}
    for counts in GRAPHS:
        model = out["pingpong" if counts["pingpong_ops"] else "torch"]
        for k, v in counts.items():
            if k != "pingpong_ops" and v:
                model[k] = model.get(k, 0) + v
    return out


def run_row(arch, c, workload, mode, meshes, env, args) -> dict:
    from torch._dynamo.utils import counters

    row = dict(workload=workload, mode=mode)
    counters.clear()
    if env.async_tp:
        from pingpong.integration.async_tp import GRAPHS

        GRAPHS.clear()
    steps, check = check_and_steps(arch, c, workload, mode == "compiled", meshes, env, args)
    if env.async_tp and mode == "compiled":
        row["async_tp"] = fused_nodes()
    if steps is None:
        row.update(check)
        return row
    check["ok"] = all_ranks_ok(check["ok"], env)
    row["check"] = check
    env.log(f"{workload} {mode} check", check)
    row.update(compare(steps, args, env))
    row["per_step"] = {name: per_step(fn, env, products=args.products) for name, fn in steps.items()}
    if args.products and env.rank == 0:
        for name, ps in row["per_step"].items():
            print(f"[{workload} {mode} products, {name}, ms per step]\n{products_table(ps['products_ms'])}", flush=True)
    if args.host_profile:
        for name, fn in steps.items():
            host_profile(fn, env, f"{workload}-{mode}-{env.variant}-{name}")
    if args.trace:
        for name, fn in steps.items():
            mine, every = trace(fn, env, f"{workload}-{mode}-{env.variant}-{name}"), [None] * env.world
            dist.all_gather_object(every, mine)
            row["per_step"][name]["timeline_ranks"] = every
    if mode == "compiled":
        row["graph_breaks"] = sum(counters["graph_break"].values())
        row["graphs"] = counters["stats"]["unique_graphs"]
    env.log(f"{workload} {mode}", {k: v for k, v in row.items() if k != "check"})
    return row


# ----------------------------------------------------------------------------- the table


def table(rows) -> str:
    def f(x, d=3):
        return "-" if x is None else f"{x:.{d}f}"

    head = ("workload", "mode", "torch ms", "pingpong ms", "ratio", "IQR %", "GPU ms t/p", "host ms t/p", "check")
    lines = []
    for r in rows:
        ps = r.get("per_step", {})
        t, p = ps.get("torch", {}), ps.get("pingpong", {})
        note = r.get("error_line") or r.get("skipped") or ("ok" if r.get("check", {}).get("ok") else "FAILED")
        if r.get("graph_breaks"):
            note += f", {r['graph_breaks']} graph breaks"
        if "async_tp" in r:  # fused nodes of torch's / pingpong's graphs; unfused collectives left
            counts = [r["async_tp"][m] for m in ("torch", "pingpong")]
            fused = [sum(v for k, v in d.items() if "." in k) for d in counts]
            left = [d.get("all_gather", 0) + d.get("reduce_scatter", 0) for d in counts]
            note += f", fused t/p {fused[0]}/{fused[1]}, unfused t/p {left[0]}/{left[1]}"
        lines.append((r["workload"], r["mode"], f(r.get("torch_ms")), f(r.get("pingpong_ms")), f(r.get("ratio")),
                      f(r.get("iqr_pct"), 2), f"{f(t.get('gpu_ms'))}/{f(p.get('gpu_ms'))}",
                      f"{f(t.get('host_ms'))}/{f(p.get('host_ms'))}", note))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = lambda cells: " | ".join(str(x).ljust(w) for x, w in zip(cells, widths))  # noqa: E731
    return "\n".join([fmt(head), "-+-".join("-" * w for w in widths), *map(fmt, lines)])


# ----------------------------------------------------------------------------- main


class Env:
    def __init__(self, rank, world, device, dtype, backend, sequence_parallel=False, async_tp=False, sp_stream="auto",
                 fp8=None):
        self.rank, self.world, self.device, self.dtype, self.backend = rank, world, device, dtype, backend
        self.sequence_parallel, self.async_tp, self.sp_stream, self.fp8 = sequence_parallel, async_tp, sp_stream, fp8
        # host barriers that launch no device work (per_step's profiled steps)
        self.host_group = dist.new_group(backend="gloo") if dist.get_backend() == "nccl" else None

    @property
    def variant(self) -> str:
        """What the run's flags change in a row's models, for file names: bf16 or fp8-<recipe>
        (pingpong's layers), then -sp-<stream> (--sequence-parallel) and -async-tp."""
        parts = [f"fp8-{self.fp8}" if self.fp8 else "bf16"]
        parts += [f"sp-{self.sp_stream}"] if self.sequence_parallel else []
        return "-".join(parts + (["async-tp"] if self.async_tp else []))

    def log(self, what, obj):
        if self.rank == 0:
            print(f"[{what}] {json.dumps(obj, default=str)}", flush=True)


def setup(cpu: bool):
    if "RANK" not in os.environ:  # one process: world size 1
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29561")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(minutes=5)  # a rank left waiting ends the run, not the machine's time
    if cpu:
        dist.init_process_group("gloo", timeout=timeout)
        return rank, world, torch.device("cpu")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device, timeout=timeout)
    return rank, world, device


def meshes_for(world, device):
    from torch.distributed.device_mesh import init_device_mesh

    one = init_device_mesh(device.type, (world,))
    out = {"tp": one, "dp": one}
    if world >= 4 and world % 2 == 0:
        out["2d"] = init_device_mesh(device.type, (world // 2, 2), mesh_dim_names=("dp", "tp"))
    return out


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="hidden 2048 (unless --hidden), 4 steps, 16 rounds of ~40 ms")
    p.add_argument("--cpu-smoke", action="store_true", help="CPU, gloo, tiny model, interpreted kernels (fp16)")
    p.add_argument("--arch", default="llama", choices=("llama", "hf-llama", "hf-qwen2"))
    p.add_argument("--hidden", type=int, default=None, help="2048 or 4096 (the target); the other sizes follow")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--batch", type=int, default=2, help="sequences per step (prefill, training)")
    p.add_argument("--seq", type=int, default=2048, help="tokens per sequence; the decode's cached context")
    p.add_argument("--decode-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=None, help="training steps of the loss-curve check")
    p.add_argument("--lr", type=float, default=None,
                   help="AdamW's learning rate of the training rows (default 0.064 / hidden: a smooth loss curve)")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--round-ms", type=float, default=None, help="target length of one timing")
    p.add_argument("--max-reps", type=int, default=200)
    p.add_argument("--min-reps", type=int, default=None,
                   help="at least this many timed steps of each model per round (default 4; 1 with --cpu-smoke)")
    p.add_argument("--backend", default="inductor", help="torch.compile backend of the compiled mode")
    p.add_argument("--json", default=None)
    p.add_argument("--sm-carveout", type=int, default=None, help="torch's SM carveout for both models (SMs kept from"
                   " the GEMMs for NCCL: torch._C._set_sm_carveout_experimental); unset by default")
    p.add_argument("--trace", action="store_true",
                   help="every rank's profiler timeline of 3 steps of each model per row, trace-*.json ($OUT or .)")
    p.add_argument("--host-profile", action="store_true",
                   help="every rank's cProfile of one step of each model per row, host_profile-*.txt ($OUT or .)")
    p.add_argument("--products", action="store_true",
                   help="per_step's products_ms: each model's GEMMs of one step by product (M, N, K, layouts, strides,"
                        " dtype, pingpong's plan) with calls and GPU ms per step, from a record_shapes profile")
    p.add_argument("--sequence-parallel", action="store_true",
                   help="tp-* rows: the sequence-parallel TP plan for both models (own Llama; tp-decode skipped)")
    p.add_argument("--sp-stream", default="auto", choices=("auto", "local", "dtensor"),
                   help="--sequence-parallel: the stream between blocks (auto: local for prefill, DTensor for training)")
    p.add_argument("--fp8", default=None, choices=tuple(fp8_training.RECIPES),
                   help="pingpong's model only: its Linears as FP8 training layers of this recipe"
                        " (pingpong.nn.Float8TrainingLinear, replace_linear(fp8=..., training=True)'s rule; a layer whose"
                        " features the recipe cannot take stays a bf16 pingpong Linear); torch's model stays bf16, so"
                        " the ratio is FP8 against bf16 and the checks allow FP8's rounding (FP8_SLACK)")
    p.add_argument("--async-tp", action="store_true",
                   help="with --sequence-parallel, NCCL: torch's async TP for both models, pingpong's pass for pingpong's;"
                        " compiled rows report each model's fused nodes")
    args = p.parse_args(argv)
    if args.sequence_parallel and args.arch != "llama":
        p.error("--sequence-parallel: the own Llama only (--arch llama): transformers' attention takes keyword inputs")
    if args.async_tp and not args.sequence_parallel:
        p.error("--async-tp: the plain TP plan all-reduces, so async TP has nothing to fuse; add --sequence-parallel")
    if args.async_tp and args.cpu_smoke:
        p.error("--async-tp: needs NCCL and CUDA symmetric memory; --cpu-smoke runs on gloo (CPU)")
    for name in args.workloads.split(","):
        if name not in WORKLOADS:
            p.error(f"--workloads: {name!r} is not one of {WORKLOADS}")
    for name in args.modes.split(","):
        if name not in MODES:
            p.error(f"--modes: {name!r} is not one of {MODES}")
    if args.hidden not in (None, 2048, 4096):
        p.error(f"--hidden: 2048 or 4096, got {args.hidden}")
    quick = args.quick or args.cpu_smoke
    args.steps = args.steps or (4 if quick else 8)
    args.rounds = args.rounds or (16 if quick else 30)
    args.round_ms = args.round_ms or (40.0 if quick else 100.0)
    args.min_reps = args.min_reps or (1 if args.cpu_smoke else 4)
    if args.cpu_smoke:
        args.seq, args.decode_batch, args.batch = min(args.seq, 16), 2, 2
        args.rounds, args.round_ms = min(args.rounds, 4), min(args.round_ms, 1.0)
    args.rounds = max(4, args.rounds + args.rounds % 2)  # whole pairs of rounds, at least two
    return args


def config(args) -> Config:
    if args.cpu_smoke:
        return Config(vocab=64, hidden=64, inter=128, layers=2, heads=8, kv_heads=4, max_pos=64)
    hidden = args.hidden or (2048 if args.quick else 4096)
    if hidden == 4096:
        return Config(hidden=4096, inter=14336, layers=args.layers, heads=32, kv_heads=8)
    return Config(layers=args.layers)


def enable_async_tp(mesh) -> None:
    """torch's async TP for every model compiled from here (its inductor switch, symmetric memory
    for the TP group) and pingpong's pass beside torch's; inductor's caches off, so that every
    compile runs the passes (fused_nodes counts what they made)."""
    import warnings

    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch.distributed._symmetric_memory import enable_symm_mem_for_group

    inductor_config._micro_pipeline_tp = True
    inductor_config.fx_graph_cache = False
    if hasattr(functorch_config, "enable_autograd_cache"):
        functorch_config.enable_autograd_cache = False
    with warnings.catch_warnings():  # deprecated on torch 2.13, and still what its pass checks
        warnings.simplefilter("ignore", FutureWarning)
        enable_symm_mem_for_group(mesh.get_group().group_name)
    pingpong.distributed.enable_async_tp()


def main(argv=None) -> int:
    args = parse(argv)
    if args.cpu_smoke:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        from conftest import interpret_plans
        from fp8_emulation import emulate_fp8

        interpret_plans(setattr)
        emulate_fp8(setattr)  # --fp8's kernels: the scaled products and quantizations emulated on the CPU
    import torch._dynamo

    torch._C._set_sm_carveout_experimental(args.sm_carveout)  # both models' GEMMs alike; in the JSON's args
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, 64)  # a row's variants of one block's code, with room
    rank, world, device = setup(args.cpu_smoke)
    env = Env(rank, world, device, torch.float16 if args.cpu_smoke else torch.bfloat16, args.backend,
              args.sequence_parallel, args.async_tp, args.sp_stream, args.fp8)
    arch, c = Arch(args.arch), config(args)
    meshes = meshes_for(world, device)
    if args.async_tp:
        enable_async_tp(meshes["tp"])
    from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam

    info = dict(world=world, torch=torch.__version__, arch=args.arch, config=asdict(c),
                fsdp2_tp_spec_fixed=hasattr(FSDPParam, "_get_unsharded_dtensor_spec"),
                device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), args=vars(args))
    env.log("run", info)
    rows = []
    paths = [p for p in (args.json, os.environ.get("OUT") and os.path.join(os.environ["OUT"], "dist_llama.json")) if p]
    # every compiled row before any eager one: on torch 2.13 a compiled 2-D model (torch's too)
    # fails in inductor (device_mesh._get_submesh is not an OpOverload) after an eager 2-D run
    for mode in args.modes.split(","):
        for workload in args.workloads.split(","):
            if workload == "2d-train" and "2d" not in meshes:
                continue
            t0 = time.time()
            try:
                row = run_row(arch, c, workload, mode, meshes, env, args)
            except Exception as e:  # the other rows still run; the error is in the results
                row = dict(workload=workload, mode=mode, error=traceback.format_exc(),
                           error_line=f"ERROR {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}")
                env.log(f"{workload} {mode} error", row["error"])
            row["wall_s"] = round(time.time() - t0, 1)
            rows.append(row)
            if rank == 0:  # after every row: a run stopped by its time limit keeps the rows it made
                for path in paths:
                    with open(path, "w") as f:
                        json.dump(dict(info, rows=rows), f, indent=1, default=str)
            torch._dynamo.reset()
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            sync(env)
    failed = [r for r in rows if "error" in r or not r.get("check", {"ok": True})["ok"]]
    if rank == 0:
        print(f"\n{world} × {info['device']}, torch {torch.__version__}, {args.arch} hidden {c.hidden}, {c.layers} layers,"
              f" batch {args.batch} × seq {args.seq}, decode {args.decode_batch} × 1 after {args.seq};"
              " ratio = torch ms / pingpong ms (> 1: pingpong faster), median of rounds; IQR of the per-round ratio")
        print(table(sorted(rows, key=lambda r: (WORKLOADS.index(r["workload"]), MODES.index(r["mode"])))), flush=True)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
