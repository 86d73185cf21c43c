"""GPU state during each measured request, read through NVML by the gpu package.

Clock locking and power caps are off limits on a shared GPU (and the user's power limit is what is
measured), so instead every request records the clocks, power, temperature and throttle reasons seen
while it ran, and a throttled run can be told apart later. The window also keeps each reading's time,
energy counter and power (`readings`): bench.energy turns them into the request's joules. Without NVML or without a visible GPU, `GpuMonitor.open` returns None: not an error.
Which GPU is gpu.device's rule, as for every other reader: CUDA ordinal `index` under this process's
CUDA_VISIBLE_DEVICES (0: its first entry, or NVML device 0 when it is unset), so run bench with the
server's CUDA_VISIBLE_DEVICES.

Usage:
    monitor = GpuMonitor.open(index=0)        # None on a machine without an NVIDIA GPU
    with monitor.window() as window:          # reads at entry, every 100 ms in a thread, and at exit
        ...                                   # the request
    window.result                             # GpuWindow | None
    window.readings                           # tuple[bench.energy.Reading, ...], Unix-timed
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from bench.energy import Reading
from bench.errors import BenchConfigError
from bench.records import GpuIdentity
from bench.runs import GpuWindow
from gpu import DeviceSelectionError, Gpu, GpuInfo, GpuReadError, GpuSample, open_gpu

__all__ = ["GpuMonitor", "GpuSample", "decode_throttle_reasons", "summarize_window", "to_reading"]

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
    readings: tuple[Reading, ...] = ()


def to_reading(at_unix_s: float, sample: GpuSample) -> Reading:
    """What bench.energy needs of one sample, timed on the request's clock (Unix time)."""
    return Reading(t_s=at_unix_s, energy_mj=sample.energy_mj, power_w=sample.power_w,
                   power_capped="sw_power_cap" in decode_throttle_reasons(sample.throttle_mask),
                   power_limit_w=sample.power_limit_w)


class GpuMonitor:
    """One open GPU; `window()` samples it while a request runs."""

    def __init__(self, gpu: Gpu, identity: GpuIdentity, period_s: float):
        self._gpu = gpu
        self.identity = identity
        self._period_s = period_s

    @classmethod
    def open(cls, index: int | None, *, period_s: float = 0.1) -> GpuMonitor | None:
        """The monitor for CUDA ordinal `index`, or None when NVML, a driver or a visible GPU is absent.

        Raises:
            BenchConfigError: CUDA_VISIBLE_DEVICES or `index` names no GPU of this machine.
        """
        if index is None:
            return None
        try:
            gpu = open_gpu(ordinal=index)
        except DeviceSelectionError as exc:
            raise BenchConfigError(f"GPU telemetry: {exc}; or pass --no-gpu") from exc
        if gpu is None:
            log.info("no GPU telemetry: no NVML, driver or visible GPU")
            return None
        try:
            identity = _identity(gpu.info())
        except GpuReadError as exc:
            gpu.close()
            log.info("no GPU telemetry (%s)", exc)
            return None
        return cls(gpu, identity, period_s)

    def sample(self) -> GpuSample:
        return self._gpu.sample()

    @contextmanager
    def window(self) -> Iterator[_Window]:
        """Sample on entry, every `period_s`, and on exit (so the readings span the block: its energy is
        measured end to end); the summary lands in `.result`, the timed readings in `.readings`."""
        out = _Window()
        samples: list[tuple[float, GpuSample]] = []
        stop = threading.Event()

        def _run() -> None:
            while not stop.wait(self._period_s):
                if not self._sample_into(samples):
                    return

        self._sample_into(samples)
        thread = threading.Thread(target=_run, name="bench-gpu-sampler", daemon=True)
        thread.start()
        try:
            yield out
        finally:
            stop.set()
            thread.join()
            self._sample_into(samples)
            out.result = summarize_window([s for _, s in samples])
            out.readings = tuple(to_reading(t, s) for t, s in samples)

    def _sample_into(self, samples: list[tuple[float, GpuSample]]) -> bool:
        before = time.time()
        try:
            sample = self.sample()  # a dozen NVML calls: stamped at their midpoint
            samples.append(((before + time.time()) / 2, sample))
        except GpuReadError as exc:  # a lost GPU must not kill the measurement thread
            log.warning("NVML sample failed: %s", exc)
            return False
        return True

    def close(self) -> None:
        self._gpu.close()


def _identity(info: GpuInfo) -> GpuIdentity:
    """bench's record of the GPU: gpu.GpuInfo's fields, `nvml_index` recorded as `index`."""
    fields = dataclasses.asdict(info)
    return GpuIdentity(index=fields.pop("nvml_index"), **fields)
