"""The loop's minimization wired to the study: launches stored under their labels and replayed on resume,
request time from the baseline's bench record, the TabbyAPI subset measured, RESULTS.md and the export.

RecordedLaunches is a test double for a GPU launch (it replaces `_Launcher._bench`, the one place that
starts a server): it answers with real bench records of the committed drafting study
(examples/real-0.5b-own-answers, two fresh launches each of its champion and its baseline), the champion's
where the scripted rule says the configuration drafts, the baseline's elsewhere.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import pytest

from autoresearch.__main__ import build_parser, main, make_plan
from autoresearch.change_costs import MINIMIZATION_ATTR
from autoresearch.db import ResultsDB
from autoresearch.finalists import Champion
from autoresearch.minimal_champion import KIND, _Launcher, minimize_champion
from bench import BenchResult

EXAMPLE = Path(__file__).parents[2] / "examples" / "real-0.5b-own-answers" / "results.db"


class RecordedLaunches:
    """Real bench records by config: the champion's launches when it drafts n-gram with hybrid drafts on top."""

    def __init__(self, db: ResultsDB):
        rounds = [r for r in db.measurements(study="drafting-eos", kind="finalist_bench") if r["payload"]["round"] == 2]
        self.records = {(r["payload"]["trial"], r["launch"]): BenchResult.from_dict(r["payload"]) for r in rounds}
        self.calls: list[str] = []

    def __call__(self, config, label):
        self.calls.append(label)
        drafts = config.args.draft_mode == "ngram" and config.args.hybrid_draft_tokens > 0
        return self.records[(18 if drafts else 0, int(label.rsplit("/", 1)[-1]))]


@pytest.fixture
def study_copy(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "results.db")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    plan = make_plan(build_parser().parse_args(["export", "--study", "drafting-eos", "--storage", url]))
    return plan, optuna.load_study(study_name="drafting-eos", storage=url), ResultsDB(url), url


def test_the_champion_is_minimized_its_launches_stored_and_a_resumed_run_replays_them(study_copy, monkeypatch,
                                                                                       tmp_path, capsys):
    plan, study, db, url = study_copy
    recorded = RecordedLaunches(db)
    monkeypatch.setattr(_Launcher, "_bench", lambda _self, config, label: recorded(config, label))
    stored = study.user_attrs["champion"]
    champion = Champion(**{k: stored[k] for k in Champion.__dataclass_fields__ if k in stored})  # stored before #27
    result = minimize_champion(plan, study, db, champion)

    assert set(result.kept) == {"draft_mode", "hybrid_draft_tokens"}
    assert result.costs["draft_mode"].verdict == "slower" and result.costs["prefill_cooldown"].verdict == "same"
    assert result.complete and result.launches <= result.bound
    # hybrid drafts have no TabbyAPI key: what TabbyAPI runs was measured too, and is slower
    subset = result.extra["tabbyapi_subset"]
    assert subset["cost"]["verdict"] == "slower"
    assert len(db.measurements(study="drafting-eos", kind=KIND)) == len(recorded.calls) == result.launches + 4
    stored = optuna.load_study(study_name="drafting-eos", storage=url).user_attrs[MINIMIZATION_ATTR]
    assert stored["request_mix"]["kinds"][0]["kind"] == "math"

    # resumed with the decision gone: every launch is answered from the database, none is made again
    study.set_user_attr(MINIMIZATION_ATTR, None)
    again = minimize_champion(plan, study, db, champion)
    assert again == result and len(recorded.calls) == result.launches + 4

    assert main(["report", "--study", "drafting-eos", "--storage", url, "--results-md",
                 str(tmp_path / "RESULTS.md")]) == 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## What each change bought (minimization)" in text and "`hybrid_draft_tokens=4`" in text
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--format", "tabbyapi", "--full-champion",
                 "--out", str(tmp_path / "tabby")]) == 0
    not_expressed = (tmp_path / "tabby" / "NOT-EXPRESSED.md").read_text()
    assert "`hybrid_draft_tokens=4` -> `0`" in not_expressed and "request time +" in not_expressed
    assert f"measured the subset of the minimal champion (`{subset['digest'][:12]}`)" in not_expressed


def test_a_baseline_champion_is_not_minimized(study_copy):
    plan, study, db, _ = study_copy
    baseline = Champion(trial=0, config={"engine": "exllamav3"}, decode_tok_per_s=1.0, prefill_tok_per_s=1.0,
                        speedup=1.0, is_baseline=True)
    assert minimize_champion(plan, study, db, baseline) is None


def test_minimize_is_on_with_a_model_off_when_asked_and_its_launch_counts_must_be_positive(tmp_path, monkeypatch):
    from autoresearch.errors import PlanError
    from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

    checkpoint = write_exl3_checkpoint(tmp_path / "q27", QWEN38_27B, sparse=True)  # headers only: nothing launches
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path / "cache"))
    argv = ["--model", str(checkpoint), "--suite", "none", "--trials", "3", "--vram", "24GiB"]
    plan = make_plan(build_parser().parse_args(argv))
    assert plan.minimize and (plan.minimize_launches, plan.minimize_max_launches) == (2, None)
    assert not make_plan(build_parser().parse_args([*argv, "--no-minimize"])).minimize
    with pytest.raises(PlanError, match="--minimize-launches"):
        make_plan(build_parser().parse_args([*argv, "--minimize-launches", "0"]))
