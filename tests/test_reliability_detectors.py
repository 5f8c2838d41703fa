"""The detectors other tests rely on, shown to fire: the spill/local-memory detector on kernels
that do spill, and TMA legality on a misaligned base (a detector that never fires would let
every "no spills" / "TMA-legal" assertion pass)."""

import functools

import pytest
import torch
import triton
import triton.language as tl

from pingpong.runtime import compile as cc
from pingpong.toolchain import KERNEL_OPTIONS


@triton.jit
def _register_hog(x_ptr, y_ptr, BLOCK: tl.constexpr):
    """Keeps a whole BLOCK live across a reduction: far more values per thread than registers."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    s = tl.sum(x * x, axis=0)
    tl.store(y_ptr + offs, x * s + tl.flip(x, 0))


@functools.lru_cache(maxsize=None)
def hog_facts(target):
    """8192 fp32 per warp under a 64-register cap (sm_90a); 32768 per wave (gfx942: > 512 VGPRs+AGPRs)."""
    block, kw = {"sm_90a": (8192, dict(num_warps=1, maxnreg=64)), "gfx942": (32768, dict(num_warps=1))}[target]
    x = torch.empty(block)
    with cc.offline(target):
        ck = _register_hog.warmup(x, x, BLOCK=block, grid=(1,), **kw, **KERNEL_OPTIONS)
    return cc.Compiled("register_hog", target, dict(ck.asm), ck.metadata).facts()


def test_spill_detector_sees_local_memory_on_hopper():
    f = hog_facts("sm_90a")
    assert f.spill_bytes > 0, "cuobjdump's STACK/LOCAL bytes not read"
    assert f.counts["LDL/STL"] > 0, "the SASS local load/store pattern does not match"
    assert f.registers <= 64


def test_spill_detector_sees_scratch_on_cdna():
    f = hog_facts("gfx942")
    assert f.extra["scratch bytes"] > 0, "the scratch (private segment) size is not read"
    assert f.extra["vgpr spills"] > 0, "the VGPR spill count is not read"
    assert f.spill_bytes >= f.extra["scratch bytes"] + 4 * f.extra["vgpr spills"], "spill_bytes drops a term"


def _bf16(rows, cols, offset_elems=0):
    flat = torch.empty(offset_elems + rows * cols, dtype=torch.bfloat16)
    return flat[offset_elems:].view(rows, cols)


def test_tma_orientation_refuses_misaligned_bases():
    from pingpong.hopper.launch import tma_orientation

    assert tma_orientation(_bf16(64, 64)) == "row"
    assert tma_orientation(_bf16(64, 64).t()) == "col"
    assert _bf16(64, 64, 1).data_ptr() % 16 == 2
    assert tma_orientation(_bf16(64, 64, 1)) is None  # x[1:]: base 2 bytes off
    assert tma_orientation(_bf16(64, 64, 1).t()) is None
    assert tma_orientation(_bf16(64, 64, 8)) == "row"  # 16 bytes off: aligned
    assert tma_orientation(_bf16(64, 64)[:, 1:]) is None  # row-major view whose base is 2 bytes in
