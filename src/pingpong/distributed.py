"""pingpong's ops on DTensors: the sharding rules of the torch.library ops, and the checks that
run before any work (docs/distributed.md is the user's page).

    | op               | layout (one letter per dim; "1": broadcast)      | linear in the product  |
    |------------------|--------------------------------------------------|------------------------|
    | pingpong::mm     | a …mk, b …kn -> …mn                              | always                 |
    | pingpong::gemm   | a …mk, b …kn, c …mn / mn, bias n / 1n / m1 -> …mn | activation is None     |
    | pingpong::gemm_  | the same, written into c (c takes the output's placement) | activation is None |
    | pingpong::linear | x …k, w nk, bias n -> …n                          | activation is None     |
    | pingpong::scaled_mm | a mk, b kn, scales 1 / m1, 1n / mk, kn (K whole with block scales) -> mn | activation is None |
    | pingpong::grouped_mm | a mk, b gkn, offs g (m, g whole) -> mn; and the ragged-N, ragged-K, batched forms | always |

`rules` turns a `Layout` into the strategies of one mesh dim, the way DTensor's aten.mm rule
does (`gen_einsum_strategies`): DTensor expands them over the mesh, prices each against the
operands' placements and redistributes the operands to the cheapest; the local GEMM then runs
on pingpong's kernel (the op's own implementation on the local tensors).

    | strategy (one mesh dim)            | output       | factors (a, b / x, w)       | addends (c, bias) |
    |------------------------------------|--------------|-----------------------------|-------------------|
    | replicate                          | Replicate()  | Replicate()                 | Replicate()       |
    | split a letter of the output       | Shard(its dim)| Shard where the letter is, | the same rule     |
    |   (batch, then m / the rows, n)    |              | else Replicate()            |                   |
    | split a contracted letter (k)      | Partial()    | Shard where the letter is   | Partial()         |
    |   (only when linear)               |              |                             |                   |
    | one factor partial (only linear)   | Partial(op)  | that one Partial(op), the   | Partial(op)       |
    |                                    |              | others Replicate()          |                   |

A new op registers with one line, `register(op, layout)`, where `layout(**arguments)` returns
the op's `Layout` (`product` and `follow` build the usual dims). A role WHOLE marks an operand
that is never split (indices such as grouped GEMM offsets); `Layout.whole` names letters that
are never split (grouped GEMM's concatenated rows).

How the rules become active: importing this module registers them (it imports
torch.distributed.tensor, ~0.4 s, so `import pingpong` does not). The public functions
(`pingpong.matmul`, `gemm`, `gemm_`, `linear`, `pingpong.nn.Linear`) import it on their first
call with a DTensor argument, and `import pingpong` imports it when torch.distributed.tensor is
already loaded. Call `import pingpong.distributed` yourself before calling
``torch.ops.pingpong.*`` directly on DTensors, or before torch.compile traces a DTensor model
whose first pingpong call is inside the compiled region.

FSDP2 needs no rule: `fully_shard` all-gathers each parameter into a plain tensor before the
forward, so pingpong's Linears see plain tensors (a DTensor only when combined with tensor
parallelism, then on the TP mesh, which the rules above take).

The FP8 training linear (pingpong.fp8_training.fp8_linear, pingpong.nn.Float8TrainingLinear)
has no rule of its op: `fp8_linear` below takes its DTensor calls whole, the layout of each mesh
dim from the weight's placement (`fp8_layouts`), each rank's FP8 linear (forward and both
gradients) on its local tensors, every scale from the values that rank holds.
"""

from __future__ import annotations

import dataclasses
import itertools
import string
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding

from . import fp8, fp8_training, grouped  # noqa: F401  (fp8, grouped, ops define the ops the rules are for)
from .integration import batching, ops  # noqa: F401
from .integration.async_tp import disable_async_tp, enable_async_tp  # noqa: F401  (async TP's switch: pingpong.integration.async_tp)
from .runtime.spec import (DENSE_OP_ARGS, DENSE_ROLES, DENSE_TENSORS, EpilogueArgs, check_activation, op_args,
                           scaling_by_shape, validate_linear)
from .errors import PingpongError

__all__ = ["FACTOR", "ADDEND", "WHOLE", "OperandDims", "Layout", "register", "rules", "check", "checked", "stale", "respec",
           "product", "follow", "LAYOUTS", "enable_async_tp", "disable_async_tp"]

FACTOR, ADDEND, WHOLE = "factor", "addend", "whole"
LINEAR_REDUCE_OPS = tuple(getattr(Partial, "LINEAR_REDUCE_OPS", ("sum",)))  # Partial kinds a product is linear in
_BATCH_LETTERS = string.ascii_uppercase  # batch dims; m, n, k name the matrix dims


@dataclass(frozen=True)
class OperandDims:
    """One tensor argument: `dims` has one symbol per dim (a letter names an index of the
    product, "1" a dim of size 1 that broadcasts); `role` is FACTOR (multiplied into the product:
    a, b, x, w, scales), ADDEND (added to it: c, bias; it follows the output's placement) or
    WHOLE (never split: always Replicate())."""

    dims: str
    role: str = FACTOR


@dataclass(frozen=True)
class Layout:
    """How one call's tensors index the product. `out`: the output's dims (an in-place op's
    written argument is an ADDEND with the output's dims); `operands`: tensor argument name ->
    OperandDims (absent optional tensors left out); `linear`: the result is linear in the product
    (no activation), so contracted letters may be split (a Partial() result) and an operand may
    be Partial; `whole`: letters never split."""

    out: str
    operands: dict[str, OperandDims]
    linear: bool = True
    whole: str = ""
    activation: str = field(default="none", compare=False)  # for messages


# ----------------------------------------------------------------------------- building layouts


def _dims(shape, letters: str) -> str:
    """`letters` right-aligned on `shape`; a dim of size 1 broadcasts ("1")."""
    return "".join("1" if n == 1 else l for n, l in zip(shape, letters))


def product(a_shape, b_shape) -> tuple[str, str, str]:
    """(a's dims, b's dims, the output's dims) of a (…, M, K) @ (…, K, N) with torch.matmul's
    batch broadcasting: a batch dim is a letter where it has the output's size (not 1), else
    "1"."""
    a_batch, b_batch = tuple(a_shape[:-2]), tuple(b_shape[:-2])
    batch = tuple(torch.broadcast_shapes(torch.Size(a_batch), torch.Size(b_batch)))
    letters = _BATCH_LETTERS[:len(batch)]

    def own(dims):
        return "".join("1" if n != s or n == 1 else l
                       for n, s, l in zip(dims, batch[len(batch) - len(dims):], letters[len(letters) - len(dims):]))

    return own(a_batch) + "mk", own(b_batch) + "kn", letters + "mn"


def follow(out: str, shape) -> str:
    """The dims of a tensor broadcast against the output (c, a bias): right-aligned on the
    output's letters, a size-1 dim is "1"."""
    return _dims(shape, out[len(out) - len(shape):] if len(shape) else "")


def _epilogue(fields, values, kwargs) -> EpilogueArgs:
    """The EpilogueArgs of an op's arguments after its tensors, given positionally or by name."""
    given = {**dict(zip(fields, values)), **kwargs}
    return op_args([given.get(f, EpilogueArgs._field_defaults.get(f)) for f in fields], fields)[0]


def _gemm_layout(a, b, *values, **kwargs) -> Layout:
    args = _epilogue(DENSE_OP_ARGS, values, kwargs)
    a_dims, b_dims, out = product(tuple(a.shape), tuple(b.shape))
    operands = {"a": OperandDims(a_dims), "b": OperandDims(b_dims)}
    for f in DENSE_TENSORS:
        t = getattr(args, f)
        if t is not None:
            operands[f] = OperandDims(follow(out, t.shape), DENSE_ROLES[f])
    act = check_activation(args.activation)
    return Layout(out, operands, linear=act == "none", activation=act)


def _mm_layout(a, b, out_dtype=None) -> Layout:
    return _gemm_layout(a, b)


def _linear_layout(x, w, bias=None, activation=None) -> Layout:
    lead = _BATCH_LETTERS[:x.dim() - 1]
    operands = {"x": OperandDims(_dims(x.shape[:-1], lead) + "k"), "w": OperandDims("nk")}
    if bias is not None:
        operands["bias"] = OperandDims("n", ADDEND)
    act = check_activation(activation)
    return Layout(lead + "n", operands, linear=act == "none", activation=act)


# ----------------------------------------------------------------------------- the rules


def rules(layout: Layout) -> list[tuple[object, dict[str, object]]]:
    """The strategies of one mesh dim, as (output placement, {argument: placement}), in the
    order DTensor's einsum rule lists them (replicate, batch, contracted, free, linearity):
    its cost model then breaks ties the same way."""
    ops_ = layout.operands
    factors = [n for n, o in ops_.items() if o.role == FACTOR]

    def split(letter, out_placement, addend):
        ins = {}
        for name, o in ops_.items():
            if o.role == WHOLE:
                ins[name] = Replicate()
            elif o.role == ADDEND and addend is not None:
                ins[name] = addend
            else:
                ins[name] = Shard(o.dims.index(letter)) if letter in o.dims else Replicate()
        return out_placement, ins

    free = [l for l in layout.out if l.isalpha() and l not in layout.whole]
    batch = [l for l in free if sum(l in ops_[f].dims for f in factors) > 1]
    contracted = [] if not layout.linear else sorted(
        {l for f in factors for l in ops_[f].dims if l.isalpha()} - set(layout.out) - set(layout.whole))
    out = [(Replicate(), {name: Replicate() for name in ops_})]
    out += [split(l, Shard(layout.out.index(l)), None) for l in batch]
    out += [split(l, Partial(), Partial()) for l in contracted]
    out += [split(l, Shard(layout.out.index(l)), None) for l in free if l not in batch]
    if layout.linear:
        for reduce_op, f in itertools.product(LINEAR_REDUCE_OPS, factors):
            out.append((Partial(reduce_op), {name: Partial(reduce_op) if name == f or o.role == ADDEND else Replicate()
                                             for name, o in ops_.items()}))
    return out


@dataclass(frozen=True)
class _Registered:
    op: object
    layout: Callable[..., Layout]
    check: Callable[..., None]
    names: tuple[str, ...]  # the schema's argument names, in order
    inplace: bool  # the op returns nothing and writes its first argument


LAYOUTS: dict[object, _Registered] = {}


def register(op, layout: Callable[..., Layout], check: Callable[..., None] | None = None) -> None:
    """Give DTensor the sharding rule of a torch.library op (an OpOverload).

    `layout(**arguments)` returns the call's `Layout`; tensor arguments arrive as objects with
    `.shape` and `.dim()` (DTensor's specs, or the DTensors themselves in `check`). `check`
    (optional) validates the arguments' metadata on the global shapes, raising PingpongError
    (the op's fake implementation's checks), before the placements are looked at.
    """
    schema = op._schema
    names = tuple(a.name for a in schema.arguments)
    inplace = len(schema.returns) == 0

    def rule(*args, **kwargs):
        bound = dict(zip(names, args), **kwargs)
        lay = layout(**{k: _Shaped(v) if _is_spec(v) else v for k, v in bound.items()})
        result = []
        for out_placement, ins in rules(lay):
            placements = [ins.get(n) if _is_spec(v) else None for n, v in zip(names, args)]
            placements += [ins.get(k) if _is_spec(v) else None for k, v in kwargs.items()]
            result.append(([] if inplace else [out_placement], placements))
        return result

    register_sharding(op)(rule)  # DTensor caches the result per call, keyed by every argument (torch 2.11, 2.13)
    if not any(isinstance(a.type, torch.ListType) for a in schema.arguments):
        _flat(op)
    LAYOUTS[op] = _Registered(op, layout, check or (lambda *a, **k: None), names, inplace)


def _flat(op) -> None:
    """Tell DTensor that `op` (no list among its arguments) takes its tensors flat:
    register_sharding marks every op it registers as nesting them (`needs_pytree`), which sends
    each call through pytree's flatten and DTensor's slower path for local results. Left as
    register_sharding made it where this torch keeps no such mark."""
    infos = getattr(DTensor._op_dispatcher.sharding_propagator, "op_to_schema_info", None)
    info = infos.get(op) if isinstance(infos, dict) else None
    if getattr(info, "needs_pytree", False) and dataclasses.is_dataclass(info):
        infos[op] = dataclasses.replace(info, needs_pytree=False)


def _is_spec(v) -> bool:
    return v is not None and hasattr(v, "placements") and hasattr(v, "mesh")


class _Shaped:
    """A DTensorSpec seen as a tensor's metadata (what layouts read)."""

    __slots__ = ("shape",)

    def __init__(self, spec):
        self.shape = tuple(spec.shape)

    def dim(self) -> int:
        return len(self.shape)


# ----------------------------------------------------------------------------- checks before any work


def _implicit_replication() -> bool:
    flag = getattr(torch._C, "_get_dtensor_allow_implicit_replication", None)
    if flag is not None:
        return bool(flag())
    return bool(getattr(DTensor._op_dispatcher, "_allow_implicit_replication", False))


def _show(p) -> str:
    return repr(p)


def _mesh(mesh) -> str:
    """A mesh by its ranks (two meshes of one shape print alike otherwise)."""
    names = f", dims {mesh.mesh_dim_names}" if mesh.mesh_dim_names else ""
    return f"the {mesh.device_type} mesh of ranks {mesh.mesh.tolist()}{names}"


_PASSED: dict = {}  # a call's key (_passed) -> the positions of its stale DTensors, once it passed the checks
_PASSED_MAX = 4096


def check(op, *args, **kwargs) -> None:
    """PingpongError before any work (no redistribution, no kernel) for a call of a registered
    op whose tensors include a DTensor: a DTensor whose spec misstates its local dtype (`stale`),
    a plain tensor mixed in (where DTensor refuses it too), two meshes, the op's own argument
    errors (global shapes), and placements the rule does not take: an operand split along the
    contracted dim or Partial under an activation, and an in-place output whose placement the
    product cannot take.

    A call that passed is remembered by its key (`_passed`: the op, each DTensor's spec, local
    dtype and device, each plain tensor's metadata and each other argument's type and value:
    all that the checks read), so a call alike costs one lookup, as DTensor caches its
    sharding per call; any other call is checked in full, so a refused call is refused every
    time."""
    key, positions = _passed(op, args, kwargs)
    if positions == ():
        return
    _check(op, args, kwargs)
    _remember(key, ())


def checked(op, args: tuple) -> tuple:
    """`args` of a call of `op` by pingpong.integration.ops' routes (matmul, gemm, linear): each stale
    DTensor rebuilt (`respec`), then `check`ed; a call alike costs one lookup. While
    torch.compile traces, only rebuilt (the checks are not traced)."""
    if torch.compiler.is_compiling():
        return respec(args)
    key, positions = _passed(op, args)
    if positions is None:
        fixed = respec(args)
        positions = tuple(i for i, (t, f) in enumerate(zip(args, fixed)) if t is not f)
        _check(op, fixed, {})
        _remember(key, positions)
        return fixed
    return respec(args) if positions else args


def _remember(key, positions: tuple) -> None:
    if key is not None:
        if len(_PASSED) >= _PASSED_MAX:
            _PASSED.clear()
        _PASSED[key] = positions


def _passed(op, args, kwargs=None) -> tuple:
    """(the call's key, what `_PASSED` holds for it or None): the key None when an argument
    does not hash (that call is checked every time). The key: the op and each argument's
    `_token`, keyword arguments by name; hashed once, by the lookup."""
    key = (op, *map(_token, args))
    if kwargs:
        key += tuple(x for k, v in kwargs.items() for x in (k, _token(v)))
    try:
        return key, _PASSED.get(key)
    except TypeError:
        return None, None


def _token(v):
    """What `check` reads of one argument, hashable."""
    if isinstance(v, DTensor):
        return type(v), v._spec, v._local_tensor.dtype, v.device
    if isinstance(v, torch.Tensor):
        return type(v), v.shape, v.stride(), v.dtype, v.device, _implicit_replication()
    return type(v), v


def _check(op, args, kwargs) -> None:
    reg = LAYOUTS[op]
    bound = dict(zip(reg.names, args), **kwargs)
    tensors = {n: v for n, v in bound.items() if isinstance(v, torch.Tensor)}
    dtensors = {n: v for n, v in tensors.items() if isinstance(v, DTensor)}
    if not dtensors:
        return
    name = op.name().replace("::", ".")
    _check_dtensors(op, name, tensors)
    reg.check(*args, **kwargs)
    lay = reg.layout(**bound)
    for n, t in dtensors.items():
        operand = lay.operands.get(n)
        if operand is None:
            continue
        for mesh_dim, p in enumerate(t.placements):
            if reg.inplace and n == reg.names[0]:
                _check_written(name, n, lay, mesh_dim, p)
            elif operand.role == FACTOR and not lay.linear:
                _check_complete(name, n, operand, lay, mesh_dim, p)


def _check_dtensors(op, name: str, tensors: dict) -> None:
    """The checks of any call with DTensors: none stale, no plain tensor mixed in, one mesh."""
    dtensors = {n: v for n, v in tensors.items() if isinstance(v, DTensor)}
    first, ref = next(iter(dtensors.items()))
    for n, t in dtensors.items():
        if stale(t):
            raise PingpongError(_stale_message(n, t, op, name))
    for n, t in tensors.items():
        if not isinstance(t, DTensor) and t.numel() != 1 and not _implicit_replication():
            raise PingpongError(
                f"{n}: a plain torch.Tensor mixed with DTensor {first} in {name}; DTensor refuses mixed operands too."
                f" Make {n} a DTensor on {first}'s mesh, e.g. DTensor.from_local({n}, {first}.device_mesh, [Replicate()])"
                f" (or distribute_tensor), or call under torch.distributed.tensor.experimental.implicit_replication()"
                " if it is the same on every rank")
    for n, t in dtensors.items():
        if t.device_mesh != ref.device_mesh:
            raise PingpongError(
                f"{n}: on {_mesh(t.device_mesh)}, but {first} is on {_mesh(ref.device_mesh)}; {name} needs every DTensor on"
                f" one DeviceMesh. Redistribute onto one mesh first (e.g. DTensor.from_local({n}.full_tensor(),"
                f" {first}.device_mesh, [Replicate()]))")


# ----------------------------------------------------------------------------- a spec that misstates the dtype


def stale(t) -> bool:
    """Whether DTensor t's spec (its tensor_meta) gives another dtype than its local tensor has.
    torch 2.11's FSDP2 makes such DTensors: the unsharded parameter of a tensor-parallel module
    under MixedPrecisionPolicy(param_dtype=...) is the param_dtype all-gather output wrapped in
    the fp32 parameter's spec (pytorch/pytorch#183805 fixed it: torch 2.13 has the fix). DTensor
    propagates the spec's dtype, so pingpong's checks and its ops' fake implementation (the
    output's metadata) see float32 while every rank holds the bf16 tensor the kernel reads."""
    meta = t._spec.tensor_meta
    return meta is not None and meta.dtype != t._local_tensor.dtype


class _Respec(torch.autograd.Function):
    """t with its spec's dtype that of its local tensor (the same local tensor, mesh,
    placements, global shape and stride); the gradient passes through unchanged, so autograd
    casts it to t's dtype as it does for torch's own ops on t."""

    @staticmethod
    def forward(ctx, t):
        return DTensor.from_local(t.to_local(), t.device_mesh, t.placements, run_check=False, shape=t.shape,
                                  stride=t.stride())

    @staticmethod
    def backward(ctx, grad):
        return grad


def respec(args: tuple) -> tuple:
    """`args` with each `stale` DTensor Parameter rebuilt from its local tensor (`_Respec`):
    the truth (what every rank holds and the kernel reads) becomes what DTensor propagates.
    Narrow on purpose: a Parameter (where FSDP2 makes them: its unsharded parameters), an
    out-of-place operand of pingpong.integration.ops' routes of matmul, gemm and linear (so
    pingpong.nn.Linear under FSDP2 × TP trains on torch 2.11 as torch's nn.Linear does, whose
    ops leave the float32 spec unread); any other stale DTensor gets `check`'s PingpongError.
    Traced by torch.compile too: a compiled block's parameters enter its graph as they are, and
    torch.compile reads a graph input's spec (not an intermediate's: hence Parameters only)."""
    return tuple(_Respec.apply(t) if isinstance(t, DTensor) and isinstance(t, torch.nn.Parameter) and stale(t) else t
                 for t in args)


def _stale_message(n, t, op, name) -> str:
    if op in (torch.ops.pingpong.mm.default, torch.ops.pingpong.gemm.default, torch.ops.pingpong.linear.default, FP8_OP):
        which = f"{name} rebuilds such a DTensor from its local tensor only where it is a Parameter, and {n} is not one"
    else:
        which = (f"{name} does not rebuild it (pingpong.matmul, gemm, linear and pingpong.nn.Linear rebuild such a"
                 " Parameter from its local tensor)")
    return (f"{n}: a DTensor whose local tensor is {t._local_tensor.dtype} while its spec says"
            f" {t._spec.tensor_meta.dtype}: torch 2.11's FSDP2 builds a tensor-parallel parameter's unsharded DTensor"
            " this way under MixedPrecisionPolicy(param_dtype=...) (FSDP2 × TP; fixed in torch 2.13,"
            f" pytorch/pytorch#183805); {which}. Fixes: torch 2.13 or later; or parameters already in the compute"
            f" dtype (model.to(torch.bfloat16), no param_dtype); or DTensor.from_local({n}.to_local(), {n}.device_mesh,"
            f" {n}.placements, shape={n}.shape, stride={n}.stride())")


def _check_complete(name, n, operand, lay, mesh_dim, p) -> None:
    """Under an activation the product must be complete on every rank: no Partial operand, no
    split of a contracted letter."""
    split_k = isinstance(p, Shard) and operand.dims[p.dim] not in lay.out and operand.dims[p.dim].isalpha()
    if split_k or p.is_partial():
        what = "splits the contracted dim (K)" if split_k else "holds partial sums"
        raise PingpongError(
            f"{n}: placement {_show(p)} on mesh dim {mesh_dim} {what}, so {name}'s result would be a partial sum, but"
            f" activation {lay.activation!r} must see the complete sum. Supported: activation=None (apply"
            f" {lay.activation} after the reduction, e.g. after RowwiseParallel's all-reduce), or split the output"
            f" instead (ColwiseParallel: weight Shard(0), input Replicate()), or redistribute {n} to Replicate()")


def _check_written(name, n, lay, mesh_dim, p) -> None:
    """An in-place output keeps its placement: it must be one the product can take."""
    dims = lay.out
    ok = (p.is_replicate()
          or (type(p) is Shard and dims[p.dim].isalpha() and dims[p.dim] not in lay.whole)
          or (lay.linear and type(p) is Partial and p.reduce_op in LINEAR_REDUCE_OPS))
    if not ok:
        take = ", ".join(["Replicate()", *(f"Shard({i})" for i, l in enumerate(dims) if l.isalpha())]
                         + ([f"Partial({o!r})" for o in LINEAR_REDUCE_OPS] if lay.linear else []))
        why = f" under activation {lay.activation!r}" if p.is_partial() and not lay.linear else ""
        raise PingpongError(
            f"{n}: {name} writes {n} in place, so it keeps its placement {_show(p)} (mesh dim {mesh_dim}), which the"
            f" product cannot take{why}. Supported placements of {n}: {take}. Or use pingpong.gemm (out of place) and"
            " redistribute its result")


# ----------------------------------------------------------------------------- pingpong's ops


def _check_mm(a, b, out_dtype=None):
    batching.check(a, b, EpilogueArgs(), out_dtype)


def _check_gemm(a, b, *values, **kwargs):
    out_dtype = {**dict(zip(DENSE_OP_ARGS, values)), **kwargs}.get("out_dtype")
    batching.check(a, b, _epilogue(DENSE_OP_ARGS, values, kwargs), out_dtype)


def _check_gemm_(c, a, b, *values, **kwargs):
    batching.check(a, b, _epilogue(ops.INPLACE_OP_ARGS, values, kwargs)._replace(c=c), getattr(c, "dtype", None))


def _check_linear(x, w, bias=None, activation=None):
    validate_linear(x, w, bias, activation)


def _gemm__layout(c, a, b, **kwargs) -> Layout:
    return _gemm_layout(a, b, c=c, **kwargs)


def _scale_dims(s, rows: str, cols: str, n_rows: int, n_cols: int) -> str:
    """An fp8 scale's dims: one element ("1…": tensor-wise), a row or column vector, or a
    block grid (its letters those of the operand dims it follows)."""
    if s is None:
        return ""
    shape = tuple(s.shape)
    if len(shape) < 2 or shape[0] * shape[1] == 1:
        return "1" * len(shape)
    return _dims(shape, rows + cols)


def _scaled_mm_layout(a, b, scale_a, scale_b, bias=None, out_dtype=None, activation=None, use_fast_accum=False
                      ) -> Layout:
    """a mk, b kn -> mn; row-wise scales m1 / 1n; block-wise scales (M, K/128) mk and
    (K/128, N/128) kn: a block grid is split only where it follows the operand dim one to one
    (K never; N only for 1×128 scales of b, N whole columns). The mode is the kernel's own
    decision (spec.scaling_by_shape): at K = 128 block scales have no K letter to show it."""
    (M, K), N = tuple(a.shape), b.shape[1]
    operands = {"a": OperandDims("mk"), "b": OperandDims("kn"),
                "scale_a": OperandDims(_scale_dims(scale_a, "m", "k", M, K)),
                "scale_b": OperandDims(_scale_dims(scale_b, "k", "n", K, N))}
    mode, sb_cols = scaling_by_shape(M, K, N, tuple(scale_a.shape), tuple(scale_b.shape)) or ("tensor", 1)
    blocks = mode == "block"
    whole = ("k" if blocks else "") + ("n" if blocks and sb_cols != 1 else "")
    if bias is not None:
        operands["bias"] = OperandDims(follow("mn", bias.shape), ADDEND)
    act = check_activation(activation)
    return Layout("mn", operands, linear=act == "none", whole=whole, activation=act)


def _grouped_layout(a, b, offs=None, out_dtype=None, zero_tail=False) -> Layout:
    """The four forms of grouped_mm (pingpong.grouped): the offsets index a concatenated dim,
    which is never split (nor is the group dim beside it); equal groups (3-D × 3-D) are a batch."""
    if offs is None:
        return Layout("Amn", {"a": OperandDims("Amk"), "b": OperandDims("Akn")})
    index = {"offs": OperandDims("g", WHOLE)}
    if a.dim() == 2 and b.dim() == 3:  # ragged rows: the MoE forward and dX
        return Layout("mn", {"a": OperandDims("mk"), "b": OperandDims("gkn"), **index}, whole="mg")
    if a.dim() == 3:  # ragged columns
        return Layout("mn", {"a": OperandDims("gmk"), "b": OperandDims("kn"), **index}, whole="gn")
    return Layout("gmn", {"a": OperandDims("mk"), "b": OperandDims("kn"), **index}, whole="gk")  # ragged K: dW


def fake_check(op) -> Callable[..., None]:
    """A registration's `check` from the op's own fake implementation: the op called on meta
    tensors of the arguments' global shapes, strides and dtypes (its argument checks raise
    PingpongError there; nothing runs). For ops whose front end owns its checks (scaled_mm,
    grouped_mm), so this module imports no front-end module above the ops."""
    def meta(v):
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) \
            else v

    def check(*args, **kwargs):
        op(*map(meta, args), **{k: meta(v) for k, v in kwargs.items()})

    return check


register(torch.ops.pingpong.mm.default, _mm_layout, _check_mm)
register(torch.ops.pingpong.gemm.default, _gemm_layout, _check_gemm)
register(torch.ops.pingpong.gemm_.default, _gemm__layout, _check_gemm_)
register(torch.ops.pingpong.linear.default, _linear_layout, _check_linear)
register(torch.ops.pingpong.scaled_mm.default, _scaled_mm_layout, fake_check(torch.ops.pingpong.scaled_mm.default))
register(torch.ops.pingpong.grouped_mm.default, _grouped_layout, fake_check(torch.ops.pingpong.grouped_mm.default))


# ----------------------------------------------------------------------------- FP8 training linear


FP8_OP = torch.ops.pingpong.fp8_linear_train.default  # fp8_linear's key in the checks' cache, and its stale-spec message
_FP8_NAME = "pingpong.fp8_linear"


@dataclass(frozen=True)
class Fp8Layout:
    """One mesh dim of an FP8 linear on DTensors: the placements x, weight and bias are
    redistributed to, y's, and those of the gradients of x, weight and bias (each rank's
    local gradient: a part of the sum where the product's contraction was split)."""

    x: object
    weight: object
    bias: object
    y: object
    grads: tuple
    share_bias: bool = False  # y Partial: each rank adds bias / (ranks on this dim), its gradient the whole dbias


def fp8_layouts(x_placements, w_placements, x_dim: int) -> list[Fp8Layout]:
    """The layout of each mesh dim, decided by the weight's placement (x's where the weight is
    Replicate()); x (…, K), weight (N, K), y (…, N):

        | weight       | x             | name       | y            | dx, dW, dbias             |
        |--------------|---------------|------------|--------------|---------------------------|
        | Shard(0)     | -> Replicate  | colwise    | Shard(-1)    | Partial, Shard(0), Shard(0) |
        | Shard(1)     | -> Shard(-1)  | rowwise    | Partial      | Shard(-1), Shard(1), Replicate |
        | Replicate    | Shard(-1)     | rowwise (the weight sliced to Shard(1))                |
        | Replicate    | Shard(d), a leading dim | tokens | Shard(d) | Shard(d), Partial, Partial |
        | Replicate    | Replicate     | replicate  | Replicate    | Replicate                 |

    The bias follows y; where y is Partial, each rank adds its share, the bias divided by the
    ranks (as DTensor's Replicate() -> Partial() does for aten's addmm), and each rank's
    gradient of it is the whole dbias (Replicate(), as torch's)."""
    R, P, last = Replicate(), Partial(), x_dim - 1
    out = []
    for px, pw in zip(x_placements, w_placements):
        if type(pw) is Shard and pw.dim == 0:
            out.append(Fp8Layout(R, pw, Shard(0), Shard(last), (P, Shard(0), Shard(0))))
        elif (type(pw) is Shard and pw.dim == 1) or (type(px) is Shard and px.dim == last):
            out.append(Fp8Layout(Shard(last), Shard(1), R, P, (Shard(last), Shard(1), R), share_bias=True))
        elif type(px) is Shard:
            out.append(Fp8Layout(px, R, R, px, (px, P, P)))
        else:
            out.append(Fp8Layout(R, R, R, R, (R, R, R)))
    return out


def fp8_linear(x, weight, bias, recipe: str):
    """pingpong.fp8_training.fp8_linear with a DTensor among x, weight, bias (its front end
    comes here; `recipe` a name of fp8_training.RECIPES): x, weight and bias redistributed to
    `fp8_layouts`, then each rank runs the whole FP8 linear (forward and both gradients,
    fp8_training's autograd Function, or its op while torch.compile traces) on its local
    tensors, every scale from the values that rank holds (docs/distributed.md, "FP8
    training"). `check_fp8`'s PingpongError before any work, except while torch.compile traces."""
    x, weight, bias = respec((x, weight, bias))
    if not torch.compiler.is_compiling():
        check_fp8(x, weight, bias, recipe)
    mesh = next(t for t in (x, weight, bias) if isinstance(t, DTensor)).device_mesh
    x, weight, bias = (_replicated(t, mesh) for t in (x, weight, bias))
    lays = fp8_layouts(x.placements, weight.placements, x.dim())
    grads = list(zip(*(lay.grads for lay in lays)))
    local = [_local(t, [getattr(lay, n) for lay in lays], mesh, g)
             for t, n, g in zip((x, weight, bias), ("x", "weight", "bias"), grads)]
    shares = _ranks(mesh, lays, lambda lay: lay.share_bias)
    if local[2] is not None and shares > 1:
        local[2] = _Share.apply(local[2], shares)
    y = fp8_training.fp8_linear(*local, recipe)
    shape = (*x.shape[:-1], weight.shape[0])
    return DTensor.from_local(y, mesh, [lay.y for lay in lays], run_check=False, shape=shape, stride=_contiguous(shape))


def _ranks(mesh, lays, which) -> int:
    """The number of ranks over the mesh dims whose layout `which` takes."""
    n = 1
    for d, lay in enumerate(lays):
        n *= mesh.size(d) if which(lay) else 1
    return n


class _Share(torch.autograd.Function):
    """A bias / ranks in the forward (each rank's share of a Partial() sum); the gradient
    passes unchanged (every rank's share has the whole bias's gradient)."""

    @staticmethod
    def forward(ctx, bias, ranks):
        return bias / ranks

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _replicated(t, mesh):
    """A plain tensor beside DTensors (allowed under implicit replication) as Replicate()."""
    if t is None or isinstance(t, DTensor):
        return t
    return DTensor.from_local(t, mesh, [Replicate()] * mesh.ndim, run_check=False)


def _local(t, placements, mesh, grad_placements):
    """t's local tensor once redistributed to `placements`; its gradient a DTensor of
    `grad_placements`."""
    if t is None:
        return None
    if tuple(t.placements) != tuple(placements):
        t = t.redistribute(mesh, placements)
    return t.to_local(grad_placements=grad_placements)


def _contiguous(shape) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def check_fp8(x, weight, bias, recipe: str) -> None:
    """PingpongError before any work for an FP8 linear on DTensors: `_check_dtensors`' checks,
    fp8_training's argument checks on the global shapes, an operand x or weight Partial (or a
    placement other than Replicate() and Shard), and a split that leaves a rank an in_features
    or out_features the recipe cannot take (each rank's extent must be whole and pass
    fp8_training.training_shape_reason). A call alike after one that passed costs one lookup
    (`check`'s cache)."""
    key, positions = _passed(FP8_OP, (x, weight, bias, recipe))
    if positions == ():
        return
    tensors = {n: t for n, t in (("x", x), ("weight", weight), ("bias", bias)) if isinstance(t, torch.Tensor)}
    _check_dtensors(FP8_OP, _FP8_NAME, tensors)
    fp8_training.check_fp8_linear(x, weight, bias, recipe)
    alternatives = ("Supported: ColwiseParallel (weight Shard(0), x Replicate()), RowwiseParallel (weight Shard(1), x"
                    " Shard(-1)), x split along a leading dim (the tokens) with the weight Replicate(), or Replicate()")
    for n in ("x", "weight"):
        t = tensors[n]
        for mesh_dim, p in enumerate(t.placements if isinstance(t, DTensor) else ()):
            if type(p) not in (Shard, Replicate):
                what = "holds partial sums" if p.is_partial() else "is not a placement the FP8 linear takes"
                raise PingpongError(
                    f"{n}: placement {_show(p)} on mesh dim {mesh_dim} {what}; {_FP8_NAME} quantizes each operand from"
                    f" the values a rank holds. Redistribute {n} first ({n}.redistribute({n}.device_mesh, [Replicate()]))."
                    f" {alternatives}")
    mesh = next(iter(t for t in tensors.values() if isinstance(t, DTensor))).device_mesh
    R = [Replicate()] * mesh.ndim
    lays = fp8_layouts(getattr(x, "placements", R), getattr(weight, "placements", R), x.dim())
    extents, split = list(weight.shape), []
    for dim, name in enumerate(("out_features", "in_features")):
        ranks = _ranks(mesh, lays, lambda lay: lay.weight == Shard(dim))
        if ranks > 1:
            split.append(f"{name}={extents[dim]} over {ranks} ranks")
            if extents[dim] % ranks:
                _fp8_split_error(x, weight, split, f"{name}={extents[dim]} does not split evenly", recipe, R)
            extents[dim] //= ranks
    why = split and fp8_training.training_shape_reason(*extents, recipe)
    if why:
        _fp8_split_error(x, weight, split, why, recipe, R)
    _remember(key, ())


def _fp8_split_error(x, weight, split, why, recipe, R):
    raise PingpongError(
        f"weight: placements {tuple(getattr(weight, 'placements', R))} (x {tuple(getattr(x, 'placements', R))}) split"
        f" {', '.join(split)}: {why} (recipe {recipe!r}, on each rank's shard). Supported: features whose share on"
        " each rank the recipe takes, fewer ranks on that mesh dim, or the weight Replicate() there")
