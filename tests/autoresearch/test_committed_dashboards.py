"""optuna-dashboard over every committed results.db: its "Best Trial" names only configurations that passed, and
the trials that did not (rejected, or their task tier pending) show their measured speeds as user attributes.

optuna-dashboard 0.21 names as "Best Trial" the Pareto front of every COMPLETE trial's values, constraints ignored,
so only a trial that passed may keep its speeds as values (autoresearch.ground.speeds); a study stored before that
rule is re-stored by autoresearch.checks.verdicts.store_unpassed_without_values, which the loop runs on opening a
study and which re-stored the committed examples. Real parts: the committed databases (copied), Optuna,
optuna-dashboard's own WSGI app over loopback HTTP.
"""

from __future__ import annotations

import json
import math
import shutil
import threading
import urllib.request
import warnings
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import optuna
import pytest

from autoresearch.checks.verdicts import store_unpassed_without_values
from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.speeds import SPEED_ATTRS, speeds
from autoresearch.ground.study import CONSTRAINTS, feasible
from autoresearch.measures.objectives import NOT_MEASURED

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted(ROOT.glob("examples/**/results.db"))


def _passed(trial: optuna.trial.FrozenTrial) -> bool:
    """What the loop recorded: its outcome (a trial stored before outcomes existed: its constraints)."""
    outcome = TrialOutcome.of(trial)
    return feasible(trial) if outcome is None else outcome in (TrialOutcome.PASSED, TrialOutcome.BASELINE)


def _detail(storage_url: str, study_id: int) -> dict:
    """GET /api/studies/<id> from optuna-dashboard's own app (the one `optuna-dashboard <storage>` serves)."""
    from optuna_dashboard import wsgi

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    server = make_server("127.0.0.1", 0, wsgi(storage_url), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/api/studies/{study_id}",
                                    timeout=60) as response:
            return json.load(response)
    finally:
        server.shutdown()
        server.server_close()


def test_every_example_database_is_found():
    assert len(COMMITTED) >= 12 and ROOT / "examples/q27-table-study/results.db" in COMMITTED


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.parent.relative_to(ROOT / "examples")) for p in COMMITTED])
def test_the_dashboard_names_as_best_only_what_passed_and_shows_every_measured_speed(tmp_path, path):
    """Before: examples/q27-table-study's Best Trial was trials 4 and 5, both rejected by the fidelity gate, while
    its RESULTS.md crowns the baseline."""
    shutil.copy(path, tmp_path / "results.db")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    for summary in optuna.get_all_study_summaries(url):
        study = optuna.load_study(study_name=summary.study_name, storage=url)
        trials = {t.number: t for t in study.get_trials()}
        detail = _detail(url, summary._study_id)
        best = [t["number"] for t in detail["best_trials"]]
        assert best and all(_passed(trials[n]) for n in best), (summary.study_name, best)
        shown = {t["number"]: t for t in detail["trials"]}
        for number, trial in trials.items():
            measured = speeds(trial)
            if measured is None:
                continue
            attrs = {a["key"]: a["value"] for a in shown[number]["user_attrs"]}
            assert tuple(float(attrs[k]) for k in SPEED_ATTRS) == pytest.approx(measured), (summary.study_name, number)
            if trial.state == optuna.trial.TrialState.COMPLETE and not _passed(trial):
                assert all(v is None or v == "-inf" or not math.isfinite(float(v)) for v in shown[number]["values"])
        sortable = {a["key"]: a["sortable"] for a in detail["union_user_attrs"]}
        assert all(sortable.get(k, True) for k in SPEED_ATTRS)  # the table sorts by them


def _old_study(tmp_path) -> optuna.Study:
    """A study as the loop stored it before a rejected trial kept NOT_MEASURED as its values."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(study_name="old", storage=f"sqlite:///{tmp_path / 'results.db'}",
                                    directions=["maximize", "maximize"])
    ok, rejected = dict.fromkeys(CONSTRAINTS, -1.0), {**dict.fromkeys(CONSTRAINTS, -1.0), "fidelity": 1.0}
    for values, constraints, attrs in (
            ((100.0, 1000.0), ok, {"outcome": "baseline", "decode_tok_per_s": 100.0, "prefill_tok_per_s": 1000.0}),
            ((150.0, 1500.0), rejected, {"outcome": "gate_failed_fidelity"}),  # older still: no speed attrs
            ((140.0, 1400.0), {k: v for k, v in ok.items() if k != "tasks"}, {"outcome": "tasks_pending"}),
            ((120.0, 1100.0), ok, {"outcome": "passed", "decode_tok_per_s": 120.0, "prefill_tok_per_s": 1100.0}),
            ((200.0, 2000.0), rejected, {}),  # stored before outcomes: its violated constraint says so
            ((90.0, 900.0), {k: v for k, v in ok.items() if k != "measured"}, {})):  # ...and nothing says it failed
        study.add_trial(optuna.trial.create_trial(values=list(values), constraints=constraints, user_attrs=attrs))
    return study


def test_a_study_stored_before_not_measured_is_re_stored_its_speeds_kept(tmp_path):
    study = _old_study(tmp_path)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    assert [t["number"] for t in _detail(url, study._study_id)["best_trials"]] == [4]  # rejected, fastest
    assert store_unpassed_without_values(study) == [1, 2, 4]
    assert [t["number"] for t in _detail(url, study._study_id)["best_trials"]] == [3]
    trials = optuna.load_study(study_name="old", storage=url).get_trials()
    assert [tuple(t.values) for t in trials] == [(100.0, 1000.0), NOT_MEASURED, NOT_MEASURED, (120.0, 1100.0),
                                                 NOT_MEASURED, (90.0, 900.0)]
    assert [speeds(t) for t in trials] == [(100.0, 1000.0), (150.0, 1500.0), (140.0, 1400.0), (120.0, 1100.0),
                                           (200.0, 2000.0), (90.0, 900.0)]
    assert store_unpassed_without_values(study) == []  # once
