"""pingpong's GEMMs in torch's async tensor parallelism (docs/distributed.md, "Async TP").

torch's async TP is inductor's post-grad pass `micro_pipeline_tp_pass`: it rewrites an
all-gather feeding `aten.mm`, and an `aten.mm` feeding a reduce-scatter, into
`symm_mem.fused_all_gather_matmul` / `fused_matmul_reduce_scatter`, whose CUDA implementations
(`_fused_all_gather_matmul_impl`, `_fused_matmul_reduce_scatter_impl` in
torch.distributed._symmetric_memory) run a given mm-out callable on each chunk as it arrives
over symmetric memory. This module does the same for pingpong's ops:

    piece                          what
    mm_out(A, B, bias=, activation=, out=)
                                   the mm-out callable: pingpong's product into the chunk `out`
                                   (pingpong.integration.direct.gemm with out=; a chunk that is not a
                                   contiguous, 16-byte aligned block goes through a new tensor)
    pingpong::all_gather_gemm      (a_shard, [b…], [bias…], [activation…], gather_dim, group_name,
                                   return_a) -> (a or None, [act(a @ b + bias)…]): torch's
                                   all-gather implementation with mm_out
    pingpong::gemm_reduce_scatter  (a, b, bias, reduce_op, scatter_dim, group_name) ->
                                   reduce_scatter(a @ b + bias): torch's implementation with mm_out
    fuse(graph)                    the post-grad pass: torch's own pattern finders
                                   (find_all_gather_patterns, find_reduce_scatter_patterns); keeps
                                   the groups whose consumers (producer) are pingpong.linear or
                                   pingpong.mm, directly or between reshapes (`_Product`), and
                                   rewrites them to the two ops, under torch's conditions (NCCL,
                                   symmetric memory enabled for the group); counts in FUSED
    enable_async_tp()              adds `fuse` to inductor's post-grad custom passes, beside any
                                   the user set; it acts while torch's own switch,
                                   torch._inductor.config._micro_pipeline_tp, is on, and records
                                   each graph's fused nodes and unfused collectives in GRAPHS

Both ops take B as the (K, N) operand of a @ b: a `pingpong.linear` node contributes its
weight transposed (a view), its bias and its activation. Only gathers and scatters along a
dim other than the last are taken (the sequence-parallel plans' dim 1): torch's last-dim
all-gather runs aten.mm itself, not the callable, and a last-dim reduce-scatter chunks B's
columns, which a bias would not follow. A fused activation is kept on the all-gather side
(the chunks are rows of the output) and refused on the reduce-scatter side (it must see the sum).

Off CUDA (gloo, torch's fake process group) the ops run unfused: the functional all-gather or
reduce-scatter and pingpong's product, with the CUDA implementation's output layout.
"""

from __future__ import annotations

import collections
import hashlib
import operator
from typing import Optional

import torch

from . import batching, direct, inductor
from ..errors import PingpongError
from ..runtime.spec import NO_ARGS, TMA_ALIGN, EpilogueArgs

__all__ = ["mm_out", "all_gather_gemm", "gemm_reduce_scatter", "fuse", "enable_async_tp", "disable_async_tp",
           "FUSED", "GRAPHS", "graph_counts"]

#: rewrites made by `fuse`, per op name ("all_gather_gemm", "gemm_reduce_scatter")
FUSED: collections.Counter = collections.Counter()


def mm_out(a, b, *, bias=None, activation=None, out) -> None:
    """out ← act(a @ b + bias), in the (A, B, **kwargs, out=) form torch's async-TP
    implementations call. `out` is a chunk of their output or of a symmetric-memory buffer: a
    contiguous, aligned one is written in place (pingpong.integration.direct.gemm's out=), any other (a
    column chunk, an odd offset) takes the product in a new tensor and a copy."""
    args = NO_ARGS if bias is None and activation is None else EpilogueArgs(bias=bias, activation=activation)
    if out.is_contiguous() and out.data_ptr() % TMA_ALIGN == 0:
        direct.gemm(a, b, args, out.dtype, out=out)
    else:
        out.copy_(direct.gemm(a, b, args, out.dtype))


# ----------------------------------------------------------------------------- the ops


def _symm_mem():
    import torch.distributed._symmetric_memory as symm_mem

    for name in ("_fused_all_gather_matmul_impl", "_fused_matmul_reduce_scatter_impl"):
        if not hasattr(symm_mem, name):
            raise PingpongError(f"async TP: torch {torch.__version__} has no torch.distributed._symmetric_memory.{name}, "
                                "which pingpong's fused ops call (torch 2.11 and 2.13 have it)")
    return symm_mem


def _world(group_name: str) -> int:
    from torch.distributed import distributed_c10d as c10d

    return c10d._get_group_size_by_name(group_name)


def _check_dim(name: str, dim: int, t, what: str) -> None:
    if not 0 <= dim < t.dim() - 1:
        raise PingpongError(f"{name}: {dim} is not a dim of {what}'s {t.dim()} but its last; pingpong's fused "
                            "all-gather / reduce-scatter take a non-negative dim before the last (the sequence "
                            "dim of the sequence-parallel plans)")


def _unflatten(t, leading, dim):
    """torch's layout of a gathered result: the rows of t, (ranks × the shard's rows), back to
    the shard's dims with `dim` gathered (a view: `dim` > 0 gives a non-contiguous result)."""
    return t.view(*leading, -1).flatten(0, 1).movedim(0, dim)


def _check_gather(a_shard, bs, biases, activations, gather_dim) -> None:
    """The arguments torch's implementation reads before the products (which check their own)."""
    if not bs:
        raise PingpongError("bs: pingpong.all_gather_gemm needs at least one b")
    if not len(bs) == len(biases) == len(activations):
        raise PingpongError(f"biases, activations: one per b ({len(bs)}), got {len(biases)} and {len(activations)}")
    _check_dim("gather_dim", gather_dim, a_shard, "a_shard")


def _gather_results(a_shard, bs, biases, activations, gather_dim, world, return_a=True):
    """New (a, [y…]) of the all-gather op, in the layout of torch's implementation, after
    pingpong's checks on the gathered shapes (fake tensors: at trace time)."""
    _check_gather(a_shard, bs, biases, activations, gather_dim)
    moved = a_shard.movedim(gather_dim, 0)
    leading = [world, *moved.shape[:-1]]
    a_flat = a_shard.new_empty(world * moved.shape[:-1].numel(), moved.shape[-1])
    a = _unflatten(a_flat, leading, gather_dim)
    shapes = [batching.check(a, b, EpilogueArgs(bias=bias, activation=act), None)
              for b, bias, act in zip(bs, biases, activations)]
    return (a if return_a else None), [_unflatten(a_flat.new_empty(a_flat.shape[0], shape[-1], dtype=dtype), leading,
                                                  gather_dim) for shape, dtype in shapes]


_GATHER_SCHEMA = ("(Tensor a_shard, Tensor[] bs, Tensor?[] biases, str?[] activations, int gather_dim, str group_name, "
                  "bool return_a=True) -> (Tensor?, Tensor[])")


def _all_gather_gemm(a_shard, bs, biases, activations, gather_dim, group_name, return_a=True):
    world = _world(group_name)
    if _fused(a_shard):
        symm_mem = _symm_mem()
        _check_gather(a_shard, bs, biases, activations, gather_dim)  # the shapes: checked by the fake at trace
        kwargs = [{"bias": bias, "activation": act} for bias, act in zip(biases, activations)]
        with inductor.op_range("pingpong::all_gather_gemm"), torch.no_grad():
            return symm_mem._fused_all_gather_matmul_impl(mm_out, a_shard, list(bs), None, kwargs,
                                                          [a_shard.dtype] * len(bs), gather_dim, group_name, return_a)
    # unfused (off CUDA): the functional all-gather, then each product, into the fused layout
    a, outs = _gather_results(a_shard, bs, biases, activations, gather_dim, world)
    c10d = torch.ops._c10d_functional
    rows = c10d.wait_tensor(c10d.all_gather_into_tensor(a_shard.movedim(gather_dim, 0).contiguous(), world, group_name))
    a.copy_(rows.movedim(0, gather_dim))
    for y, b, bias, act in zip(outs, bs, biases, activations):
        y.copy_(direct.gemm(a, b, EpilogueArgs(bias=bias, activation=act), None))
    return (a if return_a else None), outs


def _all_gather_gemm_fake(a_shard, bs, biases, activations, gather_dim, group_name, return_a=True):
    return _gather_results(a_shard, bs, biases, activations, gather_dim, _world(group_name), return_a)


_SCATTER_SCHEMA = "(Tensor a, Tensor b, Tensor? bias, str reduce_op, int scatter_dim, str group_name) -> Tensor"


def _check_scatter(a, reduce_op, scatter_dim, world) -> None:
    """The arguments torch's implementation reads before the products (which check their own)."""
    if reduce_op not in ("sum", "avg"):
        raise PingpongError(f"reduce_op: {reduce_op!r}; pingpong.gemm_reduce_scatter takes 'sum' or 'avg'")
    _check_dim("scatter_dim", scatter_dim, a, "a")
    if a.shape[scatter_dim] % world:
        raise PingpongError(f"a: dim {scatter_dim} of the product ({a.shape[scatter_dim]}) does not split over the "
                            f"{world} ranks of the reduce-scatter")


def _scatter_result(a, b, bias, reduce_op, scatter_dim, world):
    """A new result of the reduce-scatter op, in the layout of torch's implementation (its
    reduction over the stacked partial products), after pingpong's checks (fake tensors: at
    trace time)."""
    _check_scatter(a, reduce_op, scatter_dim, world)
    shape, dtype = batching.check(a, b, EpilogueArgs(bias=bias), None)
    x = a.movedim(scatter_dim, 0)
    leading = [world, x.shape[0] // world, *x.shape[1:-1]]
    stacked = a.new_empty(x.shape[:-1].numel(), shape[-1], dtype=dtype)
    return stacked.view(*leading, -1).movedim(1, scatter_dim + 1).movedim(0, scatter_dim).sum(dim=scatter_dim)


def _gemm_reduce_scatter(a, b, bias, reduce_op, scatter_dim, group_name):
    world = _world(group_name)
    if _fused(a):
        symm_mem = _symm_mem()
        _check_scatter(a, reduce_op, scatter_dim, world)  # the shapes: checked by the fake at trace
        with inductor.op_range("pingpong::gemm_reduce_scatter"), torch.no_grad():
            return symm_mem._fused_matmul_reduce_scatter_impl(mm_out, a, b, {"bias": bias}, a.dtype, reduce_op,
                                                              scatter_dim, group_name)
    # unfused (off CUDA): the product, then the functional reduce-scatter, into the fused layout
    out = _scatter_result(a, b, bias, reduce_op, scatter_dim, world)
    y = direct.gemm(a, b, EpilogueArgs(bias=bias), None).movedim(scatter_dim, 0).contiguous()
    c10d = torch.ops._c10d_functional
    mine = c10d.wait_tensor(c10d.reduce_scatter_tensor(y, "sum", world, group_name))
    out.copy_(mine.movedim(0, scatter_dim) / world if reduce_op == "avg" else mine.movedim(0, scatter_dim))
    return out


def _gemm_reduce_scatter_fake(a, b, bias, reduce_op, scatter_dim, group_name):
    return _scatter_result(a, b, bias, reduce_op, scatter_dim, _world(group_name))


def _fused(t) -> bool:
    """Whether the ops run torch's fused implementations: on CUDA, outside torch's
    symmetric-memory test mode (where its own ops run their fallbacks, and so do these)."""
    import torch.distributed._symmetric_memory as symm_mem

    return t.is_cuda and not getattr(symm_mem, "_is_test_mode", False)


# inductor keeps a custom op's input strides as traced (the layout the pass's
# force_stride_order gives a_shard / a), as torch's ops ask with their needs_fixed_stride_order tag
all_gather_gemm = torch.library.custom_op("pingpong::all_gather_gemm", _all_gather_gemm, mutates_args=(),
                                          schema=_GATHER_SCHEMA)
all_gather_gemm.register_fake(_all_gather_gemm_fake)
gemm_reduce_scatter = torch.library.custom_op("pingpong::gemm_reduce_scatter", _gemm_reduce_scatter, mutates_args=(),
                                              schema=_SCATTER_SCHEMA)
gemm_reduce_scatter.register_fake(_gemm_reduce_scatter_fake)


# ----------------------------------------------------------------------------- the pass

_FUSED_TARGETS = {
    "pingpong.all_gather_gemm": torch.ops.pingpong.all_gather_gemm.default,
    "pingpong.gemm_reduce_scatter": torch.ops.pingpong.gemm_reduce_scatter.default,
}

#: what async TP made of each graph the pass saw while switched on (`graph_counts`), newest last
GRAPHS: collections.deque = collections.deque(maxlen=4096)


def graph_counts(graph) -> collections.Counter:
    """A graph's fused async-TP nodes, torch's ("symm_mem.<op>") and pingpong's
    ("pingpong.<op>"); the all-gathers and reduce-scatters left unfused ("all_gather",
    "reduce_scatter"); and "pingpong_ops", its nodes of pingpong's ops (whose model it is)."""
    targets = dict(_FUSED_TARGETS)
    symm = getattr(torch.ops, "symm_mem", None)
    for name in ("fused_all_gather_matmul", "fused_matmul_reduce_scatter", "fused_all_gather_scaled_matmul",
                 "fused_scaled_matmul_reduce_scatter"):
        op = getattr(symm, name, None) if symm is not None else None
        if op is not None:
            targets[f"symm_mem.{name}"] = op.default
    c10d = torch.ops._c10d_functional
    targets["all_gather"], targets["reduce_scatter"] = c10d.all_gather_into_tensor.default, c10d.reduce_scatter_tensor.default
    by_target = {v: k for k, v in targets.items()}
    counts = collections.Counter(by_target[n.target] for n in graph.nodes if n.target in by_target)
    counts["pingpong_ops"] = sum(isinstance(n.target, torch._ops.OpOverload) and n.target.namespace == "pingpong"
                                 for n in graph.nodes)
    return counts


class _Product:
    """One pingpong product the fused op takes over: `nodes` is [op], [reshape, pingpong.mm,
    reshape] (an N-D operand folded to rows and back, as pingpong's backward writes it),
    [reshape, pingpong.mm] (folded to rows, the rows' product used as it is) or [pingpong.mm,
    reshape] (rows made elsewhere, the result unfolded: `a_shape` is then the N-D shape a
    takes); `a` is the operand gathered or scattered, `b` the (K, N) operand (a linear's weight,
    to be transposed), `bias`, `activation`."""

    def __init__(self, nodes, a, b, transpose, bias, activation, a_shape=None):
        self.nodes, self.a, self.b, self.transpose, self.bias, self.activation = nodes, a, b, transpose, bias, activation
        self.a_shape = a_shape
        from torch._inductor.fx_passes.micro_pipeline_tp import _find_ancestors

        self.ancestors = _find_ancestors(b) | (_find_ancestors(bias) if bias is not None else set())

    def b_node(self, graph):
        if not self.transpose:
            return self.b
        return graph.call_function(torch.ops.aten.permute.default, (self.b, [1, 0]))

    def replace_with(self, new) -> None:
        """The product's result (the last node) becomes `new` (N-D); the rows' product of a
        folded pattern, where used, a reshape of `new` (as torch's _Matmul.replace_with)."""
        mm = self.nodes[1] if len(self.nodes) > 1 else None
        if len(self.nodes) == 3:
            self.nodes[-1].replace_all_uses_with(new)
        elif mm is None:
            self.nodes[0].replace_all_uses_with(new)
        if mm is not None and mm.users:
            graph = new.graph
            with graph.inserting_after(new):
                view = graph.call_function(torch.ops.aten.reshape.default, (new, list(_val(mm).shape)))
            mm.replace_all_uses_with(view)

    def erase(self) -> None:
        for node in reversed(self.nodes):
            if not node.users:
                node.graph.erase_node(node)


def _val(node):
    return node.meta["val"]


def _arg(node, i, name, default=None):
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


def _product(node, scatter: bool) -> Optional[_Product]:
    """The _Product of a pingpong.linear or pingpong.mm node (None: not one the fused ops
    take: an out_dtype, an activation before a reduce-scatter, b not a matrix)."""
    pp = torch.ops.pingpong
    if node.target is pp.linear.default:
        activation = _arg(node, 3, "activation")
        if scatter and activation not in (None, "none"):
            return None
        return _Product([node], node.args[0], node.args[1], True, _arg(node, 2, "bias"), activation)
    if node.target is pp.mm.default:
        out_dtype = _arg(node, 2, "out_dtype")
        a, b = node.args[0], node.args[1]
        if (out_dtype is not None and out_dtype != _val(a).dtype) or _val(b).dim() != 2:
            return None
        return _Product([node], a, b, False, None, None)
    return None


def _folded(reshape, mm, unreshape) -> Optional[_Product]:
    """[reshape, pingpong.mm, reshape] as one N-D product, when the outer reshape gives the
    product's N-D shape (the fused op's result): else None."""
    p = _product(mm, scatter=False)
    if p is None or mm.args[0] is not reshape or reshape.target is not torch.ops.aten.reshape.default:
        return None
    a = reshape.args[0]
    if tuple(_val(unreshape).shape) != (*_val(a).shape[:-1], _val(p.b).shape[-1]):
        return None
    return _Product([reshape, mm, unreshape], a, p.b, False, None, None)


def _unfolded(mm, unreshape) -> Optional[_Product]:
    """[pingpong.mm, reshape] whose rows the reshape unfolds to N-D (the reduce-scatter side of a
    backward whose rows are not a reshape, e.g. after an activation's derivative)."""
    p = _product(mm, scatter=True)
    if p is None:
        return None
    a, out = _val(p.a), tuple(_val(unreshape).shape)
    if a.dim() != 2 or len(out) < 3 or out[-1] != _val(p.b).shape[-1] or torch.Size(out[:-1]).numel() != a.shape[0]:
        return None
    return _Product([mm, unreshape], p.a, p.b, False, None, None, a_shape=[*out[:-1], a.shape[1]])


def _rows_of(reshape, mm) -> Optional[_Product]:
    """[reshape, pingpong.mm]: the reshape folds an N-D a's leading dims into rows."""
    p = _product(mm, scatter=False)
    a = _val(reshape.args[0])
    if p is None or a.dim() < 3 or tuple(_val(reshape).shape) != (a.shape[:-1].numel(), a.shape[-1]):
        return None
    return _Product([reshape, mm], reshape.args[0], p.b, False, None, None)


def _consumers(res) -> list:
    """The pingpong products that take the gathered `res` as their a (x), directly or folded
    to rows by a reshape (the result unfolded by another, or used as rows)."""
    found = []
    for user in res.users:
        if user.target is torch.ops.aten.reshape.default:
            for mm in user.users:
                if mm.target is torch.ops.pingpong.mm.default and mm.args[0] is user:
                    p = next((f for f in (_folded(user, mm, u) for u in mm.users
                                          if u.target is torch.ops.aten.reshape.default) if f is not None), None)
                    p = p or _rows_of(user, mm)
                    if p is not None:
                        found.append(p)
        else:
            p = _product(user, scatter=False)
            if p is not None and p.a is res:
                found.append(p)
    return [p for p in found if res not in p.ancestors]


def _producer(node) -> Optional[_Product]:
    """The pingpong product whose result is the reduce-scatter's input, directly or folded."""
    if node.target is torch.ops.aten.reshape.default:
        mm = node.args[0]
        if isinstance(mm, torch.fx.Node) and mm.target is torch.ops.pingpong.mm.default:
            pre = mm.args[0]
            if isinstance(pre, torch.fx.Node) and pre.target is torch.ops.aten.reshape.default:
                return _folded(pre, mm, node) or _unfolded(mm, node)
            return _unfolded(mm, node)
        return None
    return _product(node, scatter=True)


def _raise_ancestors(graph, fused, ancestors) -> None:
    order = {n: i for i, n in enumerate(graph.nodes)}
    for n in sorted(ancestors, key=order.__getitem__):
        if order[n] > order[fused]:
            fused.prepend(n)


def _fuse_all_gather(ag, symm_mem) -> bool:
    from torch._inductor import inductor_prims

    shard, res = ag.shard_node, ag.res_node
    if not symm_mem.is_symm_mem_enabled_for_group(ag.group_name) or ag.gather_dim == _val(shard).dim() - 1:
        return False
    products = _consumers(res)
    if not products:
        return False
    graph = ag.ag_node.graph
    # the weights and biases first (torch raises them too): the new nodes below read them
    _raise_ancestors(graph, ag.ag_node, set().union(*(p.ancestors for p in products)))
    with graph.inserting_before(ag.ag_node):
        restrided = symm_mem.restride_A_shard_for_fused_all_gather_matmul(_val(shard), ag.gather_dim)
        shard = graph.call_function(inductor_prims.force_stride_order, (shard, restrided.stride()))
        bs = [p.b_node(graph) for p in products]
        fused = graph.call_function(torch.ops.pingpong.all_gather_gemm.default,
                                    (shard, bs, [p.bias for p in products], [p.activation for p in products],
                                     ag.gather_dim, ag.group_name), {"return_a": True})
        gathered = graph.call_function(operator.getitem, (fused, 0))
        outs = graph.call_function(operator.getitem, (fused, 1))
        for i, p in enumerate(products):
            p.replace_with(graph.call_function(operator.getitem, (outs, i)))
            p.erase()
        ag.replace_with(gathered)
        ag.erase()
        if not gathered.users:  # nothing else reads the gathered a: the op need not return it
            graph.erase_node(gathered)
            fused.kwargs = {"return_a": False}
    return True


def _fuse_reduce_scatter(rs, symm_mem) -> bool:
    from torch._inductor import inductor_prims

    inp = rs.input_node
    if not symm_mem.is_symm_mem_enabled_for_group(rs.group_name) or rs.scatter_dim == _val(inp).dim() - 1:
        return False
    product = _producer(inp)
    if product is None:
        return False
    matched = rs.match.nodes if hasattr(rs.match, "nodes") else rs.match
    if len(inp.users) != 1 and not all(u in matched for u in inp.users):
        return False  # the product is read elsewhere too: the fused op does not return it
    if rs.wait_tensor_node in product.ancestors:
        return False
    graph = rs.wait_tensor_node.graph
    with graph.inserting_before(rs.wait_tensor_node):
        a, shape = product.a, _val(product.a).shape
        if product.a_shape is not None:
            a, shape = graph.call_function(torch.ops.aten.reshape.default, (a, product.a_shape)), product.a_shape
        restrided = symm_mem.restride_A_for_fused_matmul_reduce_scatter(torch.empty(shape, device="meta"), rs.scatter_dim)
        a = graph.call_function(inductor_prims.force_stride_order, (a, restrided.stride()))
        fused = graph.call_function(torch.ops.pingpong.gemm_reduce_scatter.default,
                                    (a, product.b_node(graph), product.bias, rs.reduce_op, rs.scatter_dim, rs.group_name))
        rs.replace_with(fused)
        rs.erase()
        product.erase()
    _raise_ancestors(graph, fused, product.ancestors)
    return True


def fuse(graph) -> None:
    """The post-grad pass: pingpong's products next to an all-gather or a reduce-scatter become
    the fused ops, where torch's own pass would fuse aten.mm (NCCL available, symmetric memory
    enabled for the group, a dim before the last); counts its rewrites in FUSED."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        return
    import torch.distributed._symmetric_memory as symm_mem
    from torch._inductor import config
    from torch._inductor.fx_passes import micro_pipeline_tp as torch_pass

    gathers = torch_pass.find_all_gather_patterns(graph)
    scatters = torch_pass.find_reduce_scatter_patterns(graph)
    if config.reorder_for_compute_comm_overlap:  # as torch's pass: a collective a reordering hides stays
        exposed = set(torch_pass._get_unexposed_collectives(graph))
        gathers = [g for g in gathers if g.ag_node not in exposed]
        scatters = [s for s in scatters if s.reduce_scatter_node not in exposed]
    # reduce-scatters first: their producers are nodes of the traced graph; an all-gather's
    # rewrite makes new nodes (without the fake values the matching reads) that may feed one
    for rs in scatters:
        if _fuse_reduce_scatter(rs, symm_mem):
            FUSED["gemm_reduce_scatter"] += 1
    for ag in gathers:
        if _fuse_all_gather(ag, symm_mem):
            FUSED["all_gather_gemm"] += 1


# ----------------------------------------------------------------------------- the switch


class _Pass:
    """`fuse` as inductor's custom post-grad pass, acting while
    torch._inductor.config._micro_pipeline_tp is on. `before`: the pass the user had set, run
    first (torch 2.11 takes one pass, not a list). A CustomGraphPass (`_pass`: inductor is
    imported only when the pass is enabled), so its uuid keeps inductor's FX graph cache."""

    def __init__(self, before=None):
        self.before = before

    def __call__(self, graph) -> None:
        if self.before is not None:
            self.before(graph)
        from torch._inductor import config

        if config._micro_pipeline_tp:
            fuse(graph)
            GRAPHS.append(graph_counts(graph))

    def uuid(self):
        if self.before is not None and not hasattr(self.before, "uuid"):
            return None  # the user's pass has no uuid: inductor bypasses its cache, as without this pass
        before = None if self.before is None else self.before.uuid()
        with open(__file__, "rb") as f:
            return hashlib.sha256(f.read() + repr(before).encode()).hexdigest()


_PASS_CLASS = []


def _pass(before=None):
    """A new _Pass, as a subclass of inductor's CustomGraphPass (made once)."""
    if not _PASS_CLASS:
        from torch._inductor.custom_graph_pass import CustomGraphPass

        _PASS_CLASS.append(type("PingpongAsyncTP", (_Pass, CustomGraphPass), {}))
    return _PASS_CLASS[0](before)


def _takes_lists() -> bool:
    """Whether inductor takes a list of custom post-grad passes (torch 2.13; 2.11 takes one)."""
    from torch._inductor import custom_graph_pass

    return hasattr(custom_graph_pass, "get_custom_graph_passes")


def enable_async_tp() -> None:
    """pingpong.linear and pingpong.mm take part in torch's async TP: pingpong's post-grad pass is
    added to torch._inductor.config.post_grad_custom_post_pass (after a pass already set there,
    which keeps running), and rewrites graphs compiled while torch's own switch is on:

        torch._inductor.config._micro_pipeline_tp = True
        torch.distributed._symmetric_memory.enable_symm_mem_for_group(tp_mesh.get_group().group_name)
        pingpong.distributed.enable_async_tp()

    Idempotent; `disable_async_tp` takes it out."""
    from torch._inductor import config

    current = config.post_grad_custom_post_pass
    passes = list(current) if isinstance(current, (list, tuple)) else [] if current is None else [current]
    if any(isinstance(p, _Pass) for p in passes):
        return
    if _takes_lists():
        config.post_grad_custom_post_pass = passes + [_pass()] if passes else _pass()
    else:
        config.post_grad_custom_post_pass = _pass(current)


def disable_async_tp() -> None:
    """Take pingpong's pass out of inductor's custom post-grad passes (a pass it ran after stays)."""
    from torch._inductor import config

    current = config.post_grad_custom_post_pass
    if isinstance(current, _Pass):
        config.post_grad_custom_post_pass = current.before
    elif isinstance(current, (list, tuple)):
        kept = [p for p in current if not isinstance(p, _Pass)]
        config.post_grad_custom_post_pass = kept if len(kept) > 1 else (kept[0] if kept else None)
