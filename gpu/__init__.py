"""The GPU this process would use, through NVML: the project's one device rule and NVML wrapper.

See gpu/device.py for the rule. Usage:
    from gpu import visible_gpu
    with visible_gpu() as gpu:          # None without NVML, a driver, or a visible GPU
        total = gpu.memory_total_bytes() if gpu is not None else None
"""

from gpu.device import DeviceChoice, Gpu, GpuInfo, GpuSample, choose_device, open_gpu, visible_gpu
from gpu.errors import DeviceSelectionError, GpuError, GpuReadError

__all__ = [
    "DeviceChoice",
    "DeviceSelectionError",
    "Gpu",
    "GpuError",
    "GpuInfo",
    "GpuReadError",
    "GpuSample",
    "choose_device",
    "open_gpu",
    "visible_gpu",
]
