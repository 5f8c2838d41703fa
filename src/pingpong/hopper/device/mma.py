"""MmaOp: one consumer's accumulator, wgmma issue and wait depth.

The operands come straight from a ring slot in shared memory. wgmma wants A as [M, K] and
B as [K, N]; a K-major B slot ([BN, BK]) and an MN-major A slot ([BK, BM]) are presented
through a transposed *view* (`permute`), which wgmma reads natively — no data moves.
In the cooperative schedule each consumer reads its own 64-row half of the A slot.

A two-piece tile (config.column_pieces: 192 = 128 + 64 columns) has two accumulators, one
per B buffer of the slot; each k-step issues two wgmma groups (PIECES), and wait(n) counts
k-steps, so "one k-step in flight" stays the contract whatever the pieces.

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
    acc2: Union[warpgroup_mma_accumulator, gl.tensor]  # the second piece's; a placeholder scalar with one piece
    use_acc: gl.tensor
    PIECES: gl.constexpr

    @gluon.jit
    def start(ROWS: gl.constexpr, COLS: gl.constexpr, layout: gl.constexpr, COLS2: gl.constexpr = 0,
              layout2: gl.constexpr = None):
        """Fresh accumulators for ROWS × COLS (pieces COLS - COLS2 and COLS2 when COLS2 > 0);
        the first wgmma overwrites them (use_acc False)."""
        acc2 = gl.to_tensor(0)
        if COLS2:
            acc2 = gl.zeros((ROWS, COLS2), dtype=gl.float32, layout=layout2)
        return MmaOp(gl.zeros((ROWS, COLS - COLS2), dtype=gl.float32, layout=layout), acc2, gl.to_tensor(False),
                     _pieces(COLS2))

    @gluon.jit
    def issue(self, ring, s, ROW0: gl.constexpr, ROWS: gl.constexpr, A_KMAJOR: gl.constexpr,
              B_KMAJOR: gl.constexpr):
        """Asynchronous wgmma on slot `s`, rows [ROW0, ROW0+ROWS) of the A tile."""
        if ring.A_BOXES > 1:  # a cluster's cooperative consumer: its own A box is its rows
            a = ring.a_box(s, ROW0 // ROWS)
            if not A_KMAJOR:
                a = a.permute((1, 0))
        elif A_KMAJOR:
            a = ring.a_bufs.index(s).slice(ROW0, ROWS, 0)
        else:
            a = ring.a_bufs.index(s).slice(ROW0, ROWS, 1).permute((1, 0))
        acc = warpgroup_mma(a, _b_operand(ring.b_bufs.index(s), B_KMAJOR), self.acc, use_acc=self.use_acc,
                            is_async=True)
        acc2 = self.acc2
        if self.PIECES == 2:
            acc2 = warpgroup_mma(a, _b_operand(ring.b2_bufs.index(s), B_KMAJOR), self.acc2, use_acc=self.use_acc,
                                 is_async=True)
        return MmaOp(acc, acc2, gl.to_tensor(True), self.PIECES)

    @gluon.jit
    def wait(self, PENDING: gl.constexpr):
        """Block until at most PENDING k-steps' wgmma groups of this warpgroup are in flight."""
        acc2 = self.acc2
        if self.PIECES == 2:
            acc, acc2 = warpgroup_mma_wait(2 * PENDING, (self.acc, self.acc2))
        else:
            acc = warpgroup_mma_wait(PENDING, (self.acc,))
        return MmaOp(acc, acc2, self.use_acc, self.PIECES)


@gluon.constexpr_function
def _pieces(COLS2):
    """Column pieces of a tile whose second piece has COLS2 columns (0: none)."""
    return 2 if COLS2 else 1


@gluon.jit
def _b_operand(buf, B_KMAJOR: gl.constexpr):
    """A B slot as wgmma's [K, N] operand: a K-major [N, K] buffer through a transposed view."""
    if B_KMAJOR:
        buf = buf.permute((1, 0))
    return buf
