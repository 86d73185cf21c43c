"""The memory model's calibration for one study: its predictions against the peaks its servers reported.

Each launched trial stores a `memory` measurement (the model's predicted peak and the engine's own
measured peak, from /v1/server_info after the bench); the feasibility stage of later trials holds
their predictions, so calibrated, against the VRAM budget.
"""

from __future__ import annotations

from autoresearch.ground.db import ResultsDB
from search_space import Calibration, MemoryObservation

__all__ = ["memory_calibration"]


def memory_calibration(db: ResultsDB, study: str) -> Calibration | None:
    """The calibration fitted to the study's memory measurements so far (None before any)."""
    rows = db.measurements(study=study, kind="memory")
    observations = [MemoryObservation(predicted_peak_bytes=r["payload"]["predicted_peak_bytes"],
                                      measured_peak_bytes=r["payload"]["measured_peak_bytes"])
                    for r in rows if r["payload"].get("measured_peak_bytes")]
    return Calibration.fit(observations) if observations else None
