"""A stand-in for Triton's CUDA launcher, so launch arguments can be compared on the CPU."""

import types


class FakeLauncher:
    """Triton's CudaLauncher minus the C module: `launch` is Triton's own
    wrap_handle_tensordesc around a recorder (`calls`). The C module's argument annotations
    and packed signature are stand-in tokens (the C launcher only passes them through)."""

    calls: list = []

    def __init__(self, src, metadata):
        from triton.backends.nvidia.driver import wrap_handle_tensordesc

        self.launch = wrap_handle_tensordesc(lambda *args: self.calls.append(args), dict(src.signature),
                                             metadata.tensordesc_meta)
        self.global_scratch_size = self.profile_scratch_size = 0
        self.launch_cooperative_grid, self.launch_pdl, self.num_ctas = False, False, getattr(metadata, "num_ctas", 1)
        self.gsan_enabled = False
        self.arg_annotations, self.kernel_signature = ("annotations",), b"signature"

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


def parts(call):
    """One recorded C-launch call as (head, hooks, tail, kernel_args): head = grid, stream,
    function, cooperative, pdl, packed metadata; hooks = launch metadata, enter and exit
    hooks; tail = both scratch buffers, argument annotations, packed signature."""
    return call[:8], call[8:11], call[11:15], list(call[15])
