"""The GPU this process would use, read through NVML (nvidia-ml-py): one device rule, one init/shutdown.

bench (telemetry), serving (memory released after a server) and search_space (the VRAM budget) all
read the same GPU, so they must agree on which one it is. The rule, `choose_device`:

- CUDA_VISIBLE_DEVICES unset: CUDA ordinal k is NVML index k (ordinal 0, the default: device 0).
- Set: its entries are read as CUDA reads them, up to the first that hides devices. Ordinal k is
  the k-th entry: an index ("1"; NVML index 1) or a GPU UUID ("GPU-8f3c…", a unique prefix is
  enough, as CUDA accepts).
- "" or a negative index ("-1"), CUDA's ways to hide every GPU: this process has no GPU, and
  `open_gpu` returns None, as it does without NVML or a driver.
- Anything else ("abc", "MIG-…", an index or UUID this machine lacks): DeviceSelectionError. CUDA
  would quietly see no GPU; here a typo must not turn into a budget or telemetry of no GPU.
- An index is NVML's (PCI bus) order. CUDA's default order is fastest first; the two agree when
  every GPU is the same model or CUDA_DEVICE_ORDER=PCI_BUS_ID. With mixed models and another
  order the index is ambiguous: DeviceSelectionError, which names the UUIDs to use instead.

Every `open_gpu` that returns a Gpu has called nvmlInit once; `Gpu.close` (or leaving its `with`
block) calls nvmlShutdown once, also after an error. NVML counts its initialisations, so readers that
overlap (bench's monitor while the launcher waits on memory) do not shut each other down.

This is its own top-level package, importing nothing of the project, because every reader may import
it while bench may import none of serving, search_space, eval or autoresearch (bench measures any
server), and search_space imports serving: the shared piece sits below all of them.

Usage:
    with visible_gpu() as gpu:            # None: no NVML, no driver, or CUDA_VISIBLE_DEVICES hides all
        if gpu is not None:
            gpu.memory_total_bytes(), gpu.compute_pids(), gpu.info().uuid, gpu.sample()
    gpu = open_gpu()                      # a long-lived reader (bench's monitor): call gpu.close()
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from gpu.errors import DeviceSelectionError, GpuReadError

__all__ = ["DeviceChoice", "Gpu", "GpuInfo", "GpuSample", "choose_device", "open_gpu", "visible_gpu"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_HIDING_ENTRY = re.compile(r"-\d+")  # a negative index: CUDA stops reading the list there


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceChoice:
    """The rule's answer before NVML is asked: an NVML index or a GPU UUID (prefix), and where it came from."""

    nvml_index: int | None = None
    uuid_prefix: str | None = None
    source: str  # e.g. "CUDA_VISIBLE_DEVICES='1,0' entry 0"


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuInfo:
    """Which GPU it is, read once."""

    nvml_index: int
    name: str
    uuid: str
    driver_version: str
    memory_total_bytes: int
    power_limit_w: float | None  # None where the board does not report it
    max_sm_clock_mhz: int | None
    max_mem_clock_mhz: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSample:
    """The GPU's state at one instant."""

    sm_clock_mhz: int
    mem_clock_mhz: int
    power_w: float | None
    temperature_c: int
    utilization_pct: int | None
    memory_used_bytes: int
    throttle_mask: int  # NVML clocks-event reason bits; 0 where unsupported
    compute_processes: int | None = None  # processes holding a compute context: >1 means sharing
    # NVML's total-energy counter (mJ since the driver loaded; Volta and later), None where the board lacks it
    energy_mj: int | None = None
    power_limit_w: float | None = None  # the enforced power limit at this instant (the user's, never changed here)


def choose_device(env: Mapping[str, str] | None = None, *, ordinal: int = 0) -> DeviceChoice | None:
    """The device CUDA ordinal `ordinal` is under `env` (default: this process's), without NVML.

    Returns None when CUDA_VISIBLE_DEVICES hides every GPU ("" or a negative index first).

    Raises:
        DeviceSelectionError: an entry is neither an index nor a GPU- UUID, or the list is too short.
    """
    if ordinal < 0:
        raise DeviceSelectionError(f"a CUDA ordinal is >= 0, got {ordinal}")
    env = os.environ if env is None else env
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return DeviceChoice(nvml_index=ordinal, source="CUDA_VISIBLE_DEVICES unset")
    visible: list[DeviceChoice] = []
    for position, raw in enumerate(value.split(",")[: ordinal + 1]):
        entry = raw.strip()
        if entry == "" or _HIDING_ENTRY.fullmatch(entry):
            break  # CUDA sees the entries before this one and no more
        source = f"CUDA_VISIBLE_DEVICES={value!r} entry {position}"
        if entry.isdigit():
            visible.append(DeviceChoice(nvml_index=int(entry), source=source))
        elif entry.startswith("GPU-"):
            visible.append(DeviceChoice(uuid_prefix=entry, source=source))
        else:
            raise DeviceSelectionError(
                f"CUDA_VISIBLE_DEVICES={value!r}: entry {entry!r} is neither a device index nor a GPU-… UUID "
                "(MIG instances are not read here). Give an index (0) or a UUID (nvidia-smi -L), or '' or -1 "
                "to hide every GPU"
            )
    if len(visible) > ordinal:
        return visible[ordinal]
    if ordinal == 0:
        return None
    raise DeviceSelectionError(f"CUDA ordinal {ordinal} asked for, but CUDA_VISIBLE_DEVICES={value!r} shows "
                               f"{len(visible)} GPU(s)")


def open_gpu(env: Mapping[str, str] | None = None, *, ordinal: int = 0) -> Gpu | None:
    """Initialise NVML and open the device `choose_device` names; the caller closes it.

    Returns None without NVML, a driver or a visible GPU (the reason is logged at debug level).

    Raises:
        DeviceSelectionError: as `choose_device`, or NVML has no device with that index or UUID.
    """
    choice = choose_device(env, ordinal=ordinal)
    if choice is None:
        log.debug("CUDA_VISIBLE_DEVICES hides every GPU: no NVML device")
        return None
    nvml = _init_nvml()
    if nvml is None:
        return None
    try:
        index = _resolve(nvml, choice, os.environ if env is None else env)
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        return Gpu(nvml, handle, nvml_index=index, choice=choice)
    except nvml.NVMLError as exc:
        nvml.nvmlShutdown()
        log.debug("NVML cannot open %s: %s", choice.source, exc)
        return None
    except BaseException:
        nvml.nvmlShutdown()
        raise


@contextmanager
def visible_gpu(env: Mapping[str, str] | None = None, *, ordinal: int = 0) -> Iterator[Gpu | None]:
    """`open_gpu` for one block: NVML is shut down when it exits, by an error too."""
    gpu = open_gpu(env, ordinal=ordinal)
    try:
        yield gpu
    finally:
        if gpu is not None:
            gpu.close()


class Gpu:
    """One open NVML device. Reads raise GpuReadError; a reading the board lacks is None."""

    def __init__(self, nvml: Any, handle: Any, *, nvml_index: int, choice: DeviceChoice):
        self._nvml = nvml
        self._handle = handle
        self._open = True
        self.nvml_index = nvml_index
        self.choice = choice

    def __enter__(self) -> Gpu:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut NVML down for this device, once however often it is called."""
        if not self._open:
            return
        self._open = False
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)

    def info(self) -> GpuInfo:
        nv, h = self._nvml, self._handle
        return self._read(lambda: GpuInfo(
            nvml_index=self.nvml_index,
            name=_text(nv.nvmlDeviceGetName(h)),
            uuid=_text(nv.nvmlDeviceGetUUID(h)),
            driver_version=_text(nv.nvmlSystemGetDriverVersion()),
            memory_total_bytes=int(nv.nvmlDeviceGetMemoryInfo(h).total),
            power_limit_w=self._optional(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
            max_sm_clock_mhz=self._optional(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            max_mem_clock_mhz=self._optional(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
        ))

    def uuid(self) -> str:
        return self._read(lambda: _text(self._nvml.nvmlDeviceGetUUID(self._handle)))

    def memory_total_bytes(self) -> int:
        return self._read(lambda: int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).total))

    def memory_used_bytes(self) -> int:
        return self._read(lambda: int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used))

    def compute_pids(self) -> frozenset[int]:
        """Processes holding a compute context on this device."""
        return self._read(lambda: frozenset(
            p.pid for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)))

    def process_memory_bytes(self) -> dict[int, int | None]:
        """Memory each compute process holds on this device; None where NVML cannot tell (containers)."""
        def read() -> dict[int, int | None]:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
            return {p.pid: (m if isinstance(m := getattr(p, "usedGpuMemory", None), int) else None) for p in procs}

        return self._read(read)

    def sample(self) -> GpuSample:
        """Clocks, power, temperature, utilization, memory used, throttle reasons, compute processes, the
        energy counter and the enforced power limit."""
        nv, h = self._nvml, self._handle
        return self._read(lambda: GpuSample(
            sm_clock_mhz=nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            mem_clock_mhz=nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            power_w=self._optional(lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000),
            temperature_c=nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            utilization_pct=self._optional(lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),
            memory_used_bytes=int(nv.nvmlDeviceGetMemoryInfo(h).used),
            throttle_mask=self._optional(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h)) or 0,
            compute_processes=self._optional(lambda: len(nv.nvmlDeviceGetComputeRunningProcesses(h))),
            energy_mj=self._optional(lambda: int(nv.nvmlDeviceGetTotalEnergyConsumption(h))),
            power_limit_w=self._optional(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
        ))

    def _read(self, read: Callable[[], _T]) -> _T:
        if not self._open:
            raise GpuReadError(f"GPU {self.nvml_index} was read after close()")
        try:
            return read()
        except self._nvml.NVMLError as exc:
            raise GpuReadError(f"NVML read failed on GPU {self.nvml_index} ({self.choice.source}): {exc}") from exc

    def _optional(self, read: Callable[[], _T]) -> _T | None:
        """A reading some boards do not support (power on some SKUs): None instead of an error."""
        try:
            return read()
        except self._nvml.NVMLError_NotSupported:
            return None


def _init_nvml() -> Any:
    """pynvml after a successful nvmlInit, or None where the package, the library or a driver is missing."""
    try:
        import pynvml
    except ImportError:
        log.debug("nvidia-ml-py is not installed: no NVML")
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.debug("NVML unavailable: %s", exc)
        return None
    return pynvml


def _resolve(nv: Any, choice: DeviceChoice, env: Mapping[str, str]) -> int:
    """The NVML index of `choice` (NVML initialised); DeviceSelectionError where this machine lacks it."""
    count = nv.nvmlDeviceGetCount()
    if choice.uuid_prefix is not None:
        uuids = [_text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
        matches = [i for i, u in enumerate(uuids) if u.startswith(choice.uuid_prefix)]
        if len(matches) != 1:
            found = "no GPU" if not matches else f"{len(matches)} GPUs"
            raise DeviceSelectionError(f"{choice.source}: {found} here with a UUID starting "
                                       f"{choice.uuid_prefix!r}; this machine has {uuids}")
        return matches[0]
    index = choice.nvml_index
    if index is None or index >= count:
        raise DeviceSelectionError(f"{choice.source}: GPU index {index}, but NVML sees {count} GPU(s)")
    if count > 1 and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        names = [_text(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
        if len(set(names)) > 1:
            uuids = [_text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
            raise DeviceSelectionError(
                f"{choice.source}: GPU index {index} is ambiguous on mixed GPUs {names}: CUDA orders them "
                "fastest first, NVML by PCI bus. Set CUDA_DEVICE_ORDER=PCI_BUS_ID or name the GPU by UUID "
                f"in CUDA_VISIBLE_DEVICES (one of {uuids})"
            )
    return index


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
