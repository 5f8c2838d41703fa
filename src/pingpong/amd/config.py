"""The AMD kernels' configs: what a user chooses, and everything derived from it.

Two kernel families, one config each (CdnaConfig has the role of the Hopper KernelConfig):

    CdnaConfig(target, block)            CDNA ping-pong, gfx942 / gfx950
        │ derive()  -> CdnaDerived
        ▼
    waves and groups · MFMA shape and count per K-step · direct-to-LDS width · the 16-row
    load subtile and the LDS swizzle computed from it · DMA loads per wave ·
    LDS bytes · accumulator registers · the schedule's vmcnt values and barrier counts

    WmmaConfig(target, block)            RDNA3.5 WMMA "standard" kernel, gfx1151
        │ derive()  -> WmmaDerived

Swizzle derivation (the swizzle follows from the load subtile; here as SwizzledSharedLayout parameters). One wave's
direct-to-LDS instruction writes 64 lanes × LOAD_WIDTH elements to *consecutive* LDS bytes, so
the LDS tile is cut into subtiles of that size: the load thread layout is 16 rows × 4 lanes,
a subtile is 16 × (4·LOAD_WIDTH) elements:

    swizzle_bits      = 1
    swizzle_elem_base = log2(subtile_cols / 2)      (XOR target: the upper half of a row)
    swizzle_shift     = log2(subtile_rows)          (XOR source: bit base+shift of the offset)
    Swizzle(bits, base, shift):  E ^ ((E >> (base+shift)) & (2^bits-1)) << base

In SwizzledSharedLayout terms on one row-major subtile (phase = (row // per_phase) % max_phase,
vector index ^= phase):  vec = 2^base, per_phase = 2^(base+shift) / subtile_cols,
max_phase = 2^bits.  gfx950 (16-byte DMA, bf16): subtile 16×32, Swizzle(1, 4, 4) → vec 16,
per_phase 8, max_phase 2. gfx942 (4-byte DMA): subtile 16×8, Swizzle(1, 2, 4)
→ vec 4, per_phase 8, max_phase 2.

`validate()` raises ConfigError naming the violated constraint (LDS, waves, registers, shape).
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class TargetSpec:
    """Hardware facts of one AMD target that the configs are checked against."""

    name: str
    family: str  # "cdna" or "rdna"
    wave_size: int
    lds_bytes: int  # LDS one workgroup may allocate
    simds: int  # SIMDs per CU (CDNA) / per WGP half (RDNA)
    regs_per_simd_lane: int  # VGPR (+AGPR) file per SIMD lane, 32-bit registers
    max_regs_per_wave: int  # architectural cap per wave (VGPR + AGPR)
    dma_bytes: int  # widest direct-to-LDS buffer load per lane (0: none)
    mfma_k: int  # K of the bf16 16x16 MFMA (CDNA) / WMMA (RDNA)
    mfma_version: int  # AMDMFMALayout / AMDWMMALayout version
    mfma_k_fp8: int = 0  # K of the fp8 16x16 MFMA (0: no fp8 MFMA)
    fp8_dtype: str = ""  # the torch dtype of its fp8 operands (e4m3: FNUZ on CDNA3, OCP on CDNA4)
    fp8_mfma_scaled: bool = False  # that MFMA is the scaled (microscaling) one, run with unit scales

    def mfma_k_for(self, dtype: str) -> int:
        return self.mfma_k_fp8 if dtype == "fp8" else self.mfma_k


TARGETS: dict[str, TargetSpec] = {
    # MI300X: 64 KB LDS, buffer_load_dword ... lds (4 bytes per lane), MFMA 16x16x16 bf16,
    # 16x16x32 fp8 (e4m3fnuz: CDNA3's fp8 has no negative zero and exponent bias 8).
    "gfx942": TargetSpec("gfx942", "cdna", 64, 64 * 1024, 4, 512, 512, 4, 16, 3, 32, "float8_e4m3fnuz"),
    # MI355X: 160 KB LDS, buffer_load_dwordx4 ... lds (16 bytes per lane), MFMA 16x16x32 bf16,
    # 16x16x128 fp8 on OCP e4m3 (torch's float8_e4m3fn): the f8f6f4 MFMA, twice the rate of the
    # CDNA3 16x16x32 one, exists only as the scaled instruction (v_mfma_scale_...), which the
    # kernel issues with unit scales (mfma_scaled without scale tensors).
    "gfx950": TargetSpec("gfx950", "cdna", 64, 160 * 1024, 4, 512, 512, 16, 32, 4, 128, "float8_e4m3fn", True),
    # Strix Halo: wave32, 64 KB LDS, v_wmma_f32_16x16x16_f16 (RDNA3 WMMA, version 1).
    "gfx1151": TargetSpec("gfx1151", "rdna", 32, 64 * 1024, 2, 1536, 256, 0, 16, 1),
}

LOAD_SUBTILE_ROWS = 16  # rows of the per-wave load thread layout (16 rows × 4 lanes = one wave of 64)
LOAD_SUBTILE_LANE_COLS = 4  # lanes along K in that layout
MFMA_MN = 16  # the 16×16 MFMA/WMMA output tile
ELEM_BYTES = 2  # bf16 / fp16 operands (the RDNA kernel; the CDNA one derives it from its dtype)
OPERAND_BYTES = {"bf16": 2, "fp8": 1}  # the CDNA ping-pong's operand types


def target_spec(target: str) -> TargetSpec:
    if target not in TARGETS:
        raise ConfigError(f"target: unknown AMD target {target!r}; valid targets: {', '.join(TARGETS)}")
    return TARGETS[target]


def _operand_bytes(dtype: str) -> int:
    if dtype not in OPERAND_BYTES:
        raise ConfigError(f"dtype: {dtype!r} is not a CDNA ping-pong operand type; valid: {', '.join(OPERAND_BYTES)}")
    return OPERAND_BYTES[dtype]


def _log2(x: int, what: str) -> int:
    if x <= 0 or x & (x - 1):
        raise ConfigError(f"{what}: {x} is not a power of two")
    return x.bit_length() - 1


# --------------------------------------------------------------------------- CDNA ping-pong


def emitted_waits(issued: tuple, waits: tuple, in_flight: int = 0) -> tuple:
    """The vmcnt waits of a straight-line phase sequence that can block, i.e. that the ISA has.

    Phase i issues issued[i] in-order loads, then waits until at most waits[i] are in flight.
    Triton 3.9 lowers `wait_group` to LLVM's async marks, and LLVM emits an `s_waitcnt
    vmcnt(N)` only where more than N loads can be in flight; a wait already satisfied (such as
    the ping-pong's S4 wait: after S3's vmcnt(0) only A0's loads were issued) is no
    instruction at all, and the hardware state is the same as with it. `in_flight`: loads in
    flight before the first phase (0: the prologue and every loop iteration end on vmcnt(0)).
    schedule_model.vmcnt_sequence(..., emitted=True) applies the same rule to the race model.
    """
    out = []
    for n, w in zip(issued, waits):
        in_flight += n
        if in_flight > w:
            out.append(w)
            in_flight = w
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class CdnaDerived:
    """Everything that follows from a CdnaConfig (one source of truth)."""

    target: str
    dtype: str  # operands: "bf16" or "fp8"
    elem_bytes: int
    block_m: int
    block_n: int
    block_k: int
    waves: int  # per workgroup: 2 groups × WAVES_PER_GROUP
    groups: int
    waves_per_group: int
    threads: int
    wave_m: int  # output rows one wave owns (128)
    wave_n: int  # output columns one wave owns (64)
    warps_per_cta: tuple  # MFMA layout warp grid [groups, waves_per_group]
    mfma_shape: tuple  # (16, 16, K)
    scaled_mfma: bool  # the MFMA is the scaled one with unit scales (gfx950 fp8: f8f6f4)
    mfma_version: int
    k_width: int  # operand elements per lane per MFMA
    mfma_per_k_step: int  # MFMA instructions per wave per BK step
    load_width: int  # elements per lane per direct-to-LDS instruction
    subtile_rows: int
    subtile_cols: int
    subtiles_k: int  # subtiles along BK
    swizzle: tuple  # (bits, elem_base, shift), derived from the load subtile
    smem_vec: int  # SwizzledSharedLayout parameters derived from `swizzle`
    smem_per_phase: int
    smem_max_phase: int
    a_loads: int  # direct-to-LDS instructions per wave per stage for A (self-loaded)
    b_loads: int  # ... for B (each group loads its half of the shared B tile)
    stages: int
    lds_bytes: int
    acc_regs: int  # fp32 accumulator registers per lane
    reg_budget: int  # VGPR+AGPR per wave with all waves resident
    agprs: int  # AGPRs LLVM may allocate ("amdgpu-agpr-alloc"): 0, the whole budget is ArchVGPRs
    main_loop_vmcnt: tuple  # the schedule's vmcnt waits in the steady-state loop (before S2, S3, S4, S1)
    main_loop_vmcnt_isa: tuple  # those of them the ISA emits: the ones not already satisfied
    prologue_vmcnt: tuple
    epilogue_vmcnt: tuple
    main_loop_barriers: int  # s_barrier per main-loop iteration (2 K-steps)
    epilogue_chunks: int  # column chunks the epilogue stores one after the other (register budget)


@dataclasses.dataclass(frozen=True)
class CdnaConfig:
    """The CDNA ping-pong's choices. Defaults: 256×256×64 (8 waves, 128×64 each); gfx942 halves BK.

    dtype "bf16" or "fp8" (the target's e4m3: TargetSpec.fp8_dtype). Everything sized in bytes
    (LDS, DMA width, load subtile, swizzle, LDS reads) follows from the operand's bytes, so an
    fp8 config is the bf16 one with twice the K per byte: BK 128 on gfx950, 64 on gfx942."""

    target: str = "gfx950"
    block: tuple = (256, 256, 64)
    groups: int = 2
    waves_per_group: int = 4
    stages: int = 2
    dtype: str = "bf16"

    @classmethod
    def for_target(cls, target: str, dtype: str = "bf16") -> "CdnaConfig":
        """The default config that fits `target`: 128-byte K rows (BK = 64 bf16, 128 fp8), halved
        until the stages fit the LDS (gfx942's 64 KB: BK = 32 bf16, 64 fp8)."""
        spec = target_spec(target)
        if spec.family != "cdna":
            raise ConfigError(f"target: {target} is not a CDNA target (ping-pong needs MFMA); use WmmaConfig")
        _operand_bytes(dtype)
        bk = 128 // OPERAND_BYTES[dtype]
        while bk > spec.mfma_k_for(dtype) and cls(target, (256, 256, bk), dtype=dtype).lds_bytes() > spec.lds_bytes:
            bk //= 2
        return cls(target, (256, 256, bk), dtype=dtype)

    @property
    def elem_bytes(self) -> int:
        return _operand_bytes(self.dtype)

    def lds_bytes(self) -> int:
        bm, bn, bk = self.block
        return self.stages * (bm + bn) * bk * self.elem_bytes

    def validate(self) -> None:
        spec = target_spec(self.target)
        if spec.family != "cdna":
            raise ConfigError(f"target: {self.target} is not a CDNA target (ping-pong needs MFMA)")
        elem_bytes = self.elem_bytes
        mfma_k = spec.mfma_k_for(self.dtype)
        if mfma_k == 0:
            raise ConfigError(f"dtype: {self.target} has no {self.dtype} MFMA")
        bm, bn, bk = self.block
        for what, v in (("block_m", bm), ("block_n", bn), ("block_k", bk)):
            _log2(v, what)
        if self.groups != 2:
            raise ConfigError(f"groups: the ping-pong alternates exactly 2 wave groups, got {self.groups}")
        if self.stages != 2:
            raise ConfigError(f"stages: the ping-pong schedule is a 2-stage double buffer, got {self.stages}")
        waves = self.groups * self.waves_per_group
        if waves * spec.wave_size > 1024:
            raise ConfigError(f"waves: {waves} waves × {spec.wave_size} lanes exceed 1024 threads per workgroup")
        if waves % spec.simds:
            raise ConfigError(f"waves: {waves} waves do not spread evenly over {spec.simds} SIMDs")
        load_width = spec.dma_bytes // elem_bytes
        sub_cols = LOAD_SUBTILE_LANE_COLS * load_width
        if bk % sub_cols or bk % mfma_k:
            raise ConfigError(f"block_k: {bk} must be a multiple of the load subtile width {sub_cols} "
                              f"and of the MFMA K {mfma_k}")
        wave_m, wave_n = bm // self.groups, bn // self.waves_per_group
        if wave_m % MFMA_MN or wave_n % MFMA_MN or wave_m == 0 or wave_n == 0:
            raise ConfigError(f"block: a wave tile {wave_m}×{wave_n} is not a multiple of the 16×16 MFMA")
        rows_per_pass = LOAD_SUBTILE_ROWS * self.waves_per_group
        if (bm // self.groups) % rows_per_pass or (bn // self.groups) % rows_per_pass:
            raise ConfigError(f"block: each group loads its half in passes of {rows_per_pass} rows; "
                              f"{bm // self.groups} (A) and {bn // self.groups} (B) must be multiples")
        if self.lds_bytes() > spec.lds_bytes:
            raise ConfigError(f"lds: {self.lds_bytes()} bytes of A/B stages exceed the {spec.lds_bytes} bytes "
                              f"of LDS on {self.target} (reduce block_k)")
        acc = wave_m * wave_n // spec.wave_size
        ops = (wave_m + wave_n) * bk * elem_bytes // 4 // spec.wave_size
        budget = self.reg_budget()
        if acc + ops > budget:
            raise ConfigError(f"registers: {acc} accumulator + {ops} operand registers per lane exceed the "
                              f"{budget} VGPR+AGPR a wave gets with {waves} waves on {spec.simds} SIMDs")

    def reg_budget(self) -> int:
        spec = target_spec(self.target)
        waves_per_simd = math.ceil(self.groups * self.waves_per_group / spec.simds)
        return min(spec.max_regs_per_wave, spec.regs_per_simd_lane // waves_per_simd)

    def derive(self) -> CdnaDerived:
        self.validate()
        spec = target_spec(self.target)
        bm, bn, bk = self.block
        waves = self.groups * self.waves_per_group
        wave_m, wave_n = bm // self.groups, bn // self.waves_per_group
        mfma_k = spec.mfma_k_for(self.dtype)
        load_width = spec.dma_bytes // self.elem_bytes
        sub_rows, sub_cols = LOAD_SUBTILE_ROWS, LOAD_SUBTILE_LANE_COLS * load_width
        # the swizzle is computed from the load subtile (module docstring)
        bits, base, shift = 1, _log2(sub_cols // 2, "subtile_cols/2"), _log2(sub_rows, "subtile_rows")
        per_phase = (1 << (base + shift)) // sub_cols
        elems_per_instr = spec.wave_size * load_width  # one wave's DMA instruction = one subtile
        a_loads = (bm // self.groups) * bk // (self.waves_per_group * elems_per_instr)
        b_loads = (bn // self.groups) * bk // (self.waves_per_group * elems_per_instr)
        mfma_per_k = (wave_m // MFMA_MN) * (wave_n // MFMA_MN) * (bk // mfma_k)
        # 16-byte LDS reads: one read feeds two MFMAs on gfx942 (bf16 16x16x16, fp8 16x16x32),
        # one bf16 16x16x32 MFMA on gfx950; its fp8 16x16x128 MFMA takes two reads per lane
        k_width = 16 // self.elem_bytes
        # The schedule (cdna_pingpong docstring), one wait before each loop barrier:
        # S2: B1 landed, A1 (the newest a_loads DMAs) still in flight; S3: A1 landed;
        # S4: nothing to wait for, A0 stays in flight; S1: A0 and B0 landed.
        loop_vmcnt = (a_loads, 0, a_loads, 0)
        # DMA instructions each loop phase issues before its wait (S1: B1, A1; S2: none; S3: A0; S4: B0)
        loop_issued = (a_loads + b_loads, 0, a_loads, b_loads)
        return CdnaDerived(
            target=self.target, dtype=self.dtype, elem_bytes=self.elem_bytes, block_m=bm, block_n=bn, block_k=bk,
            waves=waves, groups=self.groups, waves_per_group=self.waves_per_group,
            threads=waves * spec.wave_size, wave_m=wave_m, wave_n=wave_n,
            warps_per_cta=(self.groups, self.waves_per_group),
            mfma_shape=(MFMA_MN, MFMA_MN, mfma_k), scaled_mfma=self.dtype == "fp8" and spec.fp8_mfma_scaled,
            mfma_version=spec.mfma_version, k_width=k_width,
            mfma_per_k_step=mfma_per_k, load_width=load_width,
            subtile_rows=sub_rows, subtile_cols=sub_cols, subtiles_k=bk // sub_cols,
            swizzle=(bits, base, shift), smem_vec=1 << base, smem_per_phase=per_phase, smem_max_phase=1 << bits,
            a_loads=a_loads, b_loads=b_loads, stages=self.stages, lds_bytes=self.lds_bytes(),
            acc_regs=wave_m * wave_n // spec.wave_size, reg_budget=self.reg_budget(), agprs=0,
            # Prologue and epilogue drain everything (vmcnt(0) before their fenced barriers).
            main_loop_vmcnt=loop_vmcnt, main_loop_vmcnt_isa=emitted_waits(loop_issued, loop_vmcnt),
            prologue_vmcnt=(0,), epilogue_vmcnt=(0,),
            main_loop_barriers=4,
            # one chunk per 16-column MFMA tile of the wave, the finest column split that every
            # lane holds in registers, at most 4 (cdna_pingpong.store_tile says why it chunks)
            epilogue_chunks=min(4, wave_n // MFMA_MN),
        )


# --------------------------------------------------------------------------- RDNA WMMA


@dataclasses.dataclass(frozen=True)
class WmmaDerived:
    target: str
    block_m: int
    block_n: int
    block_k: int
    waves: int
    threads: int
    warps_per_cta: tuple  # [4, 2] waves over the 128×64 tile
    wave_m: int
    wave_n: int
    tiles_per_wave: tuple  # 2×2 register blocking of 16×16 WMMA tiles
    wmma_per_k_step: int  # WMMA instructions per wave per BK step
    stages: int
    pad: int  # LDS row padding in elements (+8 halves: fewer LDS bank conflicts)
    lds_bytes: int
    acc_regs: int


@dataclasses.dataclass(frozen=True)
class WmmaConfig:
    """The "standard" RDNA WMMA kernel: 128×64 tile, 4×2 waves (wave32), 2×2 WMMA tiles per wave,
    BK = 16 (BK = 32 is reported slower on this part), LDS rows padded by 8 halves, double buffer,
    fp16 in, fp32 out."""

    target: str = "gfx1151"
    block: tuple = (128, 64, 16)
    warps: tuple = (4, 2)
    stages: int = 2
    pad: int = 8

    def lds_bytes(self) -> int:
        bm, bn, bk = self.block  # A tiles BM×BK, B tiles BK×BN, each row padded by `pad`
        return self.stages * (bm * (bk + self.pad) + bk * (bn + self.pad)) * ELEM_BYTES

    def validate(self) -> None:
        spec = target_spec(self.target)
        if spec.family != "rdna":
            raise ConfigError(f"target: {self.target} is not an RDNA target (WMMA kernel needs wave32 WMMA)")
        bm, bn, bk = self.block
        wm, wn = self.warps
        if bm % (wm * MFMA_MN) or bn % (wn * MFMA_MN):
            raise ConfigError(f"block: {bm}×{bn} does not split into {wm}×{wn} waves of 16×16 WMMA tiles")
        if bk % spec.mfma_k:
            raise ConfigError(f"block_k: {bk} is not a multiple of the WMMA K {spec.mfma_k}")
        if wm * wn * spec.wave_size > 1024:
            raise ConfigError(f"waves: {wm * wn} waves exceed 1024 threads per workgroup")
        if self.lds_bytes() > spec.lds_bytes:
            raise ConfigError(f"lds: {self.lds_bytes()} bytes exceed the {spec.lds_bytes} bytes of LDS on {self.target}")
        acc = bm * bn // (wm * wn * spec.wave_size)
        if acc > spec.max_regs_per_wave // 2:
            raise ConfigError(f"registers: {acc} accumulator registers per lane exceed half the "
                              f"{spec.max_regs_per_wave} VGPRs of a wave")

    def derive(self) -> WmmaDerived:
        self.validate()
        spec = target_spec(self.target)
        bm, bn, bk = self.block
        wm, wn = self.warps
        wave_m, wave_n = bm // wm, bn // wn
        tiles = (wave_m // MFMA_MN, wave_n // MFMA_MN)
        return WmmaDerived(
            target=self.target, block_m=bm, block_n=bn, block_k=bk, waves=wm * wn,
            threads=wm * wn * spec.wave_size, warps_per_cta=(wm, wn), wave_m=wave_m, wave_n=wave_n,
            tiles_per_wave=tiles, wmma_per_k_step=tiles[0] * tiles[1] * (bk // spec.mfma_k),
            stages=self.stages, pad=self.pad, lds_bytes=self.lds_bytes(),
            acc_regs=wave_m * wave_n // spec.wave_size,
        )
