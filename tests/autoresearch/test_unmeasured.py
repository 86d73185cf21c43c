"""A configuration whose bench leaves any objective point without a valid run is never given a number.

The server under test is a stand-in (tests.bench.fakes.PrefixCachingFakeServer, a named test double
at the HTTP boundary) that ends every multi-token answer after 3 tokens, shorter than the 4 the loop times
decode on: its prefill point measures, its decode point never does.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import optuna
import pytest

from autoresearch.__main__ import main
from autoresearch.ground.model_source import resolve_model
from autoresearch.measures.objectives import NOT_MEASURED
from autoresearch.trial.runner import TrialRunner
from tests.bench.fakes import PrefixCachingFakeServer

from .test_trial_outcomes import _plan, _runner

pytestmark = pytest.mark.slow


class _StandIn:
    """What the loop reads of a launched server: its URL and whether it died."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pid = None  # no process of its own

    def check(self):
        return None


@pytest.fixture
def short_decodes(monkeypatch):
    """Every server the trial runner launches is the stand-in; yields it to inspect its requests."""
    with PrefixCachingFakeServer(decode_ends_after=3) as fake:

        @contextlib.contextmanager
        def server(self, trial, config, launch=0):
            yield _StandIn(fake.url)

        monkeypatch.setattr(TrialRunner, "_server", server)
        yield fake


def test_a_candidate_missing_one_point_is_a_completed_trial_with_a_reason(tmp_path, embedded_study, short_decodes):
    shutil.copy(embedded_study.cwd / "results.db", tmp_path / "results.db")
    name = optuna.get_all_study_names(embedded_study.db_url)[0]
    model = resolve_model(None, locks_dir=tmp_path / "locks", cache_dir=Path(embedded_study.env["AUTORESEARCH_CACHE"]))
    study, _, db, runner = _runner(_plan(tmp_path, model, "transformers", study_name=name, trials=10))
    # 64 and 128 are levers the embedded study measured already: this configuration would be their duplicate
    study.enqueue_trial({**study.get_trials()[0].params, "prefill_chunk_size": 256})
    study.optimize(runner, n_trials=1)
    trial = study.get_trials()[-1]
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.values == list(NOT_MEASURED)  # never 0.0, never the mean of the prefill point alone
    assert trial.user_attrs["outcome"] == "unmeasured"
    assert trial.constraints["measured"] > 0
    (reason,) = trial.user_attrs["reasons"]
    assert reason.startswith("unmeasured: decode_tok_per_s_client@128/rg-math: 0 valid of")
    assert "completion of 3 tokens, expected exactly 4" in reason  # timed past the answer: the server stops at 3
    assert "prefill" not in reason  # the prefill point did measure
    assert "decode_tok_per_s" not in trial.user_attrs and trial.number not in {t.number for t in study.best_trials}
    (row,) = db.measurements(study=name, kind="bench", trial=trial.number)  # what was measured is kept
    assert row["payload"]["prefill"][0]["runs"]


def test_a_baseline_that_cannot_be_measured_stops_the_study(tmp_path, monkeypatch, capsys, loop_cache,
                                                            short_decodes):
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(loop_cache))
    monkeypatch.chdir(tmp_path)
    code = main(["--trials", "3", "--suite-limit", "1", "--suite-max-tokens", "16", "--port", "0"])
    assert code == 1
    err = capsys.readouterr().err
    assert "BaselineUnmeasured: the baseline could not be measured (launch 0): decode_tok_per_s_client@128/rg-math" in err
    assert "completion of 3 tokens" in err
    text = (tmp_path / "RESULTS.md").read_text()
    assert "**The study stopped: the baseline could not be measured (launch 0)" in text
    assert "Not decided yet" in text and "speed-up" not in text.split("## Champion")[1].split("##")[0]
    (study_name,) = optuna.get_all_study_names("sqlite:///results.db")
    trial, *levers = optuna.load_study(study_name=study_name, storage="sqlite:///results.db").get_trials()
    assert trial.state == optuna.trial.TrialState.FAIL and trial.user_attrs["outcome"] == "unmeasured"
    assert all(t.state == optuna.trial.TrialState.WAITING for t in levers)  # enqueued at open, never run
    assert len(short_decodes.bodies) < 40  # it stopped at the first launch's bench: no suite, no second launch


def test_an_underpowered_judged_suite_is_refused_before_anything_launches(tmp_path, monkeypatch, capsys, loop_cache):
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(loop_cache))
    monkeypatch.chdir(tmp_path)
    code = main(["--trials", "3", "--suite-limit", "2", "--task-tier", "judge", "--port", "0"])
    assert code == 2
    err = capsys.readouterr().err
    assert "rg-math: 2 tasks detect a 5% accuracy drop with power 0%" in err and "needs 518 tasks" in err
    assert not (tmp_path / "runs").exists()


def test_a_baseline_whose_answers_all_hit_the_budget_stops_a_judged_study(tmp_path, monkeypatch, capsys, loop_cache):
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(loop_cache))
    monkeypatch.chdir(tmp_path)
    # A claim small enough for 6 tasks (a 50-point drop at 50% power), so the plan is accepted and the
    # baseline runs; the random model's 16-token answers all hit the budget: it cannot be the yardstick.
    code = main(["--trials", "3", "--suite-limit", "6", "--suite-max-tokens", "16", "--port", "0",
                 "--task-tier", "judge", "--task-min-drop", "0.5", "--task-discordance", "0.6",
                 "--task-power", "0.5", "--task-alpha", "0.4"])
    assert code == 1
    err = capsys.readouterr().err
    assert "the baseline's answers cannot be the reference" in err and "hit the 16-token budget" in err
    text = (tmp_path / "RESULTS.md").read_text()
    assert "**The study stopped: the baseline's answers cannot be the reference" in text
    (study_name,) = optuna.get_all_study_names("sqlite:///results.db")
    trial, *levers = optuna.load_study(study_name=study_name, storage="sqlite:///results.db").get_trials()
    assert trial.user_attrs["outcome"] == "baseline_tasks_invalid"
    assert all(t.state == optuna.trial.TrialState.WAITING for t in levers)
