"""GPU memory before and after a server, through NVML, so the next launch starts on a clean GPU.

The GPU watched is the server's: gpu.device's rule applied to the environment the server is started
with (the first entry of its CUDA_VISIBLE_DEVICES, device 0 when unset; the server loads on cuda:0).
Another worker's server on another GPU is not waited for. Workers sharing one GPU: the memory other
processes hold is not the stopped server's. Where NVML reports each process's memory, the memory no
live process holds must be back to what it was; where it cannot (some containers), the stopped
server's process having left the GPU is all that can be known while others hold contexts. Without an NVIDIA GPU (or without NVML)
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
    unheld_bytes: int | None = None  # used, less what live processes hold; None: NVML cannot tell


def _unheld(gpu) -> tuple[int, int | None, frozenset[int]]:
    """(memory used, memory no live process holds or None, the compute processes)."""
    used = gpu.memory_used_bytes()
    held = gpu.process_memory_bytes()
    unheld = None if any(v is None for v in held.values()) else used - sum(held.values())
    return used, unheld, frozenset(held)


def snapshot(env: Mapping[str, str] | None = None) -> Snapshot | None:
    """Memory in use on the GPU a process with `env` would use; None without NVML or a visible GPU.

    Raises:
        ConfigError: CUDA_VISIBLE_DEVICES names no GPU of this machine.
    """
    try:
        with visible_gpu(env) as gpu:
            if gpu is None:
                return None
            used, unheld, _ = _unheld(gpu)
            return Snapshot(gpu_uuid=gpu.uuid(), used_bytes=used, unheld_bytes=unheld)
    except DeviceSelectionError as exc:
        raise ConfigError(f"the server's GPU: {exc}") from exc


def wait_released(baseline: Snapshot, *, pid: int, timeout_s: float = 60.0) -> None:
    """Wait until `pid` holds no memory on the baseline's GPU and what it held is free again.

    Free again: usage back near `baseline`; or, with other processes on the GPU (another worker's
    server), the memory no live process holds back near the baseline's (or, where NVML cannot say
    what each process holds, nothing more than `pid` having left).
    """
    with visible_gpu({"CUDA_VISIBLE_DEVICES": baseline.gpu_uuid}) as gpu:
        if gpu is None:
            return
        deadline = time.monotonic() + timeout_s
        while True:
            used, unheld, pids = _unheld(gpu)
            if pid not in pids and _released(baseline, used, unheld, others=bool(pids)):
                return
            if time.monotonic() > deadline:
                raise GpuMemoryNotReleased(
                    f"GPU memory not released {timeout_s:.0f} s after the server (pid {pid}) stopped: "
                    f"{used} bytes used on {baseline.gpu_uuid}, {baseline.used_bytes} before launch"
                )
            time.sleep(0.5)


def _released(baseline: Snapshot, used: int, unheld: int | None, *, others: bool) -> bool:
    if used <= baseline.used_bytes + _SLACK_BYTES:
        return True
    if not others:  # nothing else on the GPU: the excess is the stopped server's, not yet freed
        return False
    if unheld is not None and baseline.unheld_bytes is not None:
        return unheld <= baseline.unheld_bytes + _SLACK_BYTES
    return True  # others hold contexts and NVML cannot say how much: the server's process has left
