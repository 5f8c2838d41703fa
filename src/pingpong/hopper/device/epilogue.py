"""Epilogue: out = act(α·acc + bias) + β·C, cast, store through TMA — fused, no second pass.

    acc (registers, fp32, ROWS × COLS) ── column_halves ... ──> sub-tiles of ROWS × EPI_N
    (a two-piece tile: the first piece's sub-tiles, then the second's, numbered on)
    for each sub-tile i (buffer i % BUFS):
        bias slice ──gl.load (masked, in the sub-tile's own register layout)──┐  (BIAS: "col"/"row")
        sub-tile ──×α──(+ bias)──act──┐                                     ACTIVATION constexpr
        tma.store_wait(BUFS - 1)      │       the store that last read this buffer has drained
        C sub-tile ──TMA load──> buffer ──(+ β·C)── cast ──> buffer ──TMA store──> out
                                              (β·C only when HAS_C: β ≠ 0 and a C was given)
    SWAP (the kernel's product is Cᵀ, swap-AB): the buffer is a box of out, EPI_N rows × ROWS;
    the sub-tile is written (and C read) through its transposed view, the box stored at
    (off_n, off_m)

The order is docs/epilogue.md's: the activation sees α·acc + bias, the residual β·C is added
after it. The bias needs no shared memory: each thread loads the few bias values of its own
columns (or rows) straight into the accumulator's layout (a SliceLayout of it).

Sub-tiling (KernelConfig.epilogue_n) keeps the staging at 2 small buffers per consumer
instead of one whole tile, and the shared memory saved becomes ring stages: a cooperative
128×256 fp32 tile would stage 128 KB and leave the ring 2 stages; 64-column sub-tiles
stage 64 KB and leave 3. One sub-tile's store overlaps writing the next; the last ones
overlap the mainloop of the next tile and are waited for only when their buffer is needed
again. With one whole-tile buffer (the default where it fits, measured faster: fewer
store waits) the previous tile's store is long done when the next tile needs the buffer.

The sub-tile arithmetic lives in the helpers below (`first_subtile`, `staging_slot`,
`c_parity`, `stores_left_in_flight`), which `pingpong.schedule` calls as plain Python to build
its model of this protocol: change one and the checked model changes with it.

C is read through TMA too, into the same staging buffer, so
it costs no extra shared memory and no per-element address registers; C must therefore be
TMA-legal with out's dtype (the API copies it otherwise). C may alias out (`gemm_`): each
tile is read before its own store and tiles are disjoint. A batched output (rank-3
descriptors, pingpong.hopper.device.batched) is stored into matrix `batch`; a C shared by every batch
keeps a rank-2 descriptor.

The epilogue's compile-time choices travel as one `EpilogueConstants`, `CFG.EPI` of the
kernel's constexpr bundle (pingpong.hopper.host.launch.KernelConstants), built once by the host;
the kernel hands it on and `Epilogue.allocate` (or `SplitEpilogue`, pingpong.hopper.device.fixup)
unpacks it, in one place. Its tensors travel the same way: one `EpilogueOperands` kernel
argument (`ops`: out, C, the bias, stream-K's tile descriptors, FP8's scales), built once by
the host. What is fused into α·acc (the bias, the activation) is one aggregate, `Fusion`, that
the TMA epilogue and the split / stream-K fix-up both hold and apply: a forked kernel that
fuses its own operand adds a field to EpilogueOperands and to Fusion (its math in
`Fusion.apply`): no kernel signature, launcher or fix-up changes.
"""

import dataclasses
from typing import Any, NamedTuple

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton import language as tl
from triton.language.core import _aggregate as aggregate

from .batched import load_tile, store_tile, tile_layout, tile_shape
from .pipeline import allocate_barriers


@gluon.jit
def column_halves(x):
    """Split a [ROWS, COLS] register tensor into its left and right [ROWS, COLS/2] halves.

    A column's high bit is a register index in the wgmma accumulator layout, so the
    reshape/permute/split only renames registers: no data moves."""
    ROWS: gl.constexpr = x.shape[0]
    COLS: gl.constexpr = x.shape[1]
    return x.reshape([ROWS, 2, COLS // 2]).permute(0, 2, 1).split()


@gluon.jit
def first_subtile(tile_count, SUBTILES: gl.constexpr):
    """Number of a partition's first sub-tile store of its `tile_count`-th tile: sub-tile
    stores are numbered 0, 1, 2, ... across the partition's tiles, left to right."""
    return tile_count * SUBTILES


@gluon.jit
def staging_slot(seq, BUFS: gl.constexpr):
    """Staging buffer (of the partition's BUFS) that sub-tile store number `seq` uses."""
    return seq % BUFS


@gluon.constexpr_function
def subtile_width(box, SWAP):
    """Columns of the product in one epilogue sub-tile, from the output descriptor's box: its
    width, or under SWAP (the box is the sub-tile's transpose) its height."""
    return box[-2] if SWAP else box[-1]


@gluon.jit
def c_parity(seq):
    """Parity of the partition's c_ready barrier that sub-tile `seq`'s C load completes: each
    sub-tile's load is one phase, so the parity alternates."""
    return seq & 1


@gluon.constexpr_function
def stores_left_in_flight(BUFS):
    """tma.store_wait count before a staging buffer is rewritten: stores retire in order, so
    waiting until at most BUFS - 1 are pending retires the one that last read this buffer."""
    return BUFS - 1


@gluon.jit
def add_bias(x, bias, off_m, off_n, M, N, BIAS: gl.constexpr):
    """x + the bias of its columns ("col", bias has N entries) or rows ("row", M entries)."""
    gl.static_assert(BIAS == "none" or BIAS == "col" or BIAS == "row", "BIAS must be none, col or row")
    if BIAS == "col":
        cols = off_n + gl.arange(0, x.shape[1], layout=gl.SliceLayout(0, x.type.layout))
        x = x + gl.expand_dims(gl.load(bias + cols, mask=cols < N, other=0.0).to(gl.float32), 0)
    elif BIAS == "row":
        rows = off_m + gl.arange(0, x.shape[0], layout=gl.SliceLayout(1, x.type.layout))
        x = x + gl.expand_dims(gl.load(bias + rows, mask=rows < M, other=0.0).to(gl.float32), 1)
    return x


@gluon.jit
def erf(x):
    """erf(x) within 1.5e-7 (Abramowitz & Stegun 7.1.26; ~5e-7 evaluated in fp32): a
    rational-times-exp form that keeps a whole accumulator tile in registers, where the
    library erf's branches spilled (measured offline, cooperative 128×256)."""
    t = 1.0 / (1.0 + 0.3275911 * gl.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = 1.0 - poly * gl.exp(-x * x)
    return gl.where(x < 0, -y, y)


@gluon.jit
def activate(z, ACTIVATION: gl.constexpr):
    """act(z) in fp32 (the table in docs/epilogue.md)."""
    gl.static_assert(ACTIVATION == "none" or ACTIVATION == "relu" or ACTIVATION == "gelu_erf"
                     or ACTIVATION == "gelu_tanh" or ACTIVATION == "silu", "unknown activation (docs/epilogue.md)")
    if ACTIVATION == "relu":
        z = gl.maximum(z, 0.0, propagate_nan=tl.PropagateNan.ALL)  # relu(NaN) = NaN, as torch.relu
    elif ACTIVATION == "gelu_erf":
        z = 0.5 * z * (1.0 + erf(z * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":  # z/2·(1 + tanh(u)) = z·sigmoid(2u), u = √(2/π)(z + 0.044715 z³)
        z = z / (1.0 + gl.exp(-1.5957691216057308 * (z + 0.044715 * z * z * z)))
    elif ACTIVATION == "silu":
        z = z / (1.0 + gl.exp(-z))
    return z


@dataclasses.dataclass(frozen=True)
class EpilogueConstants:
    """The epilogue's compile-time choices (CFG.EPI of the kernel's KernelConstants).

    Frozen and hashable: Triton's JIT keys a compiled kernel by the value (and its repr), so
    two equal bundles share one kernel. Runtime values (descriptors, pointers, α, β, sizes)
    stay separate kernel arguments.

    In a kernel, `EPI.X` is the plain Python value, not a gl.constexpr: read a field as
    `X: gl.constexpr = EPI.X` (a plain `x = EPI.X` would become a runtime tensor) or hand it
    straight to a constexpr_function (the aggregates' __init__). BIAS and ACTIVATION are
    checked where they are used, at compile time (add_bias, activate)."""

    HAS_C: bool = False  # β·C is read (β ≠ 0 and a C was given)
    BIAS: str = "none"  # "none" | "col" (N entries) | "row" (M entries)
    ACTIVATION: str = "none"  # docs/epilogue.md's table
    BUFS: int = 1  # staging buffers per consumer of the TMA epilogue (KernelConfig.derive: epilogue_bufs)
    SWAP: bool = False  # the result is written transposed (swap-AB): sub-tiles staged transposed, or fixup's pointers

    @gluon.constexpr_function
    def plain(self):
        """No β·C, bias or activation: the store of α·acc alone (grouped and FP8 kernels)."""
        return not self.HAS_C and self.BIAS == "none" and self.ACTIVATION == "none"


class EpilogueOperands(NamedTuple):
    """The tensors a kernel's epilogue reads and writes, as ONE kernel argument (`ops`).

    Built by the host once per launch (pingpong.hopper.host.launch.epilogue_operands) and handed
    to the entry points whole; the epilogue's constructors (`Epilogue.of`,
    fixup.SplitEpilogue.of, kernel.stream_k_epilogue) read it in one place each. Triton passes
    a NamedTuple as its fields, flattened in this order, and a field left None is no kernel
    parameter at all (a constexpr None), so each kernel declares exactly the pointers it uses
    and a new field appended here changes no existing kernel. The direct launch
    (pingpong.runtime.launcher) binds the flattened fields: its pointer tuples list them in
    this order, None fields skipped. Inside a kernel, `ops.bias` etc. are the values (a
    Gluon aggregate cannot be built on the host; its fields would be type-checked there).

    A new operand: a field here, its value in launch.epilogue_operands (the plans' pointer
    tuples follow it: launch.operand_pointers), and its use in `Fusion` (its field, read in
    `Fusion.of`, and the math), which both epilogues hold."""

    out: Any = None  # the result as the epilogue writes it: TMA descriptor (Epilogue) or pointer (SplitEpilogue)
    cin: Any = None  # C, as `out` (the plan passes out when C is not read; None where no kernel parameter is kept)
    bias: Any = None  # the bias vector (out stands in when there is none: never read)
    tile_out: Any = None  # stream-K: the TMA descriptors of its whole tiles, next to the fix-up's pointers
    tile_cin: Any = None
    sa: Any = None  # FP8: the dequantization scales (pointers or TMA descriptors, pingpong.hopper.kernels.fp8_gemm)
    sb: Any = None


@aggregate
class Fusion:
    """What the epilogue fuses into α·acc before β·C (docs/epilogue.md's order): the bias, then
    the activation, `apply`'d to the scaled accumulator of an R × C product's tile at
    (off_r, off_c). Both epilogues hold one (Epilogue here, the split and stream-K fix-up's
    pingpong.hopper.device.fixup.SplitEpilogue), built from the kernel's EpilogueOperands by
    `of`: a fused operand's field, its read and its math live here once.

    Its fields sit where the epilogues' own bias field sat, so their flattened fields (what
    the warp-specialized partitions capture, in order) are unchanged."""

    bias: gl.tensor  # pointer to the bias vector (not read when BIAS == "none")
    BIAS: gl.constexpr  # "none" | "col" | "row", of the R × C product
    ACTIVATION: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, bias, EPI):
        self.bias = bias
        self.BIAS = gl.constexpr(EPI.BIAS)
        self.ACTIVATION = gl.constexpr(EPI.ACTIVATION)

    @gluon.jit
    def of(ops, EPI: gl.constexpr):
        """The fused operands of a kernel's EpilogueOperands, their kinds from CFG.EPI."""
        return Fusion(ops.bias, EPI)

    @gluon.jit
    def apply(self, x, off_r, off_c, R, C):
        """act(x + bias) of x, the scaled accumulator (fp32) of the tile at (off_r, off_c)."""
        return activate(add_bias(x, self.bias, off_r, off_c, R, C, self.BIAS), self.ACTIVATION)


@aggregate
class Epilogue:
    c_desc: tma.tensor_descriptor  # its box is one sub-tile: [consumer rows, EPI_N] (SWAP: [EPI_N, rows])
    cin_desc: tma.tensor_descriptor
    alpha: gl.tensor
    beta: gl.tensor
    staging: gl.shared_memory_descriptor  # [COPIES * BUFS] + c_desc's box: BUFS per consumer partition
    c_ready: gl.shared_memory_descriptor  # [COPIES, 1] mbarriers for the C loads
    fusion: Fusion  # the bias and the activation
    M: gl.tensor
    N: gl.tensor
    HAS_C: gl.constexpr
    BUFS: gl.constexpr
    SWAP: gl.constexpr  # out holds the transpose of the M × N product: sub-tiles staged transposed

    @gluon.constexpr_function
    def __init__(self, c_desc, cin_desc, alpha, beta, staging, c_ready, fusion, M, N, EPI):
        self.c_desc = c_desc
        self.cin_desc = cin_desc
        self.alpha = alpha
        self.beta = beta
        self.staging = staging
        self.c_ready = c_ready
        self.HAS_C = gl.constexpr(EPI.HAS_C)
        self.BUFS = gl.constexpr(EPI.BUFS)
        self.SWAP = gl.constexpr(EPI.SWAP)
        self.fusion = fusion
        self.M = M
        self.N = N

    @gluon.jit
    def allocate(c_desc, cin_desc, alpha, beta, fusion, M, N, COPIES: gl.constexpr, EPI: gl.constexpr):
        """The epilogue of COPIES consumer partitions, from the kernel's CFG.EPI (EpilogueConstants)."""
        BUFS: gl.constexpr = EPI.BUFS
        HAS_C: gl.constexpr = EPI.HAS_C
        staging = gl.allocate_shared_memory(c_desc.dtype, [COPIES * BUFS] + tile_shape(c_desc), tile_layout(c_desc))
        c_ready = allocate_barriers(COPIES)
        if HAS_C:  # only barriers that are used get initialized (pingpong.hopper.device.pipeline.Ring)
            for i in gl.static_range(COPIES):
                mbarrier.init(c_ready.index(i), count=1)
        return Epilogue(c_desc, cin_desc, alpha, beta, staging, c_ready, fusion, M, N, EPI)

    @gluon.jit
    def of(ops, alpha, beta, M, N, COPIES: gl.constexpr, EPI: gl.constexpr):
        """`allocate` from a kernel's EpilogueOperands: out and cin its TMA descriptors."""
        return Epilogue.into(ops.out, ops.cin, ops, alpha, beta, M, N, COPIES, EPI)

    @gluon.jit
    def into(out, cin, ops, alpha, beta, M, N, COPIES: gl.constexpr, EPI: gl.constexpr):
        """`allocate` storing through TMA descriptor `out`, C read through `cin` (None: out
        stands in, never read), the fused operands of EpilogueOperands `ops` (stream-K's
        whole tiles: ops.tile_out, ops.tile_cin)."""
        if cin is None:
            epi = Epilogue.allocate(out, out, alpha, beta, Fusion.of(ops, EPI), M, N, COPIES, EPI)
        else:
            epi = Epilogue.allocate(out, cin, alpha, beta, Fusion.of(ops, EPI), M, N, COPIES, EPI)
        return epi

    @gluon.jit
    def plain(c_desc, alpha, beta, stand_in, M, N, COPIES: gl.constexpr, EPI: gl.constexpr):
        """`allocate` of a kernel without EpilogueOperands whose CFG.EPI is plain() (the grouped
        kernels: α·acc alone, no C, no fused operand): `stand_in`, any pointer, fills C's and the
        fused operands' fields, never read."""
        return Epilogue.allocate(c_desc, c_desc, alpha, beta, Fusion(stand_in, EPI), M, N, COPIES, EPI)

    @gluon.jit
    def store(self, mma, COPY: gl.constexpr, tile_count, off_m, off_n, batch, split):
        """Write act(α·acc + bias) + β·C of the tile at (off_m, off_n) of matrix `batch` (the
        accumulators of MmaOp `mma`: one, or two column pieces side by side), sub-tile by
        sub-tile, through consumer COPY's staging buffers. `tile_count` = tiles this partition
        stored before; `split` is always 0 here (SplitEpilogue's interface)."""
        EPI_N: gl.constexpr = subtile_width(self.c_desc.block_type.shape, self.SWAP)
        COLS: gl.constexpr = mma.acc.shape[1]
        SUBTILES: gl.constexpr = (COLS + (mma.acc2.shape[1] if mma.PIECES == 2 else 0)) // EPI_N
        gl.static_assert(COLS % EPI_N == 0, "the epilogue sub-tile must divide the tile width")
        gl.static_assert(SUBTILES == 1 or SUBTILES % self.BUFS == 0, "sub-tiles must cycle whole buffer rounds")
        seq = first_subtile(tile_count, SUBTILES)
        self.store_columns(mma.acc, COPY, seq, off_m, off_n, batch)
        if mma.PIECES == 2:
            self.store_columns(mma.acc2, COPY, seq + COLS // EPI_N, off_m, off_n + COLS, batch)

    @gluon.jit
    def drained_buffer(self, COPY: gl.constexpr, seq):
        """Consumer COPY's staging buffer of sub-tile store `seq`, once every store of this
        partition has drained: for a whole-width tile stored out of the sequence (stream-K's
        fix-up, pingpong.hopper.device.fixup), whichever buffer it takes is free."""
        tma.store_wait(0)
        return self.staging.index(COPY * self.BUFS + staging_slot(seq, self.BUFS))

    @gluon.jit
    def store_staged(self, staging, off_m, off_n, batch):
        """TMA store of a staging buffer written by the consumer's threads (drained_buffer)."""
        fence_async_shared()
        store_tile(self.c_desc, batch, off_m, off_n, staging)

    @gluon.jit
    def store_columns(self, x, COPY: gl.constexpr, seq, off_m, off_n, batch):
        """Halve x until it is one sub-tile wide; store the sub-tiles left to right.
        `seq` numbers this partition's sub-tile stores (buffer and C-barrier parity)."""
        EPI_N: gl.constexpr = subtile_width(self.c_desc.block_type.shape, self.SWAP)
        HALF: gl.constexpr = x.shape[1] // 2
        if x.shape[1] == EPI_N:
            self.store_subtile(x, COPY, seq, off_m, off_n, batch)
        else:
            left, right = column_halves(x)
            self.store_columns(left, COPY, seq, off_m, off_n, batch)
            self.store_columns(right, COPY, seq + HALF // EPI_N, off_m, off_n + HALF, batch)

    @gluon.jit
    def store_subtile(self, x, COPY: gl.constexpr, seq, off_m, off_n, batch):
        """One sub-tile: act(α·x + bias), wait for its buffer's previous store, (+ β·C), cast,
        TMA store. SWAP: the buffer is a box of out, the sub-tile's transpose; the registers
        are written into it (and C read from it) through its transposed view (a transposed
        stmatrix), and the box goes to out at (off_n, off_m)."""
        staging = self.staging.index(COPY * self.BUFS + staging_slot(seq, self.BUFS))
        tile = staging.permute((1, 0)) if self.SWAP else staging  # the sub-tile's M × N view
        row, col = (off_n, off_m) if self.SWAP else (off_m, off_n)  # the box's place in out
        c_ready = self.c_ready.index(COPY)
        out = self.fusion.apply(x * self.alpha, off_m, off_n, self.M, self.N)
        tma.store_wait(stores_left_in_flight(self.BUFS))  # the store that last read this buffer has drained
        if self.HAS_C:
            mbarrier.expect(c_ready, self.cin_desc.type.nbytes_per_cta)
            load_tile(self.cin_desc, batch, row, col, c_ready, staging)
            mbarrier.wait(c_ready, c_parity(seq))
            out = out + self.beta * tile.load(x.type.layout).to(gl.float32)
        tile.store(out.to(self.c_desc.dtype))
        fence_async_shared()
        store_tile(self.c_desc, batch, row, col, staging)

    @gluon.jit
    def drain(self):
        """Wait for every TMA store of this partition before the program exits."""
        tma.store_wait(0)
