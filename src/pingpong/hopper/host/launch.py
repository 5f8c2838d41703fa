"""Host side of the Hopper GEMM: TMA descriptors, the derived constexprs, the persistent grid.

Every Hopper kernel takes its constexprs as one argument, CFG, a `KernelConstants` built
here from a Derived (`kernel_constants(d, epi)`; `epi` the EpilogueConstants of the call), and
its compile options from `launch_options(d)`:

    fn, args, kwargs, grid = prepare(a, b, out, epilogue_args, ...)    kwargs = dict(CFG=KernelConstants(...), ...)
    fn[grid](*args, **kwargs)                  args: A's and B's descriptors, (workspace), ops, sizes, α, β

and the tensors of its epilogue as one argument too, `ops`, the EpilogueOperands that
`epilogue_operands` builds (pingpong.hopper.device.epilogue: out, C, the bias, stream-K's tile
descriptors, FP8's scales; a field left None is no kernel parameter) from the call's
EpilogueArgs (pingpong.runtime.spec), the object the plans' `run` gets. The plans' direct
launches pass the base addresses of the same fields (`operand_pointers`), and the operands'
constexprs come from `operand_constants`: a new operand of the epilogue is a line in each of
the three, and no plan names it.

`tma_orientation(t)` says whether a 2-D tensor (or a spec's Operand) can be described to TMA as it is stored (last
stride 1 in one of its two orientations, the other stride 16-byte aligned, base 16-byte
aligned). The plan (pingpong.runtime.plan) decides what to do with tensors that are not (a padded
copy) and launches `prepare`'s kernel, first through Triton's JIT, then directly
(pingpong.runtime.launcher); this module assumes legal inputs and asserts it.

Batched products (out (B, M, N)) get rank-3 descriptors [B, rows, cols] with a box of one
matrix tile (pingpong.hopper.device.batched); an operand shared by every batch (2-D, or batch size
1, or batch stride 0) keeps a rank-2 descriptor of its one matrix. A batch stride must be a
multiple of 16 bytes, like every other TMA stride.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ...errors import ConfigError
from ...runtime import compile as cc
from ...runtime.plan import bias_vector
from ...runtime.spec import EpilogueArgs, Operand, bias_kind, tma_matrix_stride, tma_row_stride
from ...toolchain import KERNEL_OPTIONS
from ..device.epilogue import EpilogueConstants, EpilogueOperands
from ..device.scheduler import ALIGN
from ..kernels.gemm import persistent_gemm, split_k_gemm, stream_k_gemm, warp_specialized_gemm
from .config import SCHEDULE_FACTS, KernelConfig, swizzle_width
from .splits import effective_splits, stream_k_split, stream_parts


def tma_orientation(t) -> str | None:
    """"row" if t's last dim is contiguous, "col" if its first is, None if TMA cannot read it.
    `t`: a 2-D tensor, or a spec's Operand (pingpong.runtime.spec: the plans decide from it);
    of a 3-D one, each matrix's (the batch stride is the caller's to check)."""
    if not (t.aligned if type(t) is Operand else t.data_ptr() % 16 == 0):
        return None
    (r, c), (sr, sc), elem = t.shape[-2:], t.stride()[-2:], t.element_size()
    if sc == 1 and tma_row_stride(sr, c, elem):
        return "row"
    if sr == 1 and tma_row_stride(sc, r, elem):
        return "col"
    return None


def tma_groups(t) -> bool:
    """A 3-D t's matrices (groups) are TMA-addressable one after another: at least one, and
    several a positive 16-byte multiple apart (each matrix's own legality: tma_orientation)."""
    return t.shape[0] > 0 and (t.shape[0] == 1 or tma_matrix_stride(t.stride(0), t.element_size()))


@functools.lru_cache(maxsize=None)
def _smem_layout(row_bytes: int, element_bits: int, rank: int = 2, cga: tuple = ()) -> gl.NVMMASharedLayout:
    if not cga:
        return gl.NVMMASharedLayout(swizzle_byte_width=swizzle_width(row_bytes), element_bitwidth=element_bits,
                                    rank=rank)
    return gl.NVMMASharedLayout(swizzle_byte_width=swizzle_width(row_bytes), element_bitwidth=element_bits, rank=rank,
                                cga_layout=[list(b) for b in cga])


#: CTA layouts of a 2-CTA cluster's boxes (cga bases: which box dimension the CTA bit splits):
#: split along dim 0 or dim 1 (the pair's 2·BM rows of A or of the output), or shared whole
#: by both CTAs (B: a multicast load).
CGA_SPLIT_DIM0, CGA_SPLIT_DIM1, CGA_SHARED = ((1, 0),), ((0, 1),), ((0, 0),)


def _descriptor(t: torch.Tensor, box: list[int], cga: tuple = ()) -> TensorDescriptor:
    """TMA descriptor of a row-major view, NVMMA-swizzled by its box's row width: 2-D with
    box `box`, or 3-D [batch, rows, cols] with box [1, *box] (one matrix's tile). `cga`: the
    box's CTA layout in a cluster kernel (2-D only)."""
    assert not cga or t.dim() == 2, "cluster kernels run unbatched products"
    layout = _smem_layout(box[-1] * t.element_size(), 8 * t.element_size(), t.dim(), cga)
    if t.dim() == 3:
        assert tma_matrix_stride(t.stride(0), t.element_size()), "batch stride: non-zero, 16-byte multiple"
        box = [1, *box]
    return TensorDescriptor(t, list(t.shape), list(t.stride()), box, layout)


def per_batch(t: torch.Tensor | None) -> torch.Tensor | None:
    """`t` as the kernels read it: its one matrix if every batch shares it (2-D, batch size 1,
    or batch stride 0), else the (B, rows, cols) tensor."""
    if t is None or t.dim() == 2:
        return t
    return t[0] if t.shape[0] == 1 or t.stride(0) == 0 else t


def operand_descriptor(t: torch.Tensor, rows: int, k: int, k_is_dim1: bool, cluster: str = "") -> tuple[TensorDescriptor, bool]:
    """Descriptor of an operand tile of `rows` × `k` and whether it is K-major in memory.

    `t` is A (M, K) (k_is_dim1=True) or B viewed as (N, K) (k_is_dim1=True after the caller
    transposes B's (K, N) view), or a batch (B, ·, ·) of them (`per_batch` first).
    Whichever dimension is contiguous becomes the TMA box's row. `cluster` (a 2-CTA cluster
    kernel): "split" the box's rows over the pair, or "shared" by both CTAs (multicast).
    """
    orient = tma_orientation(t if t.dim() == 2 else t[0])
    assert orient is not None, "operand must be TMA-legal (the API pads it otherwise)"
    cga = {"": (), "shared": CGA_SHARED, "split": CGA_SPLIT_DIM0 if orient == "row" else CGA_SPLIT_DIM1}[cluster]
    if orient == "row":
        return _descriptor(t, [rows, k], cga), True
    return _descriptor(t.transpose(-1, -2), [k, rows], cga), False


@functools.lru_cache(maxsize=None)
def acc_layout(d, piece: int = 0) -> gl.NVMMADistributedLayout:
    """The wgmma accumulator layout of column piece `piece` (config.column_pieces); in a
    2-CTA cluster its rows split over the pair like A's."""
    shape = list(d.instr_shape2 if piece else d.instr_shape)
    if d.cluster_m > 1:
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=list(d.warps_per_cta), instr_shape=shape,
                                         cga_layout=[list(b) for b in CGA_SPLIT_DIM0])
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=list(d.warps_per_cta), instr_shape=shape)


def prepare(a, b, out, args: EpilogueArgs, config: KernelConfig, sms: int, activation="none"):
    """(kernel, args, kwargs, grid) for out = act(α·a@b + bias) + β·c (docs/epilogue.md), α, β,
    c and the bias from `args` (EpilogueArgs; c only where it is read: β·C).

    a (M,K), b (K,N), out (M,N) row-major; or batched: out (B,M,N), a/b/c 3-D or shared
    (`per_batch`). The bias (N,)/(1,N) per column or (M,1) per row, shared by the batches.
    The one-kernel path (split_k = 1; swap_ab where config.staged_swap: the kernel computes
    Cᵀ = bᵀ·aᵀ and its epilogue stores each sub-tile transposed); `prepare_split` is the other."""
    batches = out.shape[0] if out.dim() == 3 else 1
    a, b, out = per_batch(a), per_batch(b), out if batches > 1 else per_batch(out)
    args = args._replace(c=per_batch(args.c))
    d = config.derive(a.element_size(), out.element_size())
    assert not d.workspace, "split-K / stream-K configs and ping-pong's swap-AB run through prepare_split"
    assert not (d.swap_ab and batches > 1), "swap-AB runs 2-D products"
    if d.cluster_m > 1 and batches > 1:
        raise ConfigError(f"cluster_m={d.cluster_m}: 2-CTA clusters run unbatched products; use cluster_m=1 for"
                          f" a batch of {batches}")
    return _gemm_launch(a, b, out, args, d, sms, activation, batches)


def operand_descriptors(a, b, d):
    """TMA descriptors and K-majorness of the kernel's A (rows × K) and B (K × cols).
    A two-piece B tile (d.pieces (P1, P2)) is loaded as P1/P2 + 1 boxes of P2 columns. A 2-CTA
    cluster's A box is one consumer's rows of the pair (cluster_m·consumer_m: all 2·block_m
    under ping-pong, block_m per cooperative consumer), split over the CTAs; its B box is
    shared (multicast)."""
    pair = d.cluster_m > 1  # the A box: the pair's rows of one consumer (both consumers' under ping-pong)
    a_rows = d.cluster_m * d.consumer_m if pair else d.block_m
    a_desc, a_kmajor = operand_descriptor(a, a_rows, d.block_k, True, "split" if pair else "")
    b_desc, b_kmajor = operand_descriptor(b.transpose(-1, -2), d.pieces[-1], d.block_k, True, "shared" if pair else "")
    return a_desc, b_desc, dict(a_kmajor=a_kmajor, b_kmajor=b_kmajor)


@dataclasses.dataclass(frozen=True)
class KernelConstants:
    """Every constexpr of a Hopper kernel, as ONE kernel argument (CFG).

    Built once per launch from a Derived (`kernel_constants`); the kernel reads `CFG.BM`,
    `CFG.EPI`, ... (plain Python values: hand them to a function, or read them into
    `X: gl.constexpr = CFG.X`; a plain `x = CFG.X` would become a runtime tensor). Frozen and
    hashable: Triton's JIT keys the compiled kernel by its value and repr, as it would the
    separate constexprs. Kernel-specific choices (FP8 scaling, grouped stores) stay their
    own constexpr arguments after it."""

    BM: int  # rows of the kernel's tile (a 2-CTA cluster: the pair's cluster_m·block_m rows)
    BN: int
    BK: int
    STAGES: int  # ring slots
    GROUP_M: int  # tile-rows per raster band
    acc_layout: Any  # the wgmma accumulator layout (of the first column piece)
    acc_layout2: Any  # the second column piece's (= acc_layout for a one-piece tile)
    EPI: EpilogueConstants  # the epilogue's constexprs (pingpong.hopper.device.epilogue)
    BN2: int = 0  # columns of the second column piece (config.column_pieces); 0: one piece
    B1_BOXES: int = 1  # B boxes (of BN2 columns) of the first column piece: P1/P2; 1 with one piece
    A_KMAJOR: bool = True  # storage order of the operand boxes
    B_KMAJOR: bool = True
    PINGPONG: bool = False  # the warp-specialized schedules' own (SCHEDULE_FACTS): unused by "persistent"
    RELEASERS: int = 1
    CONSUMER_WARPS: int = 0
    PRODUCER_WARPS: int = 0
    CONSUMER_REGS: int = 0
    PRODUCER_REGS: int = 0
    CLUSTER: int = 1  # CTAs per cluster (the launch's num_ctas)


def kernel_constants(d, epi: EpilogueConstants, a_kmajor: bool = True, b_kmajor: bool = True) -> KernelConstants:
    """The kernel's CFG for derived config `d`: tile, ring depth, raster, accumulator layouts,
    the schedule's warps and registers (SCHEDULE_FACTS), the epilogue's `epi`. A 2-CTA
    cluster kernel describes the pair: its BM is cluster_m·block_m rows."""
    ws = SCHEDULE_FACTS[d.schedule].warp_specialized
    return KernelConstants(BM=d.cluster_m * d.block_m, BN=d.block_n, BK=d.block_k, STAGES=d.stages,
                           GROUP_M=d.group_m, acc_layout=acc_layout(d),
                           acc_layout2=acc_layout(d, len(d.pieces) - 1), EPI=epi, BN2=d.block_n2,
                           B1_BOXES=d.pieces[0] // d.block_n2 if d.block_n2 else 1,
                           A_KMAJOR=a_kmajor, B_KMAJOR=b_kmajor, PINGPONG=d.schedule == "pingpong",
                           RELEASERS=d.releasers, CONSUMER_WARPS=d.worker_warps[0] if ws else 0,
                           PRODUCER_WARPS=d.worker_warps[1] if ws else 0,
                           CONSUMER_REGS=d.worker_regs[0] if ws else 0,
                           PRODUCER_REGS=d.worker_regs[1] if ws else 0, CLUSTER=d.cluster_m)


#: launch every Hopper GEMM kernel with programmatic dependent launch (launch_options)
PDL = True


def launch_options(d) -> dict:
    """The launch's compile options: warps of the default partition, the register cap of the
    warp-specialized schedules (setmaxnreg needs it), CTAs per cluster (a pair only, so a
    cluster_m=1 launch is the same as before clusters existed), programmatic dependent launch
    (PDL: every Hopper GEMM kernel begins with kernel_start, pingpong.hopper.kernels.gemm),
    KERNEL_OPTIONS."""
    options = dict(num_warps=d.num_warps, launch_pdl=PDL, **KERNEL_OPTIONS)
    if SCHEDULE_FACTS[d.schedule].warp_specialized:
        options["maxnreg"] = d.maxnreg
    if d.cluster_m > 1:
        options["num_ctas"] = d.cluster_m
    return options


def epilogue_operands(out: torch.Tensor, args: EpilogueArgs, target=None, cin=None, tile_out=None, tile_cin=None,
                      sa=None, sb=None) -> EpilogueOperands:
    """The `ops` argument of a Hopper GEMM launch (pingpong.hopper.device.epilogue.EpilogueOperands),
    built once per JIT launch: `target` and `cin` are out and C as the kernel's epilogue
    addresses them (TMA descriptors or the tensors; target None: `out` itself), the fused
    operands come from `args` (the call's EpilogueArgs: the bias as its vector, None: `out`
    stands in, never read), `tile_*` are stream-K's whole-tile descriptors, `sa`, `sb` FP8's
    scales. A None field is no kernel parameter."""
    bias = out if args.bias is None else bias_vector(args.bias)
    return EpilogueOperands(out if target is None else target, cin, bias, tile_out, tile_cin, sa, sb)


def operand_pointers(out: torch.Tensor, args: EpilogueArgs, cin=None, tiles: bool = False, sa=None,
                     sb=None) -> tuple:
    """The base addresses a plan's direct launch passes for the kernel's `ops`: those of the
    tensors behind `epilogue_operands(out, args, None, cin, ...)`'s fields, in order, None
    fields skipped (pingpong.runtime.launcher binds the flattened tuple). `cin`: C as read, or
    out standing in (the 16-bit kernels keep the parameter), None (no parameter: FP8);
    `tiles`: stream-K's whole-tile descriptors, over out and cin again; `sa`, `sb`: FP8's
    scales (tensors, or their descriptors' bases). Written out field by field, as the launch
    runs it per call (a pass over epilogue_operands' fields costs a microsecond more);
    tests/test_launcher.py checks the two agree for every operand of EpilogueArgs."""
    o = out.data_ptr()
    bias = o if args.bias is None else bias_vector(args.bias).data_ptr()
    if cin is None:
        ptrs = (o, bias, o) if tiles else (o, bias)
    else:
        c = o if cin is out else cin.data_ptr()
        ptrs = (o, c, bias, o, c) if tiles else (o, c, bias)
    return ptrs if sa is None else ptrs + (sa.data_ptr(), sb.data_ptr())


def operand_constants(args: EpilogueArgs, M: int, swap: bool = False) -> dict:
    """The EpilogueConstants fields of the call's fused operands (`args`): the bias's kind in
    the kernel's product (`product_bias`: transposed under swap-AB)."""
    return dict(BIAS=product_bias(args.bias, M, swap))


def tile_descriptor(t: torch.Tensor, d) -> TensorDescriptor:
    """TMA descriptor of the output (or C) for the TMA epilogue: one epilogue sub-tile of
    consumer_m × epilogue_n, in a 2-CTA cluster the pair's rows split over the two CTAs; a
    staged swap-AB product's sub-tile is the transpose, epilogue_n rows of out × consumer_m."""
    if d.staged_swap:
        return _descriptor(t, [d.epilogue_n, d.consumer_m])
    return _descriptor(t, [d.cluster_m * d.consumer_m, d.epilogue_n], CGA_SPLIT_DIM0 if d.cluster_m > 1 else ())


def persistent_grid(M: int, N: int, d, sms: int, units_per_tile: int = 1) -> tuple[int]:
    """The persistent grid of an M × N product: one program per SM, a 2-CTA cluster's program
    a pair of SMs taking the pair's tiles, never more programs than work units."""
    units = -(-M // (d.cluster_m * d.block_m)) * -(-N // d.block_n) * units_per_tile
    return (max(1, min(sms // d.cluster_m, units)),)


def _gemm_launch(a, b, out, args: EpilogueArgs, d, sms: int, activation="none", batches=1):
    """The one-kernel GEMM launch for derived config `d` (TMA epilogue into `out`; swap-AB: the
    kernel's product is the N × M Cᵀ = bᵀ·aᵀ, stored transposed)."""
    bias_m = a.shape[-2]  # the caller's M: which way a bias runs
    if d.swap_ab:
        a, b = b.transpose(-1, -2), a.transpose(-1, -2)
    M, K = a.shape[-2:]
    N = b.shape[-1]
    a_desc, b_desc, majors = operand_descriptors(a, b, d)
    c_desc = tile_descriptor(out, d)
    c = args.c
    has_c = c is not None  # the plan passes C only when it is read (GemmSpec.epilogue.reads_c)
    assert not has_c or (tma_orientation(c if c.dim() == 2 else c[0]) == "row" and c.dtype == out.dtype), \
        "C must be TMA-legal, out's dtype"
    ops = epilogue_operands(out, args, c_desc, tile_descriptor(c, d) if has_c else c_desc)
    kernel_args = (a_desc, b_desc, ops, M, N, K, float(args.alpha), float(args.beta), batches)
    epi = EpilogueConstants(HAS_C=has_c, ACTIVATION=activation, BUFS=d.epilogue_bufs, SWAP=d.swap_ab,
                            **operand_constants(args, bias_m, d.swap_ab))
    kwargs = dict(CFG=kernel_constants(d, epi, **majors), **launch_options(d))
    grid = persistent_grid(M, N, d, sms, batches)
    return (persistent_gemm if d.schedule == "persistent" else warp_specialized_gemm), kernel_args, kwargs, grid


# ----------------------------------------------------------------------------- split-K / swap-AB

#: the workspace's offsets are 32-bit (pingpong.hopper.device.fixup): inside one split's block,
#: and the final sum's steps of up to 4 blocks (4 · block < 2**31)
MAX_SPLIT_BLOCK = 2**29


def partial_slots(M: int, N: int, K: int, config: KernelConfig, in_bytes: int = 2, sms: int = 132) -> int:
    """Partial tiles one output tile may be summed from: split-K's splits, or under stream_k
    the most programs sharing one tile on `sms` SMs (scheduler.stream_parts); 1: none."""
    d = config.derive(in_bytes)
    if d.stream_k:
        return stream_parts(-(-M // d.block_m) * -(-N // d.block_n), -(-K // d.block_k), sms)
    return effective_splits(K, d.block_k, d.split_k)


def workspace_shape(M: int, N: int, K: int, config: KernelConfig, in_bytes: int = 2, sms: int = 132) -> tuple[int, int]:
    """(rows, cols) of the fp32 workspace a split-K / stream-K call needs (0 rows: no partials);
    in_bytes: the operands' element size (1 for FP8), for which `config` is derived; sms: the
    SMs a stream-K launch runs on.

    The kernel computes a rows' × cols' product (M × N, or N × M under swap_ab); each slot
    (split) owns rows' rounded up to block_m rows (a tile never crosses into the next slot's
    block), and a row is padded to 16 bytes."""
    d = config.derive(in_bytes)
    rows, cols = (N, M) if d.swap_ab else (M, N)
    slots = partial_slots(M, N, K, config, in_bytes, sms)
    return (slots if slots > 1 else 0) * -(-rows // d.block_m) * d.block_m, -(-cols // 4) * 4


def workspace_reason(M: int, N: int, K: int, config: KernelConfig, in_bytes: int = 2, sms: int = 132) -> str | None:
    """Why a split-K / stream-K config cannot run this M × N × K product (one slot's workspace
    block beyond 32-bit offsets), or None (in_bytes, sms: as workspace_shape)."""
    if not (config.split_k > 1 or config.swap_ab or config.stream_k):
        return None
    rows, cols = workspace_shape(M, N, K, config, in_bytes, sms)
    slots = partial_slots(M, N, K, config, in_bytes, sms)
    if rows // max(slots, 1) * cols >= MAX_SPLIT_BLOCK:
        what = "stream_k=True" if config.stream_k else f"split_k={config.split_k}"
        return (f"{what} needs {rows // slots * cols} fp32 workspace elements per partial tile slot for this"
                f" {M}×{N} output; at most {MAX_SPLIT_BLOCK - 1} fit")
    return None


def counter_count(M: int, N: int, config: KernelConfig, in_bytes: int = 2) -> int:
    """Arrival counters a split-K call needs: one per ALIGN (16) rows of tiles (a tile half's counter is
    its first row's, pingpong.hopper.device.fixup.SplitEpilogue.tile_counter) and column of
    tiles of the kernel's product (in_bytes: as workspace_shape)."""
    d = config.derive(in_bytes)
    rows, cols = (N, M) if d.swap_ab else (M, N)
    return -(-rows // d.block_m) * (d.block_m // ALIGN.value) * -(-cols // d.block_n)


def product_bias(bias, M: int, swap: bool) -> str:
    """The bias's kind (runtime.spec.bias_kind of the caller's M × N) in the kernel's product:
    transposed under swap-AB, so a per-column bias is per row there and the other way round."""
    kind = bias_kind(bias, M)
    return {"col": "row", "row": "col"}.get(kind, kind) if swap else kind


def prepare_split(a, b, out, args: EpilogueArgs, config: KernelConfig, sms: int, workspace: torch.Tensor,
                  counters: torch.Tensor, activation="none"):
    """(kernel, args, kwargs, grid) of a split-K / swap-AB / stream-K call: one launch.

        splits × tiles work units ──fp32 partials──> workspace
        the last split of each tile ──Σ splits in order, α, bias, act, β·C, cast (transpose)──> out

    Stream-K (config.stream_k): the units of scheduler.stream_k_split on `sms` SMs; a unit
    holding a whole tile is stored through TMA (out and c then TMA-legal, as `prepare`'s), a
    tile shared by several programs is finished as a split tile is.

    `workspace`: fp32, at least workspace_shape(...) (values unused); `counters`: int32, at
    least counter_count(...), all zero (they are zero again after the kernel); with one split
    neither is read (empty tensors do). `args` as `prepare`'s. out must be
    row-major; c (if β ≠ 0) row-major with out's dtype; c may alias out."""
    M, K = a.shape
    N = b.shape[1]
    d = config.derive(a.element_size(), out.element_size())
    assert d.workspace, "an unsplit cooperative swap-AB config runs through prepare (staged_swap)"
    ka, kb = (b.t(), a.t()) if d.swap_ab else (a, b)  # swap: Cᵀ (N × M) = bᵀ (N × K) · aᵀ (K × M)
    splits = partial_slots(M, N, K, config, sms=sms)
    ws_rows, ld = workspace_shape(M, N, K, config, sms=sms)
    block = ws_rows // splits * ld if splits > 1 else 0
    assert block < MAX_SPLIT_BLOCK, "one split's workspace block must be 32-bit addressable"
    assert workspace.dtype == torch.float32 and workspace.numel() >= ws_rows * ld
    assert counters.dtype == torch.int32 and (splits == 1 or counters.numel() >= counter_count(M, N, config))
    assert out.stride(1) == 1 or out.shape[1] <= 1, "out must be row-major"
    c = args.c
    has_c = c is not None  # the plan passes C only when it is read (GemmSpec.epilogue.reads_c)
    assert not has_c or ((c.stride(1) == 1 or c.shape[1] <= 1) and c.dtype == out.dtype), "C: row-major, out's dtype"
    a_desc, b_desc, majors = operand_descriptors(ka, kb, d)
    tiles = -(-ka.shape[0] // d.block_m) * -(-kb.shape[1] // d.block_n)
    if d.stream_k:  # whole tiles through the TMA epilogue: out and C TMA-legal, as prepare's
        programs, dp_tiles, streamers = stream_k_split(tiles, -(-K // d.block_k), sms)
        kernel, grid, decomposition = stream_k_gemm, programs, (dp_tiles, streamers)
        assert tma_orientation(out) == "row" and (not has_c or tma_orientation(c) == "row"), "out, C: TMA-legal"
        c_desc = tile_descriptor(out, d)
        ops = epilogue_operands(out, args, None, c if has_c else out, c_desc,
                                tile_descriptor(c, d) if has_c else c_desc)
    else:
        kernel, grid, decomposition = split_k_gemm, max(1, min(sms, tiles * splits)), (splits,)
        ops = epilogue_operands(out, args, None, c if has_c else out)
    kernel_args = (a_desc, b_desc, workspace, counters, ops, ka.shape[0], kb.shape[1], K, float(args.alpha),
                   float(args.beta), *decomposition, block // 4, ld // 4, out.stride(0), c.stride(0) if has_c else 0)
    epi = EpilogueConstants(HAS_C=has_c, ACTIVATION=activation, SWAP=d.swap_ab,
                            BUFS=d.epilogue_bufs if d.stream_k else 1,  # (staging: stream-K's TMA epilogue)
                            **operand_constants(args, M, d.swap_ab))
    kwargs = dict(CFG=kernel_constants(d, epi, **majors), **launch_options(d))
    return kernel, kernel_args, kwargs, (grid,)


# ----------------------------------------------------------------------------- offline compilation


def _offline_builder(schedule: str, block: tuple[int, int, int], fusion: str = "", batches: int = 1,
                     cluster_m: int = 1):
    """`fusion` "": α·acc + β·C; else the activation name, with a per-column bias too."""

    def build(target: str) -> cc.Launch:
        M, N, K = 512, 512, 512
        lead = (batches,) if batches > 1 else ()
        a = torch.empty(*lead, M, K, dtype=torch.bfloat16)
        w = torch.empty(*lead, N, K, dtype=torch.bfloat16)  # transpose_b: b = w.t()
        out = torch.empty(*lead, M, N, dtype=torch.bfloat16)
        bias = torch.empty(N, dtype=torch.bfloat16) if fusion else None
        config = KernelConfig(*block, schedule=schedule, cluster_m=cluster_m)
        kernel, args, kwargs, grid = prepare(a, w.transpose(-1, -2), out, EpilogueArgs(out, 1.0, 1.0, bias), config,
                                             132, fusion or "none")
        return cc.Launch(kernel, args, kwargs, grid)

    extra = (f", bias + {fusion}" if fusion else "") + (f", batched ({batches}, M, K) @ ({batches}, K, N)" if batches > 1 else "")
    extra += ", 2-CTA cluster (B multicast)" if cluster_m > 1 else ""
    build.__doc__ = f"Hopper GEMM, {schedule} schedule, {block[0]}×{block[1]}×{block[2]}, bf16 transpose_b, β·C{extra}"
    return build


for _name, _block in (("persistent", (128, 256, 64)), ("cooperative", (128, 256, 64)), ("pingpong", (128, 128, 64))):
    cc.register(_name, targets=("sm_90a",))(_offline_builder(_name, _block))
# The fused epilogue at the headline shape (cooperative 128×256: the most registers per
# consumer thread) and the batched path (rank-3 descriptors) on the other warp-specialized schedule.
cc.register("cooperative-gelu", targets=("sm_90a",))(_offline_builder("cooperative", (128, 256, 64), "gelu_erf"))
cc.register("pingpong-batched", targets=("sm_90a",))(_offline_builder("pingpong", (128, 128, 64), batches=4))
# Two-piece tiles (config.column_pieces: 128 + 64 columns; 128 + 32, the first piece four boxes).
cc.register("cooperative-192", targets=("sm_90a",))(_offline_builder("cooperative", (128, 192, 64)))
cc.register("cooperative-160", targets=("sm_90a",))(_offline_builder("cooperative", (128, 160, 64)))
# ... and 128 + 16 (the mid-rows model's 128×144: a 16-column second piece, nine epilogue sub-tiles).
cc.register("cooperative-144", targets=("sm_90a",))(_offline_builder("cooperative", (128, 144, 64)))
# ... and the mid-rows model's narrow cooperative 128×96 (64 + 32 columns; select.MID_ROWS_NARROW).
cc.register("cooperative-96", targets=("sm_90a",))(_offline_builder("cooperative", (128, 96, 64)))
# select's mid-size tile: ping-pong 64×96 (64 + 32 columns), its ring 10 stages deep.
cc.register("pingpong-96", targets=("sm_90a",))(_offline_builder("pingpong", (64, 96, 64)))
# select's mid-size tiles as they run: two 64-element k-steps per ring slot (64×32; 64×96 = 64 + 32).
cc.register("pingpong-64x32x128", targets=("sm_90a",))(_offline_builder("pingpong", (64, 32, 128)))
cc.register("pingpong-96x128", targets=("sm_90a",))(_offline_builder("pingpong", (64, 96, 128)))
# ... and batched (rank-3 boxes): a launch-bound batched product of few rows (select.launch_bound_tile;
# the batched path narrows 64×96 to its first piece, 64×64).
cc.register("pingpong-batched-64x32x128", targets=("sm_90a",))(
    _offline_builder("pingpong", (64, 32, 128), batches=4))
# 2-CTA clusters (KernelConfig.cluster_m=2): the pair shares B's loads through TMA multicast.
cc.register("pingpong-cluster", targets=("sm_90a",))(_offline_builder("pingpong", (128, 128, 64), cluster_m=2))
cc.register("pingpong-cluster-64", targets=("sm_90a",))(_offline_builder("pingpong", (64, 128, 64), cluster_m=2))
cc.register("cooperative-cluster", targets=("sm_90a",))(_offline_builder("cooperative", (128, 256, 64), cluster_m=2))
cc.register("pingpong-cluster-gelu", targets=("sm_90a",))(
    _offline_builder("pingpong", (64, 256, 64), "gelu_erf", cluster_m=2))


def _offline_split_builder(config: KernelConfig, shape: tuple[int, int, int], doc: str):
    """Offline build of a split-K / swap-AB call on an `nt` problem (a @ wᵀ) of `shape`, with β·C
    (an unsplit swap-AB config: the one-kernel path's, Derived.staged_swap)."""
    def build(target: str) -> cc.Launch:
        M, N, K = shape
        a = torch.empty(M, K, dtype=torch.bfloat16)
        w = torch.empty(N, K, dtype=torch.bfloat16)
        out = torch.empty(M, N, dtype=torch.bfloat16)
        if not config.derive().workspace:
            kernel, args, kwargs, grid = prepare(a, w.t(), out, EpilogueArgs(out, 1.0, 1.0), config, 132)
            return cc.Launch(kernel, args, kwargs, grid)
        workspace = torch.empty(workspace_shape(M, N, K, config, sms=132), dtype=torch.float32)
        counters = torch.zeros(counter_count(M, N, config), dtype=torch.int32)
        kernel, args, kwargs, grid = prepare_split(a, w.t(), out, EpilogueArgs(out, 1.0, 1.0), config, 132, workspace,
                                                   counters)
        return cc.Launch(kernel, args, kwargs, grid)

    build.__doc__ = doc
    return build


#: name -> (config, shape, description) of the split-K / swap-AB variants compiled offline.
OFFLINE_SPLIT_VARIANTS = {
    "splitk": (KernelConfig(128, 128, 64, schedule="cooperative", split_k=8), (512, 512, 65536),
               "Hopper GEMM, split-K 8, cooperative 128×128×64, the last split sums the partials"),
    "splitk_pingpong": (KernelConfig(64, 128, 64, schedule="pingpong", split_k=4), (512, 512, 16384),
                        "Hopper GEMM, split-K 4, ping-pong 64×128×64, the last split sums the partials"),
    "swapab": (KernelConfig(128, 16, 64, schedule="cooperative", split_k=2, swap_ab=True), (16, 8192, 8192),
               "Hopper GEMM, swap-AB (Cᵀ = W·Aᵀ), cooperative 128×16×64, split-K 2 (decode)"),
    "swapab_64": (KernelConfig(128, 64, 64, schedule="cooperative", swap_ab=True), (64, 4096, 4096),
                  "Hopper GEMM, swap-AB, cooperative 128×64×64 (M ≤ 64), one split"),
    "swapab_pingpong": (KernelConfig(64, 16, 128, schedule="pingpong", swap_ab=True), (16, 6144, 4096),
                        "Hopper GEMM, swap-AB, ping-pong 64×16×128 (select's decode tile), one split"),
    "swapab_wave": (KernelConfig(128, 32, 128, schedule="cooperative", swap_ab=True), (32, 10240, 8192),
                    "Hopper GEMM, swap-AB, cooperative 128×32×128 (select's decode tile where 64-row ones take a"
                    " thin second wave: 80 tiles in one wave)"),
    "splitk_192": (KernelConfig(128, 192, 64, schedule="cooperative", split_k=2), (512, 6144, 4096),
                   "Hopper GEMM, split-K 2, cooperative 128×192×64 (two column pieces, 128 + 64)"),
    "swapab_160": (KernelConfig(64, 160, 64, schedule="pingpong", swap_ab=True), (800, 3072, 3072),
                   "Hopper GEMM, swap-AB, ping-pong 64×160×64 (two column pieces, 128 + 32: 800 rows in 5 tiles)"),
    "swapab_144": (KernelConfig(128, 144, 64, swap_ab=True), (1466, 3072, 3072),
                   "Hopper GEMM, swap-AB, cooperative 128×144×64 (the wave rule's: 1466 rows in 11 tiles)"),
    "swapab_192": (KernelConfig(128, 192, 64, swap_ab=True), (513, 37888, 3584),
                   "Hopper GEMM, swap-AB, cooperative 128×192×64 (the mid-rows model's: 513 rows in 3 tiles)"),
    "streamk": (KernelConfig(128, 128, 64, stream_k=True), (589, 8192, 8192),
                "Hopper GEMM, stream-K, cooperative 128×128×64 (a data-parallel wave, the last streamed)"),
    "streamk_256": (KernelConfig(128, 256, 64, stream_k=True), (589, 8192, 8192),
                    "Hopper GEMM, stream-K, cooperative 128×256×64 (a data-parallel wave, the last streamed)"),
    "streamk_pingpong": (KernelConfig(64, 128, 64, schedule="pingpong", stream_k=True), (800, 3072, 3072),
                         "Hopper GEMM, stream-K, ping-pong 64×128×64 (a data-parallel wave, the last streamed)"),
    "streamk_192": (KernelConfig(128, 192, 64, stream_k=True), (124, 9216, 7168),
                    "Hopper GEMM, stream-K, cooperative 128×192×64 (two column pieces; fewer tiles than SMs)"),
}
for _name, (_config, _shape, _doc) in OFFLINE_SPLIT_VARIANTS.items():
    cc.register(_name, targets=("sm_90a",))(_offline_split_builder(_config, _shape, _doc))
