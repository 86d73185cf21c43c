"""What a stored study says of itself, read before a plan is made and without creating anything.

`report` and `export` name their study from the database when it holds one (`study_to_read`); a
resumed run keeps the decode mode its study was measured with (`stored_decode_until`), also when that
study predates the setting: a bench plan stored without `decode_until` was measured to a fixed length.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import optuna

from autoresearch.ground.errors import PlanError
from results import readable_storage

__all__ = ["sqlite_path", "stored_concurrency", "stored_decode_until", "stored_study", "study_to_read"]


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite storage URL (None for any other database, and for a URI such as an in-memory copy)."""
    if not url.startswith("sqlite:///") or "?" in url:
        return None
    return Path(url.removeprefix("sqlite:///")).resolve()


def study_to_read(storage_url: str, shown: str, name: str | None = None) -> str:
    """The study `name` in `storage_url`, or its one study when no name is given (the database named as the user
    gave it, `shown`); PlanError listing them when it holds none, several, or not `name`: which one a report,
    an export or a plan is of is the user's to say."""
    names = sorted(optuna.get_all_study_names(storage_url))
    if name is not None and name in names:
        return name
    if not names:
        raise PlanError(f"{shown} holds no study: run the loop first, or pass --storage")
    if name is not None:
        raise PlanError(f"{shown} holds no study {name!r}; it holds {', '.join(names)}")
    if len(names) == 1:
        return names[0]
    raise PlanError(f"{shown} holds {len(names)} studies ({', '.join(names)}): pass --study NAME")


def stored_study(storage_url: str, name: str) -> dict | None:
    """The user attributes of study `name` when it exists with its model recorded; None otherwise. A SQLite
    file is read from a snapshot: one that does not exist is not created (a refused run leaves nothing
    behind), and one in a read-only folder is read (the run's preflight then says what to change)."""
    try:
        with contextlib.nullcontext(storage_url) if sqlite_path(storage_url) is None \
                else readable_storage(storage_url) as url:
            attrs = optuna.load_study(study_name=name, storage=url).user_attrs
    except (FileNotFoundError, KeyError):
        return None
    return attrs if "model" in attrs and "engine" in attrs and "suite" in attrs else None


def stored_decode_until(attrs: dict | None) -> str | None:
    """How the stored study timed decode ("length" or "eos"); None for no study or one with no bench plan.
    A plan stored without the key is from before "eos" existed (BenchPlan.to_dict leaves "length" out)."""
    plan = (attrs or {}).get("bench_plan")
    return plan.get("decode_until", "length") if isinstance(plan, dict) else None


def stored_concurrency(attrs: dict | None) -> int | None:
    """The suite's answers in flight the stored study was measured at (autoresearch.trial.suite_concurrency); None
    for no study, or one at its suite's own number (stored before the number was decided per study)."""
    settings = (attrs or {}).get("settings")
    return settings.get("--suite-concurrency") if isinstance(settings, dict) else None
