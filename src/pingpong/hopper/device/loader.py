"""TileLoader: issues the TMA loads of one k-step into one ring slot.

It knows the operands' storage (K-major or MN-major, i.e. which of the four transpose
combinations the caller passed) and turns (off_m, off_n, k) into TMA box coordinates:

    A stored (M, K) row-major  -> box [BM, BK] at (off_m, k)      "K-major"
    A stored (K, M) (a = x.t()) -> box [BK, BM] at (k, off_m)     "MN-major"
    B stored (N, K) (b = w.t()) -> box [BN, BK] at (off_n, k)     "K-major" (transpose_b, headline)
    B stored (K, N) row-major  -> box [BK, BN] at (k, off_n)      "MN-major"

A two-piece B tile (BN2 > 0, config.column_pieces: P1 + P2 columns, P2 = BN2) is B1_BOXES + 1
boxes of BN2 columns: B1_BOXES = P1/P2 side by side into the first piece's buffer, one into the
second's, at off_n + P1.

A 2-CTA cluster (MULTICAST): the A box is the pair's 2·BM rows, split over the two CTAs (each
loads its own half), the B box is the same for both and goes out once, from the leader, as a
`.multicast::cluster` copy into both CTAs' slot; each CTA expects its own bytes (its A half
plus the whole B) on its own ready barrier.

Out-of-range boxes are zero-filled by TMA, so M, N, K need not be tile multiples.
A batched operand (rank-3 descriptor) is read from matrix `batch` (pingpong.hopper.device.batched).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.language.core import _aggregate as aggregate

from .batched import load_tile


@aggregate
class TileLoader:
    a_desc: tma.tensor_descriptor
    b_desc: tma.tensor_descriptor
    A_KMAJOR: gl.constexpr
    B_KMAJOR: gl.constexpr
    BN2: gl.constexpr = 0  # columns of the second piece of a two-piece B tile; 0: one box per stage
    MULTICAST: gl.constexpr = False  # a 2-CTA cluster: B is loaded once by the leader into both CTAs
    B1_BOXES: gl.constexpr = 1  # boxes of the first column piece (P1/P2 of a two-piece tile; 1 with one piece)

    @gluon.jit
    def load(self, ring, counter, off_m, off_n, k, batch=0, extra_bytes: gl.constexpr = 0):
        """Wait for the slot of k-step `counter` to be empty, then fill it with A and B tiles;
        returns the slot. `extra_bytes`: what the caller loads into the slot besides (the FP8
        kernel's block scales), counted on the same ready barrier."""
        s = ring.acquire_empty(counter)
        bar = ring.ready.index(s)
        B_BOXES: gl.constexpr = self.B1_BOXES + 1 if self.BN2 else 1
        # bytes landing in THIS CTA (a cluster's A box is split over the pair, B reaches both whole)
        mbarrier.expect(bar, ring.A_BOXES * self.a_desc.type.nbytes_per_cta
                        + B_BOXES * self.b_desc.type.nbytes_per_cta + extra_bytes)
        if ring.A_BOXES == 1:
            self.load_a(ring.a_bufs.index(s), off_m, k, bar, batch)
        else:  # a cluster's cooperative consumers' boxes (pipeline.Ring.allocate), one after the other
            A_ROWS: gl.constexpr = self.a_desc.block_type.shape[-2 if self.A_KMAJOR else -1]
            for i in gl.static_range(ring.A_BOXES):
                self.load_a(ring.a_box(s, i), off_m + i * A_ROWS, k, bar, batch)
        if self.BN2:
            N_DIM: gl.constexpr = 0 if self.B_KMAJOR else 1  # where N runs in a B box
            for i in gl.static_range(self.B1_BOXES):  # the first piece: B1_BOXES boxes side by side
                self.load_b(ring.b_bufs.index(s).slice(i * self.BN2, self.BN2, N_DIM), off_n + i * self.BN2, k, bar,
                            batch)
            self.load_b(ring.b2_bufs.index(s), off_n + self.B1_BOXES * self.BN2, k, bar, batch)
        else:
            self.load_b(ring.b_bufs.index(s), off_n, k, bar, batch)
        return s

    @gluon.jit
    def load_a(self, dst, off_m, k, bar, batch):
        """One A box: rows from off_m, k-step k."""
        if self.A_KMAJOR:
            load_tile(self.a_desc, batch, off_m, k, bar, dst)
        else:
            load_tile(self.a_desc, batch, k, off_m, bar, dst)

    @gluon.jit
    def load_b(self, dst, off_n, k, bar, batch):
        """One B box: columns from off_n, k-step k."""
        if self.B_KMAJOR:
            load_tile(self.b_desc, batch, off_n, k, bar, dst, self.MULTICAST)
        else:
            load_tile(self.b_desc, batch, k, off_n, bar, dst, self.MULTICAST)
