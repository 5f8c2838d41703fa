"""The call plan: a cache of plans keyed by GemmSpec, and the list of backends.

    public function (api.py, functional.py)
        │ spec.build(...)           a GemmSpec (pingpong.runtime.spec): operands' dtypes,
        │                           shapes, strides, devices, 16-byte alignment; out dtype;
        │                           the epilogue (C read?, bias, activation); in place; config
        ▼
    get(spec) ──miss──▶ the caller validates (spec.validate*), then plan_for(spec) asks the
        │                 backends in BACKEND_MODULES' order (hopper, amd, portable):
        │                   backend.can_implement(spec) -> None | why not
        │                   backend.plan(spec)         -> a Plan (path, config, copies, launch)
        ▼                 (a refused call caches nothing; no backend: PingpongError with
    plan.run(a, b, out, args)                           every backend's reason)

Every plan runs through that one entry point: `args`, an EpilogueArgs (pingpong.runtime.spec),
holds the call's operands besides A and B (C, α, β, bias, FP8 scales, group offsets), the
values of what the spec's `epilogue` and `groups` describe; a plan reads the fields its spec
asks for. `run_ptrs` is the one other entry: the pointer launch of a LayerPlan.

A spec holds everything validation and dispatch read, so a cache hit means the call is valid
and its decision known; only per-call values (addresses, α, β, overlap of an in-place output
with the inputs) are checked again. `path_for` returns `plan.path`, the path `run` takes.
The cache keeps PLAN_CACHE_SIZE plans; eviction approximates least recently used (second chance: a hit
only marks its plan, `store` passes over marked ones).

A grouped spec (`spec.groups`, pingpong.grouped_mm) goes the same way: the same cache (a
grouped spec never equals a dense one: `groups` is in the key), the same backends, each of
which answers for every spec it is asked about, grouped ones included (Hopper: its ragged-rows
and ragged-K kernels; AMD: none; portable: any). Its plan is a GroupedPlan,
run(a, b, out, args) with args.offs. Decided here, before the backends: nothing to compute ("empty": an
empty output, no groups of rows, or a K of 0, which gives zeros), and 3-D × 3-D, which is the
dense batched product (the plan of the spec without `groups`).
"""

from __future__ import annotations

import collections
import importlib
import logging
import os
import sys

import torch

from ..errors import PingpongError
from . import spec as spec_mod
from .device import launch_sms
from .spec import BATCHED, NO_ARGS, RAGGED_K, EpilogueArgs, GemmSpec, torch_activation

#: "Which kernel ran": each new plan (a cache miss, never a hit) is reported at INFO. Off unless
#: logging is configured for it, or PINGPONG_LOG names a level (then a handler on stderr).
LOG = logging.getLogger("pingpong")
LOG_ENV = "PINGPONG_LOG"
LOG_LEVELS = ("debug", "info", "warning", "error")


def _log_from_env() -> None:
    level = os.environ.get(LOG_ENV, "").strip().lower()
    if not level:
        return
    if level not in LOG_LEVELS:
        raise PingpongError(f"{LOG_ENV}: expected one of {', '.join(LOG_LEVELS)}, got {level!r}")
    LOG.setLevel(level.upper())
    if not LOG.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("pingpong: %(message)s"))
        LOG.addHandler(handler)


_log_from_env()

#: Plans kept (each a few hundred bytes plus its bound launch); least recently used evicted (`store`).
PLAN_CACHE_SIZE = 1024

PLANS: "collections.OrderedDict[GemmSpec, Plan]" = collections.OrderedDict()

#: The backends, in the order plan_for asks them: each module has NAME, can_implement(spec) and
#: plan(spec) (and CONFIGURABLE when matmul_tiled's explicit config applies to it). Named, not
#: imported: the backends build on this module (Plan, the spec), so they load on the first plan
#: (`backends`), and `import pingpong` stays light.
BACKEND_MODULES = ("pingpong.hopper.host.backend", "pingpong.amd.backend", "pingpong.portable")

#: The loaded BACKEND_MODULES (`backends`); None until the first plan. Tests put their own list here.
BACKENDS: "list | None" = None


def backends() -> list:
    """The backends plan_for asks, in order: BACKEND_MODULES, imported on the first call (an
    import error names the backend and propagates: a missing backend is never skipped)."""
    global BACKENDS
    if BACKENDS is None:
        loaded = []
        for name in BACKEND_MODULES:
            try:
                loaded.append(importlib.import_module(name))
            except ImportError as e:
                raise type(e)(f"the backend {name} (pingpong.runtime.plan.BACKEND_MODULES) cannot be imported: {e}",
                              name=e.name) from e
        BACKENDS = loaded
    return BACKENDS


def get(spec) -> "Plan | None":
    """The cached plan of `spec` (marked used: `store`'s second chance), or None."""
    if spec is None:
        return None
    try:
        p = PLANS.get(spec)
    except TypeError:  # unhashable arguments (an activation list): validation reports them
        return None
    if p is not None:
        p.used = True
    return p


def store(key, plan: "Plan") -> "Plan":
    """Cache `plan` in PLANS (`remember`)."""
    return remember(PLANS, key, plan, PLAN_CACHE_SIZE)


def remember(cache: collections.OrderedDict, key, value, size: int):
    """Cache `value` (an object with a `used` flag, which a hit sets); when `cache` holds
    `size`, the least recently used goes, by second chance (CLOCK): from the oldest end, a value
    used since it was stored or last passed over is moved to the recent end and marked unused,
    the first unused one is evicted. A hit only marks its value (one lookup of the key: moving
    it would hash the key and compare it with the stored one again). PLANS and
    pingpong.integration.direct's LayerPlans."""
    while len(cache) >= size:
        old, v = cache.popitem(last=False)
        if not v.used:
            break
        v.used = False
        cache[old] = v
    value.used = False
    cache[key] = value
    return value


def plan_for(spec: GemmSpec, asked=None) -> "Plan":
    """Decide, for a validated spec: the first backend (of `asked`, default `backends()`)
    that can implement it plans it (not cached); a spec under an SM carveout that leaves the
    GPU no SM is refused first (PingpongError naming torch's setting). The plan's `why` says why that backend and,
    where the backend says, where its config came from; the decision is logged (LOG, INFO)."""
    if spec.carveout is not None and spec.device.type == "cuda":  # every path: torch's carveout leaves an SM
        launch_sms(device_index(spec.device), spec.carveout)
    plan = _decide(spec, asked)
    if LOG.isEnabledFor(logging.INFO):
        LOG.info("%s -> %s", describe_spec(spec), describe(plan))
    return plan


def describe_spec(spec: GemmSpec) -> str:
    """The call a spec stands for, in one line: shape, dtypes, device."""
    kind = "grouped " + spec.groups.mode if spec.groups is not None else "scaled_mm" if spec.epilogue.scales \
        is not None else "gemm"
    M, N, K = spec.mnk
    batch = f"{spec.batches}×" if spec.batches > 1 else ""
    dtypes = "->".join(str(d).removeprefix("torch.") for d in (spec.a.dtype, spec.out_dtype))
    return f"{kind} {batch}{M}×{N}×{K} {dtypes} on {spec.device}"


def explain(plan: "Plan") -> dict:
    """What a plan runs: {"path", "config", "why", "stream_k"} (config: the KernelConfig, or
    None for a backend without one; stream_k: what stream-K would do with the config's tile,
    where the backend says (the Hopper 16-bit kernel), else None)."""
    plan = getattr(plan, "dense", plan)  # 3-D × 3-D grouped: the dense batched plan it runs
    return {"path": plan.path, "config": getattr(plan, "config", None), "why": getattr(plan, "why", ""),
            "stream_k": getattr(plan, "stream_k", None)}


def describe(plan: "Plan") -> str:
    info = explain(plan)
    config = f", {info['config']}" if info["config"] is not None else ""
    return f"{info['path']}{config}" + (f" ({info['why']})" if info["why"] else "")


def _decide(spec: GemmSpec, asked) -> "Plan":
    if spec.groups is not None:
        if spec.groups.mode == BATCHED:  # a batch of equal groups: the dense batched product
            return BatchedPlan(_decide(spec._replace(groups=None), asked))
        empty = _empty_groups(spec)
        if empty is not None:
            return empty
    else:
        (M, N, K), batches = spec.mnk, spec.batches
        if 0 in (M, K, N, batches):
            return EmptyPlan(device_index(spec.device), spec.epilogue.reads_c, spec.epilogue.activation)
    reasons = []
    for backend in backends() if asked is None else asked:
        if spec.config is not None and not getattr(backend, "CONFIGURABLE", False):
            continue
        why = backend.can_implement(spec)
        if why is None:
            plan = backend.plan(spec)
            plan.why = "; ".join(filter(None, [getattr(plan, "why", ""), *(f"not {r}" for r in reasons)]))
            return plan
        reasons.append(f"{backend.NAME}: {why}")
    if spec.config is not None and len(reasons) == 1:  # matmul_tiled: the Hopper kernel's reason
        raise PingpongError(f"config: {reasons[0].split(': ', 1)[1]}")
    raise PingpongError("no backend runs this call: " + "; ".join(reasons))


def cached_plan(spec: GemmSpec) -> "Plan":
    """plan_for(spec), stored in the cache (in-place plans also get their byte extents)."""
    p = plan_for(spec)
    if spec.inplace:
        p.extents = (spec.a.span_bytes(), spec.b.span_bytes(), spec.c.span_bytes())
    return store(spec, p)


def device_index(device: torch.device) -> int:
    if device.index is not None:
        return device.index
    return torch.cuda.current_device() if device.type == "cuda" else -1


#: (device, raw stream) -> that stream's arrival counters (int32, all zero between launches)
_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}
#: (device, raw stream) -> that stream's split-K / stream-K fp32 workspace (`split_scratch`)
_WORKSPACES: dict[tuple[int, int], torch.Tensor] = {}
#: the largest workspace kept per stream, in fp32 words (8 MiB); a launch that needs more
#: takes its own from the caching allocator per call (such products are GPU-bound)
WORKSPACE_KEEP_WORDS = 2**21


def split_scratch(device: torch.device, words: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(a flat fp32 workspace of at least `words` words, `counters` zeroed int32 arrival
    counters) for one split-K / stream-K launch on `device`'s current stream. Both are kept per
    stream as `stream_zeros` keeps its words (the kernel leaves the counters at zero), with one
    look at the stream for both:
    launches in one stream's order run one after another (a launch with programmatic
    dependent launch waits for the grid before it to finish before it touches memory), so
    they can share one workspace, as the caching allocator would hand each the block the last
    one freed, without an allocation per call (the partials are written before they are read:
    its values do not matter). A fresh one, not kept: over WORKSPACE_KEEP_WORDS words, and
    wherever `stream_zeros` keeps nothing (a CUDA graph being captured, off a GPU, the
    CUDA-graph trees' stream)."""
    key = keeping_stream(device)
    if key is None:
        return (torch.empty(words, dtype=torch.float32, device=device),
                torch.zeros(counters, dtype=torch.int32, device=device))
    return (_kept(_WORKSPACES, key, device, words, torch.float32, WORKSPACE_KEEP_WORDS, empty=True),
            _kept(_COUNTERS, key, device, counters, torch.int32))


def stream_zeros(kept: dict, device: torch.device, n: int, dtype=torch.int32) -> torch.Tensor:
    """At least `n` zeroed words for kernels on `device`'s current stream that leave them zeroed
    again (quantize_fp8_pair's two slots of maxima, each zeroed by the call after the one that
    filled it; split-K's arrival counters, through `split_scratch`), kept in `kept` by (device,
    raw stream): launches in one stream's order can all use that stream's buffer (no fill per
    call); launches on different streams never share one. While a CUDA graph is being captured,
    or off a GPU, a fresh zeroed tensor (the fill is part of the graph), since a graph's
    replays may run beside anything. A caller whose kernel may have left words set (its launch
    raised between two kernels) drops its stream's buffer (`kept.pop(key)`, `stream_key`).
    Nor is one kept for the stream of torch.compile's CUDA-graph trees (`_graph_tree_stream`)."""
    key = keeping_stream(device)
    if key is None:
        return torch.zeros(n, dtype=dtype, device=device)
    return _kept(kept, key, device, n, dtype)


def _kept(kept: dict, key: tuple[int, int], device: torch.device, n: int, dtype, most: int | None = None,
          empty: bool = False) -> torch.Tensor:
    """At least `n` words of `kept`'s buffer for `key`, a stream that may keep buffers (from
    `keeping_stream`), made again when missing or too small: zeroed (`stream_zeros`' words), or
    `empty` (`split_scratch`'s workspace, whose values do not matter); a fresh one, not kept,
    for the CUDA-graph trees' stream or over `most` words."""
    buf = kept.get(key)
    if buf is None or buf.numel() < n:  # the old buffer is freed in its stream's order
        make = torch.empty if empty else torch.zeros
        if (most is not None and n > most) or _graph_tree_stream(key):
            return make(n, dtype=dtype, device=device)
        buf = kept[key] = make(max(n, 4096), dtype=dtype, device=device)
    return buf


def _graph_tree_stream(key: tuple[int, int]) -> bool:
    """Whether (device, raw stream) is the stream of torch.compile's CUDA-graph trees
    (mode="reduce-overhead"), whose warm-up runs are not captured but allocate from the graphs'
    private memory pool: a buffer kept from there could later be handed to a recorded graph
    (torch clears cuBLAS's workspaces around its warm-ups for this reason). Asked only when
    a buffer would be made; False while inductor's graph trees are not imported, True where
    their manager cannot be read (a torch whose trees are laid out otherwise: keep nothing)."""
    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    if trees is None:
        return False
    try:
        manager = trees.get_manager(key[0], create_if_none_exists=False)
        return manager is not None and manager.stream.cuda_stream == key[1]
    except (AttributeError, TypeError):
        return True


def keeping_stream(device: torch.device) -> tuple[int, int] | None:
    """The (device index, raw stream) whose kept buffers a launch may use now (`stream_key`);
    None while a CUDA graph is being captured (its replays may run beside anything) or off a
    GPU."""
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return None
    return stream_key(device)


def stream_key(device: torch.device) -> tuple[int, int]:
    """(device index, its current raw stream): where `stream_zeros` keeps a buffer."""
    return device.index, torch._C._cuda_getCurrentRawStream(device.index)


class Plan:
    """A dispatch decision. `path`: "hopper", "hopper-padded", "portable", "amd", "empty"."""

    # extents: byte spans of a, b, c (in-place plans); used: hit since stored or last passed over (`store`);
    # why: the decision's reasons, for `explain` and the log (plan_for); stream_k: what stream-K would do
    # (the Hopper backend sets it, for `explain`)
    __slots__ = ("path", "device", "activation", "extents", "used", "why", "stream_k")

    #: True when `run_ptrs` works: one launch from base addresses, no copies, C not read
    pointer_launch = False

    def run(self, a, b, out, args: EpilogueArgs = NO_ARGS) -> None:
        """out = the product of a and b with the epilogue the spec describes, reading its
        operands from `args` (a dense product: act(α·a@b + bias) + β·C; scaled: with
        args.scale_a, args.scale_b; grouped: args.offs)."""
        raise NotImplementedError

    def run_ptrs(self, a_ptr: int, b_ptr: int, out_ptr: int, bias_ptr: int, views, *inputs) -> None:
        """out = act(a@b + bias) from the tensors' base addresses (bias_ptr 0: none), for a
        caller whose key fixes every tensor's layout (pingpong.integration.direct.LayerPlan);
        `views(*inputs)` -> (a, b, out, bias) is called only when the launch goes through the
        JIT (a module-level function and its arguments: no closure made per call)."""
        raise NotImplementedError


class LaunchedPlan(Plan):
    """A plan whose kernel launches through a bound direct launch: `self.launch`, a
    runtime.launcher.CachedLaunch, with `_jit_args(a, b, out, c, args)` giving the JIT's
    arguments on the launches that go through Triton (c: C as read, None where it is not;
    args: the call's EpilogueArgs, whose own c is not read)."""

    __slots__ = ()

    #: the kernel takes (b, a) as its A and B (swap-AB: it computes Cᵀ = bᵀ·aᵀ); a plan that
    #: swaps sets it at construction
    swapped = False

    def run_ptrs(self, a_ptr, b_ptr, out_ptr, bias_ptr, views, *inputs):
        if self.swapped:
            a_ptr, b_ptr = b_ptr, a_ptr
        self.launch(self.device, (a_ptr, b_ptr, out_ptr, out_ptr, bias_ptr or out_ptr), (1.0, 0.0), self._jit_views,
                    views, *inputs)

    def _jit_views(self, views, *inputs):
        a, b, out, bias = views(*inputs)
        return self._jit_args(a, b, out, None, EpilogueArgs(bias=bias))


class EmptyPlan(Plan):
    """M, N, K or the batch is 0: no kernel. The empty sum makes out = act(bias) + β·c (zeros
    without a bias and C; β = 0: C unread)."""

    __slots__ = ("reads_c",)

    def __init__(self, device, read, activation="none"):
        self.device, self.reads_c, self.path, self.activation = device, read, "empty", activation

    def run(self, a, b, out, args=NO_ARGS):
        if out.numel() == 0:
            return
        bias = args.bias
        if bias is None and self.activation == "none" and not self.reads_c:
            out.zero_()
            return
        y = torch.zeros(out.shape[-2:], dtype=torch.float32, device=out.device)
        if bias is not None:
            y = torch_activation(self.activation)(y + bias.float())
        if self.reads_c:
            y = y + args.c.float() * args.beta
        out.copy_(y)


def bias_vector(bias: torch.Tensor | None) -> torch.Tensor | None:
    """The bias as the 1-D, unit-stride vector the kernels read (itself when it already is)."""
    if bias is None:
        return None
    if bias.dim() == 1 and (bias.stride(0) == 1 or bias.numel() <= 1):
        return bias
    v = bias.reshape(-1)
    return v if v.stride(0) == 1 or v.numel() <= 1 else v.contiguous()


# ----------------------------------------------------------------------------- grouped plans


class GroupedPlan(Plan):
    """The plan of a grouped spec (pingpong.grouped): `run(a, b, out, args)` writes the product
    into out, a contiguous tensor of the result's shape (the spec's `grouped_out`). A
    ragged-columns product (3-D × 2-D) is ragged rows on the transposed views, written
    transposed (outᵀ = bᵀ · aᵀ, `spec.ragged_view`): `compute` gets those views."""

    __slots__ = ("mode",)

    def run(self, a, b, out, args=NO_ARGS) -> None:
        self.compute(*spec_mod.ragged_view(self.mode, a, b, out), args.offs)

    def compute(self, a, b, out, offs) -> None:
        raise NotImplementedError


class EmptyGroupedPlan(GroupedPlan):
    """Nothing to compute: an empty output or no groups (out is left as it is: rows past the
    last group are unset anyway), or ragged K with K = 0 (every group empty: zeros)."""

    __slots__ = ("zeros",)

    def __init__(self, device, mode, zeros):
        self.device, self.mode, self.zeros, self.path, self.activation = device, mode, zeros, "empty", "none"

    def compute(self, a, b, out, offs):
        if self.zeros:
            out.zero_()


def _empty_groups(spec: GemmSpec) -> "EmptyGroupedPlan | None":
    mode, count, _ = spec.groups
    if 0 in spec_mod.grouped_shape(mode, spec.a, spec.b, count) or (mode != RAGGED_K and count == 0):
        return EmptyGroupedPlan(device_index(spec.device), mode, False)
    if mode == RAGGED_K and spec.a.shape[1] == 0:
        return EmptyGroupedPlan(device_index(spec.device), mode, True)
    return None


class BatchedPlan(GroupedPlan):
    """3-D × 3-D: the dense batched product's plan (the spec without `groups`)."""

    __slots__ = ("dense",)

    def __init__(self, dense: Plan):
        self.dense, self.mode, self.device, self.path = dense, BATCHED, dense.device, dense.path
        self.activation = "none"

    def compute(self, a, b, out, offs):
        self.dense.run(a, b, out)
