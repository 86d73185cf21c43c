"""The VRAM budget and the fit check that rejects configurations before any server starts.

The budget is the GPU's memory (`--vram 24GiB` emulates an RTX 3090 on a larger card) less a
reserve for what torch's allocator never sees: the CUDA context, cuBLAS and kernel images.

Usage:
    budget = Budget(vram_bytes=parse_bytes("24GiB"))
    check = check_fit(memory.estimate(config), budget, calibration)
    check.fits, check.excess_bytes          # excess <= 0 is feasible: use it as an Optuna constraint
    require_fit(memory.estimate(config), budget)   # raises DoesNotFit
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gpu import DeviceSelectionError, GpuReadError, visible_gpu
from search_space.calibration import Calibration
from search_space.errors import BudgetError, DoesNotFit
from search_space.memory import MemoryEstimate
from serving import units
from serving.errors import ConfigError

__all__ = ["DEFAULT_RESERVE_BYTES", "Budget", "FitCheck", "check_fit", "gpu_memory_bytes", "parse_bytes",
           "require_fit"]

log = logging.getLogger(__name__)

# CUDA context with torch and exllamav3's kernels loaded, plus allocator slack; the same size as
# exllamav3's own default load reserve (Model.load reserve_per_device=0.5 GB).
DEFAULT_RESERVE_BYTES = 512 * 1024**2

def parse_bytes(text: str) -> int:
    """'24GiB' -> 25769803776 (serving.units' reading: binary and decimal units, or bytes), positive.

    Raises:
        BudgetError: the text is not a positive size.
    """
    try:
        value = units.parse_bytes(text)
    except ConfigError as exc:
        raise BudgetError(f"cannot read {text!r} as a size; write e.g. 24GiB, 23.5GiB, 24000MB or a byte count") from exc
    if value <= 0:
        raise BudgetError(f"a VRAM budget must be positive, got {text!r}")
    return value


def gpu_memory_bytes() -> int | None:
    """Total memory of the GPU this process would use (gpu.device's rule), or None where NVML has none.

    Raises:
        BudgetError: CUDA_VISIBLE_DEVICES names no GPU of this machine.
    """
    try:
        with visible_gpu() as gpu:
            return None if gpu is None else gpu.memory_total_bytes()
    except DeviceSelectionError as exc:
        raise BudgetError(f"cannot read the VRAM budget from the GPU: {exc}; or pass --vram") from exc
    except GpuReadError as exc:
        log.debug("NVML has no GPU memory to report: %s", exc)
        return None


@dataclass(frozen=True, slots=True)
class Budget:
    vram_bytes: int
    reserve_bytes: int = DEFAULT_RESERVE_BYTES

    def __post_init__(self) -> None:
        if self.vram_bytes <= self.reserve_bytes:
            raise BudgetError(f"a VRAM budget of {self.vram_bytes} bytes leaves nothing after the "
                              f"{self.reserve_bytes}-byte reserve")

    @property
    def usable_bytes(self) -> int:
        return self.vram_bytes - self.reserve_bytes


@dataclass(frozen=True, slots=True)
class FitCheck:
    """A prediction held against a budget."""

    estimate: MemoryEstimate
    predicted_peak_bytes: int  # the estimate's peak after calibration
    budget: Budget

    @property
    def excess_bytes(self) -> int:
        """How far the calibrated peak exceeds the usable budget; <= 0 fits."""
        return self.predicted_peak_bytes - self.budget.usable_bytes

    @property
    def fits(self) -> bool:
        return self.excess_bytes <= 0


def check_fit(estimate: MemoryEstimate, budget: Budget, calibration: Calibration | None = None) -> FitCheck:
    calibration = calibration or Calibration()
    return FitCheck(estimate=estimate, predicted_peak_bytes=calibration.apply(estimate.peak_bytes), budget=budget)


def require_fit(estimate: MemoryEstimate, budget: Budget, calibration: Calibration | None = None) -> FitCheck:
    """Raises DoesNotFit, with the numbers, when the calibrated peak exceeds the usable budget."""
    check = check_fit(estimate, budget, calibration)
    if not check.fits:
        raise DoesNotFit(
            f"predicted peak {_gib(check.predicted_peak_bytes)} exceeds the usable "
            f"{_gib(budget.usable_bytes)} ({_gib(budget.vram_bytes)} less a {_gib(budget.reserve_bytes)} reserve); "
            f"components: " + ", ".join(f"{k} {_gib(v)}" for k, v in estimate.components().items()),
            excess_bytes=check.excess_bytes,
        )
    return check


def _gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB"
