"""RESULTS.md is written from one read of the store, at the ends of the run's stages, not after every trial.

Before: each report re-read the study section by section, with a query per section and two per trial (the
measured table's bench and fidelity rows): 74 queries for the committed levers study's 10 trials, and the
loop wrote it after every trial. The queries are counted on SQLAlchemy's own hook (`before_cursor_execute`,
every engine: Optuna's storage, the results store and eval's store alike).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from sqlalchemy import event

from autoresearch import loop
from autoresearch.__main__ import make_plan
from autoresearch.cli import parse_args
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.study import baseline_trial, is_baseline
from autoresearch.report.results_md import write_report
from autoresearch.report.snapshot import read_measured
from autoresearch.report.store_read import StoreRows, study_in_memory
from eval import EvalStore, GatePolicy
from eval.task_decision import TaskPolicy

from .night_env import MINIMIZING_HOURS, NightEnv

LEVERS = Path(__file__).parents[2] / "examples" / "real-0.5b-levers" / "results.db"
MOST_QUERIES = 16  # one read of each store: Optuna's trials and attrs, the results tables, eval's decisions


class Queries:
    """Counts the statements every SQLAlchemy engine sends while it is open."""

    def __init__(self):
        self.count = 0

    def _seen(self, *_args) -> None:
        self.count += 1

    def __enter__(self) -> Queries:
        event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", self._seen)
        return self

    def __exit__(self, *_exc) -> None:
        event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", self._seen)


def _levers(tmp_path):
    shutil.copy(LEVERS, tmp_path / "results.db")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    plan = make_plan(parse_args(["report", "--study", "lever-study", "--storage", url,
                                                "--results-md", str(tmp_path / "RESULTS.md")]))
    return plan, optuna.load_study(study_name="lever-study", storage=url), ResultsDB(url), EvalStore(url)


def _queries_to_write(plan, study, db, store) -> int:
    with Queries() as queries:
        write_report(plan, study, db, store)
    return queries.count


def _more_trials(study: optuna.Study, db: ResultsDB, n: int) -> None:
    """n more measured candidates, each as the loop stores one: a COMPLETE trial, its bench and fidelity rows."""
    base = baseline_trial(study)
    model = next(t for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)) if not is_baseline(t))
    bench = db.measurements(study=study.study_name, kind="bench", trial=model.number)[0]
    fidelity = db.measurements(study=study.study_name, kind="fidelity", trial=base.number)[-1]
    for _ in range(n):
        study.add_trial(optuna.trial.create_trial(
            params=model.params, distributions=model.distributions, values=model.values,
            user_attrs=model.user_attrs, system_attrs=model.system_attrs))
        number = len(study.trials) - 1
        for row in (bench, fidelity):
            db.add_measurement(study=study.study_name, trial=number, kind=row["kind"],
                               config_digest=row["config_digest"], payload=row["payload"], launch=row["launch"])


def test_results_md_is_written_from_a_few_queries_however_many_trials_the_study_holds(tmp_path):
    plan, study, db, store = _levers(tmp_path)
    assert _queries_to_write(plan, study, db, store) <= MOST_QUERIES  # before: 74 on these 10 trials
    again = _queries_to_write(plan, study, db, store)  # as the loop's next report: its stores open already
    _more_trials(study, db, 6)
    assert _queries_to_write(plan, study, db, store) == again  # before: 12 more (two per trial)
    measured = plan.results_md.read_text()
    assert all(f"| {n} |" in measured for n in range(10, 16))  # the report did read the new trials


def test_the_one_read_answers_each_section_as_the_stores_do(tmp_path):
    """The copies answer what the sections ask as the stores themselves do (a read the copies answered
    otherwise would change RESULTS.md without a word)."""
    plan, study, db, _ = _levers(tmp_path)
    rows, copy = StoreRows.read(db, "lever-study"), study_in_memory(study)
    for kind in (None, "bench", "fidelity", "finalist_bench", "minimize_bench", "nothing"):
        for trial in (None, 0, 3):
            assert rows.measurements(study="lever-study", kind=kind, trial=trial) == \
                db.measurements(study="lever-study", kind=kind, trial=trial)
    assert rows.provenance(study="lever-study") == db.provenance(study="lever-study")
    assert rows.finalists(study="lever-study") == db.finalists(study="lever-study")
    base = baseline_trial(study).user_attrs["config"]
    assert read_measured(copy, rows, "lever-study", base) == read_measured(study, db, "lever-study", base)
    assert [t.number for t in copy.best_trials] == [t.number for t in study.best_trials]
    assert copy.user_attrs == study.user_attrs and copy.study_name == study.study_name
    with pytest.raises(ValueError, match="not 'other'"):
        rows.measurements(study="other")


@pytest.mark.slow
def test_a_run_writes_results_md_at_the_ends_of_its_stages_not_after_each_trial(tmp_path, small_model,
                                                                                monkeypatch):
    env = NightEnv.make(tmp_path, small_model, monkeypatch, hours=MINIMIZING_HOURS,
                        gate_policy=GatePolicy(tasks=TaskPolicy(mode="smoke")))
    written: list[int] = []

    def counted(plan, study, db, store, **kw):
        written.append(len(study.trials))
        return write_report(plan, study, db, store, **kw)

    monkeypatch.setattr(loop, "write_report", counted)
    env.tier.judgment_s = 400.0  # about the plan's: the minimization runs (a judgment 1.6x the plan's cuts it first)
    assert env.run() == 0
    trials = len(env.study().trials)
    assert trials >= 5
    # the search's end, the finalists', the minimization's and the night's: before, one more per trial
    assert len(written) == 4 and written[0] == trials
    assert "## The night as run" in env.plan.results_md.read_text()
