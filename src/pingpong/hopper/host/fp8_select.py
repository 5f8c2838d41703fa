"""The FP8 GEMM's rule: the KernelConfig of an FP8 product (pingpong.hopper.kernels.fp8_gemm)
from its shape, scaling and accumulation alone, on S SMs (`rule_fp8`). It runs where no tuning
table answers (`fp8_launch.select_fp8`); the measurements behind each choice: docs/design.md,
FP8, and the comments at each constant:

    65–960 rows,    the FP8 mid-rows model (FP8_MID_ROWS, below: select.MidRowsModel's waves ×
    tensor/row,     k-steps × tile area / speed over its candidates, swap-AB two-piece tiles
    promoted, not   for 129–160 rows and cooperative swap-AB tiles, M in 128–192 columns,
    launch-bound    among them); the rest of the rule decides everything else:
    M ≤ 32,         swap-AB ping-pong 64×16×128 (64×32 above 16 rows): N on the wgmma's 64-row
    tensor/row      side, M in its 16 or 32 columns (select.DECODE_M). Unsplit where N makes
                    ≥ S / select.DECODE_UNSPLIT_SHARE 64-row tiles (select.decode_tile); else
                    K is split as below (few tiles leave SMs idle).
                    Block-wise scales cannot swap (`check_fp8_config`).
    65–128 rows,    cooperative 128×128×128 where its tiles fill a wave, every scaling.
    M ≤ 64          ping-pong 64×128×128, or 64×64 where 128-column tiles fill less than 3/4
    (block: ≤ 128)  of a wave: 64-row tiles waste the least of a skinny product and stream the
                    weight through the ring. Tensor/row: 64×32 where its tiles fit one wave
                    (twice the SMs on the weight), unless K splits 64×64 tiles into parts of
                    ≥ select.MID_SPLIT_STEPS k-steps (the narrower tile re-reads A twice as often);
                    where 64×64 tiles take a second wave under half full (8448 < N ≤ 12608
                    on 132 SMs: select.thin_second_wave), the cooperative swap-AB 128×64
                    (_SWAP_WAVE: N's 128-row tiles in one wave, M in its 64 columns, unsplit
                    as the 64×64 tiles it replaces and as measured; H200, 36-62 rows, N
                    8960-12288: 5-19% faster, tensor- and row-wise, as decode's one-wave
                    tiles, select.decode_tile).
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
    the two-piece 128×160 and 128×144 (PIECE_EFFICIENCY) where they take a wave fewer of few, or
    the staged cooperative swap-AB 128×144 and 128×160 (STAGED_SWAP_EFFICIENCY: N in 128-row
    tiles, M in two column pieces) where they take as many waves on fewer padded columns, up to
    STAGED_SWAP_MAX_M rows (where `pingpong tune` searches them too), except on long tensor-wise
    products (below), unmeasured with them.

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

from ...runtime.spec import SCALE_BLOCK
from .config import KernelConfig
from .launch import workspace_reason
from .select import (DECODE_M, MID_ROWS_MAX_M, MID_SPLIT_STEPS, NARROW_MAX_M, SPLIT_MIN_BYTES, MidRowsModel,
                     decode_tile, one_wave_tile, split, thin_second_wave, tile_count)

#: M·N·K from which a product on LONG_SMS SMs is long (`long_product`, module docstring); on S
#: SMs the threshold is LONG_WORK · S / LONG_SMS (the work each SM does)
LONG_WORK, LONG_SMS = 2 ** 40, 132

#: bytes of an fp8 operand element: what configs are derived for (config.derive, workspace sizes)
FP8_BYTES = 1


def rule_fp8(M: int, N: int, K: int, promote: bool, sms: int, scaling: str = "tensor") -> KernelConfig:
    """The fixed rule's KernelConfig of an FP8 product (module docstring): decode's swap-AB
    tile, else the tile, then its split count (select.split, K in k-steps of SCALE_BLOCK)."""
    if fp8_mid_rows_decides(M, N, K, sms, scaling, promote):  # the FP8 mid-rows model, unsplit if no workspace
        config = FP8_MID_ROWS.config(M, N, K, sms)
        return config if workspace_reason(M, N, K, config, FP8_BYTES) is None else dataclasses.replace(config, split_k=1)
    k_steps = -(-K // SCALE_BLOCK)
    narrow = scaling != "block"  # block-wise takes no 128×64 tile (module docstring)
    if M <= DECODE_M and narrow:  # swap-AB: unsplit over many tiles of N, else split as every tile below
        tile, unsplit = decode_tile(M, N, SCALE_BLOCK, sms)
        if unsplit:
            return tile
    elif 64 < M <= 128 and tile_count(_SQUARE, M, N) >= sms:  # a wave of 128×128 tiles: those
        tile = _SQUARE
    elif M <= 64 or (M <= 128 and not narrow):
        bn = 128 if -(-M // 64) * -(-N // 128) >= 0.75 * sms else 64
        tile = KernelConfig(64, bn, SCALE_BLOCK, schedule="pingpong")
        if narrow and bn == 64 and thin_second_wave(tile_count(tile, M, N), sms):  # (narrow: M ≤ 64 here)
            return _SWAP_WAVE  # N's 128-row tiles in one wave, unsplit as measured (module docstring)
        if narrow and bn == 64 and min(sms // tile_count(tile, M, N), k_steps // MID_SPLIT_STEPS) < 2:
            tile = one_wave_tile(M, N, sms, (64, 32), SCALE_BLOCK) or tile  # unless a long K splits 64×64
    elif M <= 128:
        tile = least_wave_time(M, N, sms, ((_NARROW, 1.0), (_MID, 1.0)))
    else:
        tile = KernelConfig(128, 128 if promote else 256, SCALE_BLOCK, schedule="cooperative")

    # the staged swap-AB tiles where they were measured: not on long tensor-wise products, whose
    # unswapped tiles run the row-wise kernel (module docstring, `kernel_scaling`)
    staged_swaps = M <= STAGED_SWAP_MAX_M and not (scaling == "tensor" and long_product(M, N, K, sms))

    def unsplit(c: KernelConfig) -> KernelConfig:  # an unsplit 128×128, or another tile whose waves take less time
        return least_wave_time(M, N, sms, ((_NARROW, NARROW_EFFICIENCY), (c, 1.0), (_WIDE, WIDE_EFFICIENCY),
                                           (_HALF, HALF_EFFICIENCY), *PIECE_EFFICIENCY.items(),
                                           *(STAGED_SWAP_EFFICIENCY.items() if staged_swaps else ()))
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
_SWAP_WAVE = KernelConfig(128, 64, SCALE_BLOCK, swap_ab=True)  # 33-64 rows: N in 128-row tiles, one wave
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
#: none, so they are not candidates; 64×64's speed puts it last everywhere measured. The swap-AB
#: pieces lose up to 8% where K is short (140×21888×2048), a cost the model does not see.
FP8_MID_ROWS_MIN_M = 64
_SWAP_MID = KernelConfig(64, 64, SCALE_BLOCK, schedule="pingpong", swap_ab=True)
_W160 = KernelConfig(128, 160, SCALE_BLOCK)  # 128 + 32 columns
_W144 = KernelConfig(128, 144, SCALE_BLOCK)  # 128 + 16 columns
_SWAP_144 = KernelConfig(64, 144, SCALE_BLOCK, schedule="pingpong", swap_ab=True)  # M in 128 + 16 columns
_SWAP_160 = KernelConfig(64, 160, SCALE_BLOCK, schedule="pingpong", swap_ab=True)  # M in 128 + 32 columns
#: Cooperative swap-AB, unsplit: N in 128-row tiles, M in 128, 144, 160 or 192 (128 + 64)
#: columns, stored through TMA staged transposed (config.staged_swap). They take the products
#: whose M these widths divide into nearly full tiles where 128-row tiles pad M (286 rows: 2 × 144
#: against 3 × 128) or take a wave more (547×5120×13824: one wave of 128×192 against two of
#: 128×128). The narrow 80 = 64 + 16 and 96 = 64 + 32 columns take M only where one of them
#: holds it (65-96 rows; over more rows they re-read N's operand per tile: 3 × 96 over 196 rows
#: ran slower than 2 × 128), as the 16-bit model's (select.MID_ROWS_NARROW_SWAP): 72×10240×8192
#: 0.980 of torch._scaled_mm against the 128×128 pick's 0.902 tensor-wise, 1.081 against 0.983
#: row-wise (set h200-run481-fp8-*-narrow-swap; speeds 0.8-1.0 score alike there).
STAGED_SWAPS = {bn: KernelConfig(128, bn, SCALE_BLOCK, swap_ab=True) for bn in (128, 144, 160, 192)}
NARROW_STAGED_SWAPS = {bn: KernelConfig(128, bn, SCALE_BLOCK, swap_ab=True) for bn in (80, 96)}
_STAGED_SPEEDS = {STAGED_SWAPS[128]: 0.95, STAGED_SWAPS[144]: 0.95, STAGED_SWAPS[160]: 1.0, STAGED_SWAPS[192]: 1.05,
                  NARROW_STAGED_SWAPS[80]: 0.8, NARROW_STAGED_SWAPS[96]: 0.8}
#: The cooperative 128×96 (64 + 32 columns), unsplit, as the 16-bit model's (select.MID_ROWS_NARROW,
#: its row limit): on ten one-wave products of 196-512 rows it ran 1.01-1.04× the 128×128 pick
#: tensor-wise and 1.02-1.05× row-wise, and on held-out ones of 106-468 rows 1.00-1.08× and
#: 1.01-1.10× (benchmarks/data/midrows_sweeps.json); at 88 and 91 rows it lost to the narrow
#: swap-AB 128×96 (0.94-0.97×). Its speed, 0.78, puts
#: it ahead of 128×128 (a one-wave tie at 0.75) and behind the narrow swap-AB tiles (0.8)
_W96 = KernelConfig(128, 96, SCALE_BLOCK)
FP8_MID_ROWS = MidRowsModel({_SQUARE: 1.0, _NARROW: 0.75, _WIDE: 1.05, _HALF: 0.9, _MID: 0.3, _SWAP_MID: 0.75,
                             _W160: 0.98, _W144: 0.97, _SWAP_144: 0.8, _SWAP_160: 0.75, _W96: 0.78, **_STAGED_SPEEDS},
                            frozenset({_WIDE, _HALF, _MID, _SWAP_MID, _W160, _W144, _SWAP_144, _SWAP_160, _W96,
                                       *_STAGED_SPEEDS}), 32,
                            SCALE_BLOCK, {_HALF: 320, _SWAP_MID: 192, _SWAP_144: 144, _SWAP_160: 160,
                                          _W96: NARROW_MAX_M, **{c: c.block_n for c in NARROW_STAGED_SWAPS.values()}})
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
#: per-FLOP speed of the staged cooperative swap-AB 128×144 and 128×160 (N in 128-row tiles, M in
#: two column pieces) against 128×128 in the rule's waves, fitted to the H200 sweeps of two
#: shapes where they take as many waves as the two-piece 128×160 (1041×2048×10944: one,
#: 1577×3072×8192: two) and run faster: they win where M fills their columns better than 128-row
#: tiles do at the same waves. Blind spot: their time on long or many-wave products varies more
#: than the model sees (128×144 lost 5% at 1006×7168×20480 and won at 964×7168×20480; 128×160
#: lost 4% at 3307×7168×5120 row-wise). Up to STAGED_SWAP_MAX_M rows, about as far as the
#: sweeps reached (3424 rows; beyond, with N of 2048-4096, they would take products of up to
#: 17000 rows that none measured); 128 and 192 columns are no candidates: they would take 8192³.
STAGED_SWAP_EFFICIENCY = {STAGED_SWAPS[144]: 0.9, STAGED_SWAPS[160]: 0.96}
STAGED_SWAP_MAX_M = 4096
#: per-FLOP speed of the ping-pong 64×128 tile against 128×128 above 128 rows: it wins only
#: where 128-row tiles leave a mostly empty last tile-row or wave
HALF_EFFICIENCY = 0.75


def least_wave_time(M: int, N: int, sms: int, tiles) -> KernelConfig:
    """The tile of `tiles` ((config, per-FLOP efficiency) pairs, preferred first) whose waves
    take the least modelled time, ⌈tiles / S⌉ · BM·BN / efficiency: the persistent grid runs S
    tiles at a time (wave quantization, pingpong.hopper.host.select); ties go to the earlier one."""
    cost = lambda c, e: -(-tile_count(c, M, N) // sms) * c.block_m * c.block_n / e  # noqa: E731
    return min(tiles, key=lambda t: cost(*t))[0]
