"""MmaOp: LDS → registers → MFMA for one K-step of the CDNA ping-pong.

Each wave owns a WM×WN = 128×64 accumulator (the MFMA layout's warp grid is [2 groups, 4
waves]; wave w sits at (w // 4, w % 4): warp_id_m = group, warp_id_n = wave in group), as 8×4 16×16
tiles that the layout deals round-robin over that grid: rows 16·(2i + w // 4) + [0, 16),
columns 16·(4j + w % 4) + [0, 16) (Buffers stores A and B in the matching 16-row stripes, and
schedule_model.sharing reads this layout to know which group reads which half). One K-step issues
(WM/16)·(WN/16)·(BK/MFMA_K) MFMA instructions per wave: 8·4·2 = 64 on gfx950 (16x16x32),
8·4·2 = 64 on gfx942 (16x16x16 with BK = 32).

MmaOp receives the LDS views from Buffers; it does not know how the tiles were loaded. It
reads them with `load_shared_relaxed`: the schedule has already waited (vmcnt) and passed a
barrier for every producer of the stage it reads, so the compiler need not add its own
conservative vmcnt(0) for the direct-to-LDS loads still in flight to the *other* stage.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate


@gluon.constexpr_function
def mfma_layout(VERSION, MFMA_K, GROUPS, WAVES_PER_GROUP):
    return gl.amd.AMDMFMALayout(version=VERSION, instr_shape=[16, 16, MFMA_K], transposed=True,
                                warps_per_cta=[GROUPS, WAVES_PER_GROUP])


@aggregate
class MmaOp:
    acc: gl.tensor
    a_layout: gl.constexpr
    b_layout: gl.constexpr
    SCALED: gl.constexpr  # the scaled MFMA with unit scales (gfx950 fp8, CdnaDerived.scaled_mfma)

    @gluon.constexpr_function
    def __init__(self, acc, a_layout, b_layout, SCALED):
        self.acc = acc
        self.a_layout = gl.constexpr(a_layout)
        self.b_layout = gl.constexpr(b_layout)
        self.SCALED = gl.constexpr(SCALED)

    @gluon.jit
    def start(BM: gl.constexpr, BN: gl.constexpr, layout: gl.constexpr, K_WIDTH: gl.constexpr,
              SCALED: gl.constexpr = False):
        acc = gl.zeros([BM, BN], gl.float32, layout)
        return MmaOp(acc, gl.DotOperandLayout(0, layout, K_WIDTH), gl.DotOperandLayout(1, layout, K_WIDTH), SCALED)

    @gluon.jit
    def compute(self, a_view, b_view):
        """acc += A_stage · B_stageᵀ (B is stored N×K, so its LDS view is transposed here)."""
        a = gl.amd.cdna4.async_copy.load_shared_relaxed(a_view, self.a_layout)
        b = gl.amd.cdna4.async_copy.load_shared_relaxed(b_view.permute([1, 0]), self.b_layout)
        if self.SCALED:  # no scale tensors: unit scales, a plain e4m3 product
            acc = gl.amd.cdna4.mfma_scaled(a, None, "e4m3", b, None, "e4m3", self.acc)
        else:
            acc = gl.amd.cdna3.mfma(a, b, self.acc)
        return MmaOp(acc, self.a_layout, self.b_layout, self.SCALED)
