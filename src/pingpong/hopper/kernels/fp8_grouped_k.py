"""FP8 grouped GEMM on Hopper, K grouped: the mixture-of-experts weight gradient in FP8, one
persistent launch.

    out[g] = (a[:, P_{g-1} : P_g] @ b[:, P_{g-1} : P_g]ᵀ) · scales      g = 0 .. G-1,  P_{-1} = 0

In the experts' backward this is dW_g = dY_gᵀ·X_g: a = dYᵀ (M, TP) and b = Xᵀ (N, TP), the
tokens quantized and stored contiguous (fp8 wgmma reads K-major operands only), each expert's
tokens starting at a multiple of 128 with zeros after them up to its padded end P_g
(pingpong.quantize_groups.quantize_groups_t writes them so; poffs (G,) int32 holds the P_g and
is read on the device only). A 128-deep K block therefore never straddles two experts, and the
loads are the dense kernel's plain TMA boxes: nothing is ragged, the padding adds exact zeros.

    a (M, TP) fp8    │ expert 0: T_0 tokens, zeros │ expert 1 (empty) │ expert 2 ... │ unused │
                     0                             P_0 = P_1          P_2                TP
    out (G, M, N)      matrix g: the K loop over [P_{g-1}, P_g) in 128-deep blocks; empty: zeros

The parts are the FP8 dense kernel's (pingpong.hopper.kernels.fp8_gemm.run_fp8_partitions: the
producer with TileLoader and block scales, the ping-pong and cooperative consumers with the
promoted K loop, Fp8Scales, the dense Epilogue into a rank-3 out); new is the scheduler:

PaddedKScheduler. TileScheduler's batched units, the expert as the batch (every expert has
the same ceil(M/BM)·ceil(N/BN) output tiles): the grid follows from the shapes alone. A unit's
K loop starts at its expert's P_{g-1} and runs (P_g − P_{g-1}) / BK k-steps: device data, so
the scheduler is COUNTED and each consumer adds up the k-steps of every unit of its program to
find its ring position (the skeleton's counted consumers: pingpong.hopper.kernels.gemm, modelled
in pingpong.schedule as hopper_pingpong_counted). An empty expert's units load nothing, hold no
ring slot and store zeros.

    program p │ unit (g0, tile i): ring 0..3 │ unit (g1, tile j): empty, zeros │ unit (g2, tile k): ring 4.. │
    producer  │ A a[m.., P_{g-1}+k], B b[n.., P_{g-1}+k], block-wise + sa, sb boxes of K block P_{g-1}/128+k │
    consumer0 │ promoted K loop ═══ │ ·sa[g, rows]·sb[g, cols] │ TMA store out[g] tile │ ...
    consumer1 │ wait turn │ promoted K loop ═══ │ ... (ping-pong; cooperative: 64-row halves)

Scales (SCALING):
    "row"    sa (G, M) per expert and row of a (dYᵀ: per output feature), sb (G, N) per expert and
             row of b (Xᵀ: per input feature), each along the expert's tokens; applied once
             after the K loop (Fp8Scales.apply_outer with the expert's sa_g, sb_g strides)
    "block"  1×128 along the tokens: sa (TP/128, M), sb (TP/128, N), K block kb's rows of both
             staged in the ring slot with its A and B tiles and applied at the promotion (the
             dense kernel's 1×128 b scales, SB_COLS = 1)

The accumulation is promoted (every 128-deep K block into the fp32 accumulator), as
torch._scaled_mm's default. Rows and columns past M and N are clipped by TMA; K blocks past
TP (bad poffs) read zeros.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate

from ..device.epilogue import Epilogue
from ..device.loader import TileLoader
from ..device.pipeline import Ring
from ..device.scheduler import TileScheduler
from .fp8_gemm import Fp8Scales, check_constants, run_fp8_partitions
from .gemm import kernel_start


@gluon.jit
def padded_k_range(poffs, g):
    """(first K element, length) of expert g's padded run [P_{g-1}, P_g); a decreasing end: empty."""
    end = gl.load(poffs + g)
    start = gl.where(g > 0, gl.load(poffs + gl.maximum(g - 1, 0)), 0)
    return start, gl.maximum(end - start, 0)


@aggregate
class PaddedKScheduler(TileScheduler):
    """TileScheduler's batched units, the expert as the batch (module docstring), each unit's
    K loop its expert's padded run of poffs (TileScheduler's k_steps, of K = 0, unused)."""

    poffs: gl.tensor
    COUNTED: gl.constexpr = True

    @gluon.jit
    def create(poffs, G, M, N, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr):
        t = TileScheduler.create(M, N, gl.to_tensor(0), BM, BN, BK, GROUP_M, G)
        return PaddedKScheduler(t.pid, t.num_programs, t.num_pid_m, t.num_pid_n, BM, BN, BK, GROUP_M,
                                num_tiles=t.num_tiles, k_steps=t.k_steps, tiles_per_batch=t.tiles_per_batch,
                                rows=t.rows, cols=t.cols, poffs=poffs)

    @gluon.jit
    def k_begin(self, local_tile):
        return padded_k_range(self.poffs, self.tile_batch(local_tile))[0]

    @gluon.jit
    def unit_steps(self, local_tile):
        return padded_k_range(self.poffs, self.tile_batch(local_tile))[1] // self.BK


_RUNTIME_SCALARS = ["M", "N", "G", "sa_g", "sb_g"]


@gluon.jit(do_not_specialize=_RUNTIME_SCALARS)
def fp8_grouped_k_gemm(a_desc, b_desc, c_desc, poffs, sa, sb, M, N, G, sa_g, sb_g, CFG: gl.constexpr,
                       SCALING: gl.constexpr):
    """out[g] = (a[:, run g] @ b[:, run g]ᵀ)·scales (module docstring): the FP8 dense kernel's
    producer and consumers (ping-pong or cooperative, promoted K loop) over PaddedKScheduler's
    units into matrix g of out's rank-3 descriptor.

        program p │ unit (g, tile) │ unit ...                 ring of STAGES as the dense kernel
        producer  │ A a[m.., P_{g-1}+k..], B b[n.., P_{g-1}+k..] (block: + sa, sb rows of K block) │ ...
        consumer0 │ promoted K loop ═══ (empty expert: zeros) │ ·scales │ TMA store out[g] tile │
        consumer1 │ wait turn │ promoted K loop ═══ │ ·scales │ TMA store out[g'] tile │

    CFG: the dense kernel's constexprs (KernelConstants, pingpong.hopper.host.launch), its EPI a
    plain store; SCALING "row" (sa, sb pointers: (G, M), (G, N) rows of strides sa_g, sb_g) or
    "block" (sa, sb TMA descriptors of (TP/128, M) and (TP/128, N), boxes [1, BM], [1, BN])."""
    kernel_start()
    gl.static_assert(SCALING == "row" or SCALING == "block", "SCALING: row or block (1×128 along the tokens)")
    gl.static_assert(CFG.EPI.plain(), "this kernel's epilogue stores the scaled acc alone (no β·C, bias or activation)")
    gl.static_assert(CFG.BN2 == 0 and CFG.CLUSTER == 1, "one-piece tiles, one CTA")
    gl.static_assert(len(c_desc.block_type.shape) == 3, "out: a rank-3 (expert, row, column) descriptor")
    check_constants(CFG, SCALING, True, 1)
    sched = PaddedKScheduler.create(poffs, G, M, N, CFG.BM, CFG.BN, CFG.BK, CFG.GROUP_M)
    ring = Ring.allocate(a_desc, b_desc, CFG.STAGES, CFG.RELEASERS)
    epi = Epilogue.plain(c_desc, gl.to_tensor(1.0), gl.to_tensor(0.0), poffs, M, N, 2, CFG.EPI)
    one = gl.to_tensor(1)  # (row-wise: rows and columns of the (G, M), (G, N) scales contiguous)
    scales = Fp8Scales.allocate(sa, sb, one, one, sb_g, sa_g, M, N, CFG.STAGES, SCALING, 1)
    run_fp8_partitions(ring, sched, epi, scales, TileLoader(a_desc, b_desc, True, True), CFG, True)
