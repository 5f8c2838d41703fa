"""Facts about a GPU that the launch paths read on every call, queried once per device.

The persistent kernels (Hopper GEMM, FP8, grouped, the streaming add) launch one program per
SM they may use: `launch_sms`, the device's SMs less torch's SM carveout. The carveout
(`torch._C._set_sm_carveout_experimental(n)`; None: unset) is what torch's own matmuls honor
(cuBLASLt targets SMs − n, its CUTLASS kernels size their grids so, inductor's persistent
templates read it; on ROCm torch runs cuBLASLt on a CU-masked stream): SMs left to kernels
that run beside the GEMM, such as NCCL's all-gathers and reduce-scatters under FSDP2. Without
it a persistent CTA whose SM is held waits for it, and the GEMM's tail grows by that wait.
pingpong.runtime.spec's `sm_carveout()` reads it (a C getter, tens of ns) once per call into
the key of every plan cache (GemmSpec.carveout, the layer key), so a plan made under one
carveout never serves another.
"""

import functools

import torch

from ..errors import PingpongError

#: what sets torch's SM carveout, for messages
CARVEOUT_SETTER = "torch._C._set_sm_carveout_experimental"


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    """Number of SMs (CUs on ROCm) of a device: the persistent grid without a carveout."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def carveout_sms(sms: int, carveout: int | None) -> int:
    """The SMs of `sms` left under torch's SM carveout `carveout` (None: all of them);
    PingpongError naming torch's setting when it is negative or leaves no SM."""
    if carveout is None:
        return sms
    if not 0 <= carveout < sms:
        raise PingpongError(f"SM carveout ({CARVEOUT_SETTER}): {carveout} must be at least 0 and below the GPU's"
                            f" {sms} SMs; set it to a value in [0, {sms - 1}] or to None")
    return sms - carveout


@functools.lru_cache(maxsize=None)
def launch_sms(device_index: int, carveout: int | None) -> int:
    """The SMs a persistent grid on the device spans under `carveout` (`carveout_sms`)."""
    return carveout_sms(sm_count(device_index), carveout)


@functools.lru_cache(maxsize=None)
def is_hopper(device_index: int) -> bool:
    """A CUDA sm_90 device: what the Gluon Hopper kernels are compiled for (sm_90a). -1 (no
    GPU: CPU or meta tensors) is not one."""
    if device_index < 0 or not torch.cuda.is_available():
        return False
    return torch.version.hip is None and torch.cuda.get_device_capability(device_index) == (9, 0)


#: the first CUDA capability whose Triton converts to float8_e4m3fn (Ada, sm_89; below it Triton's
#: NVIDIA backend offers only e5m2 and its own e4b15)
FP8_E4M3_CAPABILITY = (8, 9)


@functools.lru_cache(maxsize=None)
def fp8_e4m3_reason(device_index: int) -> str | None:
    """None where Triton can cast to float8_e4m3fn on the device (CUDA sm_89 or newer; ROCm),
    else why not, naming the GPU: an A100 (sm_80) has no FP8 (Triton refuses the type there)."""
    if torch.version.hip is not None:
        return None
    cap = torch.cuda.get_device_capability(device_index)
    if tuple(cap) >= FP8_E4M3_CAPABILITY:
        return None
    return (f"float8_e4m3fn needs an NVIDIA GPU of sm_89 or newer (Ada, Hopper, Blackwell); cuda:{device_index}"
            f" ({torch.cuda.get_device_name(device_index)}) is sm_{cap[0]}{cap[1]}, which has no FP8 e4m3 (Triton"
            " cannot cast to it there); use dtype=torch.float8_e5m2, or run on such a GPU")


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
