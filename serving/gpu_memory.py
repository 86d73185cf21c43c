"""GPU memory before and after a server, through NVML, so the next launch starts on a clean GPU.

The GPU watched is the server's: gpu.device's rule applied to the environment the server is started
with (the first entry of its CUDA_VISIBLE_DEVICES, device 0 when unset; the server loads on cuda:0).
Another worker's server on another GPU is not waited for. Without an NVIDIA GPU (or without NVML)
every function here is a no-op returning None: the CPU engine has nothing to wait for.

Usage:
    baseline = snapshot(env)                  # env: the server's environment; None: this process's
    ...                                       # start, use and stop the server
    wait_released(baseline, pid=server_pid)   # GpuMemoryNotReleased after the timeout
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from gpu import DeviceSelectionError, visible_gpu
from serving.errors import ConfigError, ServingError

__all__ = ["GpuMemoryNotReleased", "Snapshot", "snapshot", "wait_released"]

log = logging.getLogger(__name__)
_SLACK_BYTES = 256 * 1024**2  # other processes' small allocations come and go


class GpuMemoryNotReleased(ServingError):
    """A stopped server's GPU memory was still in use after the timeout."""


@dataclass(frozen=True)
class Snapshot:
    gpu_uuid: str  # the device watched; `wait_released` reads the same one
    used_bytes: int


def snapshot(env: Mapping[str, str] | None = None) -> Snapshot | None:
    """Memory in use on the GPU a process with `env` would use; None without NVML or a visible GPU.

    Raises:
        ConfigError: CUDA_VISIBLE_DEVICES names no GPU of this machine.
    """
    try:
        with visible_gpu(env) as gpu:
            if gpu is None:
                return None
            return Snapshot(gpu_uuid=gpu.uuid(), used_bytes=gpu.memory_used_bytes())
    except DeviceSelectionError as exc:
        raise ConfigError(f"the server's GPU: {exc}") from exc


def wait_released(baseline: Snapshot, *, pid: int, timeout_s: float = 60.0) -> None:
    """Wait until `pid` holds no memory on the baseline's GPU and its usage is back near `baseline`."""
    with visible_gpu({"CUDA_VISIBLE_DEVICES": baseline.gpu_uuid}) as gpu:
        if gpu is None:
            return
        deadline = time.monotonic() + timeout_s
        while True:
            used = gpu.memory_used_bytes()
            if pid not in gpu.compute_pids() and used <= baseline.used_bytes + _SLACK_BYTES:
                return
            if time.monotonic() > deadline:
                raise GpuMemoryNotReleased(
                    f"GPU memory not released {timeout_s:.0f} s after the server (pid {pid}) stopped: "
                    f"{used} bytes used on {baseline.gpu_uuid}, {baseline.used_bytes} before launch"
                )
            time.sleep(0.5)
