"""Bytes copied by a piece of eager code, and a Hopper-planned grouped_mm whose launches do
nothing: what a training step copies on a GPU, counted on the CPU."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pingpong import grouped as gm
from pingpong.hopper.host import backend as hopper_backend
from pingpong.portable import grouped as portable_grouped
from pingpong.runtime import spec as spec_mod

#: the aten ops that copy a tensor's values (contiguous, reshape of a view that cannot be one,
#: autograd's accumulation into a parameter of another layout: each is one of these)
COPIES = ("copy_", "clone", "_to_copy")


class CopiedBytes(TorchDispatchMode):
    """Counts the bytes each copy writes: `copies` lists (op, shape, bytes)."""

    def __init__(self):
        super().__init__()
        self.copies = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in COPIES:
            self.copies.append((name, tuple(out.shape), out.numel() * out.element_size()))
        return out

    @property
    def bytes(self) -> int:
        return sum(c[2] for c in self.copies)


def hopper_layouts(setattr, launch=lambda *args: None) -> None:
    """grouped_mm planned as the Hopper backend plans it on a GPU (its contiguous copies of an
    operand it cannot read as stored included), the kernel launches `launch` (the plan's
    CachedLaunch's arguments; nothing by default) and the tail zeroing doing nothing;
    `setattr`: monkeypatch.setattr."""

    def plan(a, b, offs, out_dtype, interpret=False):
        spec = spec_mod.build_grouped(a, b, offs, out_dtype)
        gm.check(a, b, offs, out_dtype)
        kernel, *_, copy_a, copy_b, why = hopper_backend._grouped_layout(spec)
        assert why is None, why
        p = hopper_backend.GroupedHopperPlan(-1, spec.groups.mode, kernel.prepare, None, copy_a, copy_b, 1)
        p.launch = launch
        return spec, p

    setattr(gm, "_plan", plan)
    setattr(portable_grouped, "zero_tail", lambda *args, **kwargs: None)


def experts_tensors(E, H, inter, T, gen, dtype=torch.bfloat16):
    """x (T, H), gate_up_proj (E, 2I, H), down_proj (E, H, I) (transformers' layout), the
    output gradient (T, H) and offs: T routed rows balanced over E experts."""
    x = torch.randn(T, H, generator=gen).to(dtype).requires_grad_()
    w1 = (torch.randn(E, 2 * inter, H, generator=gen) / H**0.5).to(dtype).requires_grad_()
    w2 = (torch.randn(E, H, inter, generator=gen) / inter**0.5).to(dtype).requires_grad_()
    g = torch.randn(T, H, generator=gen).to(dtype)
    return x, w1, w2, g, torch.arange(1, E + 1, dtype=torch.int32) * (T // E)


def experts_step(project, x, w1, w2, g, offs):
    """One MoE experts' forward + backward, as pingpong.tools.bench_grouped_fp8's training step."""
    import torch.nn.functional as F

    gate, up = project(x, w1, offs).chunk(2, dim=-1)
    project((F.silu(gate) * up).contiguous(), w2, offs).backward(g)
