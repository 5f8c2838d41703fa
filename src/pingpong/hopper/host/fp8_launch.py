"""Host side of the Hopper FP8 GEMM (pingpong.hopper.kernels.fp8_gemm): the tile choice, TMA
descriptors, the constexprs from `Derived`, the persistent grid, and the offline builds.

Operands arrive validated (pingpong.fp8): A (M, K) row-major and W (N, K) row-major (the
caller's b = W.t()), both fp8 and TMA-legal; scales fp32 in torch._scaled_mm's layouts.

`select_fp8` picks the tile (one decision, made here): the tuning table's entry for this GPU,
shape bucket and FP8 problem (`pingpong tune --dtype fp8`; table dtype `table.fp8_key`, e.g.
"fp8e4m3-row"), found and vetted as select_config's (`select.tabled`) and checked by
`check_fp8_config` (an entry the FP8 kernel cannot run falls back to the rule); else the rule,
`rule_fp8` (S SMs; the measurements behind each choice: docs/design.md, FP8):

    65–960 rows,    the FP8 mid-rows model (FP8_MID_ROWS, below: select.MidRowsModel's waves ×
    tensor/row,     k-steps × tile area / speed over its candidates, swap-AB two-piece tiles
    promoted, not   for 129–160 rows among them); the rest of the rule decides everything else:
    launch-bound
    M ≤ 32,         swap-AB ping-pong 64×16×128 (64×32 above 16 rows): N on the wgmma's 64-row
    tensor/row      side, M in its 16 or 32 columns (select.DECODE_M). Unsplit where N makes
                    ≥ S/4 64-row tiles; else K is split as below (few tiles leave SMs idle).
                    Block-wise scales cannot swap (`check_fp8_config`).
    65–128 rows,    cooperative 128×128×128 where its tiles fill a wave, every scaling.
    M ≤ 64          ping-pong 64×128×128, or 64×64 where 128-column tiles fill less than 3/4
    (block: ≤ 128)  of a wave: 64-row tiles waste the least of a skinny product and stream the
                    weight through the ring. Tensor/row: 64×32 where its tiles fit one wave
                    (twice the SMs on the weight), unless K splits 64×64 tiles into parts of
                    ≥ select.MID_SPLIT_STEPS k-steps (the narrower tile re-reads A twice as often).
    65–128 rows,    cooperative 128×64 or ping-pong 64×64, whichever's waves take the less
    tensor/row      modelled time (`least_wave_time`; a tie keeps 128×64).
    more rows       cooperative 128×128×128, promoted: the second accumulator (the wgmma's
                    `part`) fits as 2 × 64 registers, not 2 × 128; with use_fast_accum
                    (tensor/row) 128×256, one accumulator of 128 registers.

    Then split-K by the 16-bit kernels' cost model (select.split_count, select's docstring),
    K counted in the FP8 kernel's k-steps (one 128-deep ring slot: 128 bytes of K, as a 64-deep
    bf16 k-step): 512×512×65536 (16 tiles of 128×128, 512 k-steps) takes 8 splits,
    1024×1024×16384 (64 tiles, 128 k-steps) 2. A split 128×256 tile becomes 128×128 (the
    128×256 split kernel spills with row-wise scales, offline). A split config runs
    fp8_split_gemm with an fp32 workspace and the stream's arrival counters (the 16-bit
    SplitPlan's: pingpong.runtime.plan). As there, a problem moving fewer than
    select.SPLIT_MIN_BYTES (fp8 operands, a 16-bit result) does not split: launch-bound, it
    cannot earn the workspace and counters back; nor does one whose workspace is too large.

    An unsplit 128×128 with tensor- or row-wise scales yields to the tile whose waves take the
    least modelled time, each counted at its per-FLOP speed against 128×128: 128×64
    (NARROW_EFFICIENCY; ties go to it), 128×192 (WIDE_EFFICIENCY: two column pieces, one set of
    parts, so the 64×192 accumulators fit) where 128×128 leaves much of its last wave idle, or
    ping-pong 64×128 (HALF_EFFICIENCY) where a mostly empty last tile-row of 128 costs more, or
    the two-piece 128×160 and 128×144 (PIECE_EFFICIENCY) where they take a wave fewer of few.

    Long products (M·N·K at least LONG_WORK = 2^40 on LONG_SMS = 132 SMs, in proportion to
    the SM count: `long_product`): tensor-wise ones (promoted, one unsplit, unswapped launch)
    run the row-wise kernel, the two scalars broadcast per call into (M, 1) and (1, N) vectors
    (`kernel_scaling`; two small copies): the row-wise epilogue's per-row and per-column loads
    pause each tile's store, which makes these products faster by an effect of timing that is
    measured, not explained. Long block-wise products take 4 ring stages (5 fit) and groups of
    4 tile-rows (not 8), `_LONG_BLOCK`.

    Block-wise scales take no 128×64 tile: its time was bimodal in the suites, not understood.
"""

from __future__ import annotations

import dataclasses

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ...runtime import compile as cc
from ...runtime.launcher import CachedLaunch
from ...errors import ConfigError
from ...runtime.plan import Plan, arrival_counters, device_index
from ...runtime.spec import NO_ARGS, SCALE_BLOCK, EpilogueArgs, GemmSpec, scale_mode
from ..device.epilogue import EpilogueConstants
from ..kernels.fp8_gemm import fp8_gemm, fp8_split_gemm, fp8_stream_gemm
from . import table as tables
from .config import MAX_ACC_REGS, SMEM_LIMIT, KernelConfig
from .launch import (MAX_SPLIT_BLOCK, counter_count, epilogue_operands, kernel_constants, launch_options,
                     operand_constants, operand_descriptors, operand_pointers, partial_slots, persistent_grid,
                     tile_descriptor, workspace_reason, workspace_shape)
from .select import (DECODE_M, MID_ROWS_MAX_M, MID_SPLIT_STEPS, SPLIT_MIN_BYTES, Device, MidRowsModel, one_wave_tile,
                     split, tabled, tile_count)
from .splits import effective_splits, stream_k_split

#: fp32 elements of a 128×128 b-scale box (Fp8Scales): 128 bytes, so that every slot's box
#: starts 128-byte aligned, as a TMA load's shared-memory destination must (CUDA programming
#: guide, multi-dimensional TMA alignment); only its first 4 elements are read
_SB_BOX = 32


#: M·N·K from which a product on LONG_SMS SMs is long (`long_product`, module docstring); on S
#: SMs the threshold is LONG_WORK · S / LONG_SMS (the work each SM does)
LONG_WORK, LONG_SMS = 2 ** 40, 132

#: bytes of an fp8 operand element: what configs are derived for (config.derive, workspace sizes)
FP8_BYTES = 1

#: torch's FP8 dtypes -> the kind in the tuning table's dtype key (table.fp8_key)
FP8_KINDS = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}


def rule_fp8(M: int, N: int, K: int, promote: bool, sms: int, scaling: str = "tensor") -> KernelConfig:
    """The fixed rule's KernelConfig of an FP8 product (module docstring): decode's swap-AB
    tile, else the tile, then its split count (select.split, K in k-steps of SCALE_BLOCK)."""
    if fp8_mid_rows_decides(M, N, K, sms, scaling, promote):  # the FP8 mid-rows model, unsplit if no workspace
        config = FP8_MID_ROWS.config(M, N, K, sms)
        return config if workspace_reason(M, N, K, config, FP8_BYTES) is None else dataclasses.replace(config, split_k=1)
    k_steps = -(-K // SCALE_BLOCK)
    narrow = scaling != "block"  # block-wise takes no 128×64 tile (module docstring)
    if M <= DECODE_M and narrow:  # swap-AB: unsplit over many tiles of N, else split as every tile below
        tile = KernelConfig(64, 16 if M <= 16 else 32, SCALE_BLOCK, schedule="pingpong", swap_ab=True)
        if -(-N // 64) >= sms // 4:
            return tile
    elif 64 < M <= 128 and tile_count(_SQUARE, M, N) >= sms:  # a wave of 128×128 tiles: those
        tile = _SQUARE
    elif M <= 64 or (M <= 128 and not narrow):
        bn = 128 if -(-M // 64) * -(-N // 128) >= 0.75 * sms else 64
        tile = KernelConfig(64, bn, SCALE_BLOCK, schedule="pingpong")
        if narrow and bn == 64 and min(sms // tile_count(tile, M, N), k_steps // MID_SPLIT_STEPS) < 2:
            tile = one_wave_tile(M, N, sms, (64, 32), SCALE_BLOCK) or tile  # unless a long K splits 64×64
    elif M <= 128:
        tile = least_wave_time(M, N, sms, ((_NARROW, 1.0), (_MID, 1.0)))
    else:
        tile = KernelConfig(128, 128 if promote else 256, SCALE_BLOCK, schedule="cooperative")

    def unsplit(c: KernelConfig) -> KernelConfig:  # an unsplit 128×128, or another tile whose waves take less time
        return least_wave_time(M, N, sms, ((_NARROW, NARROW_EFFICIENCY), (c, 1.0), (_WIDE, WIDE_EFFICIENCY),
                                           (_HALF, HALF_EFFICIENCY), *PIECE_EFFICIENCY.items())
                               ) if narrow and c == _SQUARE else c

    if launch_bound(M, N, K):  # no workspace (module docstring)
        return unsplit(tile)
    config = split(tile, M, N, k_steps, sms)
    if config.block_n == 256 and config.split_k > 1:  # split: 128×128 (module docstring)
        config = split(dataclasses.replace(tile, block_n=128), M, N, k_steps, sms)
    config = unsplit(config)
    if scaling == "block" and config == _SQUARE and long_product(M, N, K, sms):
        config = _LONG_BLOCK
    return config if workspace_reason(M, N, K, config, FP8_BYTES) is None else tile


def fp8_mid_rows_decides(M: int, N: int, K: int, sms: int, scaling: str = "tensor", promote: bool = True) -> bool:
    """Whether rule_fp8 takes the FP8 mid-rows model (FP8_MID_ROWS): FP8_MID_ROWS_MIN_M <
    M ≤ select.MID_ROWS_MAX_M rows, tensor- or row-wise scales, promoted accumulation (what its
    sweeps measured), and not launch-bound (select.SPLIT_MIN_BYTES)."""
    return FP8_MID_ROWS_MIN_M < M <= MID_ROWS_MAX_M and scaling != "block" and promote and not launch_bound(M, N, K)


def launch_bound(M: int, N: int, K: int) -> bool:
    """Whether an FP8 product moves fewer than select.SPLIT_MIN_BYTES (fp8 operands, a 16-bit
    result): launch-bound, it takes no split and no workspace (module docstring)."""
    return M * K + N * K + 2 * M * N < SPLIT_MIN_BYTES


def long_product(M: int, N: int, K: int, sms: int) -> bool:
    """M·N·K at least LONG_WORK on LONG_SMS SMs, as much per SM on `sms`: the long products whose
    tensor-wise scales run the row-wise kernel (`kernel_scaling`) and whose block-wise ones
    take _LONG_BLOCK (`rule_fp8`); module docstring."""
    return M * N * K * LONG_SMS >= LONG_WORK * sms


#: the promoted cooperative tiles of the rule (module docstring) and the 64-row mid-size one
_SQUARE = KernelConfig(128, 128, SCALE_BLOCK)
_NARROW = KernelConfig(128, 64, SCALE_BLOCK)
_WIDE = KernelConfig(128, 192, SCALE_BLOCK)  # two column pieces (128 + 64): tensor- and row-wise scales
_HALF = KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong")  # a ragged last tile-row wastes half as much
_MID = KernelConfig(64, 64, SCALE_BLOCK, schedule="pingpong")
#: block-wise long products (`long_product`): 4 ring stages and groups of 4 tile-rows
_LONG_BLOCK = KernelConfig(128, 128, SCALE_BLOCK, stages=4, group_m=4)
#: The FP8 mid-rows model (select.MidRowsModel; rule_fp8 above FP8_MID_ROWS_MIN_M rows, tensor-
#: and row-wise, promoted: fp8_mid_rows_decides): among cooperative 128×128 and 128×64 (split
#: or not), the two-piece 128×192, 128×160 and 128×144 (never split), ping-pong 64×128 (up to
#: 320 rows: its 64-row tiles read the weight twice as often as 128-row ones) and 64×64, and
#: swap-AB ping-pong 64×64 (N on the wgmma's rows, M on its 64 columns) and 64×144 / 64×160 (M
#: in two column pieces, 128 + 16 or 128 + 32; never split, and only up to their width: 129-160
#: rows, where a 128-row tile leaves its second tile-row almost empty), the one of least
#: modelled time, K in k-steps of one 128-deep FP8 ring slot. Speeds and limits fitted
#: (benchmarks/midrows_fit.py --model fp8) to H200 sweeps of 34 random 76-1022-row shapes with
#: both scalings, an A/B of 31 more, the same 34 with the 144-, 160- and 80-column tiles, and 24
#: shapes of 129-200 rows with the swap-AB tiles (benchmarks/data/midrows_sweeps.json, sets
#: h200-run381-fp8-*, h200-run382-fp8-*, h200-run41[12]-fp8-*-widths, h200-run41[67]-fp8-*-swap;
#: 128×80 fitted to the grid's floor, so it is no candidate). 144 and 160 sit just under 1.0:
#: where 128×192 fills its waves as well (529×37888×3584: 8 waves, 7.5 full, against 9 or 10
#: full ones), 128×192 keeps the product, which it runs faster. Swap-AB 64×192 and cooperative
#: 128×160 swap-AB each won one shape of 24 by under 5%, cooperative 128×144 swap-AB and stream-K
#: none, so they are not candidates; 64×64's speed puts it last everywhere measured. The swap-AB pieces lose
#: up to 8% where K is short (140×21888×2048), a cost the model does not see.
FP8_MID_ROWS_MIN_M = 64
_SWAP_MID = KernelConfig(64, 64, SCALE_BLOCK, schedule="pingpong", swap_ab=True)
_W160 = KernelConfig(128, 160, SCALE_BLOCK)  # 128 + 32 columns
_W144 = KernelConfig(128, 144, SCALE_BLOCK)  # 128 + 16 columns
_SWAP_144 = KernelConfig(64, 144, SCALE_BLOCK, schedule="pingpong", swap_ab=True)  # M in 128 + 16 columns
_SWAP_160 = KernelConfig(64, 160, SCALE_BLOCK, schedule="pingpong", swap_ab=True)  # M in 128 + 32 columns
FP8_MID_ROWS = MidRowsModel({_SQUARE: 1.0, _NARROW: 0.75, _WIDE: 1.05, _HALF: 0.9, _MID: 0.3, _SWAP_MID: 0.75,
                             _W160: 0.98, _W144: 0.97, _SWAP_144: 0.8, _SWAP_160: 0.75},
                            frozenset({_WIDE, _HALF, _MID, _SWAP_MID, _W160, _W144, _SWAP_144, _SWAP_160}), 32,
                            SCALE_BLOCK, {_HALF: 320, _SWAP_MID: 192, _SWAP_144: 144, _SWAP_160: 160})
#: per-FLOP speed of the 128×64 tile against 128×128 in the wave model (docs/design.md, FP8):
#: at 0.75, 512 rows at N = 6144 (2 waves of 128×128 against 3 of 128×64) tie, and the tie goes
#: to 128×64 (`rule_fp8`)
NARROW_EFFICIENCY = 0.75
#: per-FLOP speed of the 128×192 tile against 128×128: where both fill their waves alike,
#: 128×128 keeps the product; where 128×128 leaves much of its last wave idle, 128×192 wins
WIDE_EFFICIENCY = 0.95
#: per-FLOP speed of the two-piece tiles against 128×128 in the rule's waves (`rule_fp8`): they
#: win where they take a wave fewer of few (2 against 3 at 1255×3584×18944 and 2141×2048×10944:
#: 1.19× / 1.20× with tensor- / row-wise scales; 3 against 4: 1.00-1.08×), and lose 1-5% at 7
#: against 9, which these speeds keep on 128×128 (fitted to H200 sweeps of 24 shapes of
#: 964-3424 rows and an A/B of 11 more, both scalings)
PIECE_EFFICIENCY = {_W160: 0.95, _W144: 0.9}
#: per-FLOP speed of the ping-pong 64×128 tile against 128×128 above 128 rows: it wins only
#: where 128-row tiles leave a mostly empty last tile-row or wave
HALF_EFFICIENCY = 0.75


def least_wave_time(M: int, N: int, sms: int, tiles) -> KernelConfig:
    """The tile of `tiles` ((config, per-FLOP efficiency) pairs, preferred first) whose waves
    take the least modelled time, ⌈tiles / S⌉ · BM·BN / efficiency: the persistent grid runs S
    tiles at a time (wave quantization, pingpong.hopper.host.select); ties go to the earlier one."""
    cost = lambda c, e: -(-tile_count(c, M, N) // sms) * c.block_m * c.block_n / e  # noqa: E731
    return min(tiles, key=lambda t: cost(*t))[0]


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
    vectors per call): long tensor-wise products take the row-wise kernel (module docstring);
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
    swap-AB: fp8_split_gemm (pointer epilogue; swap-AB stores the transposed tile, as the
    16-bit swap path: fixup.SplitEpilogue), with `workspace` (fp32, at least
    launch.workspace_shape) and `counters` (int32, at least launch.counter_count, all zero;
    zero again after the kernel; neither is read with one split). Swap-AB runs the kernel on
    kernel_operands: an R × C = N × M product."""
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
    if splits == 1 and not d.swap_ab:  # the TMA epilogue
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
    (`workspace` rows > 0): a fresh fp32 workspace from the caching allocator and the stream's
    arrival counters per call, as the 16-bit SplitPlan (pingpong.hopper.host.backend); swap-AB with
    one split: the split kernel's pointer epilogue, with empty stand-ins for both. `scaling`
    is the kernel's (`kernel_scaling`); `broadcast`: tensor-wise scalars given to the row-wise
    kernel as (M, 1) and (1, N) vectors, made per call. `sms`: the SMs its persistent grid
    spans (the GPU's less torch's SM carveout when planned)."""

    __slots__ = ("scaling", "sb_cols", "promote", "config", "launch", "workspace", "counters", "unused", "broadcast",
                 "sms")

    def __init__(self, device, scaling, sb_cols, promote, config, activation, workspace=(0, 0), counters=0,
                 broadcast=False, *, sms):
        self.device, self.path, self.activation, self.extents, self.sms = device, "hopper-fp8", activation, None, sms
        self.scaling, self.sb_cols, self.promote, self.config = scaling, sb_cols, promote, config
        self.broadcast = broadcast
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
            ws = torch.empty(self.workspace, dtype=torch.float32, device=out.device)
            counters = arrival_counters(out.device, self.counters)
        elif self.config.swap_ab or self.config.stream_k:  # neither read (one split; no shared tile): made once
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
    elif fp8_splits(K, config) == 1:  # swap-AB alone runs the split kernel with no workspace or counters
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
    "fp8-block-long": ("block", True, _LONG_BLOCK, SCALE_BLOCK, ""),  # the rule's long block-wise products
    "fp8-block-pingpong": ("block", True, KernelConfig(64, 128, SCALE_BLOCK, schedule="pingpong"), SCALE_BLOCK, ""),
    "fp8-row-pingpong": ("row", True, KernelConfig(64, 64, SCALE_BLOCK, schedule="pingpong"), SCALE_BLOCK, ""),
    "fp8-tensor-narrow": ("tensor", True, KernelConfig(128, 64, SCALE_BLOCK), SCALE_BLOCK, ""),  # the rule's 128×64
    "fp8-tensor-wide": ("tensor", True, KernelConfig(128, 192, SCALE_BLOCK), SCALE_BLOCK, ""),  # two column pieces
    "fp8-row-wide": ("row", True, KernelConfig(128, 192, SCALE_BLOCK), SCALE_BLOCK, ""),
    "fp8-row-wide-fast": ("row", False, KernelConfig(128, 192, SCALE_BLOCK), SCALE_BLOCK, ""),
    "fp8-tensor-144": ("tensor", True, _W144, SCALE_BLOCK, ""),  # the mid-rows model's 128 + 16 columns
    "fp8-row-160": ("row", True, _W160, SCALE_BLOCK, ""),  # and its 128 + 32
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
    "fp8-row-swap-coop": ("row", True, KernelConfig(128, 32, SCALE_BLOCK, swap_ab=True), SCALE_BLOCK, ""),
    # swap-AB in two column pieces: M on the wgmma's N side, 144 = 128 + 16 and 160 = 128 + 32
    "fp8-tensor-swap-144": ("tensor", True, KernelConfig(64, 144, SCALE_BLOCK, schedule="pingpong", swap_ab=True),
                            SCALE_BLOCK, ""),
    "fp8-row-swap-160": ("row", True, KernelConfig(64, 160, SCALE_BLOCK, schedule="pingpong", swap_ab=True),
                         SCALE_BLOCK, ""),
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
