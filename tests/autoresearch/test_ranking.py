"""Finalists and the champion follow the study's one number: request time, or an older study's geometric mean.

The study, the results store and the decisions are real (Optuna on SQLite, autoresearch.crown.finalists);
the finalists' fresh launches are scripted bench results (the launch is the outside boundary).
"""

from __future__ import annotations

import optuna
import pytest

from autoresearch.crown import finalists
from autoresearch.ground.db import ResultsDB
from autoresearch.ground.model_source import ResolvedModel
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.ranked_by import GEOMEAN, RANKED_BY, mark_ranked_by_request_time
from autoresearch.ground.study import CONSTRAINTS
from autoresearch.measures.ranking import RATES, Ranking, save_request_mix
from autoresearch.measures.request_time import RequestKind, RequestMix

from .test_objectives import _result

# A decode-heavy workload: 1,000 prompt tokens, 3,000 answer tokens (a thinking model's request).
MIX = RequestMix((RequestKind(kind="math", context_tokens=1024, weight=1.0, prompt_tokens=1000, answer_tokens=3000),))
BASE, PREFILL_2X, DECODE_1_1X = (40.0, 1000.0), (40.0, 2000.0), (44.0, 1000.0)  # (decode, prefill) tok/s


def _rates(values: tuple[float, float]) -> dict[str, float]:
    return {"decode_tok_per_s_client@1024/math": values[0], "prefill_tok_per_s_server@8192": values[1]}


def _study(tmp_path, *, request_time: bool) -> optuna.Study:
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'results.db'}",
                                directions=["maximize", "maximize"])
    if request_time:  # as open_study marks a new study and the baseline trial stores its mix
        mark_ranked_by_request_time(study)
        save_request_mix(study, MIX)
    for number, (role, values) in enumerate((("baseline", BASE), ("candidate", PREFILL_2X),
                                             ("candidate", DECODE_1_1X))):
        config = {"args": {"trial": number}, "env": {}}
        study.add_trial(optuna.trial.create_trial(
            values=list(values), constraints=dict.fromkeys(CONSTRAINTS, -1.0), params={},
            user_attrs={"role": role, "config": config, "config_digest": f"digest{number}", RATES: _rates(values)}))
    return study


def _trials(study):
    trials = study.get_trials()
    return trials[0], trials[1:]


def test_finalists_are_chosen_by_request_time_a_decode_gain_before_a_larger_prefill_gain(tmp_path):
    study = _study(tmp_path, request_time=True)
    ranking = Ranking.of(study)
    assert ranking.ranked_by == RANKED_BY and ranking.mix == MIX
    baseline, _ = _trials(study)
    assert [t.number for t in finalists.select_finalists(study, ranking, baseline, 1)] == [2]
    assert [t.number for t in finalists.select_finalists(study, ranking, baseline, 2)] == [2, 1]


def test_a_study_stored_before_request_time_still_ranks_by_its_geometric_mean(tmp_path):
    study = _study(tmp_path, request_time=False)
    ranking = Ranking.of(study)
    assert ranking.ranked_by == GEOMEAN and ranking.mix is None and "geometric mean" in ranking.label
    baseline, _ = _trials(study)
    assert [t.number for t in finalists.select_finalists(study, ranking, baseline, 1)] == [1]


@pytest.mark.parametrize(("request_time", "champion"), [(True, 2), (False, 1)])
def test_the_champion_among_confirmed_finalists_follows_the_studys_number(tmp_path, monkeypatch, request_time, champion):
    study = _study(tmp_path, request_time=request_time)
    speeds = {0: BASE, 1: PREFILL_2X, 2: DECODE_1_1X}

    def scripted_launch(plan, space, t, round_, launch, db, ranking):
        decode, prefill = speeds[t.number]
        spread = (0.99, 1.0, 1.01)
        return _result({8192: [prefill * s for s in spread]}, {(1024, "math"): [decode * s for s in spread]})

    monkeypatch.setattr(finalists, "_launch_and_bench", scripted_launch)
    model = ResolvedModel(path=tmp_path, name="m", manifest_hash="0" * 64, manifest_path=tmp_path / "m.json",
                          source="m")
    plan = RunPlan(model=model, engine="exllamav3", suite="none", study_name="s",
                   storage_url=f"sqlite:///{tmp_path / 'results.db'}", workdir=tmp_path, results_md=tmp_path / "R.md",
                   trials=3, finalists=2, finalist_launches=2)
    db = ResultsDB(plan.storage_url)
    won = finalists.confirm_finalists(plan, study, None, db)
    verdicts = {r["trial"]: r["verdict"] for r in db.finalists(study="s")}
    # by request time the prefill-only finalist (76/75.5 = 1.007x) is inside the 1% minimum effect: not shown faster
    assert verdicts[2]["qualified"] and verdicts[1]["qualified"] is (not request_time)
    assert won.trial == champion and not won.is_baseline
    assert won.ranked_by == (RANKED_BY if request_time else GEOMEAN)
    assert won.decode_speedup == pytest.approx(speeds[champion][0] / BASE[0])
    assert won.prefill_speedup == pytest.approx(speeds[champion][1] / BASE[1])
    if request_time:  # 76 s against 1 + 3000/44 s
        assert won.speedup == pytest.approx(76.0 / (1.0 + 3000.0 / 44.0))
        assert verdicts[1]["speedup"] == pytest.approx(76.0 / 75.5)
    stored = finalists.load_champion(study)
    assert stored["ranked_by"] == won.ranked_by and stored["decode_speedup"] == won.decode_speedup


def test_a_committed_study_ranked_by_the_geometric_mean_reports_and_exports_saying_so(tmp_path, monkeypatch, capsys):
    import shutil
    from pathlib import Path

    from autoresearch.__main__ import main

    db = tmp_path / "results.db"
    shutil.copy(Path(__file__).parents[2] / "examples/real-0.5b-own-answers/results.db", db)
    monkeypatch.chdir(tmp_path)
    common = ["--study", "drafting-eos", "--storage", f"sqlite:///{db}"]
    assert main(["report", *common, "--results-md", str(tmp_path / "R.md")]) == 0
    text = (tmp_path / "R.md").read_text()
    assert "Ranked by the geometric mean of the decode and prefill speed-ups" in text
    assert ("speed-up 1.439x by the geometric mean of the decode and prefill speed-ups, the scalar this study was "
            "ranked by") in text
    assert "Request time on the workload, recomputed from its launches' records: 1.254x (decode 1.249x" in text
    assert "**Answer lengths assumed, not measured: math @1024: 256 tokens (the answers reached the plan's" in text
    assert main(["export", *common, "--out", str(tmp_path / "c.json")]) == 0
    assert "(1.439x the baseline as confirmed, by the geometric mean" in capsys.readouterr().out


def test_a_trial_without_stored_rates_is_left_out_of_the_ranking_not_given_a_number(tmp_path, caplog):
    study = _study(tmp_path, request_time=True)
    study.add_trial(optuna.trial.create_trial(values=[80.0, 4000.0], constraints=dict.fromkeys(CONSTRAINTS, -1.0),
                                              params={}, user_attrs={"role": "candidate"}))
    baseline, candidates = _trials(study)
    ranked = Ranking.of(study).rank(candidates, baseline)
    assert [t.number for _, t in ranked] == [2, 1]
    assert "trial 3 is not ranked: trial 3 stored no rates" in caplog.text


def test_a_measured_trial_stores_its_rates_and_request_time_speed_up_for_the_dashboard():
    from autoresearch.trial.record import record_request_time

    base = _result({8192: [1000.0] * 3}, {(1024, "math"): [40.0] * 3})  # answers unknown: the plan's 10 tokens
    faster = _result({8192: [2000.0] * 3}, {(1024, "math"): [44.0] * 3})
    trial = optuna.trial.FixedTrial({})
    record_request_time(trial, faster, base)
    assert trial.user_attrs[RATES] == pytest.approx(_rates(DECODE_1_1X) | {"prefill_tok_per_s_server@8192": 2000.0})
    prompt, answer = 1000.0, 10.0  # the decode point's prompt, and the assumed answer
    expected = (prompt / 1000.0 + answer / 40.0) / (prompt / 2000.0 + answer / 44.0)
    assert trial.user_attrs["request_speedup"] == pytest.approx(expected)
    assert trial.user_attrs["request_speedup_of"] == "the baseline's first launch"
    # against the baseline's launches pooled (its first read prefill 2x what its later ones did: a warm-up)
    pool = {"request_s": prompt / 500.0 + answer / 40.0, "launches": 5}  # their request times' geometric mean
    record_request_time(trial, faster, base, pool)
    expected = (prompt / 500.0 + answer / 40.0) / (prompt / 2000.0 + answer / 44.0)
    assert trial.user_attrs["request_speedup"] == pytest.approx(expected)
    assert trial.user_attrs["request_speedup_of"] == "the baseline's 5 launches pooled"


def test_best_so_far_follows_request_time(tmp_path):
    from autoresearch.loop import best_line

    line = best_line(_study(tmp_path, request_time=True))
    assert line == f"trial 2: decode 44.0, prefill 1000 tok/s ({76.0 / (1.0 + 3000.0 / 44.0):.3f}x by request time)"
    (tmp_path / "old").mkdir()
    assert best_line(_study(tmp_path / "old", request_time=False)).startswith("trial 1: ")
