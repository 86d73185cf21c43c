"""GPU state during each measured request, read through NVML (nvidia-ml-py).

Clock locking and power caps are off limits on a shared GPU, so instead every request records the
clocks, power, temperature and throttle reasons seen while it ran, and a throttled run can be told
apart later. Without NVML or without that GPU, `GpuMonitor.open` returns None: not an error.

Usage:
    monitor = GpuMonitor.open(index=0)        # None on a machine without an NVIDIA GPU
    with monitor.window() as window:          # samples every 100 ms in a background thread
        ...                                   # the request
    window.result                             # GpuWindow | None
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bench.records import GpuIdentity, GpuWindow

__all__ = ["GpuMonitor", "GpuSample", "decode_throttle_reasons", "summarize_window"]

log = logging.getLogger(__name__)

# NVML clocks-event reason bits (nvml.h, nvmlClocksEventReason*); stable across driver versions.
_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# reasons that say nothing about lost speed while a request runs
_BENIGN = {"gpu_idle", "applications_clocks_setting", "display_clock_setting"}


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSample:
    sm_clock_mhz: int
    mem_clock_mhz: int
    power_w: float | None
    temperature_c: int
    utilization_pct: int | None
    memory_used_bytes: int
    throttle_mask: int
    compute_processes: int | None = None  # processes holding a compute context: >1 means sharing


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """Names of the set reason bits, benign ones left out; unknown bits kept as hex."""
    names = [name for bit, name in _REASONS.items() if mask & bit and name not in _BENIGN]
    unknown = mask & ~sum(_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return tuple(names)


def summarize_window(samples: Sequence[GpuSample]) -> GpuWindow | None:
    """Fold the samples of one request into a GpuWindow (None for no samples)."""
    if not samples:
        return None
    powers = [s.power_w for s in samples if s.power_w is not None]
    utils = [s.utilization_pct for s in samples if s.utilization_pct is not None]
    mask = 0
    for s in samples:
        mask |= s.throttle_mask
    return GpuWindow(
        samples=len(samples),
        sm_clock_mhz_min=min(s.sm_clock_mhz for s in samples),
        sm_clock_mhz_max=max(s.sm_clock_mhz for s in samples),
        mem_clock_mhz_min=min(s.mem_clock_mhz for s in samples),
        mem_clock_mhz_max=max(s.mem_clock_mhz for s in samples),
        power_w_mean=sum(powers) / len(powers) if powers else None,
        power_w_max=max(powers) if powers else None,
        temperature_c_max=max(s.temperature_c for s in samples),
        utilization_pct_mean=sum(utils) / len(utils) if utils else None,
        memory_used_bytes_max=max(s.memory_used_bytes for s in samples),
        throttle_reasons=decode_throttle_reasons(mask),
        compute_processes_max=max(
            (s.compute_processes for s in samples if s.compute_processes is not None), default=None
        ),
    )


class _Window:
    """Filled in when the `window()` block exits."""

    result: GpuWindow | None = None


class GpuMonitor:
    """One NVML device handle; `window()` samples it while a request runs."""

    def __init__(self, nvml: Any, handle: Any, identity: GpuIdentity, period_s: float):
        self._nvml = nvml
        self._handle = handle
        self.identity = identity
        self._period_s = period_s

    @classmethod
    def open(cls, index: int | None, *, period_s: float = 0.1) -> GpuMonitor | None:
        """The monitor for GPU `index`, or None when NVML, a driver or that GPU is absent."""
        if index is None:
            return None
        try:
            import pynvml
        except ImportError:
            log.info("nvidia-ml-py is not installed: no GPU telemetry")
            return None
        try:
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            identity = _identity(pynvml, handle, index)
        except pynvml.NVMLError as exc:
            log.info("no GPU telemetry (NVML: %s)", exc)
            return None
        return cls(pynvml, handle, identity, period_s)

    def sample(self) -> GpuSample:
        nv, h = self._nvml, self._handle
        return GpuSample(
            sm_clock_mhz=nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            mem_clock_mhz=nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            power_w=_optional(lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000, nv),
            temperature_c=nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            utilization_pct=_optional(lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu, nv),
            memory_used_bytes=nv.nvmlDeviceGetMemoryInfo(h).used,
            throttle_mask=_optional(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h), nv) or 0,
            compute_processes=_optional(lambda: len(nv.nvmlDeviceGetComputeRunningProcesses(h)), nv),
        )

    @contextmanager
    def window(self) -> Iterator[_Window]:
        """Sample every `period_s` until the block exits; the summary lands in `.result`."""
        out = _Window()
        samples: list[GpuSample] = []
        stop = threading.Event()

        def _run() -> None:
            self._sample_into(samples)
            while not stop.wait(self._period_s):
                if not self._sample_into(samples):
                    return

        thread = threading.Thread(target=_run, name="bench-gpu-sampler", daemon=True)
        thread.start()
        try:
            yield out
        finally:
            stop.set()
            thread.join()
            self._sample_into(samples)
            out.result = summarize_window(samples)

    def _sample_into(self, samples: list[GpuSample]) -> bool:
        try:
            samples.append(self.sample())
        except self._nvml.NVMLError as exc:  # a lost GPU must not kill the measurement thread
            log.warning("NVML sample failed: %s", exc)
            return False
        return True

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)


def _optional(read: Any, nv: Any) -> Any:
    """A reading some boards do not support (power on some SKUs): None instead of an error."""
    try:
        return read()
    except nv.NVMLError_NotSupported:
        return None


def _identity(nv: Any, h: Any, index: int) -> GpuIdentity:
    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    return GpuIdentity(
        index=index,
        name=text(nv.nvmlDeviceGetName(h)),
        uuid=text(nv.nvmlDeviceGetUUID(h)),
        driver_version=text(nv.nvmlSystemGetDriverVersion()),
        memory_total_bytes=nv.nvmlDeviceGetMemoryInfo(h).total,
        power_limit_w=_optional(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000, nv),
        max_sm_clock_mhz=_optional(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM), nv),
        max_mem_clock_mhz=_optional(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM), nv),
    )
