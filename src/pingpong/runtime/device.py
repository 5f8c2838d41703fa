"""Facts about a GPU that the launch paths read on every call, queried once per device."""

import functools

import torch


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    """Number of SMs (CUs on ROCm) of a device: the persistent grid."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=None)
def is_hopper(device_index: int) -> bool:
    """A CUDA sm_90 device: what the Gluon Hopper kernels are compiled for (sm_90a). -1 (no
    GPU: CPU or meta tensors) is not one."""
    if device_index < 0 or not torch.cuda.is_available():
        return False
    return torch.version.hip is None and torch.cuda.get_device_capability(device_index) == (9, 0)


#: peak HBM bandwidth (bytes/s) by GPU name, where the device properties do not give it
_HBM_BY_NAME = {"H100 PCIe": 2.0e12, "H100": 3.35e12, "H200": 4.8e12}


@functools.lru_cache(maxsize=None)
def hbm_bandwidth(device_index: int) -> float | None:
    """Peak memory bandwidth of a device in bytes/s: 2 transfers per memory clock × the bus
    width (HBM is double data rate), from the device properties; else by name; else None."""
    props = torch.cuda.get_device_properties(device_index)
    clock_khz, bus_bits = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    if clock_khz and bus_bits:
        return 2.0 * clock_khz * 1e3 * bus_bits / 8
    return next((bw for name, bw in _HBM_BY_NAME.items() if name in props.name), None)
