"""Direct launch of a compiled Triton kernel whose arguments include TMA descriptors.

`kernel[grid](descriptors..., n, CONSTS=...)` costs, per call, on the host: building the
`TensorDescriptor` objects (dataclass checks, the shared layout), the JIT's argument binder
and specialization key, a launch-metadata dict and two (empty) hook-chain calls, and one
`cuTensorMapEncodeTiled` per descriptor. At 2**20 elements that host time is longer than the
kernel itself (docs/streaming.md, "Host overhead").

`DirectLaunch` keeps what a `CompiledKernel` needs to run - Triton's C launcher, the
CUfunction, the packed metadata and the descriptors' TMA encoding (`tensordesc_meta`) - and
a small cache of encoded CUtensorMaps. A CUtensorMap is a pure function of (base address,
shape, strides) and the kernel's encoding, and a launch copies its bytes into the kernel
parameters, so a map built once for an address is valid for every later launch on it.

The arguments it hands the C launcher are exactly those Triton's own
`wrap_handle_tensordesc` would (checked on the CPU by tests/test_streaming_offline.py
against Triton's function). Only kernels whose launch needs nothing else qualify
(`from_kernel` returns None otherwise: scratch buffers, fp4-padded or mixed encodings, a
Triton whose launcher is not shaped as 3.6's), and callers use the JIT path while a launch
hook is installed (`hooks_idle`), so profilers that hook launches still see them.
PINGPONG_DIRECT_LAUNCH=0 in the environment turns direct launches off.
"""

from __future__ import annotations

import os

from triton import knobs

#: CUtensorMaps kept per BoundLaunch (each ~128 bytes); the cache is emptied when full.
MAP_CACHE_SIZE = 64


def hooks_idle() -> bool:
    """True when no launch enter/exit hook is installed (Triton 3.6: empty HookChains; any
    other object there counts as a hook)."""
    rt = knobs.runtime
    enter, exit_ = rt.launch_enter_hook, rt.launch_exit_hook
    return ((enter is None or getattr(enter, "calls", None) == [])
            and (exit_ is None or getattr(exit_, "calls", None) == []))


class DirectLaunch:
    """One compiled kernel on one device; `bind` fixes the descriptors' shape and strides.

    launch:    Triton's C `launch(gridX, gridY, gridZ, stream, function, cooperative, pdl,
               global_scratch, profile_scratch, packed_metadata, launch_metadata,
               enter_hook, exit_hook, *kernel_args)`
    encode:    `fill_tma_descriptor(ptr, swizzle, elem_size, elem_type, block, shape, strides,
               padding) -> CUtensorMap`
    desc_meta: the kernel's `metadata.tensordesc_meta`, one entry per descriptor argument;
               all must share one encoding (the descriptors differ only in their base).
    """

    __slots__ = ("launch", "function", "packed", "cooperative", "pdl", "encoding", "encode", "descriptors")

    def __init__(self, launch, function, packed_metadata, cooperative, pdl, desc_meta, encode):
        from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

        first = desc_meta[0]
        if any(m != first for m in desc_meta) or first.get("fp4_padded"):
            raise ValueError("DirectLaunch: descriptors must share one plain (not fp4-padded) encoding")
        self.launch = launch
        self.function = function
        self.packed = packed_metadata
        self.cooperative = cooperative
        self.pdl = pdl
        self.encoding = (first["swizzle"], first["elem_size"], TMA_DTYPE_DEVICE_TO_HOST[first["elem_type"]],
                         list(first["block_size"]))
        self.encode = encode
        self.descriptors = len(desc_meta)

    @classmethod
    def from_kernel(cls, kernel) -> "DirectLaunch | None":
        """From a CompiledKernel that has run once (its module is loaded); None if the kernel
        or this Triton's launcher is not one DirectLaunch reproduces exactly."""
        if os.environ.get("PINGPONG_DIRECT_LAUNCH", "1") == "0":
            return None  # opt-out: every launch through Triton's JIT (read when a variant first runs)
        try:
            import triton

            run = kernel.run  # CudaLauncher
            metas = getattr(kernel.metadata, "tensordesc_meta", None)
            if not metas or run.global_scratch_size or run.profile_scratch_size or getattr(run, "num_ctas", 1) != 1:
                return None
            wrapped = run.launch  # wrap_handle_tensordesc's `inner`, closing over the C launch
            names = wrapped.__code__.co_freevars
            raw = wrapped.__closure__[names.index("launcher")].cell_contents
            encode = triton.runtime.driver.active.utils.fill_tma_descriptor
            return cls(raw, kernel.function, kernel.packed_metadata, run.launch_cooperative_grid, run.launch_pdl,
                       metas, encode)
        except (AttributeError, ValueError, TypeError, KeyError, IndexError):
            return None

    def bind(self, shape, strides, scalars) -> "BoundLaunch":
        """Launches whose descriptors all have `shape` and `strides` (element units, last
        stride 1) and whose other arguments are `scalars` (constexprs included, in order)."""
        return BoundLaunch(self, tuple(shape), tuple(strides), tuple(scalars))


class BoundLaunch:
    """`bound(grid, stream, *base_addresses)`: one launch, one descriptor per base address."""

    __slots__ = ("direct", "shape", "strides", "scalars", "maps", "_dims", "_head")

    def __init__(self, direct: DirectLaunch, shape: tuple, strides: tuple, scalars: tuple):
        self.direct, self.shape, self.strides, self.scalars = direct, shape, strides, scalars
        self.maps: dict = {}
        self._dims = shape + strides
        self._head = (direct.function, direct.cooperative, direct.pdl, None, None, direct.packed, None, None, None)

    def tensor_map(self, ptr: int):
        """The CUtensorMap of the tensor at `ptr` (cached by address)."""
        m = self.maps.get(ptr)
        if m is None:
            if len(self.maps) >= MAP_CACHE_SIZE:
                self.maps.clear()
            swizzle, elem_size, elem_type, block = self.direct.encoding
            m = self.direct.encode(ptr, swizzle, elem_size, elem_type, block, list(self.shape), list(self.strides), 0)
            self.maps[ptr] = m
        return m

    def args(self, ptrs) -> list:
        """Kernel arguments as the C launcher takes them: each descriptor becomes
        [CUtensorMap, *shape, *strides] (zero padding), then the scalars."""
        out = []
        dims = self._dims
        for ptr in ptrs:
            out.append(self.tensor_map(ptr))
            out.extend(dims)
        out.extend(self.scalars)
        return out

    def __call__(self, grid: int, stream: int, *ptrs: int) -> None:
        self.direct.launch(grid, 1, 1, stream, *self._head, *self.args(ptrs))
