"""MmaOp: one consumer's accumulator, wgmma issue and wait depth.

The operands come straight from a ring slot in shared memory. wgmma wants A as [M, K] and
B as [K, N]; a K-major B slot ([BN, BK]) and an MN-major A slot ([BK, BM]) are presented
through a transposed *view* (`permute`), which wgmma reads natively — no data moves.
In the cooperative schedule each consumer reads its own 64-row half of the A slot.

    issue(k) ─┐          at most WAIT_DEPTH groups in flight:
              ├─ wgmma   issue(k+1) then wait(1) ⇒ the wgmma of k has completed,
    issue(k+1)┘          so slot k may be released to the producer.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from typing import Union

from triton.experimental.gluon.language.nvidia.hopper import (warpgroup_mma, warpgroup_mma_accumulator,
                                                              warpgroup_mma_wait)
from triton.language.core import _aggregate as aggregate


@aggregate
class MmaOp:
    acc: Union[warpgroup_mma_accumulator, gl.tensor]  # an in-flight wgmma result until wait()
    use_acc: gl.tensor

    @gluon.constexpr_function
    def __init__(self, acc, use_acc):
        self.acc = acc
        self.use_acc = use_acc

    @gluon.jit
    def start(ROWS: gl.constexpr, COLS: gl.constexpr, layout: gl.constexpr):
        """A fresh accumulator; the first wgmma overwrites it (use_acc False)."""
        return MmaOp(gl.zeros((ROWS, COLS), dtype=gl.float32, layout=layout), gl.to_tensor(False))

    @gluon.jit
    def issue(self, ring, s, ROW0: gl.constexpr, ROWS: gl.constexpr, A_KMAJOR: gl.constexpr,
              B_KMAJOR: gl.constexpr):
        """Asynchronous wgmma on slot `s`, rows [ROW0, ROW0+ROWS) of the A tile."""
        if A_KMAJOR:
            a = ring.a_bufs.index(s).slice(ROW0, ROWS, 0)
        else:
            a = ring.a_bufs.index(s).slice(ROW0, ROWS, 1).permute((1, 0))
        if B_KMAJOR:
            b = ring.b_bufs.index(s).permute((1, 0))
        else:
            b = ring.b_bufs.index(s)
        acc = warpgroup_mma(a, b, self.acc, use_acc=self.use_acc, is_async=True)
        return MmaOp(acc, gl.to_tensor(True))

    @gluon.jit
    def wait(self, PENDING: gl.constexpr):
        """Block until at most PENDING wgmma groups of this warpgroup are in flight."""
        return MmaOp(warpgroup_mma_wait(PENDING, (self.acc,)), self.use_acc)
