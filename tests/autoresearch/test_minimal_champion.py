"""The loop's minimization wired to the study: launches stored under their labels and replayed on resume,
request time from the baseline's bench record, the TabbyAPI subset measured, RESULTS.md and the export.

RecordedLaunches is a test double for a GPU launch (it replaces `_Launcher._bench`, the one place that
starts a server): it answers with real bench records of the committed drafting study
(examples/real-0.5b-own-answers, two fresh launches each of its champion and its baseline), the champion's
where the scripted rule says the configuration drafts, the baseline's elsewhere.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import optuna
import pytest

from autoresearch.__main__ import main, make_plan
from autoresearch.champion.change_costs import MINIMIZATION_ATTR
from autoresearch.champion.minimal_champion import KIND, _Launcher, minimize_champion
from autoresearch.champion.minimization import Minimization
from autoresearch.cli import parse_args
from autoresearch.crown.finalists import Champion
from autoresearch.ground.db import ResultsDB
from bench import BenchResult
from serving.config import ServingConfig

EXAMPLE = Path(__file__).parents[2] / "examples" / "real-0.5b-own-answers" / "results.db"


class RecordedLaunches:
    """Real bench records by config: the champion's launches when it drafts n-gram with hybrid drafts on top."""

    def __init__(self, db: ResultsDB):
        rounds = [r for r in db.measurements(study="drafting-eos", kind="finalist_bench") if r["payload"]["round"] == 2]
        self.records = {(r["payload"]["trial"], r["launch"]): BenchResult.from_dict(r["payload"]) for r in rounds}
        self.calls: list[str] = []

    def fast(self, config) -> bool:
        return config.args.draft_mode == "ngram" and config.args.hybrid_draft_tokens > 0

    def __call__(self, config, label):
        self.calls.append(label)
        return self.records[(18 if self.fast(config) else 0, int(label.rsplit("/", 1)[-1]))]


@pytest.fixture
def study_copy(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "results.db")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    plan = make_plan(parse_args(["export", "--study", "drafting-eos", "--storage", url]))
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
    # hybrid drafts have no TabbyAPI key: what TabbyAPI runs was measured too, and is slower. Both subsets were
    # (the minimal champion's and the confirmed one's), alike here: the minimal champion's is kept on the tie
    subset = result.extra["tabbyapi_subset"]
    assert subset["cost"]["verdict"] == "slower" and subset["of"] == "minimal"
    assert [t["of"] for t in subset["tried"]] == ["minimal", "champion"]
    assert subset["tried"][1]["cost"]["request"] == subset["cost"]["request"]
    assert len(db.measurements(study="drafting-eos", kind=KIND)) == len(recorded.calls) == result.launches + 6
    stored = optuna.load_study(study_name="drafting-eos", storage=url).user_attrs[MINIMIZATION_ATTR]
    assert stored["request_mix"]["kinds"][0]["kind"] == "math"

    # resumed with the decision gone: every launch is answered from the database, none is made again
    study.set_user_attr(MINIMIZATION_ATTR, None)
    again = minimize_champion(plan, study, db, champion)
    assert again == result and len(recorded.calls) == result.launches + 6

    assert main(["report", "--study", "drafting-eos", "--storage", url, "--results-md",
                 str(tmp_path / "RESULTS.md")]) == 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## What each change bought (minimization)" in text and "`hybrid_draft_tokens=4`" in text
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--format", "tabbyapi", "--full-champion",
                 "--out", str(tmp_path / "tabby")]) == 0
    not_expressed = (tmp_path / "tabby" / "NOT-EXPRESSED.md").read_text()
    assert "`hybrid_draft_tokens=4` -> `0`" in not_expressed and "request time +" in not_expressed
    # the confirmed champion's subset was measured as well, and the minimal champion's is named beside it
    assert "Measured against the champion (2 fresh launches each" in not_expressed
    assert f"The minimal champion's subset (`{subset['digest'][:12]}`), measured alike" in not_expressed


def test_tabbyapi_gets_the_confirmed_champions_subset_where_it_was_measured_faster(study_copy, monkeypatch, tmp_path,
                                                                                   capsys):
    """The minimal champion's removals were judged with hybrid drafts in place; TabbyAPI has none, and there the
    champion's chunk size is worth keeping again (scripted launches: n-gram with 8192-token chunks as fast as
    the champion). Export then writes the confirmed champion's subset, and names the minimal one's beside it."""
    import yaml

    from autoresearch.champion.minimal_champion import _tabbyapi_subset
    from autoresearch.champion.minimize import Launch

    plan, study, db, url = study_copy
    monkeypatch.setattr(_Launcher, "_bench", lambda _self, config, label: RecordedLaunches(db)(config, label))
    stored = study.user_attrs["champion"]
    champion = Champion(**{k: stored[k] for k in Champion.__dataclass_fields__ if k in stored})
    result = minimize_champion(plan, study, db, champion)
    assert "max_chunk_size" not in result.kept and "hybrid_draft_tokens" in result.kept

    def measure(config, label):
        ngram = config.args.draft_mode == "ngram"
        fast = ngram and (config.args.hybrid_draft_tokens > 0 or config.args.max_chunk_size == 8192)
        jitter = 1 + 0.01 * int(label.rsplit("/", 1)[-1])
        return Launch(request_time_s=(1.0 if fast else 1.5) * jitter, decode_tok_per_s=300 / jitter,
                      prefill_tok_per_s=(9e4 if fast else 5e4) / jitter)

    from serving.config import ServingConfig
    subset = _tabbyapi_subset(ServingConfig.from_dict(stored["config"]), result.minimal, measure, 2, hybrid=False)
    assert subset["of"] == "champion" and subset["cost"]["verdict"] == "same"
    assert {t["of"]: t["cost"]["verdict"] for t in subset["tried"]} == {"minimal": "slower", "champion": "same"}
    # the loop stores it with the minimization; export reads it from there
    attrs = dict(study.user_attrs[MINIMIZATION_ATTR])
    attrs["extra"] = {**attrs["extra"], "tabbyapi_subset": subset}
    study.set_user_attr(MINIMIZATION_ATTR, attrs)
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--format", "tabbyapi",
                 "--out", str(tmp_path / "tabby")]) == 0
    written = yaml.safe_load((tmp_path / "tabby" / "config.yml").read_text())
    assert written["model"]["chunk_size"] == 8192 and written["draft_model"]["draft_mode"] == "ngram"
    not_expressed = (tmp_path / "tabby" / "NOT-EXPRESSED.md").read_text()
    assert f"config digest `{subset['digest'][:12]}`" in not_expressed
    minimal = subset["tried"][0]["digest"][:12]
    assert f"The minimal champion's subset (`{minimal}`), measured alike: request time +50" in not_expressed
    assert "measured faster than the minimal champion's" in capsys.readouterr().out


def test_a_baseline_champion_is_not_minimized(study_copy):
    plan, study, db, _ = study_copy
    baseline = Champion(trial=0, config={"engine": "exllamav3"}, decode_tok_per_s=1.0, prefill_tok_per_s=1.0,
                        speedup=1.0, is_baseline=True)
    assert minimize_champion(plan, study, db, baseline) is None


def test_minimize_is_on_with_a_model_off_when_asked_and_its_launch_counts_must_be_positive(tmp_path, monkeypatch):
    from autoresearch.ground.errors import PlanError
    from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

    checkpoint = write_exl3_checkpoint(tmp_path / "q27", QWEN38_27B, sparse=True)  # headers only: nothing launches
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path / "cache"))
    argv = ["--model", str(checkpoint), "--suite", "none", "--trials", "3", "--vram", "24GiB"]
    plan = make_plan(parse_args(argv))
    assert plan.minimize and (plan.minimize_launches, plan.minimize_max_launches) == (2, None)
    assert not make_plan(parse_args([*argv, "--no-minimize"])).minimize
    with pytest.raises(PlanError, match="--minimize-launches"):
        make_plan(parse_args([*argv, "--minimize-launches", "0"]))


LEVERS = Path(__file__).parents[2] / "examples" / "real-0.5b-levers" / "results.db"


def _stored_plan(url: str):
    """The levers study's plan as read from its database, with the minimization's bound it ran under (30)."""
    return dataclasses.replace(make_plan(parse_args(["export", "--study", "lever-study", "--storage", url])),
                               minimize_max_launches=30)


def _levers(tmp_path) -> tuple[str, optuna.Study, ResultsDB]:
    shutil.copy(LEVERS, tmp_path / "results.db")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    return url, optuna.load_study(study_name="lever-study", storage=url), ResultsDB(url)


def _champion(study: optuna.Study) -> Champion:
    stored = study.user_attrs["champion"]
    return Champion(**{k: stored[k] for k in Champion.__dataclass_fields__ if k in stored})


def _as_stored_before_both_subsets(url: str, study: optuna.Study) -> dict:
    """The levers study as its first minimization call left it (2026-12-03 05:08): the minimal champion's subset
    alone, stored without "tried", and no launch of the confirmed champion's subset."""
    import sqlite3

    stored = dict(study.user_attrs[MINIMIZATION_ATTR])
    subset = stored["extra"]["tabbyapi_subset"]
    minimal = next(t for t in subset["tried"] if t["of"] == "minimal")
    stored["extra"] = {**stored["extra"], "tabbyapi_subset": {k: minimal[k] for k in ("digest", "config", "cost")}}
    study.set_user_attr(MINIMIZATION_ATTR, stored)
    with sqlite3.connect(url.removeprefix("sqlite:///")) as con:
        gone = con.execute("delete from ar_measurements where kind = ? and json_extract(payload, '$.label') like "
                           "'tabbyapi/champion-subset/%'", (KIND,)).rowcount
    assert gone == 2
    return stored


def test_a_minimization_stored_before_both_subsets_were_measured_replays_its_launches_under_todays_rule(
        tmp_path, monkeypatch):
    """The real levers study (examples/real-0.5b-levers) as stored before both subsets were measured: its stored
    launches replay under autoresearch.measures.faster's rule, which calls a removal slower when a point is slower beyond
    its floor. Removing max_chunk_size left request time 'same' (decode-heavy) but prefill at 0.46x [0.29, 0.68]:
    the old rule removed it, today's refuses, and the path goes on in fresh launches (a test double answers them
    with the study's own stored bench record of the champion, so what they decide is the double's). The minimal
    champion changed, so the old one's gate verdict is not carried over to it."""
    url, study, db = _levers(tmp_path)
    before = _as_stored_before_both_subsets(url, study)
    plan = _stored_plan(url)
    assert before["extra"]["gate"]["passed"] and "max_chunk_size" not in before["kept"]
    rows = db.measurements(study="lever-study", kind=KIND)
    champion_bench = next(r["payload"]["bench"] for r in rows if r["payload"]["label"] == "tabbyapi/champion/0")
    fresh: list[str] = []
    monkeypatch.setattr(_Launcher, "_bench",
                        lambda _self, config, label: fresh.append(label) or BenchResult.from_dict(champion_bench))

    result = minimize_champion(plan, study, db, _champion(study))
    assert not any(label.startswith("rank/") for label in fresh)  # the ranking round replays whole
    chunk = next(a for a in result.attempts if a.name == "max_chunk_size")  # tried first on the same configuration
    assert not chunk.accepted and chunk.cost.verdict == "slower" and chunk.cost.prefill[2] < 1
    assert result.kept != tuple(before["kept"]) and "gate" not in result.extra
    assert [t["of"] for t in result.extra["tabbyapi_subset"]["tried"]] == ["minimal", "champion"]


def measure_the_round_it_predates(url: str, monkeypatch) -> tuple[Minimization, list[str]]:
    """The levers study's minimization given the round it predates (the minimal champion against the baseline,
    issue 47) and the fresh launches asked for. A test double for each fresh launch: the study's own stored
    launch of that configuration (step4's of the minimal champion, the TabbyAPI subset's of the baseline), by
    launch index; any other launch fails the test (the rest is replayed from the database)."""
    study = optuna.load_study(study_name="lever-study", storage=url)
    db = ResultsDB(url)
    stored = {(r["payload"]["config_digest"], r["launch"]): r["payload"]["bench"]
              for r in db.measurements(study="lever-study", kind=KIND)}
    fresh: list[str] = []

    def bench(_self, config, label):
        if not label.startswith("baseline/"):
            pytest.fail(f"a stored launch was measured again: {label}")
        fresh.append(label)
        return BenchResult.from_dict(stored[(config.digest, int(label.rsplit("/", 1)[-1]))])

    with monkeypatch.context() as patched:
        patched.setattr(_Launcher, "_bench", bench)
        return minimize_champion(_stored_plan(url), study, db, _champion(study)), fresh


def test_the_levers_study_as_measured_on_the_device_replays_and_exports_the_minimal_champions_subset(
        tmp_path, monkeypatch):
    """The same study after its device call measured the confirmed champion's subset (2026-12-03 06:57): the loop
    launches only the round it did not have then (the minimal champion against the baseline), and the minimal
    champion's subset (exllamav3's defaults, +23.4% request time against the champion) stays the one TabbyAPI
    gets: the confirmed champion's measured +66.4%. The minimal champion is not shown faster than the baseline with
    the study's own launch-to-launch spread, so export keeps the confirmed champion."""
    url, _, _ = _levers(tmp_path)
    result, fresh = measure_the_round_it_predates(url, monkeypatch)
    assert fresh == ["baseline/baseline/0", "baseline/minimal/0", "baseline/baseline/1", "baseline/minimal/1"]
    assert result.extra["gate"]["passed"]  # the same minimal champion: gated once
    # its spread pooled with every measured launch of the baseline the study stored, as the finalists' verdict pools
    # it: six launches whose request times ran 0.73-0.98 s, so two launches a side cannot show its 1.20x (with these
    # two alone, the one-pair floor issue 45 retired, it read "faster"): the confirmed champion stays exported
    study = optuna.load_study(study_name="lever-study", storage=url)
    assert result.versus_baseline.cost.history == 6 and not result.versus_baseline.faster
    assert result.versus_baseline.cost.request[0] == pytest.approx(1.204, abs=5e-4)
    assert result.versus_baseline.cost.request[1] < 1 < result.versus_baseline.cost.request[2]
    assert result.why_not_exported(ServingConfig.from_dict(study.user_attrs["champion"]["config"])) is not None
    subset = result.extra["tabbyapi_subset"]
    assert subset["of"] == "minimal" and subset["digest"].startswith("262f35c71d75")
    costs = {t["of"]: 1 / t["cost"]["request"][0] - 1 for t in subset["tried"]}
    assert costs == {"minimal": pytest.approx(0.234, abs=5e-4), "champion": pytest.approx(0.664, abs=5e-4)}


def test_the_confirmed_champions_tabbyapi_subset_is_written_only_when_shown_faster_than_the_minimals():
    """Before: the subset with the shorter median request time was chosen, however small the gap against the
    noise; now the confirmed champion's subset must be shown faster than the minimal champion's."""
    from autoresearch.champion.minimal_champion import _tabbyapi_subset
    from autoresearch.champion.minimize import Launch
    from autoresearch.champion.tabbyapi import expressible_subset
    from serving.config import ServingConfig

    champion = ServingConfig.from_dict({"engine": "exllamav3", "args": {
        "draft_mode": "ngram", "ngram_match_min": 3, "num_draft_tokens": 10, "hybrid_draft_tokens": 4}})
    minimal = ServingConfig.from_dict({"engine": "exllamav3", "args": {"hybrid_draft_tokens": 4}})
    drafts = expressible_subset(champion, hybrid=True).digest
    noise = iter([1.01, 0.99] * 10)  # launches 2% apart, alternating

    def measure(config, label):  # a test double for fresh launches: the drafting subset 0.5% quicker
        t = (0.995 if config.digest == drafts else 1.0) * next(noise) * (0.5 if config.digest == champion.digest else 1)
        return Launch(request_time_s=t, decode_tok_per_s=100 / t, prefill_tok_per_s=1000.0)

    subset = _tabbyapi_subset(champion, minimal, measure, 2, hybrid=True)
    assert [t["of"] for t in subset["tried"]] == ["minimal", "champion"]
    assert subset["of"] == "minimal" and "not shown faster" in subset["chosen"]
