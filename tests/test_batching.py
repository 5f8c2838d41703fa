"""The batching plan (CPU): torch.matmul's broadcasting reduced to one 2-D or one batched GEMM,
through views where the layout allows. The plan's views are executed with torch's own mm/bmm
and compared with torch.matmul in float64."""

import pytest
import torch

from pingpong import PingpongError
from pingpong.integration import batching

M, K, N = 5, 6, 7


def contiguous(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def permuted_batch():  # (3, M, K) whose batch stride is K and M stride 3·K: batch+M do not merge
    return contiguous(M, 3, K).transpose(0, 1)


CASES = [
    # name, a, b, kind, a is a view, b is a view
    ("2-D", lambda: contiguous(M, K), lambda: contiguous(K, N), "mm", True, True),
    ("transposed 2-D", lambda: contiguous(K, M).t(), lambda: contiguous(N, K).t(), "mm", True, True),
    ("shared weight", lambda: contiguous(3, M, K), lambda: contiguous(K, N), "fold", True, True),
    ("shared weight w.t()", lambda: contiguous(2, 3, M, K), lambda: contiguous(N, K).t(), "fold", True, True),
    ("weight with batch 1", lambda: contiguous(3, M, K), lambda: contiguous(1, K, N), "fold", True, True),
    ("sliced rows fold", lambda: contiguous(3, M, 2 * K)[..., :K], lambda: contiguous(K, N), "fold", True, True),
    ("permuted batch", permuted_batch, lambda: contiguous(K, N), "batched", True, True),
    ("same batch", lambda: contiguous(4, M, K), lambda: contiguous(4, K, N), "batched", True, True),
    ("transposed batch", lambda: contiguous(4, K, M).mT, lambda: contiguous(4, N, K).mT, "batched", True, True),
    ("2-D a, batched b", lambda: contiguous(M, K), lambda: contiguous(4, K, N), "batched", True, True),
    ("broadcast 1", lambda: contiguous(1, M, K), lambda: contiguous(4, K, N), "batched", True, True),
    ("two batch dims", lambda: contiguous(2, 3, M, K), lambda: contiguous(2, 3, K, N), "batched", True, True),
    ("broadcast lead", lambda: contiguous(3, M, K), lambda: contiguous(2, 3, K, N), "batched", False, True),  # a repeats: copied
    ("crossed broadcast", lambda: contiguous(2, 1, M, K), lambda: contiguous(1, 3, K, N), "batched", False, False),
    ("expanded a", lambda: contiguous(M, K).expand(4, M, K), lambda: contiguous(K, N), "batched", True, True),
]


@pytest.mark.parametrize("name, make_a, make_b, kind, a_view, b_view", CASES, ids=[c[0] for c in CASES])
def test_plan_matches_torch_matmul(name, make_a, make_b, kind, a_view, b_view):
    torch.manual_seed(0)
    a, b = make_a(), make_b()
    p = batching.plan_for(a, b)
    assert p.kind == kind
    assert p.out_shape == tuple(torch.matmul(a, b).shape)
    assert (p.a.stride is not None, p.b.stride is not None) == (a_view, b_view)
    for t, op in ((a, p.a), (b, p.b)):
        v = batching.operand_view(t, op, p.batch)
        if op.stride is not None:  # a view: same memory, no copy
            assert v.data_ptr() == t.data_ptr() and v.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()

    calls = []

    def two_d(x, y, c):
        calls.append(("2d", x.dim(), y.dim()))
        return x @ y

    def three_d(x, y, c):
        calls.append(("3d", x.dim(), y.dim()))
        return torch.bmm(x, y)

    out = batching.run(a, b, None, two_d, three_d)
    assert len(calls) == 1 and calls[0][0] == ("3d" if kind == "batched" else "2d")
    torch.testing.assert_close(out, torch.matmul(a, b), rtol=1e-12, atol=1e-12)


def test_fold_reads_c_through_the_folded_view():
    a, b, c = contiguous(3, M, K), contiguous(K, N), contiguous(3, M, N)
    out = batching.run(a, b, c, lambda x, y, z: torch.addmm(z, x, y), None)
    torch.testing.assert_close(out, torch.matmul(a, b) + c, rtol=1e-12, atol=1e-12)


def test_a_shared_c_keeps_the_batch_out_of_m():
    a, b, c = contiguous(2, 3, M, K), contiguous(K, N), contiguous(M, N)
    seen = []

    def three_d(x, y, z):
        seen.append(z.stride())
        return torch.baddbmm(z, x, y)

    out = batching.run(a, b, c, None, three_d)
    assert seen == [(0, N, 1)]  # c read through a stride-0 view: not copied per batch
    torch.testing.assert_close(out, torch.matmul(a, b) + c, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "a_shape, b_shape, needle",
    [
        ((2, M, K), (3, K, N), "a and b: batch dimensions \\(2,\\) \\(a\\) and \\(3,\\) \\(b\\) do not broadcast"),
        ((2, 4, M, K), (3, 1, K, N), "do not broadcast"),
        ((M, K), (K + 1, N), "a.shape\\[-1\\] must equal b.shape\\[-2\\]"),
        ((K,), (K, N), "a: expected a tensor of at least 2 dims"),
        ((M, K), (K,), "b: expected a tensor of at least 2 dims"),
    ],
)
def test_plan_refuses_shapes_that_do_not_multiply(a_shape, b_shape, needle):
    a, b = torch.empty(a_shape), torch.empty(b_shape)
    with pytest.raises(PingpongError, match=needle):
        batching.plan_for(a, b)
