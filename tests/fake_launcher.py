"""A stand-in for Triton's CUDA launcher, so launch arguments can be compared on the CPU."""

import types

ARG_CONSTEXPR, ARG_KERNEL, ARG_TUPLE = 0, 1, 2  # the C launcher's annotation types


class KernelArg(types.SimpleNamespace):
    """A readable stand-in for the C module's PyKernelArg (nested_tuple, type)."""

    def __init__(self, nested_tuple=None, type=None):
        super().__init__(nested_tuple=nested_tuple, type=type)


class FakeLauncher:
    """Triton's CudaLauncher minus the C module: `launch` is Triton's own
    wrap_handle_tensordesc around a recorder (`calls`). The C module's argument annotations
    and packed signature are stand-in tokens (the C launcher only passes them through), or,
    with `annotations(monkeypatch)` applied, the annotations Triton builds, readable stand-ins
    (then `parts` packs the kernel arguments by them, as the C launcher does)."""

    calls: list = []

    def __init__(self, src, metadata):
        from triton.backends.nvidia.driver import wrap_handle_tensordesc

        self.launch = wrap_handle_tensordesc(lambda *args: self.calls.append(args), dict(src.signature),
                                             metadata.tensordesc_meta)
        self.global_scratch_size = self.profile_scratch_size = 0
        self.launch_cooperative_grid, self.launch_pdl, self.num_ctas = False, False, getattr(metadata, "num_ctas", 1)
        self.gsan_enabled = False
        from triton.backends.driver import expand_signature
        from triton.backends.nvidia import driver as nv

        self.arg_annotations, self.kernel_signature = ("annotations",), b"signature"
        if nv.PyKernelArg is KernelArg:  # as CudaLauncher
            self.arg_annotations = nv.annotate_arguments(expand_signature(src.signature.values(),
                                                                          metadata.tensordesc_meta, "nvTmaDesc"))

    def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, enter_hook,
                 exit_hook, *args):
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                    kernel_metadata, launch_metadata, enter_hook, exit_hook, None, None, self.arg_annotations,
                    self.kernel_signature, args)


def encode(ptr, swizzle, elem_size, elem_type, block, shape, strides, padding):
    """A recognisable stand-in CUtensorMap."""
    return ("map", ptr, swizzle, elem_size, elem_type, tuple(block), tuple(shape), tuple(strides), padding)


def install(driver):
    """Make the (offline stub) driver launch through FakeLauncher; returns the call list."""
    driver.launcher_cls = FakeLauncher
    driver.utils = types.SimpleNamespace(fill_tma_descriptor_tiled=encode, load_binary=lambda *a: (1, 2, 32, 0, 1024),
                                         get_device_properties=lambda d: {"max_shared_mem": 232448})
    FakeLauncher.calls = []
    return FakeLauncher.calls


def annotations(monkeypatch):
    """Make Triton's annotate_arguments build readable KernelArgs (restored by `monkeypatch`)."""
    from triton.backends.nvidia import driver as nv

    for name, value in (("PyKernelArg", KernelArg), ("ARG_CONSTEXPR", ARG_CONSTEXPR), ("ARG_KERNEL", ARG_KERNEL),
                        ("ARG_TUPLE", ARG_TUPLE)):
        monkeypatch.setattr(nv, name, value)


def _pack(annotations, args, out):
    """The parameters the C launcher packs: constexprs skipped, tuples by their own annotations."""
    for a, v in zip(annotations, args, strict=True):
        if a.type == ARG_TUPLE:
            _pack(a.nested_tuple, v, out)
        elif a.type == ARG_KERNEL:
            out.append(v)
    return out


def parts(call):
    """One recorded C-launch call as (head, hooks, tail, kernel_args): head = grid, stream,
    function, cooperative, pdl, packed metadata; hooks = launch metadata, enter and exit
    hooks; tail = both scratch buffers, argument annotations, packed signature. With readable
    annotations (`annotations`), tail drops them and kernel_args are the packed parameters,
    so a launch with nested (tuple) arguments compares with its flat twin."""
    head, hooks, tail, args = call[:8], call[8:11], call[11:15], list(call[15])
    if tail[2] and isinstance(tail[2][0], KernelArg):
        return head, hooks, tail[:2] + tail[3:], _pack(tail[2], args, [])
    return head, hooks, tail, args


def pointer_slots(kernel, args) -> tuple:
    """Base addresses of a launch's leading descriptors and pointers (launcher.bind_jit_args's
    slots: the epilogue operands' fields where they stand), to compare with a plan's pointer
    tuple."""
    from pingpong.runtime.launcher import _is_descriptor, flat_arguments

    slots = []
    for v in flat_arguments(kernel, args)[1]:
        if _is_descriptor(v):
            slots.append(v.base.data_ptr())
        elif hasattr(v, "data_ptr"):
            slots.append(v.data_ptr())
        else:
            break
    return tuple(slots)
