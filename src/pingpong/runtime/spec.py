"""GemmSpec: what one GEMM call asks for, built once per call, validated once per new spec,
and the plan cache's key. A leaf module (torch and pingpong.errors only): every layer above
(api, batching, functional, ops, nn) validates through it, every backend plans from it.

    GemmSpec                                  the problem (hashable; equal specs = one plan)
      a, b, c          Operand | None         dtype, shape, strides, device, 16-byte-aligned base
      out_dtype        torch.dtype            (None asked: a's dtype)
      epilogue         EpilogueSpec
        reads_c        bool                   β ≠ 0 and C given: decided here, once (BLAS: β = 0
                                              never reads C, even NaN); nothing below re-decides it
        bias           Operand | None         per column (N,) / (1, N) or per row (M, 1)
        bias_kind      "none" | "col" | "row"
        activation     one of ACTIVATIONS     (the one list of them)
        scales         ScaleSpec | None       FP8 dequantization (pingpong.scaled_mm, and with
                                              groups scaled_grouped_mm): the two scale operands
                                              and use_fast_accum; the mode they name (tensor /
                                              row / block) is `scale_mode`'s (grouped:
                                              fp8_spec.scale_kinds)
      inplace          bool                   c is the output (gemm_)
      config           KernelConfig | None    an explicit Hopper config (matmul_tiled)
      groups           GroupSpec | None       a grouped product (pingpong.grouped_mm); None: dense
        mode           ROWS | COLS | RAGGED_K | BATCHED   from a's and b's dims (`grouped_mode`)
        count          int                    G, the number of groups
        offs           Operand | None         the groups' cumulative ends (None: batched)
      carveout         int | None             torch's SM carveout when the call was made
                                              (pingpong.runtime.device): the SMs a
                                              persistent grid spans, so part of the key

α and β are per-call launch scalars: a plan serves every value, so they are not in the key;
the spec records what they decide (`reads_c`). The values of the epilogue's operands (C, α, β,
bias, the scales, a grouped product's offs) travel together as one EpilogueArgs, the argument
of every plan's `run(a, b, out, args)`. The batch is in the operands' shapes
(`batches`). A spec is only built from tensors; `build` returns None for anything else and
the validation below then names the bad argument.

Validation (`validate`, `validate_nd`, `validate_linear`, `validate_inplace`) reports under
the caller's argument names (`Names`: gemm says a/b/c, linear says x/weight), with a
PingpongError naming the argument and what was expected, before any work.

A grouped product (torch._grouped_mm's four forms) is one more kind of spec: `build_grouped`
fills `groups` (c, the epilogue and the config are a dense call's only), `validate_grouped`
checks its arguments under grouped_mm's names (a, b, offs, out_dtype). Its output is always
a new contiguous tensor (`grouped_out`), so the backends decide from the spec alone. The FP8
grouped product (pingpong.scaled_grouped_mm) is a grouped spec with `epilogue.scales`, as a
dense scaled_mm's; its contract is pingpong.runtime.fp8_spec's `validate_scaled_grouped`.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import torch

from ..errors import PingpongError, check_tensor

INPUT_DTYPES = (torch.bfloat16, torch.float16)
OUTPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
BIAS_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: The fused epilogue's activations: the one list (docs/epilogue.md documents them; the kernels
#: branch on the name as a constexpr).
ACTIVATIONS = ("none", "relu", "gelu_erf", "gelu_tanh", "silu")
#: torch's SM carveout (torch._C._set_sm_carveout_experimental: SMs kept free of matmuls; None:
#: unset), read once per call into every plan key: a C getter (pingpong.runtime.device)
sm_carveout = torch._C._get_sm_carveout_experimental


def torch_activation(activation: str):
    """The activation as a torch function (the empty-K product and autograd's recomputation
    run it on the host)."""
    import torch.nn.functional as F

    return {"none": lambda z: z, "relu": F.relu, "gelu_erf": F.gelu, "silu": F.silu,
            "gelu_tanh": lambda z: F.gelu(z, approximate="tanh")}[activation]


class Names(NamedTuple):
    """The caller's names of the GEMM's operands, for error messages."""

    a: str = "a"
    b: str = "b"
    c: str = "c"
    bias: str = "bias"


GEMM = Names()
LINEAR = Names("x", "weight", "c", "bias")


class Operand(NamedTuple):
    """One tensor as a plan sees it (not its values, not its exact address). Answers the
    few tensor queries the planners ask (shape, stride(), element_size(), numel(), dim())."""

    dtype: torch.dtype
    shape: torch.Size
    strides: tuple
    device: torch.device
    aligned: bool  # base address a multiple of 16 bytes

    def stride(self, dim=None):
        return self.strides if dim is None else self.strides[dim]

    def element_size(self) -> int:
        return self.dtype.itemsize

    def numel(self) -> int:
        return math.prod(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def span_bytes(self) -> int:
        """Bytes from the first element to past the last (0 if empty; strides ≥ 0)."""
        return 0 if self.numel() == 0 else self.dtype.itemsize * (1 + span(self))

    @property
    def mT(self) -> "Operand":
        """The operand with its last two dims swapped (a tensor's .mT: a view, same base)."""
        (r, c), (sr, sc) = self.shape[-2:], self.strides[-2:]
        return _new(Operand, (self.dtype, torch.Size((*self.shape[:-2], c, r)), (*self.strides[:-2], sc, sr),
                              self.device, self.aligned))

    def contiguous(self) -> "Operand":
        """The operand a tensor's .contiguous() gives: itself when already contiguous (torch's
        rule: sizes of 1 and empty tensors ignore strides), else a new aligned row-major one."""
        if self.numel() == 0 or all(n == 1 or st == want for n, st, want in
                                    zip(self.shape, self.strides, row_major_strides(self.shape))):
            return self
        return fresh(self.dtype, self.shape, self.device)


_new = tuple.__new__  # a NamedTuple built without its Python-level __new__ (host cost per call)


def operand(t: torch.Tensor) -> Operand:
    return _new(Operand, (t.dtype, t.shape, t.stride(), t.device, t.data_ptr() % 16 == 0))


def row_major_strides(shape) -> tuple:
    """The strides of a new contiguous tensor of `shape`."""
    strides, inner = [], 1
    for n in reversed(tuple(shape)):
        strides.append(inner)
        inner *= max(n, 1)
    return tuple(reversed(strides))


def fresh(dtype: torch.dtype, shape, device) -> Operand:
    """A new contiguous tensor's operand (the caching allocator's blocks are 16-byte aligned)."""
    return _new(Operand, (dtype, torch.Size(shape), row_major_strides(shape), device, True))


class ScaleSpec(NamedTuple):
    """The FP8 scales of a scaled product (torch._scaled_mm's layouts, `scale_mode`)."""

    a: Operand
    b: Operand
    fast_accum: bool  # use_fast_accum: no per-K-block promotion (tensor-/row-wise only)


class EpilogueSpec(NamedTuple):
    reads_c: bool
    bias: Operand | None
    bias_kind: str  # "none" | "col" | "row"
    activation: str
    scales: ScaleSpec | None = None  # FP8: the dequantization scales (pingpong.scaled_mm)


NO_EPILOGUE = EpilogueSpec(False, None, "none", "none")
C_EPILOGUE = EpilogueSpec(True, None, "none", "none")


class EpilogueArgs(NamedTuple):
    """The values of one call's operands besides A and B: what `Plan.run(a, b, out, args)`
    reads (CUTLASS's fusion arguments). The spec's `epilogue` describes them (layouts, whether
    C is read, the activation); these are the per-call tensors and scalars, in one object from
    the front end to the launch, so a new operand is one field here, its check, and the
    kernel's use of it."""

    c: torch.Tensor | None = None  # read where epilogue.reads_c (β ≠ 0)
    alpha: float = 1.0
    beta: float = 0.0
    bias: torch.Tensor | None = None  # per column or per row (epilogue.bias_kind)
    scale_a: torch.Tensor | None = None  # FP8 dequantization (epilogue.scales)
    scale_b: torch.Tensor | None = None
    offs: torch.Tensor | None = None  # a grouped product's cumulative group ends (spec.groups)
    activation: str | None = None  # the spec's (epilogue.activation): carried with the operands from the front end


#: No epilogue operand: out = a @ b (a constant: no object made per call).
NO_ARGS = EpilogueArgs()

#: The 16-bit dense ops' arguments after their tensors (pingpong.integration.ops: gemm takes them all after
#: a, b; gemm_ after c, a, b without c and out_dtype), in the schemas' order: EpilogueArgs
#: fields, and out_dtype. A new operand of the dense path is appended here, once: each op's
#: schema (`op_schema`), its arguments (`op_values`) and their object again (`op_args`) follow.
DENSE_OP_ARGS = ("c", "alpha", "beta", "out_dtype", "bias", "activation")
_SCHEMA_TYPES = {"torch.Tensor | None": "Tensor?", "float": "float", "str | None": "str?"}




def _schema_type(field: str) -> str:
    """The torch.library schema type of an EpilogueArgs field, from its annotation."""
    annotation = EpilogueArgs.__annotations__[field]
    return _SCHEMA_TYPES[getattr(annotation, "__forward_arg__", annotation)]


#: The tensors among DENSE_OP_ARGS (C, the bias), in order.
DENSE_TENSORS = tuple(f for f in DENSE_OP_ARGS if f != "out_dtype" and _schema_type(f) == "Tensor?")


#: Each of DENSE_TENSORS's part in the product, for DTensor's sharding rules
#: (pingpong.distributed): "addend" (added to it: follows the output's placement) or "factor"
#: (multiplied into it: split along the product's letters it has).
DENSE_ROLES = {"c": "addend", "bias": "addend"}


def plain_args(args: EpilogueArgs) -> bool:
    """Whether a dense call's `args` ask for a @ b alone (no C, β = 0: a β without C is refused
    by the gemm op's checks, which mm's do not make)."""
    return (args.c is None and args.beta == 0.0 and args.alpha == 1.0 and args.bias is None
            and args.activation in (None, "none"))


def op_schema(head: str, fields=DENSE_OP_ARGS, returns: str = "Tensor") -> str:
    """A torch.library schema: `head` (its tensors, e.g. "Tensor a, Tensor b"), then `fields`
    typed and defaulted as EpilogueArgs declares them (out_dtype: "ScalarType? = None")."""
    parts = [head]
    for f in fields:
        if f == "out_dtype":
            parts.append("ScalarType? out_dtype=None")
        else:
            default = EpilogueArgs._field_defaults[f]
            parts.append(f"{_schema_type(f)} {f}={'None' if default is None else default}")
    return f"({', '.join(parts)}) -> {returns}"


def op_values(args: EpilogueArgs, out_dtype=None, fields=DENSE_OP_ARGS) -> tuple:
    """`args` (and out_dtype) flattened into an op's arguments after its tensors (`op_schema`)."""
    return tuple(out_dtype if f == "out_dtype" else getattr(args, f) for f in fields)


def op_args(values, fields=DENSE_OP_ARGS) -> tuple:
    """(EpilogueArgs, out_dtype) rebuilt from an op's arguments after its tensors (`op_values`
    inverted; missing trailing values take their defaults)."""
    kw = dict(zip(fields, values))
    out_dtype = kw.pop("out_dtype", None)
    return EpilogueArgs(**kw), out_dtype


def op_grads(grads: dict, fields=DENSE_OP_ARGS) -> tuple:
    """An op's gradients after its tensors, in `fields`' order, from {field: gradient}."""
    return tuple(grads.get(f) for f in fields)


#: The grouped forms (torch._grouped_mm's), by (a.dim(), b.dim()): offs along a's rows, along
#: b's columns, along K, or none (a batch of equal groups).
ROWS, COLS, RAGGED_K, BATCHED = "rows", "columns", "k", "batched"
GROUPED_MODES = {(2, 3): ROWS, (3, 2): COLS, (2, 2): RAGGED_K, (3, 3): BATCHED}


class GroupSpec(NamedTuple):
    """The groups of a grouped product (pingpong.grouped_mm)."""

    mode: str  # ROWS | COLS | RAGGED_K | BATCHED
    count: int  # G
    offs: Operand | None  # (G,) int32 cumulative ends; None for BATCHED


class GemmSpec(NamedTuple):
    a: Operand
    b: Operand
    c: Operand | None
    out_dtype: torch.dtype | None
    epilogue: EpilogueSpec
    inplace: bool = False
    config: object = None
    groups: GroupSpec | None = None
    carveout: int | None = None  # torch's SM carveout (None: unset)

    @property
    def device(self) -> torch.device:
        return self.a.device

    @property
    def mnk(self) -> tuple[int, int, int]:
        return self.a.shape[-2], self.b.shape[-1], self.a.shape[-1]

    @property
    def batches(self) -> int:
        """The batch of a batched (3-D) product; 1 for a 2-D one."""
        return max(t.shape[0] if len(t.shape) == 3 else 1 for t in (self.a, self.b))

    @property
    def batched(self) -> bool:
        return len(self.a.shape) == 3 or len(self.b.shape) == 3 or (self.c is not None and len(self.c.shape) == 3)

    @property
    def result_shape(self) -> tuple:
        return result_shape(self.a, self.b)

    @property
    def plain(self) -> bool:
        """No bias, no activation, no scales: α·a@b + β·C only."""
        e = self.epilogue
        return e.bias is None and e.activation == "none" and e.scales is None


def reads_c(c, beta: float) -> bool:
    """Whether the kernel reads C: BLAS semantics, β = 0 means C is not read (even if NaN)."""
    return c is not None and beta != 0.0


def bias_kind(bias, m: int) -> str:
    """"none", "col" (one value per output column) or "row", from a bias's shape and the
    result's rows m. A (1, 1) bias is per row when m = 1 (then n may be anything), per
    column otherwise (then n = 1)."""
    if bias is None:
        return "none"
    shape = bias.shape
    return "row" if len(shape) == 2 and shape[1] == 1 and shape[0] == m else "col"


def build(a, b, c=None, beta: float = 0.0, out_dtype=None, bias=None, activation=None, inplace: bool = False,
          config=None, scales=None) -> GemmSpec | None:
    """The spec of one call, from its (possibly invalid) arguments; None when they are not
    dense tensors (validation then names the argument). Cheap: a few attribute reads.
    `scales`: (scale_a, scale_b, use_fast_accum) of an FP8 product, or None."""
    try:  # a non-tensor has no .dtype, a sparse tensor no .stride(): both give None
        oa, ob = operand(a), operand(b)
        oc = None if c is None else operand(c)
        if c is None and beta != 0.0:  # β without c: validation refuses it (check_beta), no plan answers it
            return None
        if a.is_neg() or b.is_neg() or (c is not None and c.is_neg()) or (bias is not None and bias.is_neg()):
            return None  # a negated view: its key is its memory's, which holds the negation (check_tensor refuses it)
        if bias is None and activation is None and scales is None:
            epi = NO_EPILOGUE if c is None or beta == 0.0 else C_EPILOGUE
        else:
            ob_ = None if bias is None else operand(bias)
            if scales is not None and type(scales[2]) is not bool:  # 1 == True: a hit would skip validation
                return None
            sc = None if scales is None else _new(ScaleSpec, (operand(scales[0]), operand(scales[1]), scales[2]))
            epi = EpilogueSpec(c is not None and beta != 0.0, ob_, bias_kind(ob_, a.shape[-2]),
                               "none" if activation is None else activation, sc)
        return _new(GemmSpec, (oa, ob, oc, a.dtype if out_dtype is None else out_dtype, epi, inplace, config, None,
                               sm_carveout()))
    except (AttributeError, TypeError, RuntimeError, IndexError):
        return None


def grouped_mode(a, b) -> str:
    """The grouped form of a's and b's dims (validated 2-D or 3-D tensors or Operands)."""
    return GROUPED_MODES[(len(a.shape), len(b.shape))]


def build_grouped(a, b, offs, out_dtype, scales=None) -> GemmSpec | None:
    """The spec of one grouped_mm call, from its (possibly invalid) arguments; None when
    they are not dense tensors of 2 or 3 dims (validate_grouped then names the argument).
    `scales`: (scale_a, scale_b, use_fast_accum) of an FP8 grouped product
    (pingpong.scaled_grouped_mm; fp8_spec.validate_scaled_grouped names its arguments)."""
    try:  # `operand` written out: a call per tensor is a measurable part of a cache hit
        sa, sb = a.shape, b.shape
        if a.is_neg() or b.is_neg():  # a negated view (check_tensor refuses it): no key
            return None
        oa = _new(Operand, (a.dtype, sa, a.stride(), a.device, a.data_ptr() % 16 == 0))
        ob = _new(Operand, (b.dtype, sb, b.stride(), b.device, b.data_ptr() % 16 == 0))
        mode = GROUPED_MODES[(len(sa), len(sb))]
        oo = None if offs is None else _new(Operand, (offs.dtype, offs.shape, offs.stride(), offs.device,
                                                      offs.data_ptr() % 16 == 0))
        groups = _new(GroupSpec, (mode, sa[0] if mode == BATCHED else oo.shape[0], oo))
        if scales is None:
            epi = NO_EPILOGUE
        else:
            x, y, fast = scales
            if type(fast) is not bool:  # 1 == True: a hit would skip validation's refusal
                return None
            epi = _new(EpilogueSpec, (False, None, "none", "none", _new(ScaleSpec, (
                _new(Operand, (x.dtype, x.shape, x.stride(), x.device, x.data_ptr() % 16 == 0)),
                _new(Operand, (y.dtype, y.shape, y.stride(), y.device, y.data_ptr() % 16 == 0)), fast))))
        return _new(GemmSpec, (oa, ob, None, a.dtype if out_dtype is None else out_dtype, epi, False, None, groups,
                               sm_carveout()))
    except (AttributeError, TypeError, RuntimeError, IndexError, KeyError):
        return None


def grouped_shape(mode: str, a, b, count: int) -> tuple:
    """The result's shape of a grouped product (pingpong.grouped's table) of `count` groups;
    a, b: tensors or Operands."""
    if mode == ROWS:
        return (a.shape[0], b.shape[2])
    if mode == COLS:
        return (a.shape[1], b.shape[1])
    return (count, a.shape[-2], b.shape[-1])


def ragged_view(mode: str, a, b, out) -> tuple:
    """(a, b, out) as the ragged-rows kernels take them: as given, or for ragged columns
    (3-D × 2-D) the transposed views, written transposed (outᵀ = bᵀ · aᵀ); tensors or
    Operands alike."""
    return (b.mT, a.mT, out.mT) if mode == COLS else (a, b, out)


def grouped_out(spec: GemmSpec) -> Operand:
    """The output of a grouped spec: a new contiguous tensor of the result's shape."""
    return fresh(spec.out_dtype, grouped_shape(spec.groups.mode, spec.a, spec.b, spec.groups.count), spec.device)


# ----------------------------------------------------------------------------- validation


def check_scalar(name: str, v) -> float:
    """A finite real α or β as a float. Non-finite values are refused: inf·0 and NaN would
    spread NaN through the output without the caller asking for it."""
    if type(v) is float and v - v == 0.0:  # the common case: a finite float
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise PingpongError(f"{name}: expected a real number, got {type(v).__name__}")
    try:
        f = float(v)
    except OverflowError:
        raise PingpongError(f"{name}: {v!r} does not fit a float (|{name}| must be below ~1.8e308)") from None
    if not math.isfinite(f):
        raise PingpongError(f"{name}: expected a finite real number, got {f}")
    return f


def check_activation(activation, name: str = "activation") -> str:
    """The activation's name (None means "none"); PingpongError for anything else."""
    if activation is None:
        return "none"
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise PingpongError(f"{name}: expected None or one of {ACTIVATIONS}, got {activation!r}")
    return activation


def check_input_dtype(name: str, t, dtypes=INPUT_DTYPES) -> None:
    if t.dtype not in dtypes:
        raise PingpongError(f"{name}: dtype {t.dtype} is not supported; expected {' or '.join(map(str, dtypes))}")


def check_out_dtype(out_dtype, default: torch.dtype) -> torch.dtype:
    if out_dtype is None:
        return default
    if out_dtype not in OUTPUT_DTYPES:
        given = f"{type(out_dtype).__name__} {out_dtype!r}" if not isinstance(out_dtype, torch.dtype) else str(out_dtype)
        raise PingpongError(f"out_dtype: {given} is not supported; expected one of {OUTPUT_DTYPES}")
    return out_dtype


SCALE_BLOCK = 128  # K (and N) elements per FP8 scale block
FP8_MULTIPLE = 16  # FP8 products' K and N are multiples of it (16-byte fp8 rows for TMA; torch's rule)
TMA_ALIGN = 16  # bytes: TMA's base address and every stride but the unit one are multiples of it


def tma_row_stride(stride: int, row: int, element_size: int) -> bool:
    """TMA can step `stride` elements between rows of `row` contiguous elements of
    `element_size` bytes: a 16-byte multiple, and rows that do not overlap (≥ the row, ≥ 1).
    The one statement of the rule: the Hopper backend's legality and FP8's checks ask here."""
    return (stride * element_size) % TMA_ALIGN == 0 and stride >= max(row, 1)


def tma_matrix_stride(stride: int, element_size: int) -> bool:
    """TMA can step `stride` elements between the matrices of a batch (or the groups of a
    grouped product): a positive 16-byte multiple."""
    return stride > 0 and (stride * element_size) % TMA_ALIGN == 0


def check_fp8_sizes(K: int, N: int, op: str) -> None:
    """An FP8 product's K and N (the rule of torch's `op`, TMA's 16-byte rows of fp8);
    PingpongError naming the size otherwise."""
    if K % FP8_MULTIPLE or K == 0:
        raise PingpongError(f"K={K}: must be a positive multiple of {FP8_MULTIPLE} (16-byte TMA rows of fp8;"
                            " torch's rule)")
    if N % FP8_MULTIPLE:
        raise PingpongError(f"N={N}: must be a multiple of {FP8_MULTIPLE} ({op}'s rule; 16-byte output rows)")


def _row_contiguous(t) -> bool:
    """A (rows, cols) tensor's elements are dense in row-major order (a size-1 dim's stride
    does not matter)."""
    rows, cols = t.shape
    return (cols <= 1 or t.stride(1) == 1) and (rows <= 1 or t.stride(0) == cols)


def check_block_scale_a(scale_a, M: int, kb: int) -> None:
    """scale_a as the 1×128 block scales of an (M, K) a (kb = K/128 blocks per row): shape
    (M, kb), strides (1, M), torch._scaled_mm's outer-dim-major layout (what quantize_fp8(x,
    "block") gives; an empty one, M = 0, may have any strides); PingpongError naming scale_a
    otherwise. scaled_mm's and
    scaled_grouped_mm's block-wise modes both ask here."""
    if tuple(scale_a.shape) != (M, kb) or (scale_a.stride(0) != 1 and M > 1) or \
            (scale_a.stride(1) != M and kb > 1 and M > 0):
        raise PingpongError(f"scale_a: scale_b is block-wise, so scale_a must be 1×128 blocks of shape ({M}, {kb})"
                            f" with strides (1, {M}) (outer-dim-major: s.t() of a row-major ({kb}, {M}) s), got"
                            f" shape {tuple(scale_a.shape)} strides {tuple(scale_a.stride())}")


def scaling_by_shape(M: int, K: int, N: int, sa: tuple, sb: tuple) -> tuple[str, int] | None:
    """The mode the scales' shapes name for an (M, K) @ (K, N) product, as torch._scaled_mm
    tries them (tensor, row, block), and for block-wise how many columns share one b scale per K
    block (128 or 1); None where scale_b's shape names none. Shapes alone: `scale_mode` then
    checks the layouts, and the sharding rules (pingpong.distributed) read the mode from here."""
    kb, nb = -(-K // SCALE_BLOCK), -(-N // SCALE_BLOCK)
    # K and N ≤ 128: b is one 128×128 block, whose one scale also reads as tensor-wise; a's
    # 1×128 block scales (not one value) say which it is
    one_block = sb == (kb, nb) and math.prod(sa) != 1
    if math.prod(sb) == 1 and len(sb) <= 2 and not one_block:
        return "tensor", 1
    if sb == (1, N):
        return "row", 1
    if sb in ((kb, nb), (kb, N)):
        return "block", SCALE_BLOCK if sb == (kb, nb) else 1
    return None


def scale_mode(a, b, scale_a, scale_b) -> tuple[str, int]:
    """(mode, sb_cols) of an FP8 product's scales (tensors or Operands of validated fp8 a, b):
    "tensor" | "row" | "block", and for block-wise how many columns share one b scale per K
    block (128 or 1). scale_b's shape names the mode (`scaling_by_shape`); scale_a must then
    match it. PingpongError naming the scale otherwise. The one decision of the mode: the front
    end's validation and the backend's plan both ask here."""
    M, K = a.shape
    N = b.shape[1]
    kb, nb = -(-K // SCALE_BLOCK), -(-N // SCALE_BLOCK)
    sa, sb = tuple(scale_a.shape), tuple(scale_b.shape)
    named = scaling_by_shape(M, K, N, sa, sb)
    if named is None:
        raise PingpongError(
            f"scale_b: shape {sb} names no scaling mode for a ({M}, {K}) @ ({K}, {N}) product; expected one element"
            f" (tensor-wise), (1, {N}) (row-wise), ({kb}, {nb}) (128×128 blocks) or ({kb}, {N}) (1×128 blocks)")
    mode, sb_cols = named
    if mode == "tensor":
        if scale_a.numel() != 1 or len(sa) > 2:
            raise PingpongError(f"scale_a: scale_b is one value (tensor-wise), so scale_a must be one fp32 value too,"
                                f" got shape {sa}")
    elif mode == "row":
        if not _row_contiguous(scale_b):
            raise PingpongError(f"scale_b: row-wise (1, {N}) must be contiguous, got strides {tuple(scale_b.stride())}")
        if sa != (M, 1) or not _row_contiguous(scale_a):
            raise PingpongError(f"scale_a: scale_b is row-wise (1, {N}), so scale_a must be ({M}, 1) contiguous, got"
                                f" shape {sa} strides {tuple(scale_a.stride())}")
    else:
        if sb_cols == SCALE_BLOCK and (scale_b.stride(0) != 1 and kb > 1 or scale_b.stride(1) < kb and nb > 1):
            raise PingpongError(f"scale_b: 128×128 block scales ({kb}, {nb}) must be outer-dim-major: strides (1, ≥{kb})"
                                f" (s.t() of a row-major ({nb}, {kb}) s), got {tuple(scale_b.stride())}")
        if sb_cols == 1 and (scale_b.stride(1) != 1 and N > 1 or scale_b.stride(0) != N and kb > 1):
            raise PingpongError(f"scale_b: 1×128 block scales ({kb}, {N}) must be row-major, got strides"
                                f" {tuple(scale_b.stride())}")
        check_block_scale_a(scale_a, M, kb)
        if K % SCALE_BLOCK:
            raise PingpongError(f"K={K}: block-wise scaling needs K to be a multiple of {SCALE_BLOCK}")
    return mode, sb_cols


def check_operands(a, b, names: Names = GEMM, dtypes=INPUT_DTYPES, nd: bool = False) -> None:
    """a (M, K) and b (K, N), or batched (3-D; `nd`: any leading batch dims, torch.matmul's
    broadcasting, checked by pingpong.integration.batching); `dtypes`: the input dtypes the kernel takes."""
    na, nb = names.a, names.b
    for name, t in ((na, a), (nb, b)):
        check_tensor(name, t)
        if nd and t.dim() < 2:
            raise PingpongError(f"{name}: expected a tensor of at least 2 dims (…, rows, cols), got shape"
                                f" {tuple(t.shape)}")
        if not nd and t.dim() not in (2, 3):
            raise PingpongError(f"{name}: expected a 2-D tensor (or 3-D, batched), got {t.dim()}-D with shape"
                                f" {tuple(t.shape)}")
        check_input_dtype(name, t, dtypes)
    if a.dtype != b.dtype:
        raise PingpongError(f"{na} and {nb} must have the same dtype, got {na} {a.dtype} and {nb} {b.dtype}")
    if a.shape[-1] != b.shape[-2]:
        raise PingpongError(f"{na} and {nb}: shape mismatch, {na} is {tuple(a.shape)} and {nb} is {tuple(b.shape)};"
                            f" {na}.shape[-1] must equal {nb}.shape[-2]")
    if not nd and a.dim() == b.dim() == 3 and 1 != a.shape[0] != b.shape[0] != 1:
        raise PingpongError(f"{na} and {nb}: batch sizes {a.shape[0]} ({na}) and {b.shape[0]} ({nb}) differ (each"
                            " must be the other's or 1)")
    if a.device != b.device:
        raise PingpongError(f"{na} and {nb} must be on the same device, got {na} on {a.device} and {nb} on {b.device}")


def result_shape(a, b) -> tuple:
    """(M, N), or (B, M, N) when a or b is batched (3-D)."""
    batch = max((t.shape[0] for t in (a, b) if len(t.shape) == 3), default=None)
    return ((batch,) if batch is not None else ()) + (a.shape[-2], b.shape[-1])


def check_c(c, shape: tuple, dtype: torch.dtype, device, name: str = "c", shared_ok: bool = False,
            names: Names = GEMM) -> None:
    """c of the result's `shape`; `shared_ok`: a batched result also takes an (M, N) c."""
    check_tensor(name, c)
    shape = tuple(shape)
    if tuple(c.shape) != shape and not (shared_ok and tuple(c.shape) == shape[-2:]):
        also = f" or {shape[-2:]} (shared by the batches)" if shared_ok and len(shape) > 2 else ""
        raise PingpongError(f"{name}: expected shape {shape}{also} (the result's), got {tuple(c.shape)}")
    if c.dtype != dtype:
        raise PingpongError(f"{name}: expected dtype {dtype} (the output dtype), got {c.dtype}")
    if c.device != device:
        raise PingpongError(f"{name} must be on the same device as {names.a} and {names.b} ({device}), got {c.device}")


def check_bias(bias, m: int, n: int, device, name: str = "bias", per_column: bool = False) -> None:
    """PingpongError naming the bias unless it is None or a (n,), (1, n) or (m, 1) tensor
    (`per_column`: (n,) only, nn.Linear's) of a supported dtype on `device`."""
    if bias is None:
        return
    check_tensor(name, bias, "a torch.Tensor or None")
    shape = tuple(bias.shape)
    if per_column:
        if shape != (n,):
            raise PingpongError(f"{name}: expected shape ({n},) (weight.shape[0]: one value per output column), got"
                                f" {shape}")
    elif shape not in ((n,), (1, n), (m, 1)):
        raise PingpongError(f"{name}: expected shape ({n},) or (1, {n}) (per output column) or ({m}, 1) (per row)"
                            f" for a ({m}, {n}) result, got {shape}")
    if bias.dtype not in BIAS_DTYPES:
        raise PingpongError(f"{name}: dtype {bias.dtype} is not supported; expected one of {BIAS_DTYPES}")
    if bias.device != device:
        raise PingpongError(f"{name} must be on the result's device ({device}), got {bias.device}")


def check_gpu(device, names: Names = GEMM) -> None:
    """Last of the argument checks, so every argument error is reported the same on any machine."""
    if device.type != "cuda":
        raise PingpongError(
            f"{names.a} and {names.b} are on {device}: pingpong runs on CUDA/ROCm GPUs. For a CPU check use Triton's "
            "interpreter explicitly: pingpong.portable.portable_gemm(a, b, out, interpret=True); the Hopper tile a "
            "shape would get: pingpong.hopper.host.select.select_config(M, N, K)")


# ----------------------------------------------------------------------------- aliasing


def span(t) -> int:
    """Largest element offset of `t` (a tensor or an Operand) from its base:
    sum((size - 1) * |stride|); 0 if empty."""
    if t.numel() == 0:
        return 0
    return sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))


def byte_range(t: torch.Tensor) -> tuple[int, int]:
    """[first, last+1) byte addresses of t's elements (t non-empty, strides ≥ 0)."""
    start = t.data_ptr()
    return start, start + t.element_size() * (1 + span(t))


#: plain tensors (with addresses; no tracer, no subclass), told apart by one type lookup
PLAIN_TENSORS = frozenset((torch.Tensor, torch.nn.Parameter))


def overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the address ranges of x and y intersect. Compared by address, not by storage:
    two storages (or a storage and a view made elsewhere) can map the same memory. A tracer's
    fake tensors have no addresses: views of one fake storage are compared by their element
    ranges in it (`traced_overlaps`)."""
    if (type(x) not in PLAIN_TENSORS or type(y) not in PLAIN_TENSORS) and (is_fake(x) or is_fake(y)):
        return traced_overlaps(x, y)
    if x.numel() == 0 or y.numel() == 0:
        return False
    (x0, x1), (y0, y1) = byte_range(x), byte_range(y)
    return x0 < y1 and y0 < x1


def is_fake(t: torch.Tensor) -> bool:
    """Whether t is a tracer's tensor without memory (torch.compile's fake tensors)."""
    from torch._subclasses.fake_tensor import is_fake as fake

    return fake(t)


def traced_overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    """`overlaps` of fake tensors: views of one storage whose byte ranges from its start
    intersect, where the sizes decide it without a guard (symbolic sizes that leave it open:
    False; where inductor keeps the op in place, its run still checks the addresses)."""
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    try:
        if x.untyped_storage()._cdata != y.untyped_storage()._cdata:
            return False
    except (NotImplementedError, RuntimeError):  # a wrapper without a storage of its own
        return False
    if guard_or_false(x.numel() == 0) or guard_or_false(y.numel() == 0):
        return False
    x0, y0 = x.storage_offset() * x.element_size(), y.storage_offset() * y.element_size()
    x1, y1 = x0 + x.element_size() * (1 + span(x)), y0 + y.element_size() * (1 + span(y))
    return guard_or_false(x0 < y1) and guard_or_false(y0 < x1)


def self_overlapping(t: torch.Tensor) -> bool:
    """Whether two elements of t may share memory (an expand()ed or as_strided view).
    Sufficient test: with the dimensions of extent > 1 sorted by stride, each stride is
    positive and at least the span of the dimensions inside it; layouts that interleave
    without overlapping are refused too (rare; the message says so)."""
    dims = sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1)
    inner = 1
    for st, n in dims:
        if st < inner:
            return True
        inner = st * n
    return False


def check_inplace_target(c, name: str = "c") -> None:
    if self_overlapping(c):
        raise PingpongError(
            f"{name}: its elements overlap or interleave in memory (shape {tuple(c.shape)}, strides {c.stride()}, e.g."
            f" an expand()ed view); the kernel writes every element of {name} once, so {name} must not alias itself")


def check_no_alias(c, a, b, name: str = "c", names: Names = GEMM) -> None:
    for other, t in ((names.a, a), (names.b, b)):
        if overlaps(c, t):
            raise PingpongError(f"{name} must not share memory with {other} (the product would read what it overwrites)")


def check_no_alias_fast(c, a, b, extents) -> None:
    """`check_no_alias` with the byte extents computed once from the spec (strides are keyed)."""
    ea, eb, ec = extents
    c0 = c.data_ptr()
    c1 = c0 + ec
    a0, b0 = a.data_ptr(), b.data_ptr()
    if (c0 < a0 + ea and a0 < c1) or (c0 < b0 + eb and b0 < c1):
        check_no_alias(c, a, b)  # the same test, reported with the argument's name


def check_bias_not_in(c, bias, name: str = "c") -> None:
    if bias is not None and overlaps(c, bias):
        raise PingpongError(f"bias must not share memory with {name} (the epilogue would read what it overwrites)")


def check_args_not_in(c, args: EpilogueArgs, name: str = "c") -> None:
    """No epilogue operand but C itself shares memory with the written `c` (gemm_)."""
    check_bias_not_in(c, args.bias, name)


# ----------------------------------------------------------------------------- the validation paths


def check_beta(c, beta: float) -> None:
    """β scales c: a β ≠ 0 without c is a mistake (torch.addmm, too, needs its input), not a
    request to ignore it."""
    if c is None and beta != 0.0:
        raise PingpongError(f"beta: {beta!r} scales c, but no c was given (pass c, or leave beta at 0)")


def check_epilogue(args: EpilogueArgs, shape, dtype, device, names: Names = GEMM, shared_ok: bool = True) -> str:
    """The epilogue's operands of a result of `shape` and `dtype` on `device`, for every dense
    validation path (validate, validate_inplace, validate_nd): C (`shared_ok`: a batched
    result also takes an (M, N) C), the bias, the activation, whose name it returns. An
    operand added to EpilogueArgs gets its check here."""
    check_beta(args.c, args.beta)
    if args.c is not None:
        check_c(args.c, shape, dtype, device, names.c, shared_ok=shared_ok, names=names)
    check_bias(args.bias, shape[-2], shape[-1], device, names.bias)
    return check_activation(args.activation)


def build_args(a, b, args: EpilogueArgs, out_dtype, inplace: bool = False, config=None) -> GemmSpec | None:
    """`build` of a dense call from its EpilogueArgs."""
    return build(a, b, args.c, args.beta, out_dtype, args.bias, args.activation, inplace, config)


def validate(spec: GemmSpec | None, a, b, args: EpilogueArgs, out_dtype, names: Names = GEMM) -> None:
    """gemm / path_for: the arguments behind `spec` (2-D, or 3-D batched), then the device.
    A spec is only cached after this passed, so an equal spec later needs no validation."""
    check_operands(a, b, names)
    dtype = check_out_dtype(out_dtype, a.dtype)
    check_epilogue(args, result_shape(a, b), dtype, a.device, names)
    check_gpu(a.device, names)


def validate_inplace(spec: GemmSpec | None, a, b, args: EpilogueArgs, names: Names = GEMM) -> None:
    """gemm_'s checks (path_for(..., inplace=True) runs the same), C being args.c: arguments,
    then the device, then the address ranges (meaningless off the GPU: meta tensors all sit
    at address 0)."""
    c = args.c
    check_operands(a, b, names)
    if isinstance(c, torch.Tensor) and c.dtype not in OUTPUT_DTYPES:
        raise PingpongError(f"{names.c}: dtype {c.dtype} is not supported; expected one of {OUTPUT_DTYPES}")
    check_tensor(names.c, c)
    check_epilogue(args, result_shape(a, b), c.dtype, a.device, names, shared_ok=False)
    check_inplace_target(c, names.c)
    check_gpu(a.device, names)
    check_no_alias(c, a, b, names.c, names)
    check_args_not_in(c, args, names.c)


def validate_nd(a, b, args: EpilogueArgs, out_dtype, names: Names = GEMM, out_shape=None):
    """The N-D contract of gemm (torch.matmul's broadcasting): (output shape, output dtype,
    activation), or PingpongError naming the argument. Reads only metadata, so the ops' fake
    implementations use it too. `out_shape(a, b)`: the broadcast result's shape
    (pingpong.integration.batching)."""
    check_operands(a, b, names, nd=True)
    dtype = check_out_dtype(out_dtype, a.dtype)
    shape = out_shape(a, b)
    return shape, dtype, check_epilogue(args, shape, dtype, a.device, names)


def validate_linear(x, weight, bias, activation, names: Names = LINEAR) -> str:
    """`linear`'s contract, under its names: x (…, K), weight (N, K), bias None or (N,);
    returns the activation name."""
    for name, t in ((names.a, x), (names.b, weight)):
        check_tensor(name, t)
    if x.dim() < 1:
        raise PingpongError(f"{names.a}: expected a tensor of shape (…, K), got a 0-D tensor")
    if weight.dim() != 2:
        raise PingpongError(f"{names.b}: expected a 2-D (N, K) weight, got shape {tuple(weight.shape)}")
    if x.shape[-1] != weight.shape[1]:
        raise PingpongError(f"{names.a}: expected last dim K = {names.b}.shape[1] = {weight.shape[1]}, got shape"
                            f" {tuple(x.shape)} ({names.b} is {tuple(weight.shape)})")
    for name, t in ((names.a, x), (names.b, weight)):
        check_input_dtype(name, t)
    if x.dtype != weight.dtype:
        raise PingpongError(f"{names.a} and {names.b} must have the same dtype, got {names.a} {x.dtype} and"
                            f" {names.b} {weight.dtype}")
    if x.device != weight.device:
        raise PingpongError(f"{names.a} and {names.b} must be on the same device, got {names.a} on {x.device} and"
                            f" {names.b} on {weight.device}")
    check_bias(bias, 1, weight.shape[0], weight.device, names.bias, per_column=True)
    return check_activation(activation)


def check_offs(offs, device, name: str = "a") -> int:
    """offs as every grouped kernel reads it (offs + g, on the device): a contiguous 1-D int32
    tensor on `device` (that of the argument `name`); its length, the group count. Its values
    (the groups' cumulative ends) are never read here."""
    check_tensor("offs", offs, "a 1-D int32 tensor")
    if offs.dtype != torch.int32:
        raise PingpongError(f"offs: dtype {offs.dtype}; expected torch.int32 (cumulative group ends)")
    if offs.dim() != 1:
        raise PingpongError(f"offs: expected a 1-D tensor, got shape {tuple(offs.shape)}")
    if offs.stride(0) != 1 and offs.shape[0] > 1:
        raise PingpongError(f"offs: must be contiguous (the kernels read offs[g] at offs + g), got stride {offs.stride(0)}")
    if offs.device != device:
        raise PingpongError(f"offs: on {offs.device}; expected {name}'s device {device} (offsets are read on the device)")
    return offs.shape[0]


def validate_grouped(a, b, offs, out_dtype) -> tuple[str, tuple, torch.dtype]:
    """grouped_mm's contract (pingpong.grouped): (mode, result shape, result dtype), or a
    PingpongError naming the argument at fault (a, b, offs, out_dtype). Reads shapes, dtypes
    and devices only (the fake implementation validates through it too), never offs's values.
    A spec is only cached after this passed, so an equal spec later needs no validation."""
    for name, t in (("a", a), ("b", b)):
        check_tensor(name, t)
        if t.dim() not in (2, 3):
            raise PingpongError(f"{name}: expected a 2-D or 3-D tensor, got {t.dim()}-D with shape {tuple(t.shape)}")
        check_input_dtype(name, t)
    if a.dtype != b.dtype:
        raise PingpongError(f"a and b must have the same dtype, got a {a.dtype} and b {b.dtype}")
    if a.device != b.device:
        raise PingpongError(f"a and b must be on the same device, got a on {a.device} and b on {b.device}")
    if a.shape[-1] != b.shape[-2]:
        raise PingpongError(f"b: its K ({b.shape[-2]}, b.shape[-2]) must equal a's ({a.shape[-1]}, a.shape[-1]); "
                            f"a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    mode = grouped_mode(a, b)
    dtype = a.dtype if out_dtype is None else out_dtype
    if dtype not in (a.dtype, torch.float32):
        raise PingpongError(f"out_dtype: expected None, {a.dtype} (the inputs') or torch.float32, got {out_dtype}")
    if mode == BATCHED:
        if offs is not None:
            raise PingpongError("offs: must be None for a 3-D × 3-D (batched) product, got a tensor")
        if a.shape[0] != b.shape[0]:
            raise PingpongError(f"b: group count {b.shape[0]} (b.shape[0]) must equal a's {a.shape[0]}")
        return mode, grouped_shape(mode, a, b, a.shape[0]), dtype
    if offs is None:
        raise PingpongError(f"offs: required for a {a.dim()}-D × {b.dim()}-D product (the groups' cumulative ends)")
    G = check_offs(offs, a.device)
    if mode == ROWS and b.shape[0] != G:
        raise PingpongError(f"b: group count {b.shape[0]} (b.shape[0]) must equal offs's length {G}")
    if mode == COLS and a.shape[0] != G:
        raise PingpongError(f"a: group count {a.shape[0]} (a.shape[0]) must equal offs's length {G}")
    return mode, grouped_shape(mode, a, b, G), dtype
