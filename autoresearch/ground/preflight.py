"""What the loop checks before its first launch: the paths it writes, the engine, a pinned port.

Each would otherwise be found late: a read-only results folder as a raw OSError, an unwritable
RESULTS.md after the first trial's minutes, an engine that cannot run here as a crashed server.
Each is one PlanError line that says what to change; nothing is created when one fails.
"""

from __future__ import annotations

import importlib.util

from autoresearch.ground.errors import PlanError
from autoresearch.ground.outputs import check_writable, plot_path
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.stored_study import sqlite_path

__all__ = ["preflight"]


def preflight(plan: RunPlan) -> None:
    """Raise PlanError for the first thing that would stop this run after it launched something."""
    database = sqlite_path(plan.storage_url)
    check_writable([
        (plan.results_md, "the report", "--results-md"),
        (plot_path(plan.results_md), "the report's plot", "--results-md"),
        *([(database, "the results database", "--storage")] if database is not None else []),
        (plan.workdir, "server logs and suite runs", "--workdir", "folder"),
        # SQLite writes its -wal and -shm files beside the database
        *([(database.parent, "the results database's journal", "--storage", "folder")] if database is not None else []),
    ])
    _check_engine(plan.engine)
    if plan.port:
        from serving.launcher import port_is_free

        if not port_is_free("127.0.0.1", plan.port):
            raise PlanError(f"--port {plan.port} is in use by another program; stop it, or leave out --port "
                            "(a free port per launch)")


def _check_engine(engine: str) -> None:
    """The exllamav3 engine needs exllamav3 and a CUDA GPU; without either its server could only crash."""
    if engine != "exllamav3":
        return
    if importlib.util.find_spec("exllamav3") is None:
        raise PlanError("the exllamav3 engine cannot run here: exllamav3 is not installed (pip install exllamav3); "
                        "a model that is not EXL3 runs with --engine transformers")
    from search_space import gpu_memory_bytes
    from search_space.errors import BudgetError

    try:
        total = gpu_memory_bytes()
    except BudgetError as exc:
        raise PlanError(f"the exllamav3 engine cannot run here: {exc}") from exc
    if total is None:
        raise PlanError("the exllamav3 engine cannot run here: no CUDA GPU is visible (NVML finds none; "
                        "check CUDA_VISIBLE_DEVICES); a model that is not EXL3 runs with --engine transformers")
