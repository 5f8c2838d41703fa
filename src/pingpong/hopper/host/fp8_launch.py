"""Host side of the Hopper FP8 GEMM (pingpong.hopper.kernels.fp8_gemm): the tile choice (a
tuning table's entry or the rule of pingpong.hopper.host.fp8_select), TMA descriptors, the
constexprs from `Derived`, the persistent grid, and the offline builds.

Operands arrive validated (pingpong.fp8): A (M, K) row-major and W (N, K) row-major (the
caller's b = W.t()), both fp8 and TMA-legal; scales fp32 in torch._scaled_mm's layouts.

`select_fp8` picks the tile (one decision, made here): the tuning table's entry for this GPU,
shape bucket and FP8 problem (`pingpong tune --dtype fp8`; table dtype `table.fp8_key`, e.g.
"fp8e4m3-row"), found and vetted as select_config's (`select.tabled`) and checked by
`check_fp8_config` (an entry the FP8 kernel cannot run falls back to the rule); else the rule,
`fp8_select.rule_fp8`, a function of the shape alone (that module's docstring draws it).
"""

from __future__ import annotations

import dataclasses

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ...runtime import compile as cc
from ...runtime.launcher import CachedLaunch
from ...errors import ConfigError
from ...runtime.plan import Plan, device_index, split_scratch
from ...runtime.spec import NO_ARGS, SCALE_BLOCK, EpilogueArgs, GemmSpec, scale_mode
from ..device.epilogue import EpilogueConstants
from ..kernels.fp8_gemm import fp8_gemm, fp8_split_gemm, fp8_stream_gemm
from . import table as tables
from .config import MAX_ACC_REGS, SMEM_LIMIT, KernelConfig
from .launch import (MAX_SPLIT_BLOCK, counter_count, epilogue_operands, kernel_constants, launch_options,
                     operand_constants, operand_descriptors, operand_pointers, partial_slots, persistent_grid,
                     tile_descriptor, workspace_reason, workspace_shape)
from .fp8_select import FP8_BYTES, long_product, rule_fp8
from .select import Device, tabled, tile_count
from .splits import effective_splits, stream_k_split

#: fp32 elements of a 128×128 b-scale box (Fp8Scales): 128 bytes, so that every slot's box
#: starts 128-byte aligned, as a TMA load's shared-memory destination must (CUDA programming
#: guide, multi-dimensional TMA alignment); only its first 4 elements are read
_SB_BOX = 32



#: torch's FP8 dtypes -> the kind in the tuning table's dtype key (table.fp8_key)
FP8_KINDS = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}


def choose_fp8(M: int, N: int, K: int, promote: bool, sms: int, gpu: str | None = None, scaling: str = "tensor",
               sb_cols: int = SCALE_BLOCK, out_bytes: int = 2, kind: str = "e4m3",
               carveout: int = 0) -> tuple[KernelConfig, str]:
    """(config, source) of an FP8 product: the tuning table of the GPU named `gpu` (None: no
    table) for this problem (its dtype key: `fp8_key(kind, scaling, promote)`) where it has a
    usable entry (source: its path), else the rule (source "rule"). `sms`: the SMs the launch
    spans, the GPU's less torch's SM carveout `carveout` (select.Device)."""
    rule = rule_fp8(M, N, K, promote, sms, scaling)
    check = lambda c: check_fp8_config(c, promote, out_bytes, scale_boxes(scaling, sb_cols, c))  # noqa: E731
    found = tabled(M, N, K, tables.fp8_key(kind, scaling, promote), "nt", Device(gpu, sms, carveout), rule, check)
    return found or (rule, "rule")


def select_fp8(M: int, N: int, K: int, promote: bool, sms: int, gpu: str | None = None, scaling: str = "tensor",
               sb_cols: int = SCALE_BLOCK, out_bytes: int = 2, kind: str = "e4m3", carveout: int = 0) -> KernelConfig:
    """The KernelConfig of an FP8 product (module docstring; `choose_fp8` says where it came from)."""
    return choose_fp8(M, N, K, promote, sms, gpu, scaling, sb_cols, out_bytes, kind, carveout)[0]


def sa_box(block_m: int, any_row: bool = False) -> int:
    """fp32 elements of a block-wise sa box (Fp8Scales): block_m, or where tiles start at any
    row (the grouped kernel, ANY_ROW) 2·block_m: a TMA box is a power of two, and this one
    starts at the 16-byte boundary up to 3 rows below the tile."""
    return 2 * block_m if any_row else block_m


def scale_boxes(scaling: str, sb_cols: int, config: KernelConfig, any_row: bool = False) -> tuple[int, int]:
    """Bytes of the sa and sb boxes the block-wise scales add to each ring slot (Fp8Scales): an
    sa box (sa_box) of fp32, an sb box of _SB_BOX fp32 (128×128 b scales) or block_n (1×128);
    (0, 0) for tensor- and row-wise."""
    if scaling != "block":
        return 0, 0
    return 4 * sa_box(config.block_m, any_row), 4 * (_SB_BOX if sb_cols == SCALE_BLOCK else config.block_n)


def check_fp8_config(config: KernelConfig, promote: bool, out_bytes: int, boxes: tuple[int, int] = (0, 0)):
    """Derived of `config` for fp8 operands; ConfigError where the FP8 kernel cannot run it.
    `boxes` (scale_boxes) ride in every ring slot: derived stages are as many as still fit;
    explicit stages must fit with them."""
    d = config.derive(FP8_BYTES, out_bytes)
    if d.schedule == "persistent":
        raise ConfigError(f"the FP8 kernel runs the cooperative and ping-pong schedules; got {config}")
    if d.block_n2 and (d.split_k > 1 or d.stream_k or any(boxes) or (d.schedule != "cooperative" and not d.swap_ab)):
        raise ConfigError(f"block_n={d.block_n} (two column pieces) runs unsplit, without stream-K or a cluster, with"
                          f" tensor- or row-wise scales, on the cooperative schedule or swap-AB; got {config}"
                          f"{' with block-wise scales' if any(boxes) else ''}")
    if d.swap_ab and any(boxes):
        raise ConfigError(f"{config}: swap-AB with block-wise scales is not built: the swapped tile's rows are N,"
                          " whose 128×128 b scales are one per 128 rows (the promotion reads one a scale per row),"
                          " and its columns are M, whose 1×128 a scales would need a per-column box of block_n ≥ 32;"
                          " use swap_ab=False (tensor- and row-wise scales swap)")
    if d.block_k != SCALE_BLOCK:
        raise ConfigError(f"block_k={d.block_k}: the FP8 kernel's ring slot is one {SCALE_BLOCK}-deep K block")
    if config.cluster_m != 1 and any(boxes):
        raise ConfigError(f"cluster_m={config.cluster_m} with block-wise scales is not built (each CTA of the pair"
                          " would stage its own rows' scale boxes); use cluster_m=1 (tensor- and row-wise scales"
                          " pair)")
    if promote and 2 * d.acc_regs > MAX_ACC_REGS:
        raise ConfigError(f"a promoted FP8 tile holds two accumulators: 2 × {d.acc_regs} fp32 registers per thread"
                          f" exceed {MAX_ACC_REGS}")
    scale_bytes = sum(boxes)
    if any(b % 128 for b in boxes):
        raise ConfigError(f"{config}: block-wise scale boxes of {boxes} bytes; each must be a multiple of 128 (TMA"
                          " writes shared memory 128-byte aligned): block_m and block_n ≥ 32")
    if scale_bytes:
        fixed = d.shared_bytes - d.stages * d.stage_bytes
        fit = (SMEM_LIMIT - fixed) // (d.stage_bytes + scale_bytes)
        if config.stages is None and fit < d.stages:
            d = dataclasses.replace(config, stages=fit).derive(FP8_BYTES, out_bytes)
        elif d.stages > fit:
            raise ConfigError(f"shared memory: {d.stages} stages × ({d.stage_bytes} + {scale_bytes} B of block scales)"
                              f" + {fixed} B exceed the {SMEM_LIMIT} B limit; at most {fit} stages fit")
    return d


def block_scale_a_view(scale_a):
    """scale_a (M, K/128) with strides (1, M) (torch._scaled_mm's outer-dim-major 1×128 a
    scales) as the kernel's TMA reads it: its (K/128, M) rows. Copied only where TMA cannot
    read it in place: a row not a 16-byte multiple (M % 4 ≠ 0: into a (K/128, M rounded up to
    4) buffer), a base address off 16 bytes. The decision depends on the plan's key only (M,
    the scale's strides and alignment)."""
    sa = scale_a.t()
    if sa.shape[1] % 4 or sa.data_ptr() % 16:
        pad = torch.empty(sa.shape[0], -(-sa.shape[1] // 4) * 4, dtype=sa.dtype, device=sa.device)
        sa = pad[:, :sa.shape[1]]
        sa.copy_(scale_a.t())
    return sa


def block_scale_views(scale_a, scale_b, sb_cols: int):
    """The block scales as the kernel's TMA reads them (Fp8Scales): scale_a's storage as
    (K/128, M) rows (block_scale_a_view) and scale_b's as (N/128, K/128) rows (128×128) or
    (K/128, N) (1×128), cloned where its base address is off 16 bytes."""
    sb = scale_b.t() if sb_cols == SCALE_BLOCK else scale_b
    if sb.data_ptr() % 16:
        sb = sb.clone(memory_format=torch.contiguous_format)
    return block_scale_a_view(scale_a), sb


def block_scale_descriptors(sa, sb, sa_box: int):
    """TMA descriptors of 128×128 block scales (Fp8Scales): sa, (K/128, M) rows (a row stride
    that is a multiple of 4), box [1, sa_box]; sb, any rank with K/128 last and contiguous,
    seen from its base as one row of fp32 long enough for its last element, box [1, _SB_BOX]."""
    flat = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    sa = TensorDescriptor(sa, list(sa.shape), [sa.stride(0), 1], [1, sa_box], flat)
    length = 1 + sum((n - 1) * st for n, st in zip(sb.shape, sb.stride()))
    sb = TensorDescriptor(sb, [1, length], [-(-length // 4) * 4, 1], [1, _SB_BOX], flat)
    return sa, sb


def kernel_operands(a, w, scale_a, scale_b, swap: bool):
    """The kernel's (A, W, sa, sb) for out = a @ wᵀ: the caller's, or under swap-AB (Cᵀ = W·Aᵀ,
    N on the wgmma's 64-row side) the operands exchanged and each scale transposed, so that the
    kernel's sa is still one per row of its product and sb one per column: row-wise scale_b
    (1, N) becomes the (N, 1) row scale, scale_a (M, 1) the (1, M) column scale; tensor-wise
    scalars stay as they are. Both operands are K-major either way (fp8 wgmma reads no
    transposed operand), so swapping is exchanging their descriptors."""
    return kernel_order(a, w, scale_a.t(), scale_b.t(), True) if swap else (a, w, scale_a, scale_b)


def kernel_order(a, w, sa, sb, swap: bool):
    """(a, w, sa, sb) in the kernel's argument order (`kernel_operands`: under swap-AB the
    operands exchanged, and the scales' roles); tensors or their base addresses alike."""
    return (w, a, sb, sa) if swap else (a, w, sa, sb)


def kernel_scaling(scaling: str, M: int, N: int, K: int, config: KernelConfig, promote: bool,
                   sms: int) -> tuple[str, bool]:
    """(the scaling the kernel runs, whether tensor-wise scalars are broadcast into row-wise
    vectors per call): long tensor-wise products take the row-wise kernel (fp8_select's docstring);
    every other call its own scaling."""
    if scaling == "tensor" and promote and long_product(M, N, K, sms) and fp8_splits(K, config) == 1 \
            and not config.swap_ab and config.cluster_m == 1:
        return "row", True
    return scaling, False


def fp8_splits(K: int, config: KernelConfig) -> int:
    """The K splits a config runs (scheduler.effective_splits): > 1 takes fp8_split_gemm."""
    return effective_splits(K, SCALE_BLOCK, config.split_k)


def prepare(a, w, out, args: EpilogueArgs, scaling: str, promote: bool, sb_cols: int, config: KernelConfig, sms: int,
            activation: str = "none", workspace=None, counters=None):
    """(kernel, args, kwargs, grid) for out = act(scale(a @ wᵀ) + bias), the scales and the bias
    from `args` (EpilogueArgs).

    scaling "tensor" | "row" | "block"; sb_cols: columns sharing one b scale per K block
    (block-wise: 128 for 128×128 blocks, 1 for 1×128). More than one split (fp8_splits) or
    a ping-pong swap-AB: fp8_split_gemm (pointer epilogue; swap-AB stores the transposed tile,
    as the 16-bit swap path: fixup.SplitEpilogue), with `workspace` (fp32, at least
    launch.workspace_shape) and `counters` (int32, at least launch.counter_count, all zero;
    zero again after the kernel; neither is read with one split). Swap-AB runs the kernel on
    kernel_operands: an R × C = N × M product; unsplit and cooperative (config.staged_swap),
    fp8_gemm, whose TMA epilogue stages each sub-tile transposed."""
    M, K = a.shape
    N = w.shape[0]
    d = check_fp8_config(config, promote, out.element_size(), scale_boxes(scaling, sb_cols, config))
    a, w, scale_a, scale_b = kernel_operands(a, w, args.scale_a, args.scale_b, d.swap_ab)
    R, C = a.shape[0], w.shape[0]  # the kernel's product: M × N, or N × M under swap-AB
    a_desc, b_desc, _ = operand_descriptors(a, w.t(), d)  # both K-major (pingpong.fp8 copies them so)
    if scaling == "tensor":
        sa, sb, strides = scale_a, scale_b, (0, 0)
    elif scaling == "row":
        sa, sb, strides = scale_a, scale_b, (scale_a.stride(0), scale_b.stride(1))
    else:
        sa, sb = block_scale_views(scale_a, scale_b, sb_cols)
        if sb_cols == SCALE_BLOCK:  # (N/128, K/128) rows seen as one row: the box at n_blk·stride + kb
            strides = (0, sb.stride(0) if sb.shape[0] > 1 else K // SCALE_BLOCK)
            sa, sb = block_scale_descriptors(sa, sb, sa_box(d.block_m))
        else:
            flat = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
            kb = K // SCALE_BLOCK
            strides = (0, 0)
            sa = TensorDescriptor(sa, [kb, R], [sa.stride(0), 1], [1, d.block_m], flat)
            sb = TensorDescriptor(sb, [kb, C], [C, 1], [1, d.block_n], flat)
    epi = EpilogueConstants(ACTIVATION=activation, BUFS=d.epilogue_bufs, SWAP=d.swap_ab,
                            **operand_constants(args, M, d.swap_ab))
    kwargs = dict(CFG=kernel_constants(d, epi), SCALING=scaling, PROMOTE=bool(promote), SB_COLS=sb_cols,
                  **launch_options(d))
    splits = fp8_splits(K, config)
    grid = persistent_grid(R, C, d, sms, splits)
    if d.stream_k:  # whole tiles through the TMA epilogue, shared ones through the fix-up
        programs, dp_tiles, streamers = stream_k_split(tile_count(config, M, N), -(-K // SCALE_BLOCK), sms)
        ws_rows, ld = workspace_shape(M, N, K, config, FP8_BYTES, sms)
        slots = partial_slots(M, N, K, config, FP8_BYTES, sms)
        assert workspace.dtype == torch.float32 and workspace.numel() >= ws_rows * ld
        assert counters.dtype == torch.int32 and (slots == 1 or counters.numel() >= counter_count(M, N, config, FP8_BYTES))
        block = ws_rows // slots * ld if slots > 1 else 0
        ops = epilogue_operands(out, args, tile_out=tile_descriptor(out, d), sa=sa, sb=sb)
        kernel_args = (a_desc, b_desc, workspace, counters, ops, R, C, K, *strides, dp_tiles, streamers, block // 4,
                       ld // 4, out.stride(0))
        return fp8_stream_gemm, kernel_args, kwargs, (programs,)
    if not d.workspace:  # the TMA epilogue (a staged swap-AB tile: its boxes transposed, config.staged_swap)
        ops = epilogue_operands(out, args, tile_descriptor(out, d), sa=sa, sb=sb)
        return fp8_gemm, (a_desc, b_desc, ops, R, C, K, *strides), kwargs, grid
    ws_rows, ld = workspace_shape(M, N, K, config, FP8_BYTES)
    block = ws_rows // splits * ld
    assert block < MAX_SPLIT_BLOCK, "one split's workspace block must be 32-bit addressable"
    assert workspace.dtype == torch.float32 and workspace.numel() >= ws_rows * ld
    assert counters.dtype == torch.int32 and (splits == 1
                                              or counters.numel() >= counter_count(M, N, config, FP8_BYTES))
    assert out.stride(1) == 1 or N <= 1, "out must be row-major"
    kernel_args = (a_desc, b_desc, workspace, counters, epilogue_operands(out, args, sa=sa, sb=sb), R, C, K, *strides,
                   splits, block // 4, ld // 4, out.stride(0))
    return fp8_split_gemm, kernel_args, kwargs, grid


# ----------------------------------------------------------------------------- the plan


class Fp8Plan(Plan):
    """One decided scaled_mm call signature (a GemmSpec with scales, planned by the Hopper
    backend): the scale mode, the promotion, the config and a cached direct launch; split
    (`workspace` rows > 0): the stream's fp32 workspace and arrival counters
    (pingpong.runtime.plan.split_scratch), as the 16-bit SplitPlan (pingpong.hopper.host.backend); a
    ping-pong swap-AB with one split, or stream-K with no shared tile: the kernel takes both
    and reads neither, so empty stand-ins made once (`split_kernel`: Derived.workspace). `scaling`
    is the kernel's (`kernel_scaling`); `broadcast`: tensor-wise scalars given to the row-wise
    kernel as (M, 1) and (1, N) vectors, made per call. `sms`: the SMs its persistent grid
    spans (the GPU's less torch's SM carveout when planned)."""

    __slots__ = ("scaling", "sb_cols", "promote", "config", "launch", "workspace", "counters", "unused", "broadcast",
                 "sms", "split_kernel")

    def __init__(self, device, scaling, sb_cols, promote, config, activation, workspace=(0, 0), counters=0,
                 broadcast=False, *, sms):
        self.device, self.path, self.activation, self.extents, self.sms = device, "hopper-fp8", activation, None, sms
        self.scaling, self.sb_cols, self.promote, self.config = scaling, sb_cols, promote, config
        self.broadcast = broadcast
        self.split_kernel = config.derive(FP8_BYTES).workspace  # fp8_split_gemm / fp8_stream_gemm: ws, counters
        self.workspace, self.counters = workspace, counters  # (rows, cols) fp32; int32 counters (0: unsplit)
        self.launch, self.unused = CachedLaunch(), None

    def run(self, a, b, out, args=NO_ARGS) -> None:
        """out = act(scale(a @ b) + bias): a (M, K), b (K, N) as validated by the front end,
        the scales and the bias from `args`.
        The launch takes base addresses in the kernel's order (kernel_order): W = bᵀ and a
        tensor- or row-wise scale's transpose have the address of b and of the scale, so a hit
        makes no view; `prepare` builds the kernel's tensors on the JIT path only."""
        if self.broadcast:  # fresh vectors from the caching allocator: safe across streams and graphs
            args = args._replace(scale_a=args.scale_a.reshape(1, 1).expand(a.shape[0], 1).contiguous(),
                                 scale_b=args.scale_b.reshape(1, 1).expand(1, b.shape[1]).contiguous())
        scale_a, scale_b = args.scale_a, args.scale_b
        sa, sb = block_scale_views(scale_a, scale_b, self.sb_cols) if self.scaling == "block" else (scale_a, scale_b)
        first, second, sa, sb = kernel_order(a, b, sa, sb, self.config.swap_ab)
        if self.counters:
            ws, counters = split_scratch(out.device, self.workspace[0] * self.workspace[1], self.counters)
        elif self.split_kernel:  # neither read (one split; no shared tile): made once
            if self.unused is None:
                self.unused = (torch.empty(0, dtype=torch.float32, device=out.device),
                               torch.empty(0, dtype=torch.int32, device=out.device))
            ws, counters = self.unused
        else:
            ws = counters = None
        split = () if ws is None else (ws.data_ptr(), counters.data_ptr())
        ptrs = (first.data_ptr(), second.data_ptr(), *split) + operand_pointers(out, args, None, self.config.stream_k, sa,
                                                                                sb)  # no C; stream-K: its TMA epilogue
        self.launch(self.device, ptrs, (), self._jit_args, a, b, out, args, ws, counters)

    def _jit_args(self, a, b, out, args, ws, counters):
        return prepare(a, b.t(), out, args, self.scaling, self.promote, self.sb_cols, self.config, self.sms,
                       self.activation, ws, counters)


def plan(spec: GemmSpec) -> Fp8Plan:
    """The Hopper backend's plan of a spec with FP8 scales (the front end validated them):
    the scale mode (the spec's one decision), the promotion (block-wise always; else unless
    use_fast_accum), the tile (`select_fp8`: the GPU's tuning table, else the rule; or the
    spec's explicit config), checked."""
    sc = spec.epilogue.scales
    scaling, sb_cols = scale_mode(spec.a, spec.b, sc.a, sc.b)
    promote = scaling == "block" or not sc.fast_accum
    device = device_index(spec.device)
    gpu = Device.of(device, spec.carveout)  # the SMs the launch spans: the GPU's less torch's carveout
    (M, N, K) = spec.mnk
    if spec.config is not None:
        config = spec.config
    else:  # the GPU's tuning table for this FP8 problem, else the rule
        config = select_fp8(M, N, K, promote, gpu.sms, gpu.name, scaling, sb_cols, spec.out_dtype.itemsize,
                            FP8_KINDS[spec.a.dtype], gpu.carveout)
    check_fp8_config(config, promote, spec.out_dtype.itemsize, scale_boxes(scaling, sb_cols, config))
    why = workspace_reason(M, N, K, config, FP8_BYTES, gpu.sms)
    if why:
        raise ConfigError(why)
    scaling, broadcast = kernel_scaling(scaling, M, N, K, config, promote, gpu.sms)
    if config.stream_k:  # the launch's decomposition: counters only where a tile is shared
        shared = partial_slots(M, N, K, config, FP8_BYTES, gpu.sms) > 1
        workspace = workspace_shape(M, N, K, config, FP8_BYTES, gpu.sms)
        counters = counter_count(M, N, config, FP8_BYTES) if shared else 0
    elif fp8_splits(K, config) == 1:  # a ping-pong swap-AB runs the split kernel with no workspace or counters
        workspace, counters = (0, 0), 0
    else:
        workspace, counters = workspace_shape(M, N, K, config, FP8_BYTES), counter_count(M, N, config, FP8_BYTES)
    return Fp8Plan(device, scaling, sb_cols, promote, config, spec.epilogue.activation, workspace, counters, broadcast,
                   sms=gpu.sms)


# ----------------------------------------------------------------------------- offline compilation


def _offline_builder(scaling: str, promote: bool, config: KernelConfig, sb_cols: int = SCALE_BLOCK, fusion: str = ""):
    def build(target: str) -> cc.Launch:
        M, N, K = (512, 512, 1024) if config.split_k == 1 else (512, 512, 65536)
        if config.stream_k:  # a hybrid: a data-parallel wave, the last streamed, shared tiles
            M, N, K = 589, 4096, 8192
        a = torch.empty(M, K, dtype=torch.float8_e4m3fn)
        w = torch.empty(N, K, dtype=torch.float8_e4m3fn)
        out = torch.empty(M, N, dtype=torch.bfloat16)
        kb = K // SCALE_BLOCK
        if scaling == "tensor":
            sa, sb = torch.empty((), dtype=torch.float32), torch.empty((), dtype=torch.float32)
        elif scaling == "row":
            sa, sb = torch.empty(M, 1), torch.empty(1, N)
        else:
            sa = torch.empty(kb, M).t()
            sb = torch.empty(-(-N // SCALE_BLOCK), kb).t() if sb_cols == SCALE_BLOCK else torch.empty(kb, N)
        bias = torch.empty(N, dtype=torch.bfloat16) if fusion else None
        workspace = torch.empty(workspace_shape(M, N, K, config, FP8_BYTES, 132), dtype=torch.float32)
        counters = torch.zeros(counter_count(M, N, config, FP8_BYTES), dtype=torch.int32)
        kernel, args, kwargs, grid = prepare(a, w, out, EpilogueArgs(bias=bias, scale_a=sa, scale_b=sb), scaling,
                                             promote, sb_cols, config, 132, fusion or "none", workspace, counters)
        return cc.Launch(kernel, args, kwargs, grid)

    b = f"{config.block_m}×{config.block_n}×{config.block_k}"
    build.__doc__ = (f"Hopper FP8 GEMM (e4m3), {scaling}-wise scales, {'promoted' if promote else 'fast'} accumulation,"
                     f" {config.schedule} {b}" + (f", bias + {fusion}" if fusion else "")
                     + (f", split-K {config.split_k} (the last split sums the partials)" if config.split_k > 1 else "")
                     + (", swap-AB (Cᵀ = W·Aᵀ, the transposed store)" if config.swap_ab else "")
                     + (" staged through TMA" if config.derive(FP8_BYTES).staged_swap else "")
                     + (", stream-K (whole tiles through TMA, shared ones fixed up)" if config.stream_k else ""))
    return build


#: name -> (scaling, promote, config, sb_cols, fusion) of the FP8 variants compiled offline
OFFLINE_FP8_VARIANTS = {
    "fp8-tensor": ("tensor", True, KernelConfig(128, 128, SCALE_BLOCK), SCALE_BLOCK, ""),
    "fp8-tensor-fast": ("tensor", False, KernelConfig(128, 256, SCALE_BLOCK), SCALE_BLOCK, ""),
    "fp8-row": ("row", True, KernelConfig(128, 128, SCALE_BLOCK), SCALE_BLOCK, "gelu_erf"),
    "fp8-row-fast": ("row", False, KernelConfig(128, 256, SCALE_BLOCK), SCALE_BLOCK, ""),
    "fp8-block": ("block", True, KernelConfig(128, 128, SCALE_BLOCK), SCALE_BLOCK, ""),
    "fp8-block-1x128": ("block", True, KernelConfig(128, 128, SCALE_BLOCK), 1, ""),
    "fp8-block-long": ("block", True, rule_fp8(16384, 16384, 16384, True, 132, "block"), SCALE_BLOCK, ""),  # long
    "fp8-block-pingpong": ("block", True, KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong"), SCALE_BLOCK, ""),
    "fp8-row-pingpong": ("row", True, KernelConfig(64, 64, SCALE_BLOCK, schedule="pingpong"), SCALE_BLOCK, ""),
    "fp8-tensor-narrow": ("tensor", True, KernelConfig(128, 64, SCALE_BLOCK), SCALE_BLOCK, ""),  # the rule's 128×64
    "fp8-tensor-wide": ("tensor", True, KernelConfig(128, 192, SCALE_BLOCK), SCALE_BLOCK, ""),  # two column pieces
    "fp8-row-wide": ("row", True, KernelConfig(128, 192, SCALE_BLOCK), SCALE_BLOCK, ""),
    "fp8-row-wide-fast": ("row", False, KernelConfig(128, 192, SCALE_BLOCK), SCALE_BLOCK, ""),
    "fp8-tensor-144": ("tensor", True, KernelConfig(128, 144, SCALE_BLOCK), SCALE_BLOCK, ""),  # 128 + 16 columns
    "fp8-row-160": ("row", True, KernelConfig(128, 160, SCALE_BLOCK), SCALE_BLOCK, ""),  # 128 + 32
    "fp8-tensor-splitk": ("tensor", True, KernelConfig(128, 128, SCALE_BLOCK, split_k=8), SCALE_BLOCK, ""),
    "fp8-row-splitk-gelu": ("row", True, KernelConfig(128, 128, SCALE_BLOCK, split_k=4), SCALE_BLOCK, "gelu_erf"),
    "fp8-tensor-fast-splitk": ("tensor", False, KernelConfig(128, 256, SCALE_BLOCK, split_k=2), SCALE_BLOCK, ""),
    "fp8-block-splitk": ("block", True, KernelConfig(128, 128, SCALE_BLOCK, split_k=4), SCALE_BLOCK, ""),
    "fp8-block-1x128-splitk": ("block", True, KernelConfig(128, 128, SCALE_BLOCK, split_k=4), 1, ""),
    "fp8-block-pingpong-splitk": ("block", True, KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong", split_k=2),
                                  SCALE_BLOCK, ""),
    "fp8-tensor-swap": ("tensor", True, KernelConfig(64, 16, SCALE_BLOCK, schedule="pingpong", swap_ab=True),
                        SCALE_BLOCK, ""),
    "fp8-row-swap-gelu": ("row", True, KernelConfig(64, 32, SCALE_BLOCK, schedule="pingpong", swap_ab=True),
                          SCALE_BLOCK, "gelu_erf"),
    "fp8-tensor-fast-swap": ("tensor", False, KernelConfig(64, 16, SCALE_BLOCK, schedule="pingpong", swap_ab=True),
                             SCALE_BLOCK, ""),
    "fp8-row-swap-coop": ("row", True, KernelConfig(128, 32, SCALE_BLOCK, swap_ab=True), SCALE_BLOCK, ""),  # staged
    # the rule's 33-64 rows where 64×64 tiles take a thin second wave (fp8_select._SWAP_WAVE)
    "fp8-tensor-swap-coop-64": ("tensor", True, KernelConfig(128, 64, SCALE_BLOCK, swap_ab=True), SCALE_BLOCK, ""),
    # the mid-rows model's staged swap-AB in two pieces: M in 128 + 64 columns, TMA-stored transposed
    "fp8-row-swap-coop-192": ("row", True, KernelConfig(128, 192, SCALE_BLOCK, swap_ab=True), SCALE_BLOCK, ""),
    # swap-AB in two column pieces: M on the wgmma's N side, 144 = 128 + 16 and 160 = 128 + 32
    "fp8-tensor-swap-144": ("tensor", True, KernelConfig(64, 144, SCALE_BLOCK, schedule="pingpong", swap_ab=True),
                            SCALE_BLOCK, ""),
    "fp8-row-swap-160": ("row", True, KernelConfig(64, 160, SCALE_BLOCK, schedule="pingpong", swap_ab=True),
                         SCALE_BLOCK, ""),
    # the mid-rows model's cooperative 128×96 (64 + 32 columns; fp8_select._W96)
    "fp8-tensor-coop-96": ("tensor", True, KernelConfig(128, 96, SCALE_BLOCK), SCALE_BLOCK, ""),
    "fp8-tensor-cluster": ("tensor", True, KernelConfig(128, 128, SCALE_BLOCK, cluster_m=2), SCALE_BLOCK, ""),
    "fp8-row-cluster-gelu": ("row", True, KernelConfig(128, 128, SCALE_BLOCK, cluster_m=2), SCALE_BLOCK, "gelu_erf"),
    "fp8-row-pingpong-cluster": ("row", True, KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong", cluster_m=2),
                                 SCALE_BLOCK, ""),
    "fp8-tensor-streamk": ("tensor", True, KernelConfig(128, 128, SCALE_BLOCK, stream_k=True), SCALE_BLOCK, ""),
    "fp8-row-streamk-gelu": ("row", True, KernelConfig(128, 128, SCALE_BLOCK, stream_k=True), SCALE_BLOCK,
                             "gelu_erf"),
    "fp8-block-streamk": ("block", True, KernelConfig(128, 128, SCALE_BLOCK, stream_k=True), SCALE_BLOCK, ""),
    "fp8-block-1x128-streamk": ("block", True, KernelConfig(128, 128, SCALE_BLOCK, stream_k=True), 1, ""),
    "fp8-row-pingpong-streamk": ("row", True, KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong", stream_k=True),
                                 SCALE_BLOCK, ""),
    "fp8-tensor-fast-streamk": ("tensor", False, KernelConfig(128, 256, SCALE_BLOCK, stream_k=True), SCALE_BLOCK,
                                ""),
    "fp8-row-swap-splitk": ("row", True,
                            KernelConfig(64, 16, SCALE_BLOCK, schedule="pingpong", split_k=4, swap_ab=True),
                            SCALE_BLOCK, ""),
}
for _name, (_s, _p, _c, _sb, _f) in OFFLINE_FP8_VARIANTS.items():
    cc.register(_name, targets=("sm_90a",))(_offline_builder(_s, _p, _c, _sb, _f))
