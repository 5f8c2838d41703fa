"""The call plan: one dispatch decision per call signature, cached, then a direct launch.

    public function (api.py)
        │ signature(...)           a hashable key: device, dtypes, shapes, strides, 16-byte
        │                          alignment of every tensor, out dtype, whether C is read,
        │                          in place or not, explicit config
        ▼
    PLANS[key] ──miss──▶ api validates the arguments, then build(...) decides once:
        │                  backend (hopper / portable / amd), path name, KernelConfig,
        │                  which operands need a 16-byte-aligned copy, the output target
        ▼                  and its copy-back (a refused call caches nothing)
    plan.run(a, b, out, c, α, β)
        aligned copies (if any) · device guard · launch · copy-back (if any)
        the Hopper launch: Triton's JIT on the plan's first call, then a direct launch that
        refreshes only the base addresses and α, β (pingpong.launcher)

A key holds everything validation and dispatch read, so a cache hit means the call is valid
and its decision known; only per-call values (addresses, α, β, overlap of in-place output
with the inputs) are checked again. `path_for` returns `plan.path`, the path `run` takes.
"""

from __future__ import annotations

import collections

import torch

from .addressing import addressable, unaddressable
from .config import KernelConfig
from .device import is_hopper
from .errors import PingpongError
from .launcher import CachedLaunch

#: Plans kept (each a few hundred bytes plus its bound launch); least recently used evicted.
PLAN_CACHE_SIZE = 1024

PLANS: "collections.OrderedDict[tuple, Plan]" = collections.OrderedDict()


def tensor_signature(t: torch.Tensor) -> tuple:
    """What a plan depends on in one tensor (not its values, not its exact address)."""
    return (t.dtype, t.shape, t.stride(), t.device, t.data_ptr() % 16 == 0)


def reads_c(c, beta: float) -> bool:
    """Whether the kernel reads C: BLAS semantics, β = 0 means C is not read (even if NaN)."""
    return c is not None and beta != 0.0


def signature(a, b, c, beta: float, out_dtype, inplace: bool, config) -> tuple:
    """The plan key of one call; raises AttributeError/TypeError for non-tensors (the caller
    then validates and reports them)."""
    c_sig = None if c is None else tensor_signature(c)
    return (tensor_signature(a), tensor_signature(b), out_dtype, c_sig, reads_c(c, beta), inplace, config)


def lookup(key) -> "Plan | None":
    return PLANS.get(key)


def store(key, plan: "Plan") -> "Plan":
    if len(PLANS) >= PLAN_CACHE_SIZE:
        PLANS.popitem(last=False)
    PLANS[key] = plan
    return plan


# ----------------------------------------------------------------------------- aligned copies


def tma_orientation(t: torch.Tensor) -> str | None:
    """"row" if t's last dim is contiguous, "col" if its first is, None if TMA cannot read it
    (TMA's rule: base 16-byte aligned, the non-unit stride a multiple of 16 bytes)."""
    from .hopper.launch import tma_orientation as orient

    return orient(t)


def tma_copy(t: torch.Tensor, values: bool = True) -> torch.Tensor:
    """A row-major copy of 2-D `t` whose row stride is padded to 16 bytes (TMA's rule): the
    "hopper-padded" path, one extra pass over the tensor. `values=False`: only the buffer."""
    rows, cols = t.shape
    align = 16 // t.element_size()
    storage = torch.empty(max(rows, 1), -(-max(cols, 1) // align) * align, dtype=t.dtype, device=t.device)
    view = storage[:rows, :cols]
    if values:
        view.copy_(t)
    return view


def _fresh_row_major_legal(n: int, dtype: torch.dtype) -> bool:
    """A new contiguous (M, n) tensor of `dtype` is TMA-legal as a row-major output (the
    caching allocator's blocks are 512-byte aligned)."""
    return (n * torch.empty((), dtype=dtype).element_size()) % 16 == 0


# ----------------------------------------------------------------------------- plans


class Plan:
    """A dispatch decision. `path`: "hopper", "hopper-padded", "portable" or "amd"."""

    __slots__ = ("path", "device", "extents")  # extents: byte spans of a, b, c (in-place plans)

    def run(self, a, b, out, c, alpha: float, beta: float) -> None:
        raise NotImplementedError


class EmptyPlan(Plan):
    """M, N or K is 0: no kernel. The empty sum makes out = β·c (or zeros; β = 0: C unread)."""

    __slots__ = ("reads_c",)

    def __init__(self, device, read):
        self.device, self.reads_c, self.path = device, read, "empty"

    def run(self, a, b, out, c, alpha, beta):
        if out.numel() == 0:
            return
        if self.reads_c:
            out.copy_(c.float() * beta)
        else:
            out.zero_()


class HopperPlan(Plan):
    """The Gluon kernel (pingpong.hopper). Operands that TMA cannot read as they are stored
    are copied into 16-byte-aligned buffers; an output it cannot write is computed into one
    and copied back."""

    __slots__ = ("config", "copy_a", "copy_b", "copy_c", "copy_out", "reads_c", "launch")

    def __init__(self, device, config, copy_a, copy_b, copy_c, copy_out, read):
        self.device, self.config, self.reads_c = device, config, read
        self.copy_a, self.copy_b, self.copy_c, self.copy_out = copy_a, copy_b, copy_c, copy_out
        self.path = "hopper-padded" if (copy_a or copy_b or copy_c or copy_out) else "hopper"
        self.launch = CachedLaunch(dynamic=("alpha", "beta"))

    def run(self, a, b, out, c, alpha, beta):
        if self.copy_a:
            a = tma_copy(a)
        if self.copy_b:
            b = tma_copy(b)
        cin = None
        if self.reads_c:
            cin = tma_copy(c) if self.copy_c else c
        if not self.copy_out:
            target = out
        elif cin is not None and c is out:  # in place on a padded copy of c: read and written there
            target = cin
        else:
            target = tma_copy(out, values=False)  # fully overwritten
        self._launch(a, b, target, cin, alpha, beta)
        if target is not out:
            out.copy_(target)

    def _launch(self, a, b, target, cin, alpha, beta):
        ptrs = (a.data_ptr(), b.data_ptr(), target.data_ptr(), (cin if cin is not None else target).data_ptr())
        self.launch(self.device, ptrs, (alpha, beta), self._jit_args, a, b, target, cin, alpha, beta)

    def _jit_args(self, a, b, target, cin, alpha, beta):
        from .device import sm_count
        from .hopper.launch import prepare

        return prepare(a, b, target, cin, alpha, beta, self.config, sm_count(self.device))


class SplitPlan(HopperPlan):
    """A split-K / swap-AB config (KernelConfig.split_k > 1 or swap_ab): the same copies as
    HopperPlan, then two launches through a fresh fp32 workspace (the caching allocator's):

        GEMM   a, b ──work units──> workspace (fp32 partials; swap-AB: of Cᵀ = bᵀ·aᵀ)
        reduce workspace, C ──Σ splits in order, α, β·C, cast──> out

    The output needs no TMA (the reduction stores through pointers), only row-major."""

    __slots__ = ("workspace", "reduce")

    def __init__(self, device, config, copy_a, copy_b, copy_c, copy_out, read, workspace):
        super().__init__(device, config, copy_a, copy_b, copy_c, copy_out, read)
        self.workspace = workspace  # (rows, cols) of the fp32 workspace
        self.launch = CachedLaunch()  # the GEMM's α, β are fixed (1, 0): partials are raw sums
        self.reduce = CachedLaunch(dynamic=("alpha", "beta"))

    def _launch(self, a, b, target, cin, alpha, beta):
        ws = torch.empty(self.workspace, dtype=torch.float32, device=target.device)
        first, second = (b, a) if self.config.swap_ab else (a, b)  # the GEMM kernel's A and B
        wp = ws.data_ptr()
        self.launch(self.device, (first.data_ptr(), second.data_ptr(), wp, wp), (), self._jit_args, a, b, target, cin,
                    alpha, beta, ws, 0)
        self.reduce(self.device, (wp, (cin if cin is not None else target).data_ptr(), target.data_ptr()),
                    (alpha, beta), self._jit_args, a, b, target, cin, alpha, beta, ws, 1)

    def _jit_args(self, a, b, target, cin, alpha, beta, ws, part):
        from .device import sm_count
        from .hopper.launch import prepare_split

        return prepare_split(a, b, target, cin, alpha, beta, self.config, sm_count(self.device), ws)[part]


class PortablePlan(Plan):
    """The plain-Triton kernel (any CUDA/ROCm GPU, any strides)."""

    __slots__ = ("reads_c",)

    def __init__(self, device, read):
        self.device, self.reads_c, self.path = device, read, "portable"

    def run(self, a, b, out, c, alpha, beta):
        from .portable import portable_gemm

        portable_gemm(a, b, out, alpha=alpha, beta=beta, c=c if self.reads_c else None)


class AmdPlan(Plan):
    """The AMD Gluon kernels (pingpong.amd; compiled and checked offline, never run here)."""

    __slots__ = ("reads_c",)

    def __init__(self, device, read):
        self.device, self.reads_c, self.path = device, read, "amd"

    def run(self, a, b, out, c, alpha, beta):
        from .amd import dispatch

        dispatch.gemm(a, b, out, alpha=alpha, beta=beta, c=c if self.reads_c else None)


def build(a, b, c, beta: float, out_dtype: torch.dtype, inplace: bool, config: KernelConfig | None) -> Plan:
    """Decide, for validated arguments: backend, path, config, copies. `c` is the output
    itself when `inplace`."""
    device = a.device.index if a.device.index is not None else (torch.cuda.current_device() if a.is_cuda else -1)
    read = reads_c(c, beta)
    if 0 in (a.shape[0], a.shape[1], b.shape[1]):
        return EmptyPlan(device, read)
    if not is_hopper(device):
        if config is not None:
            raise PingpongError("config: matmul_tiled configures the Hopper kernel; this GPU takes the portable path")
        if torch.version.hip is not None:
            from .amd import dispatch

            out = c if inplace else torch.empty(a.shape[0], b.shape[1], dtype=out_dtype, device="meta")
            if dispatch.accepts(a, b, out_dtype) and addressable(dispatch.select_kernel(dispatch._device_arch(a)),
                                                                 a, b, out, c if read else None):
                return AmdPlan(device, read)
        return PortablePlan(device, read)  # 64-bit offsets where a span needs them: addresses any tensor
    if not addressable("hopper", a, b, c if read or inplace else None):
        if config is not None:
            raise PingpongError(f"config: the Hopper kernel cannot address this call's tensors "
                                f"({unaddressable('hopper', a=a, b=b, c=c)}); matmul_tiled runs only the Hopper kernel")
        return PortablePlan(device, read)
    M, K = a.shape
    N = b.shape[1]
    if config is None:
        from .hopper.select import select_config

        config = select_config(M, N, K, (a.dtype, out_dtype), _layouts(a, b), device)
    config.derive(a.element_size(), torch.empty((), dtype=out_dtype).element_size())  # validates
    copy_ab = dict(copy_a=tma_orientation(a) is None, copy_b=tma_orientation(b) is None, read=read)
    if config.split_k > 1 or config.swap_ab:  # C and out go through pointers: row-major suffices
        from .hopper.launch import workspace_shape

        row_major = lambda t: t.stride(1) == 1 or t.shape[1] <= 1  # noqa: E731
        return SplitPlan(device, config, **copy_ab, copy_c=read and not row_major(c),
                         copy_out=inplace and not row_major(c), workspace=workspace_shape(M, N, K, config))
    out_legal = (tma_orientation(c) == "row") if inplace else _fresh_row_major_legal(N, out_dtype)
    return HopperPlan(device, config, **copy_ab, copy_c=read and tma_orientation(c) != "row", copy_out=not out_legal)


def _layouts(a, b) -> str:
    """"nt" etc.: how a (M × K) and b (K × N) are stored, n = row-major, t = a transposed view."""
    return "".join("n" if t.stride(1) == 1 else "t" for t in (a, b))
