"""Which KernelConfig a GEMM runs with: `select_config(M, N, K, dtypes, layouts, device)`.

    tuning table for this GPU (pingpong.hopper.host.table) has an entry in (M, N, K)'s bucket?
        yes, for this very shape ─> its config (if it is valid for these element sizes);
                                    under torch's SM carveout it counts as a near shape
                                    (the table's timings had every SM; the waves do not)
        yes, for a near shape    ─> its config where tuning found it ahead of the heuristic
                                    at its own shape (heuristic_us ≥ NEAR_GAIN · us: a tie
                                    tells nothing of its neighbours), unless on this shape
                                    it idles more of the last wave than the heuristic's
                                    does (× NEAR_SLACK): a tile
                                    width tuned for 6144 columns (128 tiles of 128×192) is
                                    2 waves at 8192 (172 tiles), where 128×256 makes 128;
                                    nor if its tiles cover this shape with more padding than
                                    the tuned shape's (tile_fill, × NEAR_SLACK): 64-row tiles
                                    tuned at M = 64 are full there but 2/3 empty at M = 86
        no                       ─> the heuristic below

The heuristic, for shapes nobody tuned (S = the GPU's SM count, less torch's SM carveout):

    | case                          | config                                              |
    |-------------------------------|-----------------------------------------------------|
    | < SPLIT_MIN_BYTES moved       | launch-bound, no split: decode's tile (M ≤ 32), the |
    |                               | mid-size tile (M ≤ 128, where one fits a wave), or  |
    |                               | the few-tile rule below                             |
    | M ≤ 32 (decode)               | swap-AB: 64 rows of N × 16 (M ≤ 16) or 32 columns,  |
    |                               | ping-pong (thin second wave: 128 rows, cooperative) |
    |                               | 256 bytes of K a ring slot (SMALL_TILE_K_BYTES)     |
    | M ≤ 128, ≤ S tiles of 64×96   | 64×BN ping-pong, BN ∈ MID_WIDTHS (96, 64, 32) the   |
    |                               | width whose tiles fill most of one wave (with a     |
    |                               | long K ≥ 64 wide, split within that one wave), 256  |
    |                               | bytes of K a ring slot                              |
    | M ≤ 64                        | swap-AB: 128 rows of N × (M rounded up to 32 or 64) |
    | M ≤ MID_ROWS_MAX_M (above     | mid rows: the tile of MID_ROWS_TILES (128×256,      |
    | MID_M rows, or where no mid-  | 128×192, 128×128 cooperative; 64×256, 64×128 ping-  |
    | size tile fits one wave)      | pong) and split count, or of MID_ROWS_WHOLE_TILES   |
    |                               | (128×160, 128×144; swap-AB 64×144/160/192 and       |
    |                               | 128×128/144/160/192: M on the width) or of          |
    |                               | MID_ROWS_NARROW_SWAP (swap-AB 128×80/96 where M is  |
    |                               | at most the width) or MID_ROWS_NARROW (128×96 up to |
    |                               | 512 rows),                                          |
    |                               | of least modelled time (below)                      |
    |                               | — unsplit with ≤ S/2 128×128 tiles and no swap-AB:  |
    |                               | few tiles                                           |
    | otherwise, 128×256 tiles 3-4  | stream-K 128×256 (WAVE_STREAM): the thin last       |
    |   waves + ≤ S/8, ≥ 48 k-steps | wave's k-steps spread over every SM                 |
    | otherwise                     | 128×BN×64 cooperative, BN ∈ {256, 192, 128} the     |
    |                               | width of least ⌈tiles / S⌉ · BN / efficiency (per-  |
    |                               | FLOP speed: TILE_EFFICIENCY, or in short CTAs       |
    |                               | SHORT_TILE_EFFICIENCY; in one wave: 32-column (192) |
    |                               | or 64-column (256) epilogue sub-tiles, 256 also in  |
    |                               | ≤ 4 waves of ≤ 64 k-steps); up to                   |
    |                               | WAVE_SWAP_MAX_M rows also the swap-AB 128×144 (N on |
    |                               | its rows), where it fills its waves better          |
    | ... ≤ S/2 tiles of 128×128,   | few tiles: 64×BN ping-pong, BN ∈ FEW_WIDTHS (128,   |
    |     K not split               | 64) the width whose tiles fill most of one wave     |

    then, with fewer tiles than S: split-K into the s ≥ 1 splits that minimize
        waves(s) · (k_steps / s + SPLIT_OVERHEAD_STEPS),   waves(s) = ⌈tiles·s / S⌉
    (the persistent grid runs S units at a time), k_steps counted in SPLIT_STEP_K elements of
    K, each split ≥ MIN_SPLIT_STEPS of them long,
    s ≤ MAX_SPLIT_K, and a larger s only where it wins by SPLIT_MARGIN; above 64 rows none
    where the tiles' last row is under half full and they fill half a wave (rows_unsplit)

Mid-size M (33..128 rows) streams the weight like decode does, but its rows fill a 64-row
wgmma. Its tiles run in one wave, each with a deep ring (5-9 slots of 128 K), and the width is the
one that puts the most of them on the SMs (when K is long enough that the split rule above
splits them anyway, at least MID_SPLIT_WIDTH wide): at N = 4096, 64 rows take 64×32 (128 tiles)
and 128 rows 64×64 (128 tiles); at N = 6144, 128 rows take 64×96 (128 tiles). The
measurements behind this and the constants below: benchmarks/RESULTS.md (the tables by
date) and, for the mid-rows model, benchmarks/data/midrows_sweeps.json.

Decode (M ≤ 32) puts N on the wgmma's 64-row side, ping-pong, so that twice as many tiles as
128-row ones stream the weight; but where those tiles take a second wave that is under half
full (`thin_second_wave`: 8448 < N ≤ 12608 on 132 SMs), the cooperative 128-row tile streams
the weight in one wave (H200, 16-bit and FP8, M 1-32: 5-19% faster; where the second wave is
fuller, within ±2% either way; two waves of 128-row tiles lose by 3-5%). It is faster in a CUDA
graph of decode layers too, but slower when the same product repeats back to back (not
explained; benchmarks/RESULTS.md, 2026-11-30).

The width rule is wave quantization: the persistent grid runs S tiles at a time, so a tile
count just above a multiple of S wastes most of a wave. 512×6144 makes 96 tiles of 128×256
(a quarter of an H100 idle) but 128 of 128×192; 8192² makes enough of either that the bigger
tile's efficiency decides. That efficiency depends on how long a CTA runs: with many k-steps
per CTA the 128×256 tile's lower operand traffic per FLOP wins; in a short CTA
(≤ SHORT_CTA_STEPS k-steps under 128×256: 2048³, 2560³, 1024×8192×2048) fixed costs weigh more and the narrower tile of the same wave count is as fast
or faster. Fewer tiles than half a wave even of 128×128 (1024³: 64) leave SMs idle, so those
problems take 64-row ping-pong tiles, as many as one wave holds.

Split-K then keeps the SMs streaming parts of the weight in decode where N makes few tiles
(16×1024×4096: 16 tiles of N, 2 splits; from S / DECODE_UNSPLIT_SHARE tiles of N, decode runs
unsplit), and few-tile large-K problems use the whole GPU (512×512×65536: 16 tiles, 8
splits). A plan calls this once and caches the answer.
"""

from __future__ import annotations

import dataclasses
import math

from .config import MAX_SPLIT_K, KernelConfig
from .splits import effective_splits, stream_k_choice, thin_last_wave
from ...errors import ConfigError
from . import table as tables

#: a split is worth its fp32 partial tile and the final sum only with at least this many
#: k-steps (32 × 64 = 2048 of K): shorter parts cost more in partials than the extra SMs earn
MIN_SPLIT_STEPS = 32
#: k-steps' worth of time a work unit costs beyond its k-steps (fill, drain, epilogue)
SPLIT_OVERHEAD_STEPS = 4
#: a split count must beat the next smaller one by this factor (its partials cost traffic)
SPLIT_MARGIN = 0.95
#: swap-AB with M padded to a power of two (M on the wgmma N side, which can be 16..256) for up
#: to this many rows, where the mid-size tile below does not fit one wave (and always for
#: decode, M ≤ DECODE_M); above it swap-AB only as the mid-rows model's whole tiles (M on a
#: 144-192 wide side)
SWAP_AB_MAX_M = 64
#: up to this many rows swap-AB comes first (a 64-row tile would be half padding or more):
#: ping-pong, 64 rows of N × M rounded up to 16 or 32 columns
DECODE_M = 32
#: decode's 64-row tiles of N run unsplit from S / DECODE_UNSPLIT_SHARE of them: that many
#: CTAs streaming the weight through deep rings already draw what HBM gives a product this
#: small, and a split only adds its fp32 partials and their sum (H200, bf16, M 8-32: 64 tiles
#: of N = 4096 unsplit 2-8% faster than in 2 splits at K = 4096 and 14336; 16 tiles of N = 1024
#: 2 splits 2-7% faster than 1). `decode_tile` draws the line for the 16-bit and FP8 rules.
DECODE_UNSPLIT_SHARE = 4
#: the split rules count K in steps of this many elements, whatever the config's block_k
SPLIT_STEP_K = 64
#: operands and result of fewer bytes (16-bit) than this take the one-kernel path: the split-K /
#: swap-AB path costs a workspace, counters and pointer stores, host and GPU time that a
#: problem reading < 4 MB (< 2 µs of HBM time) cannot earn back
SPLIT_MIN_BYTES = 2**22
#: mid-size M: from DECODE_M + 1 up to this many rows a 64-row ping-pong tile (when it makes ≤ S tiles)
MID_M = 128
#: Mid rows (MID_M < M ≤ MID_ROWS_MAX_M, more 128×128 tiles than half a wave): the config of
#: MID_ROWS_TILES and split count s ≥ 1, or of MID_ROWS_WHOLE_TILES / MID_ROWS_NARROW_SWAP unsplit, of least
#: modelled time
#:     ⌈tiles·s / S⌉ · (k_steps / s + split_steps) · BM·BN / speed
#: (waves × one work unit's time; a unit's time is its area over the tile's per-FLOP speed;
#: MidRowsModel). Swap-AB tiles count N on their rows and M on their width (tile_count), so a
#: width just above M (144, 160, 192 for 129-192 rows) wastes little of the tile. The speeds
#: are fitted to measured sweeps of 95-1022-row shapes on an H100 and an H200 (the whole tiles'
#: on the H200 only; stream-K was measured too, but no speed for it predicted its wins on
#: held-out shapes, so it is not a candidate); a split costs as much as split_steps k-steps of
#: one unit: the partials' traffic and the final sum. benchmarks/midrows_fit.py re-scores and
#: refits these constants on the measured sweeps (benchmarks/data/midrows_sweeps.json, or a
#: new GPU's).
MID_ROWS_MAX_M = 960


@dataclasses.dataclass(frozen=True, eq=False)
class MidRowsModel:
    """A mid-rows cost model (the comment above): the per-FLOP speed of each tile (`speeds`, by
    unsplit config, the first the unit), the tiles never split (`whole`), a split's cost in
    k-steps (`split_steps`), the K elements of one k-step (`step_k`, the tiles' block_k), the
    most rows a tile is a candidate for (`max_m`, by unsplit config; a tile not named: any).
    The 16-bit kernels' is MID_ROWS; the FP8 kernel's, fitted to its own sweeps, is
    pingpong.hopper.host.fp8_select.FP8_MID_ROWS. benchmarks/midrows_fit.py fits either."""

    speeds: dict
    whole: frozenset
    split_steps: float
    step_k: int
    max_m: dict = dataclasses.field(default_factory=dict)

    def k_steps(self, K: int) -> int:
        return math.ceil(K / self.step_k)

    def admits(self, config: KernelConfig, M: int) -> bool:
        """Whether the unsplit `config` is a candidate at M rows (`max_m`)."""
        return M <= self.max_m.get(config, M)

    def candidates(self, k_steps: int, M: int | None = None) -> list[KernelConfig]:
        """Every tile of `speeds` (of M rows: those it `admits`) with each split count of
        ≥ MIN_SPLIT_STEPS k-steps (≤ MAX_SPLIT_K), the `whole` ones unsplit."""
        most = max(1, min(MAX_SPLIT_K, k_steps // MIN_SPLIT_STEPS))
        return [dataclasses.replace(c, split_k=s) for c in self.speeds if M is None or self.admits(c, M)
                for s in range(1, 1 + (1 if c in self.whole else most))]

    def cost(self, config: KernelConfig, M: int, N: int, k_steps: int, sms: int) -> float:
        """The modelled time of `config`: waves × one work unit's k-steps plus a split's cost ×
        the tile's area over its per-FLOP speed."""
        area = config.block_m * config.block_n / self.speeds[dataclasses.replace(config, split_k=1)]
        units = tile_count(config, M, N) * config.split_k
        return math.ceil(units / sms) * (k_steps / config.split_k + self.split_steps) * area

    def config(self, M: int, N: int, K: int, sms: int) -> KernelConfig:
        """The candidate of least modelled time."""
        k_steps = self.k_steps(K)
        return min(self.candidates(k_steps, M), key=lambda c: self.cost(c, M, N, k_steps, sms))


_PP = dict(schedule="pingpong")
#: the 16-bit kernels' mid-rows tiles, split or not ...
MID_ROWS_TILES = {KernelConfig(128, 256, 64): 1.0, KernelConfig(128, 192, 64): 1.05,
                  KernelConfig(128, 128, 64): 0.9, KernelConfig(64, 256, 64, **_PP): 0.9,
                  KernelConfig(64, 128, 64, **_PP): 0.75}
#: ... and these, never split (no sweep has measured them split). The two-piece 128×144
#: (128 + 16 columns), at 0.93 of 128×160's per-FLOP speed, takes the products where both
#: fill their waves alike (577×7168×7168: 2 waves of 225 tiles or of 250); where one wave
#: holds either (about 193 rows) it is the slower, which the model does not see. The
#: cooperative swap-AB 128×128/144/160/192 (N on 128 rows, M on the width; stored through TMA,
#: staged transposed: config.staged_swap) take the products whose M those widths divide into
#: nearly full tiles where 128-row tiles would pad M or take a wave more (547×5120×13824: one
#: wave of 128×192 against two of 128×128)
MID_ROWS_WHOLE_TILES = {KernelConfig(128, 160, 64): 1.0, KernelConfig(128, 144, 64): 0.93,
                        KernelConfig(64, 144, 64, **_PP, swap_ab=True): 0.8,
                        KernelConfig(64, 160, 64, **_PP, swap_ab=True): 0.75,
                        KernelConfig(64, 192, 64, **_PP, swap_ab=True): 0.85,
                        KernelConfig(128, 128, 64, swap_ab=True): 0.85, KernelConfig(128, 144, 64, swap_ab=True): 0.9,
                        KernelConfig(128, 160, 64, swap_ab=True): 0.95, KernelConfig(128, 192, 64, swap_ab=True): 1.0}
#: ... and the narrow swap-AB tiles (64 + 16 and 64 + 32 columns of M), for products whose M
#: one of them holds: 65-96 rows, where 64-row tiles take two rows of tiles and 128-row ones
#: pad M by a third or more (65×9216×3072 1.12× the 128×128 pick, 81×10240×8192 1.16× a
#: 3-way split 128×192; on held-out shapes 1.06× the picks they replace, 19 of 23 faster).
#: Over more rows of M each tile re-reads its 128 rows of N's operand, and they lost to the
#: picks they would replace (159×57344×8192 0.81×), so a tile's width is its row limit; and
#: where 128×128 tiles would fill half a wave or less they still run (their tiles lie along
#: N), not the few-tile rule (70×7168×5120 1.02× its 64×128 ping-pong; benchmarks/RESULTS.md,
#: 2026-11-30)
MID_ROWS_NARROW_SWAP = {KernelConfig(128, 80, 64, swap_ab=True): 0.95, KernelConfig(128, 96, 64, swap_ab=True): 0.95}
#: ... and the narrow cooperative 128×96, unsplit, for products whose 96-wide tiles fill more
#: of a wave than wider ones (97-128 × 9216 × 4096: 96 tiles of 128×96 in one wave ran at
#: 0.95-0.98 of cuBLAS, where 72 of 128×128 fill 55% of it and 48 of 128×192 split 2 ways ran
#: at 0.79-0.84; 327×3584×3584 0.88 where the 64×192 swap-AB ran at 0.66, 512×3072×8192 0.91
#: where 128×192 split 2 ran at 0.82; with its last row of tiles moved to end at M,
#: scheduler.tile_offset, also where that row is under half full: 406×3072×8192 0.93, 300×4096×8192
#: 0.91, where 128×128 ran at 0.85 and 0.84). Up to 512 rows (NARROW_MAX_M): over more rows of tiles
#: it lost (832×7168×7168 0.81 where 128×128 ran at 1.03), which the fit's row limits place
#: between 512 and 640 rows. 128×80 was measured beside it and fitted to no use
MID_ROWS_NARROW = {KernelConfig(128, 96, 64): 0.9}
NARROW_MAX_M = 512
#: the 16-bit kernels' mid-rows model (K in SPLIT_STEP_K-element k-steps)
MID_ROWS = MidRowsModel({**MID_ROWS_TILES, **MID_ROWS_WHOLE_TILES, **MID_ROWS_NARROW_SWAP, **MID_ROWS_NARROW},
                        frozenset(MID_ROWS_WHOLE_TILES) | frozenset(MID_ROWS_NARROW_SWAP) | frozenset(MID_ROWS_NARROW),
                        32, SPLIT_STEP_K,
                        {**{c: c.block_n for c in MID_ROWS_NARROW_SWAP}, **{c: NARROW_MAX_M for c in MID_ROWS_NARROW}})
#: the mid-size tile's widths, widest first (ties in tile count go to the wider)
MID_WIDTHS = (96, 64, 32)
#: with a long K the mid-size tile is at least MID_SPLIT_WIDTH wide and split into as many parts
#: of ≥ MID_SPLIT_STEPS k-steps as one wave holds (when that is ≥ 2): the splits fill the SMs,
#: and a narrower tile only re-reads A more often
MID_SPLIT_WIDTH = 64
MID_SPLIT_STEPS = 128
#: relative per-FLOP speed of a 128-row tile by width, for the wave rule (many k-steps per CTA:
#: operand traffic per FLOP decides; 192 = 128 + 64 column pieces), fitted on 128/192/256-wide
#: tiles over 64 products of 1145-4096 rows (H200): at 0.97, 192 took products whose waves cost
#: about what 256's do, and lost there (6952×8192×3584: 18 waves 0.916 of cuBLAS, 14 of 128×256
#: 0.974); benchmarks/RESULTS.md, 2026-11-30
TILE_EFFICIENCY = {256: 1.0, 192: 0.95, 128: 0.9}
#: ... but in short CTAs the narrower tiles keep up: a CTA is short when the 128×256 tiling
#: gives it at most SHORT_CTA_STEPS k-steps (its waves × the K loop), and then the fixed costs
#: (ring fill, the last epilogue) weigh more than the operand traffic per FLOP
SHORT_TILE_EFFICIENCY = {256: 0.97, 192: 1.0, 128: 1.0}
SHORT_CTA_STEPS = 96
#: above MID_ROWS_MAX_M and up to WAVE_SWAP_MAX_M rows the wave rule also weighs WAVE_SWAP, a
#: swap-AB tile (N on its 128 rows, M on its 128 + 16 columns), as a width of per-FLOP speed
#: WAVE_SWAP_EFFICIENCY: where a short N leaves 128-row tiles over M a mostly idle last wave
#: (1466×3072×3072: 192 tiles of 128×192, two waves) N's 128-row tiles fill them (264 tiles
#: of the swapped 128×144: two full waves). The speed was fitted (1128-1770 rows, H200) while the
#: swapped tile stored through pointers and still holds with its staged store
#: (config.staged_swap; benchmarks/RESULTS.md). It must win by WAVE_SWAP_MARGIN (near ties lost:
#: 1793×5120×5120), in CTAs of at least WAVE_SWAP_MIN_STEPS k-steps (its epilogue and ring
#: fill are paid per tile: one wave of 24 steps, 1536³, lost)
WAVE_SWAP = KernelConfig(128, 144, 64, swap_ab=True)
WAVE_SWAP_EFFICIENCY = 0.82
WAVE_SWAP_MARGIN = 0.97
WAVE_SWAP_MIN_STEPS = 64
WAVE_SWAP_MAX_M = 2048
#: the wave rule's stream-K (KernelConfig.stream_k: the last wave's k-steps shared by every
#: SM, splits.stream_k_split): 128×256 tiles where data-parallel ones would leave a last wave of
#: at most an eighth of the SMs after WAVE_STREAM_WAVES full waves, over a K loop of at least
#: WAVE_STREAM_MIN_STEPS k-steps. There the balanced waves beat the narrower tiles' fuller ones
#: (H200, 2421×7168×5120: 0.896 → 0.960 of cuBLAS; 2539×5120×5120 0.885 → 0.944); over more
#: waves the thin last one matters less than the fix-up costs (12 waves: 0.955×), over 32-step
#: loops too (2074×6144×2048: 0.950×); benchmarks/RESULTS.md, 2026-11-30
WAVE_STREAM = KernelConfig(128, 256, 64, stream_k=True)
WAVE_STREAM_WAVES = (3, 4)
WAVE_STREAM_MIN_STEPS = 48
#: few tiles (128×128 ones fill at most half a wave and K does not split, or a launch-bound
#: problem of more than MID_M rows): the 64-row ping-pong tile of these widths whose tiles fill
#: the most of one wave: twice the tiles of 128-row ones, so fewer SMs idle
FEW_WIDTHS = (128, 64)
#: a near shape's tuned config may idle this much more of its last wave than the heuristic's
NEAR_SLACK = 1.1
#: a tuned entry answers the shapes near it only where it ran at least this much faster than
#: the heuristic's config at its own shape (the tuner's heuristic_us / us). Entries that tied
#: the rule there lost to the rule near them: over 41 held-out shapes (H200, every row band)
#: the rule's picks ran 1.018× the near entries' (33-128 rows 1.058×; benchmarks/RESULTS.md,
#: 2026-11-30)
NEAR_GAIN = 1.03
#: epilogue sub-tile (columns) of 128-row tiles of each width when they fit one wave: 128×192's
#: 4 KB of staging per sub-tile instead of 8 buys the ring a 5th stage, 128×256's 64 columns
#: (two 16 KB buffers instead of the whole 64 KB tile) a 4th; with one tile per SM nothing else
#: hides the ring's start (with more waves earlier tiles' work hides it, and the whole-tile
#: epilogue is faster: 128×256 at 16384×8192×1024 0.96× with 64 columns; benchmarks/RESULTS.md,
#: 2026-11-29)
ONE_WAVE_EPILOGUE_N = {192: 32, 256: 64}
#: 128×256 tiles take their 64-column sub-tiles over up to SHORT_LOOP_WAVES waves too when K is
#: at most SHORT_LOOP_STEPS k-steps: a short mainloop hides little of the next tile's ring fill,
#: so the 4th stage pays (H200: 2048×8192×2048 0.979 → 0.992 of cuBLAS, 352×21888×2048 0.889 →
#: 0.985); a longer loop or more waves lose (1318×9216×7168 0.94×, 8192×4096×4096 0.96×;
#: benchmarks/RESULTS.md, 2026-11-29)
SHORT_LOOP_WAVES = 4
SHORT_LOOP_STEPS = 64
#: the mid-size and decode tiles load this many bytes of K per ring slot (block_k 128 for 16-bit
#: inputs): two 64-element k-steps a slot, so half the mbarriers to initialize before the
#: first load and half the waits per byte, with the same bytes in flight
SMALL_TILE_K_BYTES = 256
#: SM count assumed when no device is given (H100 SXM)
DEFAULT_SMS = 132

_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_NAMES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


@dataclasses.dataclass(frozen=True)
class Device:
    """The facts of a GPU that selection reads. name None: no tuning table applies. sms: the
    SMs a launch spans (the persistent grid, the waves selection counts): the GPU's less
    torch's SM carveout `carveout` (pingpong.runtime.device), whose tables stay the GPU's
    (sms + carveout; `tabled`)."""

    name: str | None = None
    sms: int = DEFAULT_SMS
    carveout: int = 0

    @classmethod
    def of(cls, device, carveout: int | None = None) -> "Device":
        """Device(...) as given, or the facts of a CUDA device (index or torch.device) under
        torch's SM carveout `carveout` (None: none; PingpongError when it leaves no SM); None →
        the default (no table, DEFAULT_SMS)."""
        if device is None or isinstance(device, Device):
            return device or cls()
        import torch

        from ...runtime.device import carveout_sms, launch_sms

        if not torch.cuda.is_available():  # plans built without a GPU (tests): the default facts
            return cls(None, carveout_sms(DEFAULT_SMS, carveout), carveout or 0)
        index = device if isinstance(device, int) else (device.index if device.index is not None
                                                        else torch.cuda.current_device())
        return cls(torch.cuda.get_device_name(index), launch_sms(index, carveout), carveout or 0)


def dtype_name(dtype) -> str:
    """"bf16"/"fp16"/"fp32" for a name or a torch dtype."""
    name = _NAMES.get(str(dtype), dtype)
    if name not in _BYTES:
        raise ConfigError(f"dtypes: {dtype!r} is not one of bf16, fp16, fp32")
    return name


#: heuristic_choice's why of the few-tile rule
FEW_WHY = "few tiles: 64-row ping-pong tiles, more of them in one wave"


def heuristic_config(M: int, N: int, K: int, sms: int = DEFAULT_SMS, in_bytes: int = 2) -> KernelConfig:
    """The rule of the module docstring, for inputs of `in_bytes` bytes an element."""
    return heuristic_choice(M, N, K, sms, in_bytes)[0]


def heuristic_choice(M: int, N: int, K: int, sms: int = DEFAULT_SMS, in_bytes: int = 2) -> tuple[KernelConfig, str]:
    """heuristic_config's config and, in a few words, the row of the module docstring's table
    that chose it (pingpong.explain's why)."""
    small_k = SMALL_TILE_K_BYTES // in_bytes
    if 2 * (M * K + N * K + M * N) < SPLIT_MIN_BYTES:  # launch-bound: one kernel, no workspace
        return launch_bound_tile(M, N, small_k, sms), "launch-bound (under 4 MB moved): a small tile, unsplit"
    k_steps = math.ceil(K / SPLIT_STEP_K)  # what the split and width rules count K in
    mid = mid_tile(M, N, sms, small_k)
    if DECODE_M < M <= MID_M and mid is not None:
        wide = dataclasses.replace(mid, block_n=max(mid.block_n, MID_SPLIT_WIDTH))
        # a long K: the wider tile, split into as many ≥ MID_SPLIT_STEPS-step parts as one wave holds
        splits = min(sms // tile_count(wide, M, N), k_steps // MID_SPLIT_STEPS)
        config = dataclasses.replace(wide, split_k=splits) if splits >= 2 else split_whole_rows(mid, M, N, k_steps, sms)
        return config, with_split("≤ 128 rows: the 64-row ping-pong tile whose tiles fill most of one wave", config)
    if M <= DECODE_M:
        config, unsplit = decode_tile(M, N, small_k, sms)
        why = "decode (M ≤ 32): swap-AB, N on the tile's rows" + (
            ", 128 of them (64 would leave a thin second wave)" if config.block_m == 128 else "")
        if unsplit:
            return config, why
    elif M <= SWAP_AB_MAX_M:
        config = KernelConfig(128, 1 << math.ceil(math.log2(M)), 64, swap_ab=True)
        why = "≤ 64 rows: swap-AB, M on the tile's columns"
    elif M <= MID_ROWS_MAX_M:  # tile and split count by one cost model; few unsplit tiles (not swapped): FEW_WIDTHS
        config = mid_rows_config(M, N, K, sms)
        few = config.split_k == 1 and 2 * tile_count(KernelConfig(128, 128, 64), M, N) <= sms and not config.swap_ab
        if few:
            return few_tiles(M, N, sms), FEW_WHY
        return epilogue_subtiles(config, M, N, k_steps, sms), with_split("mid rows: the cost model's tile", config)
    elif wave_stream(M, N, k_steps, sms):
        return WAVE_STREAM, "stream-K 128×256: its last wave thin after 3-4 full ones, streamed"
    else:
        config, why = wave_tile(M, N, k_steps, sms), "the 128-row tile whose waves leave the least idle"
    split_rule = split if M <= SWAP_AB_MAX_M else split_whole_rows  # decode and ≤ 64 rows: N on the tiles' rows
    config = split_rule(epilogue_subtiles(config, M, N, k_steps, sms), M, N, k_steps, sms)
    if config.block_m == 128 and config.split_k == 1 and 2 * tile_count(config, M, N) <= sms and not config.swap_ab:
        return few_tiles(M, N, sms), FEW_WHY  # more tiles, still one wave (FEW_WIDTHS)
    return config, with_split(why, config)


def with_split(why: str, config: KernelConfig) -> str:
    """`why`, and the split where `config` splits K."""
    return why + (f", K split {config.split_k} ways (its tiles leave SMs idle)" if config.split_k > 1 else "")


def launch_bound_tile(M: int, N: int, block_k: int, sms: int) -> KernelConfig:
    """A launch-bound product's tile, unsplit: decode's (M ≤ DECODE_M), else the mid-size tile
    (M ≤ MID_M, where one fits a wave), else the few-tile rule's. Small tiles: the product is
    over before a 128×128 tile's deep K loop and wide epilogue pay for themselves."""
    if M <= DECODE_M:
        return decode_tile(M, N, block_k, sms)[0]
    return (mid_tile(M, N, sms, block_k) if M <= MID_M else None) or few_tiles(M, N, sms)


def decode_tile(M: int, N: int, block_k: int, sms: int) -> tuple[KernelConfig, bool]:
    """Decode's tile (M ≤ DECODE_M; the 16-bit and the FP8 rules' one choice): swap-AB, M in
    the wgmma's 16 or 32 columns, N on its rows: 64 rows ping-pong, or 128 rows cooperative
    where 64-row tiles take a second wave under half full (module docstring);
    and whether it runs unsplit (from S / DECODE_UNSPLIT_SHARE tiles of N; else K splits as
    every few-tile product's)."""
    width = 16 if M <= 16 else 32
    tile = KernelConfig(64, width, block_k, schedule="pingpong", swap_ab=True)
    tiles = tile_count(tile, M, N)
    if thin_second_wave(tiles, sms):
        return KernelConfig(128, width, block_k, schedule="cooperative", swap_ab=True), True
    return tile, tiles >= sms // DECODE_UNSPLIT_SHARE


def thin_second_wave(tiles: int, sms: int) -> bool:
    """Whether `tiles` take a second wave on `sms` SMs that is under half full: then tiles of
    twice the rows fit one wave (decode_tile; FP8's 33-64 rows, fp8_select)."""
    return sms < tiles < 2 * sms and thin_last_wave(tiles, sms)


def mid_rows_decides(M: int, N: int, K: int, sms: int = DEFAULT_SMS, in_bytes: int = 2) -> bool:
    """Whether heuristic_config's config for an M × N × K product comes from the mid-rows
    model (mid_rows_config): not launch-bound, more than SWAP_AB_MAX_M and at most
    MID_ROWS_MAX_M rows, and above MID_M rows unless no mid-size tile fits one wave."""
    if 2 * (M * K + N * K + M * N) < SPLIT_MIN_BYTES or not SWAP_AB_MAX_M < M <= MID_ROWS_MAX_M:
        return False
    return M > MID_M or mid_tile(M, N, sms, SMALL_TILE_K_BYTES // in_bytes) is None


def epilogue_subtiles(config: KernelConfig, M: int, N: int, k_steps: int, sms: int) -> KernelConfig:
    """128-row tiles of a width in ONE_WAVE_EPILOGUE_N that fit one wave take its epilogue
    sub-tiles (a deeper ring, above); 128×256 ones also over a few waves of a short K loop
    (SHORT_LOOP_WAVES, SHORT_LOOP_STEPS)."""
    en = ONE_WAVE_EPILOGUE_N.get(config.block_n)
    if not en or config.block_m != 128 or config.swap_ab:
        return config
    tiles = tile_count(config, M, N)
    short = config.block_n == 256 and tiles <= SHORT_LOOP_WAVES * sms and k_steps <= SHORT_LOOP_STEPS
    return dataclasses.replace(config, epilogue_n=en) if tiles <= sms or short else config


def split(config: KernelConfig, M: int, N: int, k_steps: int, sms: int) -> KernelConfig:
    """`config` with the split count of the module docstring's cost model (K in k_steps of
    SPLIT_STEP_K elements)."""
    return dataclasses.replace(config, split_k=split_count(tile_count(config, M, N), k_steps, sms))


def split_whole_rows(config: KernelConfig, M: int, N: int, k_steps: int, sms: int) -> KernelConfig:
    """`split`, but unsplit where rows_unsplit says so: the 16-bit ≤ MID_M-row and wave
    rules' split (the mid-rows model weighs split and unsplit tiles itself)."""
    config = split(config, M, N, k_steps, sms)
    return dataclasses.replace(config, split_k=1) if rows_unsplit(config, M, N, sms) else config


def rows_unsplit(config: KernelConfig, M: int, N: int, sms: int) -> bool:
    """Whether a 16-bit `config` runs unsplit for its last row of tiles (over M; N under
    swap-AB): that row holds fewer than half of its rows, and its tiles fill at least half a
    wave (fewer leave SMs idle that only a split fills). There the ≤ MID_M-row and wave rules'
    splits lost to the unsplit tile (72×3584×14336 64×64 split 7 ways 0.64 of cuBLAS, unsplit
    0.98); the mid-rows model's did not lose enough to change it (benchmarks/RESULTS.md,
    2026-11-30)."""
    rows = N if config.swap_ab else M
    short = rows > config.block_m and 0 < rows % config.block_m < config.block_m / 2
    return short and 2 * tile_count(config, M, N) >= sms


def mid_rows_config(M: int, N: int, K: int, sms: int) -> KernelConfig:
    """The 16-bit mid-rows config: MID_ROWS' candidate of least modelled time."""
    return MID_ROWS.config(M, N, K, sms)


def one_wave_tile(M: int, N: int, sms: int, widths: tuple[int, ...], block_k: int) -> KernelConfig | None:
    """The 64-row ping-pong tile of `widths` (widest first) whose tiles fill the most of one
    wave, ties to the wider; None when even the widest makes more than `sms` tiles."""
    fits = [KernelConfig(64, bn, block_k, schedule="pingpong") for bn in widths]
    fits = [c for c in fits if tile_count(c, M, N) <= sms]
    return max(fits, key=lambda c: tile_count(c, M, N), default=None)


def mid_tile(M: int, N: int, sms: int, block_k: int) -> KernelConfig | None:
    """The mid-size tile: `one_wave_tile` of MID_WIDTHS."""
    return one_wave_tile(M, N, sms, MID_WIDTHS, block_k)


def few_tiles(M: int, N: int, sms: int) -> KernelConfig:
    """The few-tile tile: `one_wave_tile` of FEW_WIDTHS (none within one wave: the widest)."""
    return one_wave_tile(M, N, sms, FEW_WIDTHS, 64) or KernelConfig(64, FEW_WIDTHS[0], 64, schedule="pingpong")


def tile_count(config: KernelConfig, M: int, N: int) -> int:
    """Output tiles of an M × N product under `config` (its transpose's under swap-AB)."""
    rows, cols = (N, M) if config.swap_ab else (M, N)
    return math.ceil(rows / config.block_m) * math.ceil(cols / config.block_n)


def stream_k_note(M: int, N: int, K: int, config: KernelConfig, sms: int, in_bytes: int = 2, out_bytes: int = 2,
                  batches: int = 1) -> str:
    """What stream-K (KernelConfig.stream_k) would do for an M × N × K product with `config`'s
    tile on `sms` SMs, in one line (pingpong.explain's "stream_k"; splits.stream_k_choice
    decides). Nothing here selects it: measured on mid-row shapes, its wins were too few and
    too unlike the data-parallel model's terms to predict (MID_ROWS_TILES' comment)."""
    if batches > 1:
        return "stream-K runs 2-D products only"
    try:
        dataclasses.replace(config, stream_k=True, split_k=1).derive(in_bytes, out_bytes)
    except ConfigError as e:
        return f"stream-K cannot run this tile: {e}"
    c = stream_k_choice(tile_count(config, M, N), -(-K // config.block_k), sms)
    return f"stream-K {'(this config)' if config.stream_k else '(not selected)'} would run {c.kind}: {c.reason}"


def width_costs(M: int, N: int, k_steps: int, sms: int) -> dict:
    """The wave rule's cost of each width of 128-row tiles, widest first (module docstring):
    its waves × width over its per-FLOP speed in CTAs of that length."""
    waves = lambda bn: math.ceil(tile_count(KernelConfig(128, bn, 64), M, N) / sms)  # noqa: E731
    short = waves(256) * k_steps <= SHORT_CTA_STEPS
    efficiency = SHORT_TILE_EFFICIENCY if short else TILE_EFFICIENCY
    return {bn: waves(bn) * bn / efficiency[bn] for bn in efficiency}


def wave_tile(M: int, N: int, k_steps: int, sms: int) -> KernelConfig:
    """The wave rule's tile: 128 rows of M by the width of least `width_costs` (ties to the
    wider: min keeps the first), or, up to WAVE_SWAP_MAX_M rows, WAVE_SWAP where its waves
    over its speed cost less (the comment at WAVE_SWAP)."""
    costs = width_costs(M, N, k_steps, sms)
    config = KernelConfig(128, min(costs, key=costs.get), 64)
    if M > WAVE_SWAP_MAX_M:
        return config
    waves = math.ceil(tile_count(WAVE_SWAP, M, N) / sms)
    if waves * k_steps < WAVE_SWAP_MIN_STEPS:
        return config
    swap = waves * WAVE_SWAP.block_n / WAVE_SWAP_EFFICIENCY
    return WAVE_SWAP if swap < WAVE_SWAP_MARGIN * costs[config.block_n] else config


def wave_stream(M: int, N: int, k_steps: int, sms: int) -> bool:
    """Whether the wave rule takes WAVE_STREAM: its 128×256 tiles fill WAVE_STREAM_WAVES whole
    waves and at most an eighth of one more, over at least WAVE_STREAM_MIN_STEPS k-steps."""
    full, last = divmod(tile_count(WAVE_STREAM, M, N), sms)
    return full in WAVE_STREAM_WAVES and 0 < 8 * last <= sms and k_steps >= WAVE_STREAM_MIN_STEPS


def split_count(tiles: int, k_steps: int, sms: int) -> int:
    """The number of K splits of the module docstring's cost model."""
    cost = lambda s: math.ceil(tiles * s / sms) * (k_steps / s + SPLIT_OVERHEAD_STEPS)  # noqa: E731
    best = 1
    if tiles >= sms:  # the tiles fill the GPU: partials would only add traffic
        return best
    for s in range(2, min(MAX_SPLIT_K, k_steps // MIN_SPLIT_STEPS) + 1):
        if cost(s) < SPLIT_MARGIN * cost(best):
            best = s
    return best


def tile_fill(config: KernelConfig, M: int, N: int) -> float:
    """The share of the config's output tiles that lies inside the M × N product (1: no padding)."""
    rows, cols = (N, M) if config.swap_ab else (M, N)
    return rows * cols / (tile_count(config, M, N) * config.block_m * config.block_n)


def idle_waves(config: KernelConfig, M: int, N: int, K: int, sms: int) -> float:
    """SM-time of the waves the config's work units run in, over the units' own (≥ 1; 1 when
    the last wave is full): what a tile count just past a multiple of `sms` costs. Stream-K
    spreads its last wave's k-steps over every SM: 1."""
    if config.stream_k:
        return 1.0
    units = tile_count(config, M, N) * effective_splits(K, config.block_k, config.split_k)
    return math.ceil(units / sms) * sms / units


def tabled(M: int, N: int, K: int, dtype: str, layout: str, device: Device, fallback: KernelConfig,
           check) -> tuple[KernelConfig, str] | None:
    """(config, table path) of the active table's nearest entry in (M, N, K)'s bucket for this
    table dtype and layout (module docstring), or None: no table or entry; a near entry that
    tuning did not find NEAR_GAIN ahead of the heuristic at its own shape; `check(config)`
    raises ConfigError (the entry cannot run this call: another output type, or for FP8 a config
    the FP8 kernel does not take); or a near entry's tiles would idle more of the last wave, or
    pad this shape more, than the tuned shape (× NEAR_SLACK; `fallback` is the untuned choice it
    is compared with). The one lookup of select_config and of select_fp8."""
    if device.name is None:
        return None
    table, where = tables.active(tables.TableKey.current(device.name, device.sms + device.carveout))
    entry = table.nearest(M, N, K, dtype, layout) if table else None
    if entry is None:
        return None
    tuned = KernelConfig(**entry["config"])
    try:
        check(tuned)
    except ConfigError:
        return None
    # under a carveout an exact entry is near: it was measured on all the GPU's SMs
    exact = (entry["M"], entry["N"], entry["K"]) == (M, N, K) and not device.carveout
    if exact:
        return tuned, where
    ahead = (entry.get("heuristic_us") or 0) >= NEAR_GAIN * (entry.get("us") or math.inf)
    if (ahead and idle_waves(tuned, M, N, K, device.sms) <= NEAR_SLACK * idle_waves(fallback, M, N, K, device.sms)
            and tile_fill(tuned, M, N) * NEAR_SLACK >= tile_fill(tuned, entry["M"], entry["N"])):
        return tuned, where
    return None


def choose(M: int, N: int, K: int, dtypes=("bf16", "bf16"), layouts: str = "nt",
           device=None, heuristic: KernelConfig | None = None) -> tuple[KernelConfig, str]:
    """(config, source): source is the tuning table's path, or "heuristic". `heuristic`: the
    heuristic's config where the caller has it already (heuristic_choice), else made here."""
    dev = Device.of(device)
    in_name, out_name = (dtype_name(d) for d in dtypes)
    if heuristic is None:
        heuristic = heuristic_config(M, N, K, dev.sms, _BYTES[in_name])
    found = tabled(M, N, K, in_name, layouts, dev, heuristic,
                   lambda c: c.validate(_BYTES[in_name], _BYTES[out_name]))  # tuned for another output type: no
    return found or (heuristic, "heuristic")


def select_config(M: int, N: int, K: int, dtypes=("bf16", "bf16"), layouts: str = "nt", device=None) -> KernelConfig:
    """The KernelConfig for an (M, N, K) product.

    dtypes: (input dtype, output dtype), as torch dtypes or "bf16"/"fp16"/"fp32".
    layouts: how A and B are stored, "nt" (a @ wᵀ), "nn", "tn" or "tt" (as in `pingpong bench`).
    device: a CUDA device index / torch.device, a select.Device, or None (no table, 132 SMs).
    """
    return choose(M, N, K, dtypes, layouts, device)[0]
