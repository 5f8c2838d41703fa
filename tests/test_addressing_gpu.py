"""GPU: the compiled portable kernel on operands whose offsets pass 2**31 (real allocations,
~22 GB in all), directly and through the public API. Fresh random inputs each run; the
generator's seed is printed, so a failure shows it. Outputs are poisoned with NaN first;
checked against a float64 reference with a norm bound and an elementwise bound."""

import pytest
import torch

import pingpong
from closeness import assert_close
from pingpong.portable import portable_gemm


def _strided(shape, strides, dtype):
    span = sum((s - 1) * st for s, st in zip(shape, strides)) + 1
    free, _ = torch.cuda.mem_get_info()
    if free < span * torch.tensor([], dtype=dtype).element_size() + 2**30:
        pytest.skip(f"needs {span * 2 / 2**30:.1f} GiB of free GPU memory")
    return torch.empty(span, dtype=dtype, device="cuda").as_strided(shape, strides)


def _check(out, ref, seed, tol):
    assert_close(out, ref, norm=tol, allowed=10 * tol * (ref.abs() + ref.pow(2).mean().sqrt()), what=f"seed {seed}")


@pytest.mark.gpu
@pytest.mark.parametrize("shape, strides", [
    ((64, 128), (1, 2**26 + 1)),  # column stride: the K-step advance 64 * stride wraps in 32 bits
    ((3, 16), (2**30 + 1, 1)),    # row 2 starts at element 2**31 + 2
])
def test_compiled_portable_addresses_past_int32(shape, strides):
    gen = torch.Generator(device="cuda")
    seed = gen.seed()
    print(f"generator seed {seed}")
    a = _strided(shape, strides, torch.float16)
    M, K = shape
    vals = torch.randn(M, K, generator=gen, device="cuda").half()
    a.copy_(vals)
    b = torch.randn(K, 64, generator=gen, device="cuda").half()
    ref = vals.double() @ b.double()
    out = torch.full((M, 64), float("nan"), device="cuda")
    portable_gemm(a, b, out)
    _check(out, ref, seed, 2e-3)
    via_api = pingpong.gemm(a, b, out_dtype=torch.float32)  # whatever path the plan picks
    _check(via_api, ref, seed, 2e-3)
