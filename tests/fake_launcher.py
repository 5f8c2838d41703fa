"""A stand-in for Triton 3.6's CUDA launcher, so launch arguments can be compared on the CPU."""

import types


class FakeLauncher:
    """Triton 3.6's CudaLauncher minus the C module: `launch` is Triton's own
    wrap_handle_tensordesc around a recorder (`calls`)."""

    calls: list = []

    def __init__(self, src, metadata):
        from triton.backends.nvidia.driver import wrap_handle_tensordesc

        self.launch = wrap_handle_tensordesc(lambda *args: self.calls.append(args), dict(src.signature),
                                             metadata.tensordesc_meta)
        self.global_scratch_size = self.profile_scratch_size = 0
        self.launch_cooperative_grid, self.launch_pdl, self.num_ctas = False, False, 1

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl, None, None,
                    *args)


def encode(ptr, swizzle, elem_size, elem_type, block, shape, strides, padding):
    """A recognisable stand-in CUtensorMap."""
    return ("map", ptr, swizzle, elem_size, elem_type, tuple(block), tuple(shape), tuple(strides), padding)


def install(driver):
    """Make the (offline stub) driver launch through FakeLauncher; returns the call list."""
    driver.launcher_cls = FakeLauncher
    driver.utils = types.SimpleNamespace(fill_tma_descriptor=encode, load_binary=lambda *a: (1, 2, 32, 0, 1024),
                                         get_device_properties=lambda d: {"max_shared_mem": 232448})
    FakeLauncher.calls = []
    return FakeLauncher.calls
