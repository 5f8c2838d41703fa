"""The Hopper backend: can_implement(spec) and plan(spec) for the Gluon kernel (pingpong.hopper),
and its plans (one kernel; split-K / swap-AB).

    can_implement(spec)   None, or why not: not an sm_90 GPU; a tensor the kernel cannot
                          address (TMA's coordinate and stride limits); an explicit config
                          the call cannot run (split-K / swap-AB / a two-piece tile batched,
                          a split-K workspace beyond 32-bit offsets); a grouped spec: an
                          operand or the output the grouped kernel's TMA cannot take; an FP8
                          grouped spec (scales): a or b not 16-byte aligned
    plan(spec)            KernelConfig (explicit, or select_config: table, heuristic), which
                          operands need a 16-byte-aligned copy (TMA's rule), the output
                          target (out itself, or an aligned buffer + copy-back); a grouped
                          spec: GroupedHopperPlan (the kernel, its tile, which operands are
                          copied first); an FP8 grouped spec: pingpong.hopper.host.fp8_grouped's
                          Fp8GroupedPlan (its tile and promotion)

Grouped specs (pingpong.grouped): ragged rows and ragged columns (the transposed views,
`spec.ragged_view`) run the ragged-rows kernel (pingpong.hopper.kernels.grouped: A K-major, B either
way, out row-major, or column-major through pointer stores); ragged K the ragged-K kernel
(pingpong.hopper.kernels.grouped_k: x = aᵀ (T, M) and b (T, N) row-major, out (G, M, N) row-major).
An operand the kernel cannot read as stored is copied contiguous first when the copy can be
read ("hopper-padded"); otherwise, or when the output cannot be written, the spec is refused
and the portable kernel runs it.

TMA's rule: the base and every non-unit stride are multiples of 16 bytes and one stride is 1.
A tensor that breaks it is copied once into an aligned buffer ("hopper-padded").
"""

from __future__ import annotations

import dataclasses

import torch

from ...errors import PingpongError
from ...runtime.addressing import unaddressable
from ...runtime.device import is_hopper
from ...runtime.launcher import CachedLaunch
from ...runtime.plan import GroupedPlan, LaunchedPlan, Plan, device_index, split_scratch
from ...runtime.spec import COLS, NO_ARGS, RAGGED_K, EpilogueArgs, GemmSpec, grouped_out, ragged_view, tma_matrix_stride
from .config import KernelConfig, column_pieces
from .launch import (counter_count, operand_pointers, partial_slots, per_batch, prepare, prepare_split, tma_orientation,
                     workspace_reason, workspace_shape)
from .select import DEFAULT_SMS, Device, choose, heuristic_choice, stream_k_note

NAME = "hopper"
CONFIGURABLE = True  # matmul_tiled's explicit KernelConfig configures this backend


# ----------------------------------------------------------------------------- TMA legality of a spec


def tma_matrices(t) -> str | None:
    """TMA orientation of a 2-D operand, or of every matrix of a batched (3-D) one: its one
    matrix if the batches share it, else matrix 0 with a 16-byte-multiple batch stride.
    `t`: an Operand (a spec's) or a tensor."""
    shape, st, size = t.shape, t.stride(), t.element_size()
    if len(shape) == 3 and not (shape[0] == 1 or st[0] == 0 or tma_matrix_stride(st[0], size)):
        return None
    return tma_orientation(t)


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


def _one_kernel(spec: GemmSpec) -> bool:
    """A batched call: one kernel over every batch (split-K / swap-AB launches are 2-D only)."""
    return spec.batches > 1 or len(spec.a.shape) == 3 or len(spec.b.shape) == 3


# ----------------------------------------------------------------------------- the backend's answers


def can_implement(spec: GemmSpec) -> str | None:
    device = spec.device
    if not is_hopper(device_index(device)):
        return (f"{device} is not a Hopper GPU (sm_90)" + ("; matmul_tiled configures the Hopper kernel, this GPU"
                                                           " takes the portable path" if spec.config else ""))
    if spec.groups is not None:
        return _grouped_layout(spec)[-1] if spec.epilogue.scales is None else _fp8_grouped_reason(spec)
    c = spec.c if spec.epilogue.reads_c or spec.inplace else None
    why = unaddressable("hopper", a=spec.a, b=spec.b, c=c)
    if why:
        return (f"the Hopper kernel cannot address this call's tensors ({why})"
                + ("; matmul_tiled runs only the Hopper kernel" if spec.config else ""))
    if spec.epilogue.scales is not None:  # FP8: pingpong.hopper.host.fp8_launch checks its config when planning
        return None
    config = spec.config
    if config is None:
        return None
    if _one_kernel(spec) and (config.split_k > 1 or config.swap_ab or config.stream_k):
        return (f"split_k={config.split_k}, swap_ab={config.swap_ab}, stream_k={config.stream_k} run 2-D products"
                " only; batched products take split_k=1, swap_ab=False, stream_k=False")
    if _one_kernel(spec) and config.cluster_m > 1:
        return (f"cluster_m={config.cluster_m} (2-CTA clusters) runs 2-D products only; batched products take"
                " cluster_m=1")
    if _one_kernel(spec) and len(column_pieces(config.block_n)) > 1:
        return (f"block_n={config.block_n} (two column pieces) runs 2-D products only; batched products take a"
                " power-of-two block_n")
    return workspace_reason(*spec.mnk, config, sms=_stream_sms(config, spec))


def plan(spec: GemmSpec) -> Plan:
    """The plan of a spec this backend can implement."""
    if spec.groups is not None:
        if spec.epilogue.scales is not None:
            from . import fp8_grouped  # the FP8 grouped kernel's module, compiled on first use

            return fp8_grouped.plan(spec)
        return _grouped_plan(spec)
    if spec.epilogue.scales is not None:
        from . import fp8_launch  # the FP8 kernel's module, compiled on first use

        return fp8_launch.plan(spec)
    a, b, c = spec.a, spec.b, spec.c
    out_dtype, read, activation = spec.out_dtype, spec.epilogue.reads_c, spec.epilogue.activation
    device = device_index(spec.device)
    gpu = Device.of(device, spec.carveout)  # the SMs the launch spans: the GPU's less torch's carveout
    (M, N, K), batches = spec.mnk, spec.batches
    config, source = spec.config, "the config given"
    if config is None:
        heuristic, why = heuristic_choice(batches * M, N, K, gpu.sms, a.element_size())
        config, source = choose(batches * M, N, K, (a.dtype, out_dtype), _layouts(a, b), gpu, heuristic)
        source = f"the heuristic: {why}" if source == "heuristic" else f"the config tuned in {source}"
        if _one_kernel(spec):
            config, source = one_kernel_config(config), source + ", as one batched kernel"
        why = workspace_reason(*spec.mnk, config, sms=_stream_sms(config, spec, gpu))
        if why:
            raise PingpongError(f"config: {why}")
    d = config.derive(a.element_size(), out_dtype.itemsize)  # validates
    copy_ab = dict(copy_a=tma_matrices(a) is None, copy_b=tma_matrices(b) is None, read=read)
    if d.workspace:  # split-K / swap-AB / stream-K: C and out go through pointers, row-major suffices
        splits = partial_slots(M, N, K, config, sms=_stream_sms(config, spec, gpu))
        rows, cols = workspace_shape(M, N, K, config, sms=_stream_sms(config, spec, gpu))
        if d.stream_k:  # whole tiles through the TMA epilogue: out and C as HopperPlan's
            copy_c = read and tma_matrices(c) != "row"
            copy_out = not ((tma_matrices(c) == "row") if spec.inplace else _fresh_row_major_legal(N, out_dtype))
        else:
            row_major = lambda t: t.strides[1] == 1 or t.shape[1] <= 1  # noqa: E731
            copy_c, copy_out = read and not row_major(c), spec.inplace and not row_major(c)
        plan = SplitPlan(device, config, **copy_ab, copy_c=copy_c, copy_out=copy_out, workspace=(rows, cols),
                         counters=counter_count(M, N, config) if splits > 1 else 0, activation=activation,
                         sms=gpu.sms)
    else:
        out_legal = (tma_matrices(c) == "row") if spec.inplace else _fresh_row_major_legal(N, out_dtype)
        plan = HopperPlan(device, config, **copy_ab, copy_c=read and tma_matrices(c) != "row",
                          copy_out=not out_legal, activation=activation, batched=spec.batched, sms=gpu.sms)
    plan.why = source
    plan.stream_k = stream_k_note(M, N, K, config, gpu.sms,
                                  a.element_size(), out_dtype.itemsize, batches)
    return plan


def one_kernel_config(config: KernelConfig) -> KernelConfig:
    """A config of the one-kernel path for a batched call (the split-K / swap-AB / stream-K
    launches and their workspace are 2-D): split-K and stream-K dropped; swap-AB (the
    selection's pick for decode rows and some mid rows) replaced by cooperative 128×128; a
    two-piece tile narrowed to its first piece (a
    batch's B box cannot be loaded into part of a buffer: Triton 3.6 could not reshape a
    slice; not re-tried under 3.9); a 2-CTA cluster run on one CTA.
    The ring slot's K width is kept: rank-3 boxes take two 64-element k-steps a slot as 2-D
    ones do (tests/test_batched_gpu.py, the `_k128` configs)."""
    if config.swap_ab:
        return KernelConfig(128, 128, 64)
    pieces = column_pieces(config.block_n)
    return dataclasses.replace(config, split_k=1, block_n=pieces[0], cluster_m=1, stream_k=False)  # 2-D only


def _stream_sms(config: KernelConfig, spec: GemmSpec, gpu: Device | None = None) -> int:
    """The SMs a stream-K launch divides its work between (its workspace depends on them; the
    other configs' does not, and they ask no device): `gpu`'s, else the spec's device's under
    its carveout."""
    if not config.stream_k:
        return DEFAULT_SMS
    return (gpu or Device.of(device_index(spec.device), spec.carveout)).sms


def _layouts(a, b) -> str:
    """"nt" etc.: how a (M × K) and b (K × N) are stored, n = row-major, t = a transposed view."""
    return "".join("n" if t.stride(-1) == 1 else "t" for t in (a, b))


# ----------------------------------------------------------------------------- grouped specs


def _grouped_layout(spec: GemmSpec):
    """(kernel module, a, b, out, copy_a, copy_b, why not) of a grouped spec on the Hopper
    grouped kernels: a, b, out as the kernel takes them (Operands), each operand read as
    stored when its TMA rule allows, else from a contiguous copy; why not (None: it runs) names
    the user's argument that neither fits, or the output."""
    mode = spec.groups.mode
    if mode == RAGGED_K:  # the kernel reads x = aᵀ (T, M) and b (T, N), T the row dimension
        from . import grouped_k as kernel

        a, b, out = spec.a.mT, spec.b, grouped_out(spec)
        a_fits = b_fits = kernel.legal_operand
        out_fits, what = kernel.legal_out, "ragged-K kernel (T-contiguous rows of 16-byte multiples)"
    else:
        from . import grouped as kernel

        a, b, out = ragged_view(mode, spec.a, spec.b, grouped_out(spec))
        a_fits, b_fits = (lambda t: kernel.legal(t, "row")), kernel.legal  # A K-major (kernel.prepare)
        out_fits, what = kernel.legal, "ragged-rows kernel (TMA: 16-byte-aligned rows)"
    copy_a, copy_b = not a_fits(a), not b_fits(b)
    names = ("b", "a") if mode == COLS else ("a", "b")  # ragged columns: the kernel's a is bᵀ
    why = None
    for name, t, fits in ((names[0], a.contiguous() if copy_a else a, a_fits),
                          (names[1], b.contiguous() if copy_b else b, b_fits)):
        if not fits(t):
            user = getattr(spec, name)
            why = (f"the Hopper {what} cannot read {name} (shape {tuple(user.shape)}, strides {user.strides}),"
                   " even from a contiguous copy")
            break
    if why is None and not out_fits(out):
        why = f"the Hopper {what} cannot write the {tuple(out.shape)} {spec.out_dtype} output"
    return kernel, a, b, out, copy_a, copy_b, why


def _fp8_grouped_reason(spec: GemmSpec) -> str | None:
    """Why the FP8 grouped kernel cannot take a validated FP8 grouped spec (pingpong.runtime.
    fp8_spec: layouts and strides are the contract's), or None: its TMA reads a and W from
    their bases, which must be 16-byte aligned (refused, not copied: a copy of a or of every
    expert's weight per call would cost as much as the product)."""
    for name in ("a", "b"):
        if not getattr(spec, name).aligned:
            return (f"{name}: base address must be 16-byte aligned (TMA) for the FP8 grouped kernel (refused, not"
                    " copied)")
    return None


def _grouped_plan(spec: GemmSpec) -> "GroupedHopperPlan":
    kernel, a, b, out, copy_a, copy_b, _ = _grouped_layout(spec)
    G = spec.groups.count
    if spec.groups.mode == RAGGED_K:
        (T, M), N = a.shape, b.shape[1]
        config = kernel.select_ragged_k_config(M, N, T, G)
    else:
        T, N = out.shape
        config = kernel.select_grouped_config(T, G, N)
    device = device_index(spec.device)
    return GroupedHopperPlan(device, spec.groups.mode, kernel.prepare, config, copy_a, copy_b,
                             Device.of(device, spec.carveout).sms)


class GroupedHopperPlan(GroupedPlan):
    """A grouped product on a Hopper grouped kernel (`_grouped_layout`), launched through a
    bound direct launch (Triton's JIT on the plan's first call). An operand TMA cannot read
    as stored is copied contiguous first ("hopper-padded"). `sms`: the SMs its persistent grid
    spans (the GPU's less torch's SM carveout when planned)."""

    __slots__ = ("prepare", "config", "copy_a", "copy_b", "launch", "sms")

    def __init__(self, device, mode, prepare, config, copy_a, copy_b, sms):
        self.device, self.mode, self.prepare, self.config, self.activation = device, mode, prepare, config, "none"
        self.sms = sms
        self.copy_a, self.copy_b = copy_a, copy_b
        self.path = "hopper-padded" if copy_a or copy_b else "hopper"
        self.launch = CachedLaunch()

    def compute(self, a, b, out, offs):
        if self.mode == RAGGED_K:
            a = a.t()  # x (T, M): the backward's a = x.t() is read as it is
        if self.copy_a:
            a = a.contiguous()
        if self.copy_b:
            b = b.contiguous()
        o = out.data_ptr()
        ptrs = (a.data_ptr(), b.data_ptr(), o, offs.data_ptr()) if self.mode == RAGGED_K else \
            (a.data_ptr(), b.data_ptr(), o, o, offs.data_ptr())
        self.launch(self.device, ptrs, (), self.prepare, a, b, out, offs, self.config, self.sms)


# ----------------------------------------------------------------------------- plans


class HopperPlan(LaunchedPlan):
    """The Gluon kernel (pingpong.hopper). Operands that TMA cannot read as they are stored
    are copied into 16-byte-aligned buffers; an output it cannot write is computed into one
    and copied back. `sms`: the SMs its persistent grid spans (the GPU's less torch's SM
    carveout when planned: the carveout is in the plan's key)."""

    __slots__ = ("config", "copy_a", "copy_b", "copy_c", "copy_out", "reads_c", "launch", "batched", "one_launch",
                 "pointer_launch", "sms", "swapped")

    def __init__(self, device, config, copy_a, copy_b, copy_c, copy_out, read, activation="none", batched=False, *,
                 sms):
        self.device, self.config, self.reads_c, self.activation, self.sms = device, config, read, activation, sms
        self.swapped = config.swap_ab
        self.copy_a, self.copy_b, self.copy_c, self.copy_out = copy_a, copy_b, copy_c, copy_out
        self.batched = batched
        self.path = "hopper-padded" if (copy_a or copy_b or copy_c or copy_out) else "hopper"
        self.launch = CachedLaunch(dynamic=("alpha", "beta"))
        self.one_launch = type(self) is HopperPlan and not (copy_a or copy_b or copy_c or copy_out or batched)
        self.pointer_launch = self.one_launch and not read

    def run(self, a, b, out, args=NO_ARGS):
        c = args.c
        if self.one_launch:  # no copies, not batched: the launch alone (C read where β·C is asked)
            cin = c if self.reads_c else None
            ptrs = self.kernel_order(a.data_ptr(), b.data_ptr()) + operand_pointers(out, args, out if cin is None else cin)
            self.launch(self.device, ptrs, (args.alpha, args.beta), self._jit_args, a, b, out, cin, args)
            return
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
        self._launch(a, b, target, cin, args)
        if target is not out:
            out.copy_(target)

    pointer_launch: bool  # set at construction: no copies, not batched, C not read, one kernel

    def kernel_order(self, a, b) -> tuple:
        """(a, b), or (b, a) under swap-AB: the kernel's A and B (it computes Cᵀ = bᵀ·aᵀ)."""
        return (b, a) if self.swapped else (a, b)

    def _launch(self, a, b, target, cin, args):
        """One launch into `target` (out, or its aligned stand-in), C as read (`cin`; None: not
        read), the rest of the call's operands from `args` (EpilogueArgs): the kernel's A and B
        (kernel_order), then its EpilogueOperands fields' base addresses (launch.operand_pointers)."""
        ptrs = self.kernel_order(a.data_ptr(), b.data_ptr()) + operand_pointers(target, args,
                                                                               target if cin is None else cin)
        self.launch(self.device, ptrs, (args.alpha, args.beta), self._jit_args, a, b, target, cin, args)

    def _jit_args(self, a, b, target, cin, args):
        return prepare(a, b, target, args._replace(c=cin), self.config, self.sms, self.activation)


class SplitPlan(HopperPlan):
    """A split-K / swap-AB / stream-K config (KernelConfig.split_k > 1, swap_ab or stream_k): the same copies as
    HopperPlan, then one launch (pingpong.hopper.device.fixup) with the stream's fp32 workspace and
    arrival counters (pingpong.runtime.plan.split_scratch), so calls on different streams share
    neither:

        GEMM   a, b ──work units──> workspace (fp32 partials; swap-AB: of Cᵀ = bᵀ·aᵀ)
               the last split of each tile ──Σ splits in order, α, bias, act, β·C, cast──> out

    The output needs no TMA (the last split stores through pointers), only row-major; under
    stream-K whole tiles go out through TMA, so out and C are TMA-legal (copied otherwise)."""

    __slots__ = ("workspace", "counters", "unused", "scratch_device")

    def __init__(self, device, config, copy_a, copy_b, copy_c, copy_out, read, workspace, counters,
                 activation="none", *, sms):
        super().__init__(device, config, copy_a, copy_b, copy_c, copy_out, read, activation, sms=sms)
        self.workspace = workspace  # (rows, cols) of the fp32 workspace
        self.counters = counters  # number of int32 arrival counters (0: one split, none needed)
        self.unused = None
        self.pointer_launch = not (copy_a or copy_b or copy_c or copy_out or read)
        self.scratch_device = torch.device("cuda", device) if device >= 0 else torch.device("cpu")  # run_ptrs'

    def _scratch(self, device) -> tuple:
        """(workspace, arrival counters) of one launch on `device`."""
        if self.counters:
            return split_scratch(device, self.workspace[0] * self.workspace[1], self.counters)
        if self.unused is None:  # one split (swap-AB alone): neither is read; empty tensors made once
            self.unused = (torch.empty(0, dtype=torch.float32, device=device),
                           torch.empty(0, dtype=torch.int32, device=device))
        return self.unused

    def _launch(self, a, b, target, cin, args):
        ws, counters = self._scratch(target.device)
        first, second = self.kernel_order(a, b)
        ptrs = operand_pointers(target, args, target if cin is None else cin, self.config.stream_k)
        self.launch(self.device, (first.data_ptr(), second.data_ptr(), ws.data_ptr(), counters.data_ptr()) + ptrs,
                    (args.alpha, args.beta), self._jit_args, a, b, target, cin, args, ws, counters)

    def run_ptrs(self, a_ptr, b_ptr, out_ptr, bias_ptr, views, *inputs):
        ws, counters = self._scratch(self.scratch_device)
        first, second = self.kernel_order(a_ptr, b_ptr)
        tiles = (out_ptr, out_ptr) if self.config.stream_k else ()  # EpilogueOperands' tile_out, tile_cin
        self.launch(self.device, (first, second, ws.data_ptr(), counters.data_ptr(), out_ptr, out_ptr,
                                  bias_ptr or out_ptr, *tiles), (1.0, 0.0), self._split_views,
                    views, ws, counters, *inputs)

    def _split_views(self, views, ws, counters, *inputs):
        a, b, out, bias = views(*inputs)
        return self._jit_args(a, b, out, None, EpilogueArgs(bias=bias), ws, counters)

    def _jit_args(self, a, b, target, cin, args, ws, counters):
        return prepare_split(a, b, target, args._replace(c=cin), self.config, self.sms, ws, counters, self.activation)
