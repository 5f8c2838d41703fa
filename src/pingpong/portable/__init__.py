"""The portable GEMM: plain `triton.language`, for any CUDA/ROCm GPU and Triton's interpreter.

    C_out = act(alpha * (A @ B) + bias) + beta * C_in     A: (M, K)   B: (K, N)   C: (M, N)
                                                          (docs/epilogue.md: bias, act)

Every operand has arbitrary strides, so all four layouts of A and B (row- or column-major,
i.e. ``a`` or ``a.t()``) run without a copy. Accumulation is fp32; inputs fp16/bf16/fp32;
output bf16/fp16/fp32. This is the library's reference-quality fallback (not its fast path):
one output tile per program, a K loop of masked loads, ``tl.dot``, and an epilogue.

    program (pid, batch) ──grouped raster──▶ (pid_m, pid_n) of matrix `batch`
         │                                       GROUP_M tile-rows share B tiles in L2; a batch
         │                                       stride 0 shares an operand across batches
         ▼   for k in 0 .. cdiv(K, BK):                  masked loads: rows ≥ M, cols ≥ N and
    acc[BM,BN] += A[BM,BK] @ B[BK,BN]                    k ≥ K read 0 (K == 0: no iteration)
         │
         ▼   epilogue
    out = act(alpha * acc + bias) (+ beta * C_in if HAS_C)  ──cast──▶ C_out    masked store
          bias: none / per column / per row (BIAS), act: ACTIVATION — both constexprs

Index width: offsets are 32-bit unless some operand's span (largest element offset,
`pingpong.runtime.addressing.span`) passes 2**31 - 1; then `INDEX_64` widens the program id, the
row/column/k indices and the K-step advance (`BK * stride`) to 64 bits, so any strided
tensor is addressed correctly.

`HAS_C` is a constexpr: when beta == 0 or no C is given the read of C is compiled out
(so C_in's contents, even NaN, never matter — BLAS semantics).

Block sizes (`default_block`), derived rather than tabled:
  * BK holds 128 bytes of one operand row: 64 elements for 16-bit inputs, 32 for fp32 — one
    full 128-byte line per row per k-step (and the widest shared-memory swizzle on NVIDIA).
  * BM, BN = 128, shrunk to the next power of two ≥ the problem's M, N (minimum 16, the
    smallest `tl.dot` tile), so small problems don't compute mostly masked tiles.
  * BK likewise shrinks to ≥ K's next power of two (minimum 16).
  * warps: 8 when the tile is 128×128 or more (per-thread accumulator ≤ 64 fp32), else 4.
  * stages: as many as fit the target's shared memory, at most 4 (`default_stages`).
Per offline target the same rule is used with the target's shared-memory limit
(`pingpong.runtime.compile.SHARED_MEMORY_LIMIT`); AMD's stream pipeliner is given at most 2 stages
(its recommended setting: one buffer in LDS being filled while one is read).

Interpreter: ``portable_gemm(..., interpret=True)`` runs the kernel in Triton's interpreter
on CPU (or GPU) tensors, without the process-wide ``TRITON_INTERPRET=1``. Triton 3.6 reads
that variable once, when ``@triton.jit`` runs (``triton/runtime/jit.py``: ``jit()`` returns an
``InterpretedFunction`` instead of a ``JITFunction`` if ``knobs.runtime.interpret``), so we keep
the undecorated Python function and wrap it twice: ``gemm_kernel = triton.jit(fn)`` for GPUs
(or whatever the environment asks for) and, on first use, ``InterpretedFunction(fn)`` for the
interpreter. GPU users never touch the second. The kernel calls no `@triton.jit` function of
triton.language (not even ``tl.cdiv`` or ``tl.zeros``, jit functions of
``triton.language.standard``): with the variable unset those are compiled-mode JITFunctions,
which the interpreter cannot call (a test checks this). Its own helper, `activate`, is
wrapped twice the same way: the interpreted kernel is a copy of the kernel function whose
globals name ``InterpretedFunction(_activate)`` instead. Caveat (triton 3.6 and 3.9): the interpreter gives wrong results for bf16,
so interpreter tests use fp16/fp32. fp32 `tl.dot` is exact fp32 in the interpreter (numpy);
on GPUs it follows ``torch.backends.cuda.matmul.allow_tf32`` (off by default: "ieee").

Offline (``pingpong isa --kernel portable --target T``; bf16, 512³, nt, with C): 128×128×64,
8 warps everywhere; sm_90a 4 stages (128 KB shared, wgmma, 0 spills), gfx942/gfx950 2 stages
(32 KB LDS, MFMA), gfx1151 2 stages (32 KB LDS, WMMA), no spills on any target; likewise
batched with a per-row fp32 bias and gelu_erf, gelu_tanh or silu (checked when added).
"""

from __future__ import annotations

import functools
import types

import torch
import triton
import triton.language as tl

from ..errors import PingpongError, check_tensor
from ..runtime import spec as spec_mod
from ..runtime.addressing import needs_int64
from ..runtime.compile import SHARED_MEMORY_LIMIT, TARGETS, Launch, register
from ..runtime.launcher import CachedLaunch
from ..runtime.plan import LaunchedPlan, Plan, bias_vector, device_index
from ..runtime.spec import NO_ARGS
from ..toolchain import KERNEL_OPTIONS
from . import grouped

__all__ = ["portable_gemm", "prepare", "default_block", "default_stages", "gemm_kernel", "SUPPORTED_INPUTS", "SUPPORTED_OUTPUTS"]

SUPPORTED_INPUTS = (torch.float16, torch.bfloat16, torch.float32)
SUPPORTED_OUTPUTS = (torch.float16, torch.bfloat16, torch.float32)

#: Line width the K-tile is sized to (bytes of one operand row per k-step).
K_TILE_BYTES = 128
#: Largest M/N tile; smallest tile any dimension may have (`tl.dot` needs ≥ 16).
MAX_MN_TILE, MIN_TILE = 128, 16
MAX_STAGES, AMD_MAX_STAGES = 4, 2
GROUP_M = 8


def _activate(z, ACTIVATION: tl.constexpr):
    """act(z) in fp32 for the fused epilogue (the table in docs/epilogue.md)."""
    tl.static_assert(ACTIVATION == "none" or ACTIVATION == "relu" or ACTIVATION == "gelu_erf"
                     or ACTIVATION == "gelu_tanh" or ACTIVATION == "silu", "unknown activation (pingpong.runtime.spec.ACTIVATIONS)")
    if ACTIVATION == "relu":
        z = tl.maximum(z, 0.0, propagate_nan=tl.PropagateNan.ALL)  # relu(NaN) = NaN, as torch.relu
    elif ACTIVATION == "gelu_erf":
        z = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":  # z/2·(1 + tanh(u)) = z·sigmoid(2u), u = √(2/π)(z + 0.044715 z³)
        z = z / (1.0 + tl.exp(-1.5957691216057308 * (z + 0.044715 * z * z * z)))
    elif ACTIVATION == "silu":
        z = z / (1.0 + tl.exp(-z))
    return z


def _gemm_kernel(
    a_ptr, b_ptr, c_ptr, out_ptr, bias_ptr,
    M, N, K,
    stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn, stride_ob, stride_om, stride_on,
    alpha, beta,
    HAS_C: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    INDEX_64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
):
    # -- which tile: grouped raster (GROUP_M tile-rows walk N together, so B stays in L2);
    #    axis 1 is the batch (a batch stride 0 shares that operand across batches)
    pid = tl.program_id(0)
    if INDEX_64:  # everything derived from pid (tile rows/cols, offsets) is then 64-bit
        pid = pid.to(tl.int64)
    batch = tl.program_id(1)
    # not tl.cdiv: see "no jit helpers" in the module docstring; (M - 1) // BM + 1, not
    # (M + BM - 1) // BM, which wraps an int32 M within a tile of 2**31 (M ≥ 1 here)
    tiles_m = (M - 1) // BM + 1
    tiles_n = (N - 1) // BN + 1
    tiles_per_group = GROUP_M * tiles_n
    first_m = (pid // tiles_per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % tiles_per_group) % group_rows
    pid_n = (pid % tiles_per_group) // group_rows

    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    if INDEX_64:  # element offsets that can pass 2**31: widen before multiplying by strides
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
        rk = rk.to(tl.int64)
        batch = batch.to(tl.int64)
        # the K-step advance too: BK * stride in 32 bits wraps (stride 2**26+1, BK 64 -> 64)
        a_step = tl.cast(stride_ak, tl.int64) * BK
        b_step = tl.cast(stride_bk, tl.int64) * BK
    else:
        a_step = stride_ak * BK
        b_step = stride_bk * BK
    mask_m = rm < M
    mask_n = rn < N

    # -- main loop: acc += A[rm, k:k+BK] @ B[k:k+BK, rn]; out-of-range elements load as 0
    a_ptrs = a_ptr + batch * stride_ab + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.full((BM, BN), 0.0, tl.float32)  # not tl.zeros (a jit function)
    for k in range(0, (K + BK - 1) // BK):
        k_left = K - k * BK
        a = tl.load(a_ptrs, mask=mask_m[:, None] & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += a_step
        b_ptrs += b_step

    # -- epilogue: act(alpha * acc + bias) (+ beta * C), cast, masked store
    mask = mask_m[:, None] & mask_n[None, :]
    acc = acc * alpha
    if BIAS == "col":
        acc += tl.load(bias_ptr + rn, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    elif BIAS == "row":
        acc += tl.load(bias_ptr + rm, mask=mask_m, other=0.0).to(tl.float32)[:, None]
    acc = activate(acc, ACTIVATION)
    if HAS_C:
        c = tl.load(c_ptr + batch * stride_cb + rm[:, None] * stride_cm + rn[None, :] * stride_cn, mask=mask,
                    other=0.0)
        acc += beta * c.to(tl.float32)
    out_ptrs = out_ptr + batch * stride_ob + rm[:, None] * stride_om + rn[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


#: The kernel for GPUs (or an InterpretedFunction when TRITON_INTERPRET=1 was set at import).
activate = triton.jit(_activate)
gemm_kernel = triton.jit(_gemm_kernel)


@functools.lru_cache(maxsize=None)
def interpreted_kernel():
    """The same kernel under Triton's interpreter, independent of TRITON_INTERPRET: a copy of
    the kernel function whose globals see the interpreted `activate` instead of the jit one."""
    from triton.runtime.interpreter import InterpretedFunction

    scope = dict(_gemm_kernel.__globals__, activate=InterpretedFunction(_activate))
    fn = types.FunctionType(_gemm_kernel.__code__, scope, _gemm_kernel.__name__)
    return InterpretedFunction(fn)


# --------------------------------------------------------------------------- block rule


def _pow2_at_least(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, triton.next_power_of_2(max(int(n), 1))))


def default_block(M: int, N: int, K: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BM, BN, BK) by the rule in the module docstring."""
    bk = K_TILE_BYTES // dtype.itemsize
    return (
        _pow2_at_least(M, MIN_TILE, MAX_MN_TILE),
        _pow2_at_least(N, MIN_TILE, MAX_MN_TILE),
        _pow2_at_least(K, MIN_TILE, bk),
    )


def default_warps(block: tuple[int, int, int]) -> int:
    bm, bn, _ = block
    return 8 if bm * bn >= 128 * 128 else 4


def default_stages(block: tuple[int, int, int], itemsize: int, shared_limit: int, amd: bool = False) -> int:
    """Pipeline depth: as many A+B k-tiles as fit `shared_limit` bytes, 1..4 (AMD: 1..2)."""
    bm, bn, bk = block
    per_stage = (bm + bn) * bk * itemsize
    cap = AMD_MAX_STAGES if amd else MAX_STAGES
    return max(1, min(cap, shared_limit // per_stage))


def _device_shared_limit(device: torch.device) -> tuple[int, bool]:
    """(max shared memory per block in bytes, is AMD) of the GPU that owns `device`."""
    return _shared_limit_of(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _shared_limit_of(index: int) -> tuple[int, bool]:
    props = triton.runtime.driver.active.utils.get_device_properties(index)
    return int(props["max_shared_mem"]), torch.version.hip is not None


def _input_precision(dtype: torch.dtype) -> str:
    """fp32 inputs follow torch's matmul setting (exact by default); 16-bit inputs are exact."""
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    """(batch, row, column) strides; an operand shared by the batches (2-D, or batch size 1)
    has batch stride 0."""
    if t.dim() == 2:
        return (0, *t.stride())
    return (0 if t.shape[0] == 1 else t.stride(0), *t.stride()[1:])


def _launch(a, b, c, out, alpha, beta, block, has_c, bias=None, activation="none",
            device_smem: tuple[int, bool] | None = None):
    """(grid, positional args, keyword args) of one kernel launch; `device_smem` = (shared
    memory bytes, is AMD) adds num_warps/num_stages (the interpreter takes neither)."""
    (M, K), N = a.shape[-2:], b.shape[-1]
    batches = out.shape[0] if out.dim() == 3 else 1
    grid = (triton.cdiv(M, block[0]) * triton.cdiv(N, block[1]), batches)
    args = (
        a, b, c, out, bias_vector(bias) if bias is not None else out, M, N, K,
        *_strides(a), *_strides(b), *_strides(c), *_strides(out),
        float(alpha), float(beta),
    )
    meta = dict(
        HAS_C=has_c, BM=block[0], BN=block[1], BK=block[2], GROUP_M=GROUP_M,
        INDEX_64=needs_int64(a, b, c, out), INPUT_PRECISION=_input_precision(a.dtype),
        BIAS=spec_mod.bias_kind(bias, M), ACTIVATION=activation, **KERNEL_OPTIONS,
    )
    if device_smem is not None:
        shared, amd = device_smem
        meta.update(num_warps=default_warps(block), num_stages=default_stages(block, a.element_size(), shared, amd))
    return grid, args, meta


# --------------------------------------------------------------------------- host launch


def portable_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    c: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    activation: str = "none",
    block: tuple[int, int, int] | None = None,
    interpret: bool = False,
) -> torch.Tensor:
    """out = act(alpha * (a @ b) + bias) + beta * c, written into `out`; returns `out`.

    2-D: a (M, K), b (K, N), out and c (M, N). Batched: out (B, M, N); a (B, M, K) or (M, K),
    b (B, K, N) or (K, N), c (B, M, N) or (M, N); a 2-D operand (or batch size 1, or batch
    stride 0) is shared by every batch. `bias` and `activation` as in docs/epilogue.md.
    Validated first with the GEMM API's checks (PingpongError naming the argument; `out` is
    then untouched), fp32 inputs allowed. `out` may be `c` itself (same storage and strides:
    each element is read before it is written, by the same program); it must not overlap a,
    b, the bias or itself, nor c in any other way.
    `block` = (BM, BN, BK), each a power of two ≥ 16; default `default_block(M, N, K, dtype)`.
    `interpret=True` runs Triton's interpreter (CPU tensors fine; bf16 wrong in triton 3.6 and 3.9).
    """
    alpha, beta = _validate(a, b, out, c, alpha, beta, bias, activation, block, interpret)
    activation = spec_mod.check_activation(activation)
    c = c if spec_mod.reads_c(c, beta) else None  # decided once: beta = 0 never reads C
    block, has_c = _preconditions(a, b, out, c, bias, activation, block)
    if out.numel() == 0:
        return out
    if interpret:
        c_arg = c if has_c else out  # never read when HAS_C is False
        grid, args, meta = _launch(a, b, c_arg, out, alpha, beta, block, has_c, bias, activation)
        interpreted_kernel()[grid](*args, **meta)
    else:
        kernel, args, meta, grid = prepare(a, b, out, c, alpha, beta, bias, activation, block)
        kernel[grid](*args, **meta)
    return out


def _validate(a, b, out, c, alpha, beta, bias, activation, block, interpret) -> tuple[float, float]:
    """portable_gemm's arguments, by the GEMM's own checks (pingpong.runtime.spec) where they
    apply; (alpha, beta) as floats."""
    alpha, beta = spec_mod.check_scalar("alpha", alpha), spec_mod.check_scalar("beta", beta)
    spec_mod.check_beta(c, beta)
    spec_mod.check_operands(a, b, dtypes=SUPPORTED_INPUTS)
    shape = spec_mod.result_shape(a, b)
    for name, t in (("out", out), ("c", c)):
        if name == "out" or t is not None:
            check_tensor(name, t)
            if t.dtype not in SUPPORTED_OUTPUTS:
                raise PingpongError(f"{name}: dtype {t.dtype} is not supported; expected one of {SUPPORTED_OUTPUTS}")
            spec_mod.check_c(t, shape, t.dtype, a.device, name=name, shared_ok=name == "c")
    if out.dim() != max(a.dim(), b.dim()):
        raise PingpongError(f"out: expected shape {shape} (the result's), got {tuple(out.shape)}")
    spec_mod.check_bias(bias, shape[-2], shape[-1], a.device)
    spec_mod.check_activation(activation)
    if block is not None and not (isinstance(block, (tuple, list)) and len(block) == 3 and all(
            isinstance(x, int) and x >= MIN_TILE and x & (x - 1) == 0 for x in block)):
        raise PingpongError(f"block: expected (BM, BN, BK), each a power of two >= {MIN_TILE}, got {block!r}")
    if not interpret and a.device.type != "cuda":
        raise PingpongError(f"a and b are on {a.device}: the compiled kernel runs on GPUs; interpret=True runs "
                            "Triton's interpreter")
    if interpret and a.dtype == torch.bfloat16:
        raise PingpongError("a and b: bfloat16 inputs are computed wrongly by Triton's interpreter (interpret=True);"
                            " use float16 or float32 (a bf16 out, c or bias is fine)")
    spec_mod.check_inplace_target(out, "out")
    spec_mod.check_no_alias(out, a, b, "out")
    spec_mod.check_bias_not_in(out, bias, "out")
    same = c is not None and (c.data_ptr(), c.stride()) == (out.data_ptr(), out.stride())
    if c is not None and not same and spec_mod.overlaps(out, c):
        raise PingpongError("c must not share memory with out unless it is out itself (same storage and strides)")
    return alpha, beta


def prepare(a, b, out, c, alpha, beta, bias=None, activation="none", block=None):
    """(kernel, args, kwargs, grid) of the compiled kernel's launch (portable_gemm's
    arguments and preconditions; GPU tensors). The call plan launches it through
    pingpong.runtime.launcher: Triton's JIT once, then directly (the pointers a, b, c, out, bias lead
    the arguments, α and β are passed per call)."""
    block, has_c = _preconditions(a, b, out, c, bias, activation, block)  # c: None when unread (the plan's reads_c)
    assert a.is_cuda, "the compiled kernel needs GPU tensors (interpret=True runs on the CPU)"
    grid, args, meta = _launch(a, b, c if has_c else out, out, alpha, beta, block, has_c, bias, activation,
                               _device_shared_limit(a.device))
    return gemm_kernel, args, meta, grid


def _preconditions(a, b, out, c, bias, activation, block):
    """The asserts of portable_gemm (the caller validated user input); (block, has_c)."""
    assert a.dim() in (2, 3) and b.dim() in (2, 3) and out.dim() == max(a.dim(), b.dim()), "2-D, or 3-D batched"
    M, K = a.shape[-2:]
    assert b.shape[-2] == K, f"inner dimensions differ: a {tuple(a.shape)}, b {tuple(b.shape)}"
    N = b.shape[-1]
    batch = tuple(out.shape[:-2])
    assert tuple(out.shape[-2:]) == (M, N), f"out must be {batch + (M, N)}, is {tuple(out.shape)}"
    assert all(t.dim() == 2 or t.shape[0] in (1, out.shape[0]) for t in (a, b)), "batch sizes differ"
    assert a.dtype == b.dtype and a.dtype in SUPPORTED_INPUTS, f"inputs {a.dtype}, {b.dtype}"
    assert out.dtype in SUPPORTED_OUTPUTS, f"output {out.dtype}"
    has_c = c is not None  # the caller dropped a C that is not read
    if has_c:
        assert tuple(c.shape) in ((M, N), batch + (M, N)), f"c must be {batch + (M, N)}, is {tuple(c.shape)}"
    assert bias is None or bias.numel() == (M if spec_mod.bias_kind(bias, M) == "row" else N)
    assert activation in spec_mod.ACTIVATIONS, f"activation {activation!r}"
    assert a.device == b.device == out.device and (c is None or c.device == out.device), "one device"
    block = tuple(block) if block is not None else default_block(M, N, K, a.dtype)
    assert len(block) == 3 and all(x >= MIN_TILE and x & (x - 1) == 0 for x in block), f"block {block}"
    return block, has_c


# --------------------------------------------------------------------------- offline build

#: The problem each target is compiled for: a 16-bit GEMM whose every dimension is a full
#: multiple of the default tile, nt layout (B given as a (K, N) view of an (N, K) tensor).
_OFFLINE_MNK = (512, 512, 512)


@register("portable", targets=("sm_90a", "gfx942", "gfx950", "gfx1151"))
def build(target_name: str) -> Launch:
    """Plain-Triton tiled GEMM (any GPU, interpreter): alpha*A@B + beta*C, all layouts."""
    M, N, K = _OFFLINE_MNK
    dtype = torch.bfloat16  # the headline input type
    a = torch.empty(M, K, dtype=dtype)
    b = torch.empty(N, K, dtype=dtype).t()  # nt: the headline layout
    c = torch.empty(M, N, dtype=dtype)
    out = torch.empty(M, N, dtype=dtype)
    block = default_block(M, N, K, dtype)
    device_smem = (SHARED_MEMORY_LIMIT[target_name], TARGETS[target_name][0] == "hip")
    _, args, kwargs = _launch(a, b, c, out, 1.0, 0.5, block, True, device_smem=device_smem)
    return Launch(gemm_kernel, args, kwargs, grid=(1,))


# --------------------------------------------------------------------------- the backend

NAME = "portable"  # asked last (runtime.plan.BACKEND_MODULES): it runs any call on any CUDA/ROCm GPU


def can_implement(spec: spec_mod.GemmSpec) -> str | None:
    """None for any unscaled call off the CPU, grouped ones included (64-bit offsets where a
    span needs them; meta tensors plan as a GPU's would)."""
    if spec.epilogue.scales is not None and spec.groups is not None:
        return "no portable FP8 grouped kernel (scaled_grouped_mm runs on Hopper only)"
    if spec.device.type == "cpu":
        return "CPU tensors: the compiled kernel runs on GPUs (the interpreter is an explicit opt-in:" \
               " pingpong.portable.portable_gemm(a, b, out, interpret=True))"
    e = spec.epilogue
    if e.scales is not None:
        return "scaled (FP8) GEMMs are not implemented by the portable kernel"
    return None


def plan(spec: spec_mod.GemmSpec) -> "PortablePlan | grouped.GroupedPortablePlan":
    if spec.groups is not None:
        return grouped.GroupedPortablePlan(device_index(spec.device), spec.groups.mode)
    return PortablePlan(device_index(spec.device), spec.epilogue.reads_c, spec.epilogue.activation)


class PortablePlan(LaunchedPlan):
    """The plain-Triton kernel (any CUDA/ROCm GPU, any strides), launched like the Hopper
    kernel: Triton's JIT on the plan's first call, then directly (pingpong.runtime.launcher)."""

    __slots__ = ("reads_c", "launch")

    def __init__(self, device, read, activation="none"):
        self.device, self.reads_c, self.path, self.activation = device, read, "portable", activation
        self.launch = CachedLaunch(dynamic=("alpha", "beta"))

    def run(self, a, b, out, args=NO_ARGS):
        c, alpha, beta, bias = args.c, args.alpha, args.beta, args.bias
        cin = c if self.reads_c else out  # never read without C
        vec = None if bias is None else bias_vector(bias)
        ptrs = (a.data_ptr(), b.data_ptr(), cin.data_ptr(), out.data_ptr(), (out if vec is None else vec).data_ptr())
        self.launch(self.device, ptrs, (alpha, beta), self._jit_args, a, b, out, c if self.reads_c else None, args)

    @property
    def pointer_launch(self) -> bool:
        return not self.reads_c

    def _jit_args(self, a, b, out, c, args):
        return prepare(a, b, out, c, args.alpha, args.beta, args.bias, self.activation)



# --------------------------------------------------------------------------- the interpreter as a backend


class InterpretedPlan(Plan):
    """portable_gemm under Triton's interpreter (CPU tensors fine)."""

    __slots__ = ("reads_c",)

    def __init__(self, read, activation="none"):
        self.device, self.path, self.reads_c, self.activation = -1, "interpreted", read, activation

    def run(self, a, b, out, args=NO_ARGS):
        c, alpha, beta, bias = args.c, args.alpha, args.beta, args.bias
        epilogue = {} if bias is None and self.activation == "none" else dict(bias=bias, activation=self.activation)
        portable_gemm(a, b, out, alpha=alpha, beta=beta, c=c if self.reads_c else None, interpret=True, **epilogue)


class Interpreter:
    """The portable kernels under Triton's interpreter as a backend: any spec, CPU tensors
    included. Not in pingpong.runtime.plan.BACKEND_MODULES: an explicit opt-in, given to
    plan_for as the one backend to ask (pingpong.grouped's `interpret`, the CPU tests')."""

    NAME = "interpreter"

    @staticmethod
    def can_implement(spec: spec_mod.GemmSpec) -> None:
        return None

    @staticmethod
    def plan(spec: spec_mod.GemmSpec) -> Plan:
        if spec.groups is not None:
            return grouped.GroupedPortablePlan(-1, spec.groups.mode, interpret=True)
        return InterpretedPlan(spec.epilogue.reads_c, spec.epilogue.activation)
