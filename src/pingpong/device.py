"""Facts about a GPU that the launch paths read on every call, queried once per device."""

import functools

import torch


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    """Number of SMs (CUs on ROCm) of a device: the persistent grid."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=None)
def is_hopper(device_index: int) -> bool:
    """A CUDA sm_90 device: what the Gluon Hopper kernels are compiled for (sm_90a)."""
    return torch.version.hip is None and torch.cuda.get_device_capability(device_index) == (9, 0)
