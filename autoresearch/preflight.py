"""What the loop checks before its first launch: the paths it writes, the engine, a pinned port.

Each would otherwise be found late: a read-only results folder as a raw OSError, an unwritable
RESULTS.md after the first trial's minutes, an engine that cannot run here as a crashed server.
Each is one PlanError line that says what to change; nothing is created when one fails.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

from autoresearch.errors import PlanError
from autoresearch.plan import RunPlan

__all__ = ["preflight"]


def preflight(plan: RunPlan) -> None:
    """Raise PlanError for the first thing that would stop this run after it launched something."""
    database = _sqlite_path(plan.storage_url)
    for path, what, flag in (
        (plan.results_md, "the report", "--results-md"),
        (plan.results_md.with_name(plan.results_md.stem + "-pareto.png"), "the report's plot", "--results-md"),
        *([(database, "the results database", "--storage")] if database is not None else []),
    ):
        _check_writable_file(path, what, flag)
    _check_writable_dir(plan.workdir, "server logs and suite runs", "--workdir")
    if database is not None:  # SQLite writes its -wal and -shm files beside the database
        _check_writable_dir(database.parent, "the results database's journal", "--storage")
    _check_engine(plan.engine)
    if plan.port:
        from serving.launcher import port_is_free

        if not port_is_free("127.0.0.1", plan.port):
            raise PlanError(f"--port {plan.port} is in use by another program; stop it, or leave out --port "
                            "(a free port per launch)")


def _sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite:///"):
        return None
    return Path(url.removeprefix("sqlite:///")).resolve()


def _first_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_writable_dir(path: Path, what: str, flag: str) -> None:
    """`path` exists and takes a new file, or can be made under its first existing ancestor."""
    existing = _first_existing(path.resolve())
    if not existing.is_dir():
        raise PlanError(f"cannot write {what} under {path}: {existing} is not a folder; pass another {flag}")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise PlanError(f"cannot write {what} under {path}: {existing}: {exc.strerror or exc}; "
                        f"pass another {flag}") from exc


def _check_writable_file(path: Path, what: str, flag: str) -> None:
    if path.is_dir():
        raise PlanError(f"cannot write {what} to {path}: it is a folder; pass another {flag}")
    if path.exists():
        if not os.access(path, os.W_OK) and os.geteuid() != 0:
            raise PlanError(f"cannot write {what} to {path}: permission denied; pass another {flag}")
        try:
            with open(path, "ab"):
                pass
        except OSError as exc:
            raise PlanError(f"cannot write {what} to {path}: {exc.strerror or exc}; pass another {flag}") from exc
        return
    _check_writable_dir(path.parent, what, flag)


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
