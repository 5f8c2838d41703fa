"""The call plan: one dispatch decision per call signature, cached, then a direct launch.

    public function (api.py)
        │ signature(...)           a hashable key: device, dtypes, shapes, strides, 16-byte
        │                          alignment of every tensor, out dtype, whether C is read,
        │                          in place or not, explicit config, the bias (as a tensor)
        │                          and the activation of the fused epilogue (pingpong.fused)
        ▼
    PLANS[key] ──miss──▶ api validates the arguments, then build(...) decides once:
        │                  backend (hopper / portable / amd), path name, KernelConfig,
        │                  which operands need a 16-byte-aligned copy, the output target
        ▼                  and its copy-back (a refused call caches nothing)
    plan.run(a, b, out, c, α, β, bias)
        aligned copies (if any) · device guard · launch · copy-back (if any)
        the Hopper launch: Triton's JIT on the plan's first call, then a direct launch that
        refreshes only the base addresses and α, β (pingpong.runtime.launcher)

Batched problems (3-D a, b, c, out: one batch dimension; an operand shared by the batches is
2-D or has batch stride 0) take the same plans: their shapes and strides are in the key.

A key holds everything validation and dispatch read, so a cache hit means the call is valid
and its decision known; only per-call values (addresses, α, β, overlap of in-place output
with the inputs) are checked again. `path_for` returns `plan.path`, the path `run` takes.
"""

from __future__ import annotations

import collections
import dataclasses

import torch

from .. import fused
from .addressing import addressable, unaddressable
from ..hopper.config import KernelConfig, column_pieces
from .device import is_hopper
from ..errors import PingpongError
from ..hopper.launch import per_batch, tma_orientation
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


def signature(a, b, c, beta: float, out_dtype, inplace: bool, config, bias=None, activation=None) -> tuple:
    """The plan key of one call; raises AttributeError/TypeError for non-tensors (the caller
    then validates and reports them)."""
    c_sig = None if c is None else tensor_signature(c)
    bias_sig = None if bias is None else tensor_signature(bias)
    return (tensor_signature(a), tensor_signature(b), out_dtype, c_sig, reads_c(c, beta), inplace, config, bias_sig,
            activation)


def store(key, plan: "Plan") -> "Plan":
    """Cache `plan`; the least recently used goes when full (a hit moves its key to the end:
    api._plan, the one reader)."""
    if len(PLANS) >= PLAN_CACHE_SIZE:
        PLANS.popitem(last=False)
    PLANS[key] = plan
    return plan


# ----------------------------------------------------------------------------- aligned copies


def tma_matrices(t: torch.Tensor) -> str | None:
    """tma_orientation of a 2-D `t`, or of every matrix of a batched (3-D) one: its one
    matrix if the batches share it, else matrix 0 with a 16-byte-multiple batch stride."""
    t = per_batch(t)
    if t.dim() == 2:
        return tma_orientation(t)
    return tma_orientation(t[0]) if (t.stride(0) * t.element_size()) % 16 == 0 else None


def tma_copy(t: torch.Tensor, values: bool = True) -> torch.Tensor:
    """A row-major copy of 2-D (or batched 3-D) `t` whose row stride is padded to 16 bytes
    (TMA's rule; the batch stride follows): the "hopper-padded" path, one extra pass over the
    tensor. `values=False`: only the buffer."""
    *lead, rows, cols = t.shape
    align = 16 // t.element_size()
    storage = torch.empty(*lead, max(rows, 1), -(-max(cols, 1) // align) * align, dtype=t.dtype, device=t.device)
    view = storage[..., :rows, :cols]
    if values:
        view.copy_(t)
    return view


def _fresh_row_major_legal(n: int, dtype: torch.dtype) -> bool:
    """A new contiguous (M, n) or (B, M, n) tensor of `dtype` is TMA-legal as a row-major
    output (the caching allocator's blocks are 512-byte aligned; the batch stride M·n is then
    a 16-byte multiple too)."""
    return (n * dtype.itemsize) % 16 == 0


# ----------------------------------------------------------------------------- plans


class Plan:
    """A dispatch decision. `path`: "hopper", "hopper-padded", "portable" or "amd"."""

    __slots__ = ("path", "device", "activation", "extents")  # extents: byte spans of a, b, c (in-place plans)

    def run(self, a, b, out, c, alpha: float, beta: float, bias=None) -> None:
        raise NotImplementedError


class EmptyPlan(Plan):
    """M, N, K or the batch is 0: no kernel. The empty sum makes out = act(bias) + β·c (zeros
    without a bias and C; β = 0: C unread)."""

    __slots__ = ("reads_c",)

    def __init__(self, device, read, activation="none"):
        self.device, self.reads_c, self.path, self.activation = device, read, "empty", activation

    def run(self, a, b, out, c, alpha, beta, bias=None):
        if out.numel() == 0:
            return
        if bias is None and self.activation == "none" and not self.reads_c:
            out.zero_()
            return
        y = torch.zeros(out.shape[-2:], dtype=torch.float32, device=out.device)
        if bias is not None:
            y = fused.torch_activation(self.activation)(y + bias.float())
        if self.reads_c:
            y = y + c.float() * beta
        out.copy_(y)


class HopperPlan(Plan):
    """The Gluon kernel (pingpong.hopper). Operands that TMA cannot read as they are stored
    are copied into 16-byte-aligned buffers; an output it cannot write is computed into one
    and copied back."""

    __slots__ = ("config", "copy_a", "copy_b", "copy_c", "copy_out", "reads_c", "launch", "batched")

    def __init__(self, device, config, copy_a, copy_b, copy_c, copy_out, read, activation="none", batched=False):
        self.device, self.config, self.reads_c, self.activation = device, config, read, activation
        self.copy_a, self.copy_b, self.copy_c, self.copy_out = copy_a, copy_b, copy_c, copy_out
        self.batched = batched
        self.path = "hopper-padded" if (copy_a or copy_b or copy_c or copy_out) else "hopper"
        self.launch = CachedLaunch(dynamic=("alpha", "beta"))

    def run(self, a, b, out, c, alpha, beta, bias=None):
        if self.batched:  # a shared operand: its one matrix (copied once, if at all)
            a, b = per_batch(a), per_batch(b)
        if self.copy_a:
            a = tma_copy(a)
        if self.copy_b:
            b = tma_copy(b)
        cin = None
        if self.reads_c:
            cin = per_batch(c) if self.batched and c is not out else c
            cin = tma_copy(cin) if self.copy_c else cin
        if not self.copy_out:
            target = out
        elif cin is not None and c is out:  # in place on a padded copy of c: read and written there
            target = cin
        else:
            target = tma_copy(out, values=False)  # fully overwritten
        bias_ptr = target.data_ptr() if bias is None else fused.bias_vector(bias).data_ptr()  # unread without one
        self._launch(a, b, target, cin, alpha, beta, bias, bias_ptr)
        if target is not out:
            out.copy_(target)

    def _launch(self, a, b, target, cin, alpha, beta, bias, bias_ptr):
        ptrs = (a.data_ptr(), b.data_ptr(), target.data_ptr(), (cin if cin is not None else target).data_ptr(), bias_ptr)
        self.launch(self.device, ptrs, (alpha, beta), self._jit_args, a, b, target, cin, alpha, beta, bias)

    def _jit_args(self, a, b, target, cin, alpha, beta, bias):
        from .device import sm_count
        from ..hopper.launch import prepare

        return prepare(a, b, target, cin, alpha, beta, self.config, sm_count(self.device), bias, self.activation)


#: (device, raw stream) -> that stream's arrival counters (int32, all zero between launches)
_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}


def arrival_counters(device: torch.device, n: int) -> torch.Tensor:
    """`n` zeroed int32 counters for a split-K launch on `device`'s current stream.

    The kernel leaves its counters at zero, so launches in one stream's order can all use that
    stream's buffer (no fill per call); launches on different streams never share one. While
    a CUDA graph is being captured the counters are a fresh zeroed tensor (the fill is part of
    the graph), since a graph's replays may run beside anything."""
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return torch.zeros(n, dtype=torch.int32, device=device)
    key = (device.index, torch._C._cuda_getCurrentRawStream(device.index))
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:  # the old buffer is freed in its stream's order
        buf = _COUNTERS[key] = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
    return buf


class SplitPlan(HopperPlan):
    """A split-K / swap-AB config (KernelConfig.split_k > 1 or swap_ab): the same copies as
    HopperPlan, then one launch (pingpong.hopper.fixup) with a fresh fp32 workspace from the
    caching allocator and the stream's arrival counters, so calls on different streams share
    neither:

        GEMM   a, b ──work units──> workspace (fp32 partials; swap-AB: of Cᵀ = bᵀ·aᵀ)
               the last split of each tile ──Σ splits in order, α, bias, act, β·C, cast──> out

    The output needs no TMA (the last split stores through pointers), only row-major."""

    __slots__ = ("workspace", "counters", "unused")

    def __init__(self, device, config, copy_a, copy_b, copy_c, copy_out, read, workspace, counters,
                 activation="none"):
        super().__init__(device, config, copy_a, copy_b, copy_c, copy_out, read, activation)
        self.workspace = workspace  # (rows, cols) of the fp32 workspace
        self.counters = counters  # number of int32 arrival counters (0: one split, none needed)
        self.unused = None

    def _launch(self, a, b, target, cin, alpha, beta, bias, bias_ptr):
        if self.counters:
            ws = torch.empty(self.workspace, dtype=torch.float32, device=target.device)
            counters = arrival_counters(target.device, self.counters)
        else:  # one split (swap-AB alone): neither is read; empty tensors made once
            if self.unused is None:
                self.unused = (torch.empty(0, dtype=torch.float32, device=target.device),
                               torch.empty(0, dtype=torch.int32, device=target.device))
            ws, counters = self.unused
        first, second = (b, a) if self.config.swap_ab else (a, b)  # the GEMM kernel's A and B
        self.launch(self.device, (first.data_ptr(), second.data_ptr(), ws.data_ptr(), counters.data_ptr(),
                                  target.data_ptr(), (cin if cin is not None else target).data_ptr(), bias_ptr),
                    (alpha, beta), self._jit_args, a, b, target, cin, alpha, beta, ws, counters, bias)

    def _jit_args(self, a, b, target, cin, alpha, beta, ws, counters, bias):
        from .device import sm_count
        from ..hopper.launch import prepare_split

        return prepare_split(a, b, target, cin, alpha, beta, self.config, sm_count(self.device), ws, counters, bias,
                             self.activation)


class PortablePlan(Plan):
    """The plain-Triton kernel (any CUDA/ROCm GPU, any strides), launched like the Hopper
    kernel: Triton's JIT on the plan's first call, then directly (pingpong.runtime.launcher)."""

    __slots__ = ("reads_c", "launch")

    def __init__(self, device, read, activation="none"):
        self.device, self.reads_c, self.path, self.activation = device, read, "portable", activation
        self.launch = CachedLaunch(dynamic=("alpha", "beta"))

    def run(self, a, b, out, c, alpha, beta, bias=None):
        cin = c if self.reads_c else out  # never read without C
        vec = None if bias is None else fused.bias_vector(bias)
        ptrs = (a.data_ptr(), b.data_ptr(), cin.data_ptr(), out.data_ptr(), (out if vec is None else vec).data_ptr())
        self.launch(self.device, ptrs, (alpha, beta), self._jit_args, a, b, out, c if self.reads_c else None, alpha,
                    beta, bias)

    def _jit_args(self, a, b, out, c, alpha, beta, bias):
        from ..portable import prepare

        return prepare(a, b, out, c, alpha, beta, bias, self.activation)


class AmdPlan(Plan):
    """The AMD Gluon kernels (pingpong.amd; compiled and checked offline, never run here).
    2-D only, no fused bias or activation (those take the portable kernel)."""

    __slots__ = ("reads_c",)

    def __init__(self, device, read):
        self.device, self.reads_c, self.path, self.activation = device, read, "amd", "none"

    def run(self, a, b, out, c, alpha, beta, bias=None):
        from ..amd import dispatch

        dispatch.gemm(a, b, out, alpha=alpha, beta=beta, c=c if self.reads_c else None)


def build(a, b, c, beta: float, out_dtype: torch.dtype, inplace: bool, config: KernelConfig | None, bias=None,
          activation: str = "none") -> Plan:
    """Decide, for validated arguments: backend, path, config, copies. `c` is the output
    itself when `inplace`. 2-D or batched (3-D) operands; `bias`/`activation` as in
    pingpong.fused (the activation is fixed by the plan, the bias is passed per call)."""
    device = a.device.index if a.device.index is not None else (torch.cuda.current_device() if a.is_cuda else -1)
    read = reads_c(c, beta)
    (M, K), N = a.shape[-2:], b.shape[-1]
    batches = max(t.shape[0] if t.dim() == 3 else 1 for t in (a, b))
    if 0 in (M, K, N, batches):
        return EmptyPlan(device, read, activation)
    if not is_hopper(device):
        if config is not None:
            raise PingpongError("config: matmul_tiled configures the Hopper kernel; this GPU takes the portable path")
        plain = a.dim() == b.dim() == 2 and bias is None and activation == "none"
        if torch.version.hip is not None and plain:
            from ..amd import dispatch

            out = c if inplace else torch.empty(a.shape[0], b.shape[1], dtype=out_dtype, device="meta")
            if dispatch.accepts(a, b, out_dtype) and addressable(dispatch.select_kernel(dispatch._device_arch(a)),
                                                                 a, b, out, c if read else None):
                return AmdPlan(device, read)
        return PortablePlan(device, read, activation)  # 64-bit offsets where a span needs them: any tensor
    if not addressable("hopper", a, b, c if read or inplace else None):
        if config is not None:
            raise PingpongError(f"config: the Hopper kernel cannot address this call's tensors "
                                f"({unaddressable('hopper', a=a, b=b, c=c)}); matmul_tiled runs only the Hopper kernel")
        return PortablePlan(device, read, activation)
    one_kernel = batches > 1 or a.dim() == 3 or b.dim() == 3  # split-K / swap-AB launches are 2-D only
    if config is None:
        from ..hopper.select import select_config

        config = select_config(batches * M, N, K, (a.dtype, out_dtype), _layouts(a, b), device)
        if one_kernel:
            config = one_kernel_config(config)
    elif one_kernel and (config.split_k > 1 or config.swap_ab):
        raise PingpongError(f"config: split_k={config.split_k}, swap_ab={config.swap_ab} run 2-D products only;"
                            " batched products take split_k=1, swap_ab=False")
    elif one_kernel and config.cluster_m > 1:
        raise PingpongError(f"config: cluster_m={config.cluster_m} (2-CTA clusters) runs 2-D products only;"
                            " batched products take cluster_m=1")
    elif one_kernel and len(column_pieces(config.block_n)) > 1:
        raise PingpongError(f"config: block_n={config.block_n} (two column pieces) runs 2-D products only;"
                            " batched products take a power-of-two block_n")
    config.derive(a.element_size(), out_dtype.itemsize)  # validates
    copy_ab = dict(copy_a=tma_matrices(a) is None, copy_b=tma_matrices(b) is None, read=read)
    if config.split_k > 1 or config.swap_ab:  # C and out go through pointers: row-major suffices
        from ..hopper.launch import MAX_SPLIT_BLOCK, counter_count, workspace_shape
        from ..hopper.scheduler import effective_splits

        splits = effective_splits(K, config.block_k, config.split_k)
        rows, cols = workspace_shape(M, N, K, config)
        if rows // splits * cols >= MAX_SPLIT_BLOCK:
            raise PingpongError(f"config: split_k={config.split_k} needs {rows // splits * cols} fp32 workspace"
                                f" elements per split for this {M}×{N} output; at most {MAX_SPLIT_BLOCK - 1} fit")
        row_major = lambda t: t.stride(1) == 1 or t.shape[1] <= 1  # noqa: E731
        return SplitPlan(device, config, **copy_ab, copy_c=read and not row_major(c),
                         copy_out=inplace and not row_major(c), workspace=(rows, cols),
                         counters=counter_count(M, N, config) if splits > 1 else 0, activation=activation)
    out_legal = (tma_matrices(c) == "row") if inplace else _fresh_row_major_legal(N, out_dtype)
    return HopperPlan(device, config, **copy_ab, copy_c=read and tma_matrices(c) != "row", copy_out=not out_legal,
                      activation=activation, batched=a.dim() == 3 or b.dim() == 3 or (c is not None and c.dim() == 3))


def one_kernel_config(config: KernelConfig) -> KernelConfig:
    """A config of the one-kernel path for a batched call (the split-K / swap-AB launches
    and their workspace are 2-D): split-K dropped; swap-AB (chosen for M ≤ 64) replaced by
    the heuristic's small-problem tile; a two-piece tile narrowed to its first piece (a
    batch's B box cannot be loaded into part of a buffer: Triton 3.6 could not reshape a
    slice; not re-tried under 3.9); a 2-CTA cluster run on one CTA.
    The ring slot's K width is kept: rank-3 boxes take two 64-element k-steps a slot as 2-D
    ones do (tests/test_batched_gpu.py, the `_k128` configs)."""
    if config.swap_ab:
        return KernelConfig(128, 128, 64)
    pieces = column_pieces(config.block_n)
    return dataclasses.replace(config, split_k=1, block_n=pieces[0], cluster_m=1)  # clusters: 2-D only


def _layouts(a, b) -> str:
    """"nt" etc.: how a (M × K) and b (K × N) are stored, n = row-major, t = a transposed view."""
    return "".join("n" if t.stride(-1) == 1 else "t" for t in (a, b))
