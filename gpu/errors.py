"""Errors the gpu package raises on purpose.

    TunerError
    └── GpuError
        ├── DeviceSelectionError   CUDA_VISIBLE_DEVICES names no GPU this machine has (also a ValueError)
        └── GpuReadError           NVML failed on a device that was open (a lost GPU, a driver reset)

No NVML, no driver or no GPU at all is not an error: `open_gpu` returns None, and each caller says
what it does without one.
"""

from __future__ import annotations

from tuner_errors import TunerError

__all__ = ["DeviceSelectionError", "GpuError", "GpuReadError"]


class GpuError(TunerError):
    """Base for every error the gpu package raises on purpose."""


class DeviceSelectionError(GpuError, ValueError):
    """CUDA_VISIBLE_DEVICES (or an ordinal) names no device here. The message gives the value and the fix."""


class GpuReadError(GpuError):
    """An NVML read failed on an open device; the NVML error is the cause."""
