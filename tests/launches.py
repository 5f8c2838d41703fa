"""Kernel launches of a piece of eager code and the bytes each moves, counted on the CPU with
every kernel a no-op: aten's (a TorchDispatchMode: each op but views and allocations is one
kernel on a GPU) and pingpong's own (their launch functions replaced by records,
`pingpong_kernels`). Bytes are each tensor's distinct elements (a broadcast dim counts once),
read and written once, but where a kernel reads its input more than once (quantize_fp8_columns
without the columns' maxima: twice); a zeroing kernel reads nothing."""

import math

import torch
from torch._library import custom_ops
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_leaves

import types

from pingpong import fp8_grouped, quantize
from pingpong.portable import grouped as portable_grouped
from pingpong.runtime import plan

#: aten ops that launch no kernel: allocations and metadata (views are `is_view`)
NO_KERNEL = ("empty", "empty_strided", "new_empty", "empty_like", "lift_fresh", "detach")
#: aten ops that write without reading their input
WRITE_ONLY = ("zero_", "fill_", "zeros", "full", "arange")


def touched(t: torch.Tensor) -> int:
    """Bytes of t's distinct elements."""
    return math.prod(n for n, s in zip(t.shape, t.stride()) if s != 0) * t.element_size() if t.numel() else 0


class Launches(TorchDispatchMode):
    """`kernels` lists (name, bytes) of every kernel launched, in order: "aten.<op>" or pingpong's
    (`record`)."""

    def __init__(self):
        super().__init__()
        self.kernels = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = custom_ops.OPDEFS.get(func.name())
        if op is not None:  # pingpong's ops (below autograd, as this mode): their function, its kernels counted
            with self:
                return op._init_fn(*args, **(kwargs or {}))
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if not func.is_view and name not in NO_KERNEL:
            reads = [] if name in WRITE_ONLY else [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            writes = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            self.kernels.append((f"aten.{name}", sum(map(touched, reads)) + sum(map(touched, writes))))
        return out

    def record(self, name, reads, writes) -> None:
        """A pingpong kernel: reads as (tensor, times read), writes as tensors."""
        with _disable_current_modes():
            self.kernels.append((name, sum(touched(t) * n for t, n in reads) + sum(map(touched, writes))))

    def bytes(self, prefix: str = "") -> int:
        return sum(b for name, b in self.kernels if name.startswith(prefix))

    def names(self) -> list:
        return [name for name, _ in self.kernels]


def pingpong_kernels(setattr, launches: Launches) -> None:
    """Replace pingpong's quantization and zero-tail launches by records into `launches`
    (`setattr`: monkeypatch.setattr); the grouped products record through `grouped_launch`."""

    def columns(x, q, s, amax=None):
        launches.record("quantize_fp8_columns", [(x, 1 if amax is not None else 2)] +
                        ([(amax, 1)] if amax is not None else []), [q, s])

    def tail(out, offs, interpret=False):
        with _disable_current_modes():
            end = int(offs[-1]) if offs.numel() else 0
        launches.record("zero_tail", [(offs, 1)], [out[max(end, 0):]])

    setattr(quantize, "launch", lambda x, q, s, granularity: launches.record(f"quantize_fp8 {granularity}",
                                                                             [(x, 1)], [q, s]))
    setattr(quantize, "launch_stacked", lambda x, q, s, amax: launches.record("quantize_stacked", [(x, 1)],
                                                                              [q, s, amax]), raising=False)
    setattr(quantize, "launch_columns", columns)
    setattr(portable_grouped, "zero_tail", tail)


def grouped_launch(launches: Launches, name: str):
    """A grouped plan's launch (or run) that records `name` reading a, b and writing out."""

    def launch(*args):
        a, b, out = [t for t in args if isinstance(t, torch.Tensor)][:3]
        launches.record(name, [(a, 1), (b, 1)], [out])
    return launch


class NoPlan(plan.Plan):
    """An FP8 grouped plan that computes nothing (and copies nothing), its launch recorded into
    `launches`: a, b and both scales read, out written."""
    __slots__ = ()
    launches = None

    def __init__(self):
        self.device, self.path, self.activation, self.extents = -1, "nothing", "none", None

    def run(self, a, b, out, args):
        self.launches.record("scaled_grouped_mm", [(a, 1), (b, 1), (args.scale_a, 1), (args.scale_b, 1)], [out])


def no_op_kernels(setattr) -> Launches:
    """Every kernel of an experts training step a no-op that records itself into the returned
    Launches, grouped_mm planned as the Hopper backend plans it on a GPU (tests/copies.py), FP8
    grouped products by NoPlan; `setattr`: monkeypatch.setattr."""
    from copies import hopper_layouts

    launches = Launches()
    hopper_layouts(setattr, grouped_launch(launches, "grouped_mm"))
    pingpong_kernels(setattr, launches)
    setattr(NoPlan, "launches", launches)
    nothing = types.SimpleNamespace(NAME="nothing", plan=lambda s: NoPlan(),
                                    can_implement=lambda s: None if s.epilogue.scales is not None else "unscaled")
    setattr(plan, "BACKENDS", [nothing, *plan.backends()])
    setattr(plan, "PLANS", type(plan.PLANS)())  # its plans in a cache of its own
    setattr(fp8_grouped, "check_gpu", lambda device: None)
    setattr(quantize, "interpreter_enabled", lambda: True)
    return launches
