"""GPU memory before and after a server, through NVML, so the next launch starts on a clean GPU.

Without an NVIDIA GPU (or without NVML) every function here is a no-op returning None: the CPU
engine has nothing to wait for.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from serving.errors import ServingError

__all__ = ["GpuMemoryNotReleased", "Snapshot", "snapshot", "wait_released"]

log = logging.getLogger(__name__)
_SLACK_BYTES = 256 * 1024**2  # other processes' small allocations come and go


class GpuMemoryNotReleased(ServingError):
    """A stopped server's GPU memory was still in use after the timeout."""


@dataclass(frozen=True)
class Snapshot:
    used_bytes: tuple[int, ...]  # per device


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no driver, no GPU, no package: nothing to watch
        return None


def snapshot() -> Snapshot | None:
    nvml = _nvml()
    if nvml is None:
        return None
    count = nvml.nvmlDeviceGetCount()
    used = tuple(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).used for i in range(count))
    return Snapshot(used)


def _pids_on_gpu(nvml) -> set[int]:
    pids = set()
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            pids.add(proc.pid)
    return pids


def wait_released(baseline: Snapshot, *, pid: int, timeout_s: float = 60.0) -> None:
    """Wait until `pid` holds no GPU memory and usage is back near `baseline`."""
    nvml = _nvml()
    if nvml is None:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        now = snapshot()
        back = now is not None and all(u <= b + _SLACK_BYTES for u, b in zip(now.used_bytes, baseline.used_bytes, strict=False))
        if pid not in _pids_on_gpu(nvml) and back:
            return
        if time.monotonic() > deadline:
            raise GpuMemoryNotReleased(
                f"GPU memory not released {timeout_s:.0f} s after the server (pid {pid}) stopped: "
                f"used {now.used_bytes if now else '?'} bytes, before launch {baseline.used_bytes}"
            )
        time.sleep(0.5)
