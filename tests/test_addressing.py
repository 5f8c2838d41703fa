"""Tensors whose element offsets pass 2**31: the portable kernel's 64-bit switch (end to end in
Triton's interpreter, on sparse file-backed tensors that make huge strides cheap), and the
per-kernel addressability predicate the dispatcher uses."""

import pytest
import torch

from closeness import assert_close
from pingpong.runtime.addressing import KERNELS, addressable, needs_int64, span, unaddressable
from pingpong.portable import portable_gemm

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")

#: Elements of slack before each sparse tensor: a 32-bit offset that wraps lands inside the
#: mapping (a wrong value, not a crash), so a broken 64-bit switch fails the test cleanly.
PAD = 2**31 + 64


def sparse_view(tmp_path, shape, strides, dtype):
    """A view with `strides` into a sparse file: only the pages the elements sit on get
    memory. Its base is PAD elements into the file."""
    need = PAD + sum((s - 1) * st for s, st in zip(shape, strides)) + 1 + PAD
    path = tmp_path / "sparse.bin"
    with open(path, "wb") as f:
        f.truncate(need * torch.tensor([], dtype=dtype).element_size())
    store = torch.from_file(str(path), shared=True, size=need, dtype=dtype)
    return store.as_strided(shape, strides, PAD)


def check(out, ref, seed):
    assert_close(out, ref, norm=1e-3, allowed=2e-3 * max(1.0, ref.abs().max().item()), what=f"seed {seed}")


@pytest.mark.parametrize("seed", [0])
def test_column_major_operand_with_stride_past_int32_sums_every_column(tmp_path, seed):
    """A (16, 128) column-major fp16 A with column stride 2**26 + 1: the K-step advance
    64 * stride is 2**32 + 64, which wraps to 64 in 32 bits (only the first 64 columns
    would be summed)."""
    M, K, N = 16, 128, 16
    a = sparse_view(tmp_path, (M, K), (1, 2**26 + 1), torch.float16)
    gen = torch.Generator().manual_seed(seed)
    vals = torch.randn(M, K, generator=gen).half()
    a.copy_(vals)
    b = torch.randn(K, N, generator=gen).half()
    out = torch.full((M, N), float("nan"))
    portable_gemm(a, b, out, interpret=True)
    check(out, vals.double() @ b.double(), seed)


@pytest.mark.parametrize("seed", [1])
def test_row_offset_just_past_int32(tmp_path, seed):
    """Row stride 2**30 + 1, 3 rows: row 2 starts at element 2**31 + 2, the first offset
    that a 32-bit index cannot hold (span just above the threshold)."""
    M, K, N = 3, 16, 16
    a = sparse_view(tmp_path, (M, K), (2**30 + 1, 1), torch.float32)
    assert 2**31 <= a.stride(0) * (M - 1) < 2**32  # just past the 32-bit range, not far
    gen = torch.Generator().manual_seed(seed)
    vals = torch.randn(M, K, generator=gen)
    a.copy_(vals)
    b = torch.randn(K, N, generator=gen)
    c = torch.randn(M, N, generator=gen)
    out = torch.full((M, N), float("nan"))
    portable_gemm(a, b, out, c=c, beta=0.5, alpha=2.0, interpret=True)
    check(out, 2.0 * (vals.double() @ b.double()) + 0.5 * c.double(), seed)


def meta(shape, strides, dtype=torch.float16):
    return torch.empty(0, device="meta", dtype=dtype).as_strided(shape, strides)


def test_span_and_the_int64_threshold():
    assert span(meta((3, 4), (4, 1))) == 11
    assert span(meta((0, 4), (4, 1))) == 0
    assert not needs_int64(meta((2, 2), (2**31 - 1 - 1, 1)))  # largest offset 2**31 - 1: fits
    assert needs_int64(meta((2, 2), (2**31 - 1, 1)))  # largest offset 2**31
    assert needs_int64(None, meta((2**31 + 1,), (1,)))
    assert not needs_int64(None, meta((2**31,), (1,)))


def test_predicate_per_kernel():
    small = meta((1024, 1024), (1024, 1))
    huge_span = meta((2, 2**30), (2**30, 1))  # 2**31 elements, 2**32 bytes of fp16
    assert all(addressable(k, small, None) for k in KERNELS)
    assert addressable("portable", huge_span) and addressable("stream-portable", huge_span)
    assert addressable("hopper", huge_span)  # dims and strides within TMA's limits
    for k in ("cdna_pingpong", "rdna_wmma", "stream-gfx942"):
        assert not addressable(k, huge_span), k
    # buffer instructions: bytes, not elements
    assert addressable("cdna_pingpong", meta((2**30 - 1,), (1,), torch.float16))
    assert not addressable("cdna_pingpong", meta((2**30 + 1,), (1,), torch.float16))
    assert not addressable("stream-hopper", meta((2**31,), (1,)))
    assert not addressable("stream-hopper", meta((2**31 - 1,), (1,)))  # its tile count (n + BLOCK - 1) // BLOCK wraps
    assert addressable("stream-hopper", meta((2**31 - 2**15,), (1,)))
    assert not addressable("hopper", meta((2**31, 1), (1, 1)))
    # a dimension within a tile of 2**31: the scheduler's cdiv(M, BM) wraps in int32 (no tile stored)
    assert not addressable("hopper", meta((2**31 - 1, 8), (8, 1)))
    assert not addressable("hopper", meta((8, 2**31 - 100), (2**31 - 100, 1)))
    assert addressable("hopper", meta((2**31 - 2**10, 8), (8, 1)))
    assert not addressable("hopper", meta((2, 16), (2**40 // 2, 1)))
    msg = unaddressable("rdna_wmma", a=small, b=huge_span, c=None)
    assert msg.startswith("b: ") and "2**31" in msg
    assert unaddressable("rdna_wmma", a=small, c=None) is None
    with pytest.raises(ValueError, match="kernel"):
        unaddressable("nope", a=small)


# ----------------------------------------------------------------------------- the portable grouped kernel


def test_grouped_ragged_rows_with_row_offset_past_int32(tmp_path):
    """Ragged rows (MoE forward): a (3, 16) with row stride 2**30 + 1, one group of its 3 rows.
    Row 2's offset, 2 * (2**30 + 1), passes 2**31 (a (T, K) of T·K > 2**31 elements: 524288
    tokens × 7168); in 32 bits it wraps and row 2 reads another row's memory."""
    from pingpong.portable import grouped as pg

    a = sparse_view(tmp_path, (3, 16), (2**30 + 1, 1), torch.float32)
    gen = torch.Generator().manual_seed(2)
    vals = torch.randn(3, 16, generator=gen)
    a.copy_(vals)
    b = torch.randn(1, 16, 16, generator=gen)
    out = torch.full((3, 16), float("nan"))
    pg.grouped(a, b, out, torch.tensor([3], dtype=torch.int32), ragged_k=False, interpret=True)
    check(out, vals.double() @ b[0].double(), 2)


def test_grouped_ragged_k_with_token_offset_past_int32(tmp_path):
    """Ragged K (MoE weight gradient, a = xᵀ): a (16, 3) whose token (K) stride is 2**30 + 1
    (x (T, M) of T·M > 2**31 elements, read transposed): token 2's offset wraps in 32 bits."""
    from pingpong.portable import grouped as pg

    a = sparse_view(tmp_path, (16, 3), (1, 2**30 + 1), torch.float32)
    gen = torch.Generator().manual_seed(3)
    vals = torch.randn(16, 3, generator=gen)
    a.copy_(vals)
    b = torch.randn(3, 16, generator=gen)
    out = torch.full((1, 16, 16), float("nan"))
    pg.grouped(a, b, out, torch.tensor([3], dtype=torch.int32), ragged_k=True, interpret=True)
    check(out[0], vals.double() @ b.double(), 3)


def test_grouped_output_column_offset_past_int32(tmp_path):
    """Ragged rows into a column-major out (the ragged-columns product writes outᵀ so): columns
    8 to 15 (offset 8 · (2**28 + 1) and up) pass 2**31; in 32 bits the store lands elsewhere. The
    zero_tail kernel writes the same view past the last group's end."""
    from pingpong.portable import grouped as pg

    out = sparse_view(tmp_path, (4, 16), (1, 2**28 + 1), torch.float32)
    out.fill_(float("nan"))
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(4, 16, generator=gen)
    b = torch.randn(1, 16, 16, generator=gen)
    offs = torch.tensor([3], dtype=torch.int32)
    pg.grouped(a, b, out, offs, ragged_k=False, interpret=True)
    pg.zero_tail(out, offs, interpret=True)
    want = torch.cat([a[:3].double() @ b[0].double(), torch.zeros(1, 16, dtype=torch.float64)])
    check(out.clone(), want, 4)
