"""Test double of the pynvml module (nvidia-ml-py), the gpu package's one outside boundary.

`FakePynvml` is a module object standing in for pynvml on a machine with the GPUs it is given; a
test puts it in `sys.modules["pynvml"]`, where `gpu.device` imports it. It counts nvmlInit and
nvmlShutdown, and like NVML it refuses device calls while not initialised, so a read outside an
open device or a missing shutdown shows.
"""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest


@dataclass
class FakeGpu:
    """One pretend board; tests change its fields to script what NVML reports."""

    name: str = "NVIDIA H200 (fake)"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total_bytes: int = 141 * 1024**3
    memory_used_bytes: int = 20 * 1024**3
    pids: tuple[int, ...] = ()
    pid_memory: dict[int, int] = field(default_factory=dict)  # NVML's usedGpuMemory per pid; absent: N/A
    utilization_pct: int = 80
    power_mw: int | None = 450_000  # None: the board does not report power
    fail_reads: bool = False  # every device read raises NVMLError, as a lost GPU does
    clocks_event_reasons: int = 0  # NVML's throttle reason bits, e.g. 0x20 sw thermal slowdown
    # the total-energy counter in mJ; None: the board lacks it (pre-Volta). It advances by power x time
    # between reads, as the real one does
    energy_mj: int | None = 7_351_234_567
    _energy_read_at: float | None = None
    calls: list[str] = field(default_factory=list)


class _Memory:
    def __init__(self, used: int, total: int) -> None:
        self.used, self.total = used, total


class _Rates:
    def __init__(self, gpu: int) -> None:
        self.gpu = gpu


class _Process:
    def __init__(self, pid: int, used: int | None = None) -> None:
        self.pid = pid
        self.usedGpuMemory = used  # pynvml: None where NVML reports the value as not available


class FakePynvml(types.ModuleType):
    """Test double of pynvml: the calls gpu.device makes, answered for `gpus` (none: no driver)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # pynvml's own names
        pass

    class NVMLError_Uninitialized(NVMLError):
        pass

    class NVMLError_LibraryNotFound(NVMLError):
        pass

    def __init__(self, gpus: Sequence[FakeGpu] = (), *, driver: bool = True) -> None:
        super().__init__("pynvml")
        self.gpus = list(gpus)
        self.driver = driver
        self.inits = 0
        self.shutdowns = 0

    @property
    def initialised(self) -> int:
        return self.inits - self.shutdowns

    def nvmlInit(self) -> None:
        if not self.driver:
            raise self.NVMLError_LibraryNotFound("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._need_init()
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._need_init()
        return "570.00"

    def nvmlDeviceGetCount(self) -> int:
        self._need_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._need_init()
        if not 0 <= index < len(self.gpus):
            raise self.NVMLError(f"Invalid Argument: index {index}")
        return self.gpus[index]

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return self._read(h, "name").name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return self._read(h, "uuid").uuid

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> _Memory:
        self._read(h, "memory")
        return _Memory(used=h.memory_used_bytes, total=h.memory_total_bytes)

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[_Process]:
        return [_Process(pid, h.pid_memory.get(pid)) for pid in self._read(h, "processes").pids]

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> _Rates:
        return _Rates(gpu=self._read(h, "utilization").utilization_pct)

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, kind: int) -> int:
        self._read(h, "clock")
        return 1980 if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGpu, kind: int) -> int:
        return self.nvmlDeviceGetClockInfo(h, kind)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        if self._read(h, "power").power_mw is None:
            raise self.NVMLError_NotSupported("Not Supported")
        return h.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        if self._read(h, "energy").energy_mj is None:
            raise self.NVMLError_NotSupported("Not Supported")
        now = time.monotonic()
        if h._energy_read_at is not None:
            h.energy_mj += int((h.power_mw or 0) * (now - h._energy_read_at))  # mW x s = mJ
        h._energy_read_at = now
        return h.energy_mj

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        self._read(h, "power_limit")
        return 700_000

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._read(h, "temperature")
        return 45

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        return self._read(h, "clocks_event_reasons").clocks_event_reasons

    def _need_init(self) -> None:
        if self.initialised <= 0:
            raise self.NVMLError_Uninitialized("Uninitialized")

    def _read(self, h: FakeGpu, what: str) -> FakeGpu:
        self._need_init()
        h.calls.append(what)
        if h.fail_reads:
            raise self.NVMLError("GPU is lost")
        return h


def two_h200s() -> list[FakeGpu]:
    """A two-GPU host, told apart by UUID and memory (the second one fuller)."""
    return [
        FakeGpu(uuid="GPU-aaaa1111-0000-0000-0000-000000000000", memory_total_bytes=141 * 1024**3),
        FakeGpu(uuid="GPU-bbbb2222-0000-0000-0000-000000000000", memory_total_bytes=140 * 1024**3,
                memory_used_bytes=60 * 1024**3, pids=(4242,)),
    ]


def install(monkeypatch: pytest.MonkeyPatch, nvml: FakePynvml) -> FakePynvml:
    """Put `nvml` where gpu.device imports pynvml, for this test only."""
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml
