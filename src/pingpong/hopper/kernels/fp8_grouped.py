"""FP8 grouped GEMM on Hopper (mixture-of-experts forward): ragged groups of rows, one
persistent launch, row-wise (or tensor-wise) scales applied in the epilogue, or DeepSeek-V3's
block-wise scales applied per 128-deep K block at the promotion.

    out[s_g : e_g, :] = (a[s_g : e_g, :] @ W[g]ᵀ) · sa[s_g : e_g, None] · sb[g, None, :]
    block-wise:  out[r, n] = Σ_kb (a[r, kb] @ W[g][n, kb]ᵀ) · sa[r, kb] · sb[g, n/128, kb]

    a (T, K) e4m3 row-major, W (G, N, K) e4m3 row-major (the caller's b = W.transpose(1, 2)),
    offs (G,) int32 cumulative row ends read on the device, sa (T,) per row, sb (G, N) per
    group and column (a zero stride: one value; tensor-wise is the same code), fp32 acc;
    block-wise sa (T, K/128) outer-dim-major (its (K/128, T) rows), sb (G, N/128, K/128).

Composed from parts, nothing copied: the 16-bit grouped kernel's GroupedScheduler (virtual
m-tiles of every group laid end to end, the group of a unit found from offs on the device;
`locate(t)` gives (group, first row, off_n), the dense TileScheduler's (batch, off_m, off_n))
and GroupedEpilogue (TMA store of whole tiles, predicated pointer stores of rows < e_g of a
group's cut last tile), pingpong.hopper.kernels.grouped; and the FP8 dense kernel's partitions
(pingpong.hopper.kernels.fp8_gemm.run_fp8_partitions: the producer with Fp8Loader, the ping-pong
and cooperative consumers with their promoted K loop, Fp8Scales), where the unit's group
is the batch: it picks W's matrix, the group's b scales and the rows the epilogue stores.
What is here: the kernel and its constexpr contract; the host side (tile, scale views, launch)
and the Hopper backend's plan of an FP8 grouped spec are pingpong.hopper.host.fp8_grouped.

    program p │ unit (g, vm, n) │ unit ...             (GroupedScheduler: p, p+P, p+2P, ...)
    producer  │ A rows [row, row+BM) · W[g] k0..kn (block: + sa, sb boxes) │ next unit ...
    consumer0 │ K loop ═══════ │ ·sa[rows]·sb[g, cols] │ store rows < e_g │ K loop (unit +2) ...
    consumer1 │ wait turn      │ K loop ═══════ │ ·sa·sb[g'] │ store rows < e_g' │ ...
                (ping-pong; cooperative: both consumers on every unit, 64-row halves)

PROMOTED K LOOP (PROMOTE, the default: torch's use_fast_accum=False; block-wise always): the
dense kernel's, two k-steps per iteration, every 128-deep ring slot into a fresh wgmma
accumulator `part` added (block-wise: scaled) into the fp32 accumulator:

    k-step │ wait ready(k) │ wgmma(slot k) -> part │ wait(0) │ acc += part [· sa[rows, k]·sb[g, n/128, k]] │ release(k)

Without PROMOTE the wgmmas accumulate in place: the dense kernels' mainloop.

ROW-WISE SCALES (Fp8Scales.apply_outer, SCALING "row"): after the K loop, the tile's rows'
sa (masked past T) and its group's row of sb (sb + g·sb_g + n·sb_col, masked past N), loaded
in the accumulator's slice layouts and multiplied in before the cast.

BLOCK-WISE SCALES (SCALING "block", Fp8Scales with ANY_ROW): K block kb's sa and sb travel in
the ring slot with its A and B tiles (TMA, one ready barrier). A unit starts at its group's
first row, any row of a, but a TMA box's innermost coordinate is 16-byte aligned: the sa box
[1, 2·BM] starts at the 4-row boundary at or below the unit's row, and the consumers gather
their rows from element off_m % 4 on; the sb box [1, 32] starts at the 4-element boundary at
or below g·sb_g + n_blk·sb_col + kb, its element read by the same gather:

    slot s │ A [BM, 128] │ W[g] [BN, 128] │ sa[kb, row0 - row0 % 4 ...] (2·BM) │ sb box (32) │

Rows of a unit past e_g read the next group's a rows and sa (or 0 past T): garbage, never
stored. Scale values are not checked (a device read would be a host sync).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..device.epilogue import Epilogue
from ..device.loader import TileLoader
from ..device.pipeline import Ring
from .fp8_gemm import SCALE_BLOCK as _SCALE_BLOCK, Fp8Scales, run_fp8_partitions
from .gemm import kernel_start
from .grouped import GroupedEpilogue, GroupedScheduler

_RUNTIME_SCALARS = ["T", "N", "K", "G", "out_sr", "out_sc", "sa_row", "sb_g", "sb_col"]

@gluon.jit(do_not_specialize=_RUNTIME_SCALARS)
def fp8_grouped_gemm(a_desc, b_desc, c_desc, out, offs, sa, sb, T, N, K, G, out_sr, out_sc, sa_row, sb_g, sb_col,
                     CFG: gl.constexpr, PROMOTE: gl.constexpr, TMA_STORE: gl.constexpr, G_PAD: gl.constexpr,
                     SCALING: gl.constexpr):
    """out = (a @ W[g]ᵀ)·scales per group of rows (module docstring). CFG: the dense kernel's
    constexprs (KernelConstants, pingpong.hopper.host.launch), its EPI a plain store; then the
    promotion, whether out takes TMA stores, the group table's length and the scaling ("row":
    sa, sb pointers, zero strides for one value; "block": their TMA descriptors)."""
    kernel_start()
    gl.static_assert(CFG.EPI.plain(), "this kernel's epilogue stores α·acc alone (no β·C, bias or activation)")
    gl.static_assert(not PROMOTE or CFG.BK == _SCALE_BLOCK, "a promotion is one 128-deep ring slot")
    gl.static_assert(SCALING == "row" or SCALING == "block", "SCALING: row (tensor-wise: zero strides) or block")
    gl.static_assert(SCALING != "block" or (PROMOTE and _SCALE_BLOCK % CFG.BN == 0),
                     "block scales are applied at the promotion; a tile's columns share one b scale (BN divides 128)")
    gl.static_assert(SCALING != "block" or sa.block_type.shape[1] >= CFG.BM + 3,
                     "an sa box starts up to 3 rows above its tile (Fp8Scales.ANY_ROW)")
    gl.static_assert(G_PAD >= 32, "the group table holds at least one element per lane")
    sched = GroupedScheduler.create(offs, G, T, N, K, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M, G_PAD)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS)
    tma_epi = Epilogue.plain(c_desc, gl.to_tensor(1.0), gl.to_tensor(0.0), out, T, N, 2, CFG.EPI)
    epi = GroupedEpilogue(tma_epi, out, out_sr, out_sc, offs, T, N, TMA_STORE)
    scales = Fp8Scales.allocate(sa, sb, sa_row, sb_col, sb_g, gl.to_tensor(0), T, N, CFG.STAGES, SCALING, _SCALE_BLOCK,
                                True)
    run_fp8_partitions(ring, sched, epi, scales, TileLoader(a_desc, b_desc, True, True), CFG, PROMOTE)
