"""One launch mechanism for every compiled kernel: Triton's JIT once, then a direct launch.

`kernel[grid](args..., CONSTS=...)` costs, per call, on the host: the JIT's argument binder
and specialization key, a launch-metadata dict, two (empty) hook-chain calls, building one
`TensorDescriptor` object per TMA operand (dataclass checks, the shared layout) and one
`cuTensorMapEncodeTiled` per descriptor. For a small GEMM or vector add that is longer
than the kernel itself.

`DirectLaunch` keeps what a `CompiledKernel` needs to run - Triton's generic C launcher
with the kernel's argument annotations and packed signature, the CUfunction, the packed
metadata (warps, CTAs per cluster, shared memory) and each TMA descriptor's encoding
(`tensordesc_meta`) -
and `BoundLaunch` fixes everything about a call that a plan fixes (descriptor shapes and
strides, sizes, constexprs) so that a launch only refreshes what changes per call:

    BoundLaunch(grid, stream, ptrs, dyn)          ptrs: one base address per slot
        slot "tma" -> [CUtensorMap(ptr), *shape, *strides]   (maps cached by address)
        slot "ptr" -> ptr                                      (a plain pointer argument)
        then  pre + dyn + post                                 (scalars; dyn = per call, e.g. α, β)

A CUtensorMap is a pure function of (base address, shape, strides) and the kernel's
encoding, and a launch copies its bytes into the kernel parameters (so CUDA-graph capture
and replay see the bytes of capture time), hence a map built once for an address is valid
for every later launch on it. The arguments handed to the C launcher are exactly those
Triton's own `wrap_handle_tensordesc` would (tests/test_launcher.py checks both against
Triton's function on the CPU).

A tuple argument (a NamedTuple such as the Hopper kernels' EpilogueOperands) is its fields,
flattened in order, its None fields skipped (Triton makes them constexprs, no kernel
parameter): `bind_jit_args` binds them as if each were its own argument, and the direct
launch hands the C launcher flat arguments with flat annotations (`flat_annotations`), which
it packs exactly as Triton's nested ones - so a plan's pointer tuple simply lists a tuple's
fields' addresses where the tuple stands, and a launch builds nothing more per call.

Only kernels whose launch needs nothing else qualify (`from_kernel` returns None otherwise:
scratch buffers, fp4-padded or im2col encodings, the global sanitizer, a Triton whose
launcher is not shaped as 3.9's). Clusters need nothing extra: the CTAs per cluster travel in
the packed metadata and the C launcher sets the cluster dimension from them. Callers keep
Triton's JIT path while a launch hook is installed (`hooks_idle`),
so profilers that hook launches still see every launch. `launch_key()` is what a cached
launch must be re-validated against on every call: the Triton version and the options the
JIT re-reads per call (`knobs.runtime.debug`, `knobs.compilation.instrumentation_mode`);
when it changes, callers drop their cached launches and go through the JIT again.
PINGPONG_DIRECT_LAUNCH=0 in the environment turns direct launches off.
"""

from __future__ import annotations

import os

import torch
import triton
from triton import knobs

#: CUtensorMaps kept per descriptor slot of a BoundLaunch (each ~128 bytes); emptied when full.
#: A model's layers share plans (every 2048 -> 2048 projection of a Llama is one plan), so one
#: slot sees every such weight and the activations' addresses: 64 made an eager Llama forward
#: re-encode maps all the time.
MAP_CACHE_SIZE = 1024
#: CUtensorMaps encoded so far in this process (the map caches' misses, each a host-side
#: `cuTensorMapEncodeTiled`): a diagnostic, read by benchmarks/model_bench.py
ENCODED = 0


def hooks_idle() -> bool:
    """True when no launch enter/exit hook is installed (empty HookChains; any other object
    there counts as a hook)."""
    rt = knobs.runtime
    enter, exit_ = rt.launch_enter_hook, rt.launch_exit_hook
    return ((enter is None or getattr(enter, "calls", None) == [])
            and (exit_ is None or getattr(exit_, "calls", None) == []))


def launch_key() -> tuple:
    """What makes Triton's JIT pick a different compiled kernel for the same arguments
    (triton/runtime/jit.py `run`: debug and instrumentation mode are re-read per call)."""
    return (triton.__version__, bool(knobs.runtime.debug), str(knobs.compilation.instrumentation_mode))


def launch_ready(key) -> bool:
    """`hooks_idle() and key == launch_key()`: the check before every direct launch, in one
    call (it runs once per launch, so the two bodies are read here without their calls)."""
    rt = knobs.runtime
    enter, exit_ = rt.launch_enter_hook, rt.launch_exit_hook
    return ((enter is None or getattr(enter, "calls", None) == [])
            and (exit_ is None or getattr(exit_, "calls", None) == [])
            and key == (triton.__version__, bool(rt.debug), str(knobs.compilation.instrumentation_mode)))


def enabled() -> bool:
    return os.environ.get("PINGPONG_DIRECT_LAUNCH", "1") != "0"


class DirectLaunch:
    """One compiled kernel on one device.

    launch:    Triton's C `launch(gridX, gridY, gridZ, stream, function, cooperative, pdl,
               packed_metadata, launch_metadata, enter_hook, exit_hook, global_scratch,
               profile_scratch, arg_annotations, kernel_signature, kernel_args)`, where
               kernel_args holds every argument in the kernel's order (constexprs included:
               the annotations skip them), each descriptor expanded to
               [CUtensorMap, *shape, *strides]
    encode:    `fill_tma_descriptor_tiled(ptr, swizzle, elem_size, elem_type, block, shape,
               strides, padding) -> CUtensorMap`
    encodings: per TMA descriptor argument, in order: (swizzle, elem_size, elem_type, block).
    """

    __slots__ = ("launch", "function", "packed", "cooperative", "pdl", "annotations", "signature", "encodings",
                 "encode")

    def __init__(self, launch, function, packed_metadata, cooperative, pdl, annotations, signature, desc_meta,
                 encode):
        from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

        if any(m.get("fp4_padded") or m.get("is_im2col") for m in desc_meta):
            raise ValueError("DirectLaunch: fp4-padded and im2col descriptors are not reproduced")
        self.launch = launch
        self.function = function
        self.packed = packed_metadata
        self.cooperative = cooperative
        self.pdl = pdl
        self.annotations = annotations
        self.signature = signature
        self.encodings = tuple((m["swizzle"], m["elem_size"], TMA_DTYPE_DEVICE_TO_HOST[m["elem_type"]],
                                list(m["block_size"])) for m in desc_meta)
        self.encode = encode

    @classmethod
    def from_kernel(cls, kernel) -> "DirectLaunch | None":
        """From a CompiledKernel that has run once (its module is loaded); None if the kernel
        or this Triton's launcher is not one DirectLaunch reproduces exactly."""
        if not enabled():
            return None  # opt-out: every launch through Triton's JIT
        try:
            run = kernel.run  # CudaLauncher
            metas = getattr(kernel.metadata, "tensordesc_meta", None) or []
            if run.global_scratch_size or run.profile_scratch_size or getattr(run, "gsan_enabled", False):
                return None
            raw = run.launch
            if metas:  # wrap_handle_tensordesc's `inner`, closing over the C launch
                names = raw.__code__.co_freevars
                raw = raw.__closure__[names.index("launcher")].cell_contents
            encode = triton.runtime.driver.active.utils.fill_tma_descriptor_tiled
            return cls(raw, kernel.function, kernel.packed_metadata, run.launch_cooperative_grid, run.launch_pdl,
                       flat_annotations(kernel, run), run.kernel_signature, metas, encode)
        except (AttributeError, ValueError, TypeError, KeyError, IndexError):
            return None

    def bind(self, slots, pre=(), post=()) -> "BoundLaunch":
        """Launches with these argument slots and scalars.

        slots: per leading kernel argument, ("tma", shape, strides) for a TMA descriptor
            (element units, last stride 1; descriptors in the kernel's order) or "ptr" for a
            plain pointer.
        pre, post: the scalar arguments (constexprs included, in order) before and after the
            per-call scalars `dyn` of each launch."""
        return BoundLaunch(self, slots, tuple(pre), tuple(post))


class BoundLaunch:
    """`bound(grid, stream, ptrs, dyn=())`: one launch, one base address per slot.

    The argument list is a template made once (dims, scalars) with holes for the per-call
    values: each TMA slot's CUtensorMap, each pointer, the dynamic scalars."""

    __slots__ = ("direct", "slots", "maps", "_head", "_template", "_tma", "_ptr", "_dyn")

    def __init__(self, direct: DirectLaunch, slots, pre: tuple, post: tuple):
        if sum(slot != "ptr" for slot in slots) != len(direct.encodings):
            raise ValueError(f"BoundLaunch: {len(direct.encodings)} TMA descriptors in the kernel, slots {slots}")
        encodings = iter(direct.encodings)
        self.slots, self._template, self._tma, self._ptr = [], [], [], []
        self.maps = [{} for _ in slots]
        for i, slot in enumerate(slots):
            if slot == "ptr":
                self.slots.append(None)
                self._ptr.append((len(self._template), i))
                self._template.append(None)
            else:
                _, shape, strides = slot
                assert strides[-1] == 1, "a TMA descriptor's last stride is 1"
                self.slots.append((next(encodings), list(shape), list(strides)))
                self._tma.append((len(self._template), self.maps[i], i))
                self._template.extend((None, *shape, *strides))
        self._template.extend(pre)
        self._dyn = len(self._template)
        self._template.extend(post)
        self.direct = direct
        self._head = (direct.function, direct.cooperative, direct.pdl, direct.packed, None, None, None, None, None,
                      direct.annotations, direct.signature)

    def tensor_map(self, i: int, ptr: int):
        """The CUtensorMap of slot i's descriptor at `ptr` (cached by address)."""
        global ENCODED
        maps = self.maps[i]
        m = maps.get(ptr)
        if m is None:
            ENCODED += 1
            if len(maps) >= MAP_CACHE_SIZE:
                maps.clear()
            (swizzle, elem_size, elem_type, block), shape, strides = self.slots[i]
            m = self.direct.encode(ptr, swizzle, elem_size, elem_type, block, shape, strides, 0)
            maps[ptr] = m
        return m

    def __call__(self, grid, stream: int, ptrs, dyn=()) -> None:
        """One launch. The kernel arguments as the C launcher takes them: each descriptor becomes
        [CUtensorMap, *shape, *strides] (zero padding), each pointer itself, then the scalars
        (pre, the per-call `dyn`, post)."""
        args = self._template.copy()
        if dyn:
            args[self._dyn:self._dyn] = dyn  # inserted: every slot sits before them
        for pos, maps, i in self._tma:
            ptr = ptrs[i]
            m = maps.get(ptr)
            args[pos] = m if m is not None else self.tensor_map(i, ptr)
        for pos, i in self._ptr:
            args[pos] = ptrs[i]
        gx, gy, gz = grid
        self.direct.launch(gx, gy, gz, stream, *self._head, args)


def _flatten(items, out: list) -> list:
    """Tuples' elements in order, recursively, absent fields dropped: None among values,
    "constexpr" in a signature (where Triton marks them so)."""
    for x in items:
        if isinstance(x, tuple):
            _flatten(x, out)
        elif x is not None and not (isinstance(x, str) and x == "constexpr"):
            out.append(x)
    return out


def flat_annotations(kernel, run):
    """The C launcher's argument annotations for FLAT kernel arguments: Triton's own
    (`run.arg_annotations`) when no argument is a tuple, else rebuilt from the flattened
    expanded signature as Triton's CudaLauncher builds them (triton/backends/nvidia/driver.py):
    the packed signature is flat either way, so the C launcher packs the same parameters."""
    signature = tuple(kernel.src.signature.values())
    if not any(isinstance(s, tuple) for s in signature):
        return run.arg_annotations
    from triton.backends.driver import expand_signature
    from triton.backends.nvidia import driver as nv

    metas = getattr(kernel.metadata, "tensordesc_meta", None)
    flat = []
    for s in expand_signature(signature, metas, "nvTmaDesc"):
        flat += _flatten(s, []) if isinstance(s, tuple) else [s]
    return nv.annotate_arguments(flat)


def _is_descriptor(v) -> bool:
    return hasattr(v, "block_shape") and hasattr(v, "strides") and hasattr(v, "base")


def flat_arguments(fn, args, kwargs=None) -> tuple[list, list]:
    """(names, values) of a JIT launch `fn[grid](*args, **kwargs)` as the kernel's parameters
    (constexprs included): a tuple argument (not a constexpr) becomes its fields in order, its
    None fields dropped, each named `arg.field` (NamedTuple) or `arg.i`. Its other fields are
    runtime values (tensors, descriptors, scalars): `flat_annotations` drops a tuple's
    constexprs, which only its None fields are."""
    kwargs = kwargs or {}
    names, values = [], []
    for i, n in enumerate(fn.arg_names):
        v = args[i] if i < len(args) else kwargs[n] if n in kwargs else fn.params[i].default
        if isinstance(v, tuple) and not getattr(fn.params[i], "is_constexpr", False):
            assert not any(isinstance(x, tuple) for x in v), "one level of tuple arguments"
            fields = getattr(v, "_fields", range(len(v)))
            names += [f"{n}.{f}" for f, x in zip(fields, v) if x is not None]
            values += _flatten(v, [])
        else:
            names.append(n)
            values.append(v)
    return names, values


def bind_jit_args(direct: DirectLaunch, fn, args, kwargs, dynamic=()) -> BoundLaunch:
    """Bind `direct` to the arguments a JIT launch `fn[grid](*args, **kwargs)` was given:
    leading TMA descriptors become "tma" slots and leading tensors "ptr" slots (their
    addresses are passed per launch), the rest are scalars in the kernel's parameter order,
    the names in `dynamic` (consecutive) passed per launch. A tuple argument counts as its
    fields (module docstring, `flat_arguments`)."""
    names, values = flat_arguments(fn, args, kwargs)
    slots = []
    for v in values:
        if _is_descriptor(v):
            slots.append(("tma", list(v.shape), list(v.strides)))
        elif hasattr(v, "data_ptr"):
            slots.append("ptr")
        else:
            break
    scalars, scalar_names = values[len(slots):], list(names[len(slots):])
    if not dynamic:
        return direct.bind(slots, tuple(scalars))
    j = scalar_names.index(dynamic[0])
    assert tuple(scalar_names[j:j + len(dynamic)]) == tuple(dynamic), f"{dynamic} must be consecutive parameters"
    return direct.bind(slots, tuple(scalars[:j]), tuple(scalars[j + len(dynamic):]))


class CachedLaunch:
    """One kernel launch of a plan whose arguments are fixed but for the base addresses and
    the `dynamic` scalars: Triton's JIT on the first call (and whenever a launch hook is
    installed or `launch_key()` changed), a bound direct launch after. Every launch runs on
    `device` (a device guard when it is not the current one) and on its current stream.

        launch(device, ptrs, dyn, prepare, *inputs)
            prepare(*inputs) -> (jit_fn, args, kwargs, grid), called only on the JIT path
    """

    __slots__ = ("dynamic", "bound", "grid", "key")

    def __init__(self, dynamic=()):
        self.dynamic, self.bound, self.grid, self.key = tuple(dynamic), None, None, None

    def __call__(self, device: int, ptrs, dyn, prepare, *inputs) -> None:
        bound = self.bound
        if bound is not None and launch_ready(self.key):
            if torch._C._cuda_getDevice() == device:
                bound(self.grid, torch._C._cuda_getCurrentRawStream(device), ptrs, dyn)
            else:
                with torch.cuda.device(device):
                    bound(self.grid, torch._C._cuda_getCurrentRawStream(device), ptrs, dyn)
            return
        with torch.cuda.device(device):
            self.jit(prepare, inputs)

    def jit(self, prepare, inputs) -> None:
        """Launch through Triton's JIT (on the current device) and bind a direct launch."""
        fn, args, kwargs, grid = prepare(*inputs)
        compiled = fn[grid](*args, **kwargs)
        self.bound = None
        if hooks_idle():
            direct = DirectLaunch.from_kernel(compiled)
            if direct is not None:
                self.bound = bind_jit_args(direct, fn, args, kwargs, self.dynamic)
                self.grid = (tuple(grid) + (1, 1))[:3]
                self.key = launch_key()


class LaunchCache(dict):
    """Bound launches by call signature (a key of everything the compiled kernel and its bound
    arguments depend on), made on a miss and all dropped once `size` are held: a model has few
    signatures, but its token counts vary. quantize's kernels and the FP8 K-grouped GEMM keep
    theirs here."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get_or_make(self, key, make=CachedLaunch):
        """self[key], made by `make()` on a miss (the cache emptied first when full)."""
        cached = self.get(key)
        if cached is None:
            if len(self) >= self.size:
                self.clear()
            cached = self[key] = make()
        return cached
