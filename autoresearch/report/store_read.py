"""One read of a study's store for one report: Optuna's study and the results tables, each read once.

Why: RESULTS.md's sections each read what they show (the measured table a bench and a fidelity row per
trial, drift its checks, energy its launches, ...). Against the database that is a query per section and
per trial, re-read for every report, so the cost grew with the night. Here the study is copied once into
memory (its trials, user attrs and directions: a real Optuna study, so the Pareto front is Optuna's own)
and the study's rows of the results tables are read once (`StoreRows`, which answers the reads the
sections make, as ResultsDB does); every section then reads the copies.

Usage:
    study, db, store = study_in_memory(study), StoreRows.read(db, study.study_name), EvalReads(store)
"""

from __future__ import annotations

import logging
from typing import Any

import optuna

from autoresearch.ground.db import ResultsDB
from eval import EvalStore, SuiteResult

__all__ = ["EvalReads", "StoreRows", "study_in_memory"]


def study_in_memory(study: optuna.Study) -> optuna.Study:
    """The study as stored now, in memory: the same name, directions, user attrs and trials (numbered alike)."""
    trials = study.get_trials(deepcopy=False)
    quiet = logging.getLogger("optuna.storages._in_memory")  # "A new study created in memory", every report
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        copy = optuna.create_study(storage=optuna.storages.InMemoryStorage(), study_name=study.study_name,
                                   directions=study.directions)
    finally:
        quiet.setLevel(level)
    for key, value in study.user_attrs.items():
        copy.set_user_attr(key, value)
    copy.add_trials(trials)
    return copy


class StoreRows:
    """One study's rows of the results tables (measurements, provenance, finalists), read once; the reads
    ResultsDB answers (`measurements`, `provenance`, `finalists`) answered from them, in the same order."""

    def __init__(self, study: str, measurements: list[dict[str, Any]], provenance: list[dict[str, Any]],
                 finalists: list[dict[str, Any]]):
        self.study = study
        self._measurements, self._provenance, self._finalists = measurements, provenance, finalists

    @classmethod
    def read(cls, db: ResultsDB, study: str) -> StoreRows:
        return cls(study, db.measurements(study=study), db.provenance(study=study), db.finalists(study=study))

    def _own(self, study: str) -> None:
        if study != self.study:
            raise ValueError(f"these rows are study {self.study!r}'s, not {study!r}'s")

    def measurements(self, *, study: str, kind: str | None = None, trial: int | None = None,
                     config_digest: str | None = None) -> list[dict[str, Any]]:
        self._own(study)
        return [r for r in self._measurements if (kind is None or r["kind"] == kind)
                and (trial is None or r["trial"] == trial)
                and (config_digest is None or r["config_digest"] == config_digest)]

    def provenance(self, *, study: str) -> list[dict[str, Any]]:
        self._own(study)
        return list(self._provenance)

    def finalists(self, *, study: str) -> list[dict[str, Any]]:
        self._own(study)
        return list(self._finalists)


class EvalReads:
    """The eval store as one report reads it: its gate decisions read once per model, suite results as asked."""

    def __init__(self, store: EvalStore):
        self._store = store
        self._decisions: dict[str, list[dict[str, Any]]] = {}

    def decision_rows(self, model_manifest_hash: str) -> list[dict[str, Any]]:
        if model_manifest_hash not in self._decisions:
            self._decisions[model_manifest_hash] = self._store.decision_rows(model_manifest_hash)
        return self._decisions[model_manifest_hash]

    def load_suite_result(self, run_id: str) -> SuiteResult:
        return self._store.load_suite_result(run_id)
