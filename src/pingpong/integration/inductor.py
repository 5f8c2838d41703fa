"""pingpong's ops in inductor's generated code: direct calls, as inductor calls cuBLAS.

For torch's own `aten.mm` inductor's wrapper allocates the result and calls the library
directly (`extern_kernels.mm(a, b, out=buf)`). A custom op it calls through the dispatcher
instead (`torch.ops.pingpong.mm.default(a, b)`): the op's autograd and backend wrappers, a
no-grad context and a new output, Python per call before pingpong's own path.
`register` gives inductor a lowering for each op in KERNELS that emits the same kind of line.
One table, filled by `lowered` beside each op: mm, gemm and linear here, scaled_mm (pingpong.fp8),
fp8_linear and fp8_linear_train (pingpong.fp8_training), grouped_mm, scaled_grouped_mm and
scaled_grouped_k_mm (pingpong.fp8_grouped), fp8_grouped_linear and fp8_grouped_linear_train
(pingpong.fp8_grouped_training), quantize_fp8, quantize_fp8_pair, quantize_fp8_columns and
quantize_fp8_blocks_t (pingpong.quantize), quantize_groups_t (pingpong.quantize_groups); each function is the op's own direct path writing into inductor's buffers
(the plan cache's lookup, the validation on a miss, as eagerly).

    graph (traced)                          inductor's Python wrapper (generated)
    pingpong.linear(x, w, bias, act)   ──▶  buf3 = empty_strided_cuda((M, N), (N, 1), bf16)
                                            extern_kernels.pingpong_linear(x, w, bias, act, out=buf3)
                                                 └─ direct.linear(…, out=buf3): the cached
                                                    LayerPlan (one dict lookup), one launch;
                                                    a new signature is validated first, as
                                                    the eager call is (errors name x, weight)
                                            in a static graph: …, site=<62-bit id>, out=buf3)
                                                 └─ that site's LayerPlan, kept from its
                                                    first aligned call (SITES): no layer
                                                    key (mm's and gemm's calls: their
                                                    plans, no spec)

An op with several outputs is one call that writes a buffer per output (`_nodes`):

    pingpong.quantize_fp8(x, "row")    ──▶  buf1 = empty_strided_cuda((M, K), (K, 1), fp8)
                                            buf2 = empty_strided_cuda((M, 1), (1, 1), fp32)
                                            buf0 = extern_kernels.pingpong_quantize_fp8(x, …, out=(buf1, buf2))

What stays single-source: the op's fake implementation (shapes, dtypes, the trace-time
refusals) and its autograd formulas (AOTAutograd traces them into the backward graph, whose
pingpong ops are lowered here too). What the lowering adds is only the call: the output's
layout is the fake implementation's (read from the node; each output's, for several),
inductor allocates it (and reuses buffers), the function writes into it. Under the C++
wrapper (AOTInductor), which cannot call Python, the ops keep inductor's default fallback
(the dispatcher call); so they do in a process started with PINGPONG_INDUCTOR_CALLS=dispatcher
(the lowering uses inductor's internal IR: this is the way back should a torch release
change it).

`register` runs from the ops' fake implementations, so it has run before inductor lowers a
graph holding one of them, and before generated code loaded from inductor's cache calls
one (an op module imported later lowers its op as `lowered` adds it). That cache (the FX
graph cache and AOTAutograd's, on disk) outlives the process and a pingpong upgrade, so
`register` puts `lowering_version` into its key: the call mode (direct, or
PINGPONG_INDUCTOR_CALLS=dispatcher) and a digest of LOWERING_SOURCES, the files that decide
which ops are lowered and the calls emitted (`key_pass`, a CustomGraphPass in
`_fuse_ddp_communication_passes`, no user's pass slot). Code compiled under another
lowering, or before these lowerings, is compiled again, not loaded. Any edit to those files
costs one recompile. A user who assigns that list drops the entry until the next trace of a
pingpong op puts it back (after theirs); a compile that patches the list itself
(torch.compile's options) may be keyed without it.
`CALLS` counts the direct calls (tests read it to see the path was taken); under
torch.profiler each call shows as a `pingpong::<op>` range, as a dispatcher call would, with
its tensor arguments as the range's inputs (shapes, strides and dtypes under
record_shapes=True) and, for mm, gemm and linear, the plan it runs as the keyword input
"plan" (`plan_label`): the kernels launched inside the range are that product's. Made only
while a profiler records: a call not profiled reads one module flag, as before.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import secrets

import torch
from torch.autograd import profiler as torch_profiler

#: the profiler range around a direct call: torch's C++ range (inductor's own, around its
#: Triton kernels), not record_function, whose enter and exit are two dispatcher ops that the
#: profiler records too (µs each under a profiler)
_range = torch._C._profiler._RecordFunctionFast

from . import direct
from ..runtime import plan as plan_mod
from ..runtime.spec import DENSE_TENSORS, NO_ARGS, EpilogueArgs, build_args, sm_carveout

__all__ = ["register", "lowered", "CALLS", "KERNELS", "lowering_version"]

#: direct calls from generated code, per op name (a defaultdict: its increment is the
#: cheaper one, and it runs on every call)
CALLS: "collections.defaultdict[str, int]" = collections.defaultdict(int)

#: op name → the function the generated code calls (`lowered` fills it, each op's module
#: beside the op; the arguments follow from the op's schema: `_lowering`)
KERNELS: dict = {}
_pending: list = []  # names of KERNELS not yet lowered (`register` lowers them)
#: ops whose call in a static graph carries its site (`_lowering`; `linear_out`, `mm_out`,
#: `gemm_out`)
SITED = {"linear", "mm", "gemm"}
#: a call site of a static graph (its `site`) -> (its plan: a LayerPlan for linear, else the
#: product's Plan; the SM carveout it was made under); emptied when SITE_CACHE_SIZE are held
SITES: dict[int, tuple] = {}
SITE_CACHE_SIZE = 4096
_registered = False  # whether `register` ran (an op module imported later lowers its op at once)


def op_range(label: str):
    """`label`'s profiler range (the C++ one above) while torch.profiler records, else nothing
    entered: for pingpong's calls outside the dispatcher (the direct calls, async TP's ops)."""
    return _range(label) if torch_profiler._is_profiler_enabled else contextlib.nullcontext()


def lowered(name: str):
    """Make the decorated function the direct call of pingpong::<name> in inductor's code.

    It is called as fn(*required tensors, *the optional tensors given, <optional>=bool for
    each optional tensor, <the other arguments but out_dtype>, [site=int for an op in SITED,
    in a static graph,] out=buffer), in the schema's
    order (out_dtype is out's dtype), and writes the result into `out`; for an op with several
    outputs `out` is a tuple of their buffers, in the order the op returns them, and fn
    returns None. Each call is counted in CALLS and shows to torch.profiler as a
    `pingpong::<name>` range, as a dispatcher call would."""
    label = f"pingpong::{name}"

    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            CALLS[name] += 1
            if torch_profiler._is_profiler_enabled:  # a module flag: no range entered otherwise
                with _range(label, [t for t in args if isinstance(t, torch.Tensor)], _planned(name, args, kwargs)):
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)
        KERNELS[name] = call
        _pending.append(name)
        if _registered:  # an op module imported after the first lowering
            register()
        return call
    return wrap


def _planned(name: str, args: tuple, kwargs: dict) -> dict:
    """The profiler range's keyword inputs: {"plan": `plan_label`} of the plan a direct call of
    mm, gemm or linear runs (the cached one: a profiled step follows its warm-up), "-" before
    it is planned; nothing for the other ops."""
    plan = None
    try:
        if name == "mm":
            plan = plan_mod.get(build_args(args[0], args[1], NO_ARGS, kwargs["out"].dtype))
        elif name == "gemm":
            epilogue = _epilogue(args[2:], dict(kwargs))
            plan = plan_mod.get(build_args(args[0], args[1], epilogue, kwargs["out"].dtype))
        elif name == "linear":
            plan = direct.layer_plan(args[0], args[1], args[2] if kwargs["bias"] else None, kwargs["activation"]).fwd
        else:
            return {}
    except Exception:  # the call itself reports what is wrong with its arguments
        pass
    return {"plan": plan_label(plan)}


def plan_label(plan) -> str:
    """A plan in one token: its path, then its config's name where it has a KernelConfig
    ("hopper cooperative:128x256x64/g8"); "-" for none."""
    if plan is None:
        return "-"
    info = plan_mod.explain(plan)
    config = info["config"]
    if config is None:
        return info["path"]
    return f"{info['path']} {config.name() if callable(getattr(config, 'name', None)) else config}"


def _aligned(tensors) -> bool:
    """Every tensor given (None: absent) starts on a 16-byte boundary."""
    addresses = 0
    for t in tensors:
        if t is not None:
            addresses |= t.data_ptr()
    return not addresses & 15


def _site_plan(site: int, *tensors):
    """The plan kept for a static graph's call `site` (SITES; callers ask only with a site),
    where it may be taken: made under the SM carveout in force, and every tensor given 16-byte
    aligned (inductor fixed the layouts and their offsets; a graph input's address it did not
    fix)."""
    kept = SITES.get(site)
    if kept is None or kept[1] != sm_carveout():
        return None
    return kept[0] if _aligned(tensors) else None


def _keep(site: int, plan) -> None:
    """Keep `plan` (None: none) for `site` (SITES: made under the carveout in force). Callers
    keep only an aligned call's plan (`_aligned`): one made for an unaligned input (another
    path) does not replace the site's plan for aligned ones, nor is it looked up to be dropped."""
    if plan is not None:
        if len(SITES) >= SITE_CACHE_SIZE:
            SITES.clear()
        SITES[site] = (plan, sm_carveout())


@lowered("mm")
def mm_out(a, b, *, out, site: int = 0):
    """pingpong::mm into inductor's buffer (a static graph's call: its site's plan, `_site_plan`)."""
    plan = _site_plan(site, a, b, out) if site else None
    if plan is not None:
        plan.run(a, b, out, NO_ARGS)
        return
    direct.gemm(a, b, NO_ARGS, out.dtype, out=out)
    if site and _aligned((a, b, out)):  # the plan that call made or found, for the site's next calls
        _keep(site, plan_mod.get(build_args(a, b, NO_ARGS, out.dtype)))  # (None: a batched product)


def _epilogue(optional, epilogue: dict) -> EpilogueArgs:
    """gemm's epilogue from the generated call: `optional` holds the epilogue's tensors that
    were given, in the schema's order, each named by a flag of `epilogue` (the generated call
    passes tensors positionally); the other arguments of `epilogue` are the schema's scalars
    (out and site, where given, are not the epilogue's)."""
    given = iter(optional)
    epilogue.pop("out", None)
    epilogue.pop("site", None)
    for f in DENSE_TENSORS:  # a flag absent: code generated before that operand existed
        epilogue[f] = next(given) if epilogue.get(f) else None
    return EpilogueArgs(**epilogue)  # the schema's epilogue arguments are EpilogueArgs's fields


@lowered("gemm")
def gemm_out(a, b, *optional, out, site: int = 0, **epilogue):
    """pingpong::gemm into inductor's buffer (`_epilogue`: the epilogue's operands; a static
    graph's call: its site's plan, `_site_plan`)."""
    args = _epilogue(optional, epilogue)
    plan = _site_plan(site, a, b, out, *optional) if site else None
    if plan is not None:
        plan.run(a, b, out, args)
        return
    direct.gemm(a, b, args, out.dtype, out=out)
    if site and _aligned((a, b, out, *optional)):
        _keep(site, plan_mod.get(build_args(a, b, args, out.dtype)))


@lowered("linear")
def linear_out(x, w, *optional, bias: bool, activation, out, site: int = 0):
    """pingpong::linear into inductor's buffer. A call of a static graph names its `site`
    (`_lowering`): inductor fixed the layout of every tensor there, so the site's LayerPlan
    is taken without the layer key where `_site_plan` allows; otherwise `direct.layer_plan`,
    kept for the site's next calls."""
    b = optional[0] if bias else None
    lp = _site_plan(site, x, w, b) if site else None
    if lp is None:
        lp = direct.layer_plan(x, w, b, activation)
        if site and _aligned((x, w, b)):
            _keep(site, lp)
    lp.forward(x, w, b, out)


def register() -> None:
    """Lower every op of KERNELS not lowered yet to its direct call, and keep the lowering's
    version in inductor's cache key (`key_pass`; the ops' fake implementations call this, so
    before each trace that holds one of them: cheap once done)."""
    global _registered
    if _registered and not _pending and _keyed():
        return
    _registered = True
    from torch._inductor import lowering
    from torch._inductor.select_algorithm import extern_kernels

    _keyed(add=True)
    while _pending:
        name = _pending.pop()
        setattr(extern_kernels, f"pingpong_{name}", KERNELS[name])  # for code from inductor's cache, either way
        MODES[name] = _calls()  # fixed for this process: what the key says (lowering_version)
        if MODES[name] == "dispatcher":  # inductor's default fallback
            continue
        op = getattr(torch.ops.pingpong, name).default
        lowering.register_lowering(op, type_promotion_kind=None)(_lowering(op, f"pingpong_{name}", name in SITED))


#: how inductor's code calls each registered op, as `_calls` said when it registered
MODES: dict[str, str] = {}


def _calls() -> str:
    """How inductor's code calls the ops: "direct" (the lowerings) or "dispatcher"."""
    return os.environ.get("PINGPONG_INDUCTOR_CALLS", "direct")


#: the files whose code decides what inductor emits for pingpong's ops: this module (the
#: lowering), the ops' schemas (the call's arguments: integration/ops.py, runtime/spec.py's
#: epilogue, each op's module) and the `lowered` functions (which ops are lowered, under what
#: name and arguments). Relative to the package; tests/test_inductor.py checks that each
#: `lowered` function's file is here.
LOWERING_SOURCES = ("integration/inductor.py", "integration/ops.py", "integration/batching.py", "runtime/spec.py",
                    "runtime/fp8_spec.py", "fp8.py", "fp8_grouped.py", "fp8_training.py", "fp8_grouped_training.py",
                    "grouped.py", "quantize.py", "quantize_groups.py")  # batching, fp8_spec: the fakes' output layouts


@functools.cache
def _sources_digest() -> str:
    """sha256 of LOWERING_SOURCES' contents (pingpong's version where a file is not readable)."""
    import hashlib
    from pathlib import Path

    from ..toolchain import __version__

    root, digest = Path(__file__).resolve().parents[1], hashlib.sha256()
    for rel in LOWERING_SOURCES:
        try:
            digest.update((root / rel).read_bytes())
        except OSError:
            digest.update(f"{rel} unreadable, pingpong {__version__}".encode())
    return digest.hexdigest()


def lowering_version() -> str:
    """The lowering's version in inductor's cache key: how the registered ops are called
    (MODES, fixed when each registered; before any, what `_calls` says they will be) and the
    digest of the code that emits those calls (`_sources_digest`)."""
    modes = "+".join(sorted(set(MODES.values()))) or _calls()
    return f"pingpong lowering {modes} {_sources_digest()}"


@functools.cache
def key_pass():
    """The entry that puts `lowering_version` into inductor's cache keys (the FX graph cache's
    and AOTAutograd's, which hashes the same details): a CustomGraphPass, torch's interface for
    code that changes what inductor compiles without a config value of its own, whose uuid()
    the key includes. It sits in `_fuse_ddp_communication_passes`: a list whose entries all
    enter the key (FxGraphHashDetails, `_get_custom_pass_detail_unsafe`), so no user's pass slot
    is taken or wrapped; those passes run only when DDP's compiled all-reduce fusion is on, and
    this one changes nothing then. Made on first use (torch._inductor is imported only when
    compiling); copied or pickled, it is this same object."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class LoweringKey(CustomGraphPass):
        def __call__(self, graph) -> None:
            pass

        def uuid(self) -> str:
            return lowering_version()

        def __reduce__(self):
            return key_pass, ()

        def __repr__(self) -> str:
            return "pingpong.integration.inductor.key_pass()"

    return LoweringKey()


def _keyed(add: bool = False) -> bool:
    """Whether `key_pass` is in inductor's config (a user's assignment to the list drops it: the
    next trace of a pingpong op puts it back, after the user's entries); add=True puts it there."""
    from torch._inductor import config

    passes = config._fuse_ddp_communication_passes
    if any(p is key_pass() for p in passes):
        return True
    if add:  # a new list: the user's own list object is left as it is
        config._fuse_ddp_communication_passes = [*passes, key_pass()]
    return add


def _lowering(op, kernel: str, sited: bool = False):
    """Inductor's lowering of `op`: an ExternKernelOut that calls extern_kernels.<kernel>
    with the arguments `lowered` names, read from the op's schema (several outputs: a call
    that writes the buffers of its outputs, `_written`); `sited`: where the node's tensors
    are all of static layout, also `site=`, a random 62-bit number naming this call (`SITES`;
    random, so that code from inductor's cache, made by another process, names other sites
    than code compiled here)."""
    from torch._inductor import ir
    from torch._inductor.lowering import fallback_handler
    from torch._inductor.virtualized import V

    fallback = fallback_handler(op, add_to_fallback_set=False)
    schema = [arg.name for arg in op._schema.arguments]
    defaults = {arg.name: arg.default_value for arg in op._schema.arguments if arg.has_default_value()}
    kinds = {arg.name: str(arg.type) for arg in op._schema.arguments}
    tensors = [n for n in schema if kinds[n] == "Tensor"]
    optional = [n for n in schema if kinds[n] == "Optional[Tensor]"]
    others = [n for n in schema if "Tensor" not in kinds[n] and n != "out_dtype"]

    def lower(*args, **kwargs):
        if V.graph.cpp_wrapper:
            return fallback(*args, **kwargs)
        bound = {**defaults, **dict(zip(schema, args)), **kwargs}
        val = V.graph.current_node.meta["val"]
        given = [n for n in optional if bound.get(n) is not None]
        inputs = [ir.ExternKernel.realize_input(bound[n]) for n in (*tensors, *given)]
        flags = {n: bound.get(n) is not None for n in optional}
        consts = {n: bound[n] for n in others}
        if isinstance(val, (tuple, list)):
            return _written(val, inputs, {**flags, **consts}, f"extern_kernels.{kernel}")
        site = {"site": secrets.randbits(62) or 1} if sited and _static(V.graph.current_node) else {}
        node = ir.ExternKernelOut(layout=_layout(val), inputs=inputs, kwargs={**flags, **consts, **site},
                                  python_kernel_name=f"extern_kernels.{kernel}")
        return ir.TensorBox.create(node)

    return lower


def _static(node) -> bool:
    """Whether an FX node's inputs and output are tensors of static sizes, strides and offsets
    (no symbol: inductor fixes their layouts in the generated code)."""
    vals = [a.meta.get("val") for a in node.all_input_nodes] + [node.meta.get("val")]
    return all(isinstance(v, torch.Tensor) and all(type(d) is int for d in (*v.shape, *v.stride(), v.storage_offset()))
               for v in vals)


def _layout(val):
    """The inductor layout of a fake output (the op's fake implementation's shape, strides, dtype)."""
    from torch._inductor import ir

    return ir.FixedLayout(val.device, val.dtype, ir.convert_shape_to_inductor(val.shape),
                          ir.convert_shape_to_inductor(val.stride()))


def _written(vals, inputs, kwargs, kernel: str) -> tuple:
    """An op with several outputs: one call node (`_nodes`' Call) that writes one buffer per
    output (`_nodes`' Written, laid out as its fake output `vals`); their tensors, in order."""
    from torch._inductor import ir

    written, call = _nodes()
    node = call(ir.MultiOutputLayout(device=vals[0].device), inputs, kwargs=kwargs, python_kernel_name=kernel)
    node.written = [written(_layout(v), node) for v in vals]
    return tuple(ir.TensorBox.create(w) for w in node.written)


@functools.cache
def _nodes():
    """(Written, Call): the IR of an op with several outputs, as inductor's own out-variant
    calls (defined on first use: torch._inductor is imported only when compiling).

    Call is the op's call, `buf0 = extern_kernels.pingpong_<op>(…, out=(buf1, buf2))`. Each
    Written is one output, a buffer of inductor's (planned and reused as any other), read
    by the graph after the call (it depends on the call); the call's codegen allocates them
    just before its line, and theirs emits nothing. An output nobody reads (inductor removed
    its buffer) is passed as a new tensor of its layout."""
    from torch._inductor import ir
    from torch._inductor.virtualized import V

    class Written(ir.ExternKernel):
        def __init__(self, layout, call):
            super().__init__(None, layout, [call], ())
            self.name = V.graph.register_buffer(self)
            V.graph.register_operation(self)

        def should_allocate(self) -> bool:
            return True

        def codegen(self, wrapper) -> None:
            pass

    class Call(ir.ExternKernelAlloc):
        written = ()  # its Written nodes (`_written` sets them)

        def codegen(self, wrapper) -> None:
            outs = []
            for buf in self.written:
                wrapper.codegen_allocation(buf)
                outs.append(_scratch(wrapper, buf) if buf.get_name() in V.graph.removed_buffers else buf.get_name())
            args = [*self.codegen_args(), *self.codegen_kwargs(), f"out=({', '.join(outs)},)"]
            wrapper.writeline(f"{self.get_name()} = {self.get_kernel_name()}({', '.join(args)})")

    return Written, Call


def _scratch(wrapper, buf) -> str:
    """Generated code for a new tensor of buf's layout (an output that nothing reads)."""
    return (f"torch.empty_strided({wrapper.codegen_shape_tuple(buf.get_size())}, "
            f"{wrapper.codegen_shape_tuple(buf.get_stride())}, dtype={buf.get_dtype()}, "
            f"device='{buf.get_device()}')")
