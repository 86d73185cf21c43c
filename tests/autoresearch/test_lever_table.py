"""The embedded default's study starts from its levers, and .ci/gpu/lever_table.py measures each one alone
against the study's champion, on the CPU engine (the GPU run is the same script on the real model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autoresearch.ground.model_source import resolve_model

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_the_first_trials_after_the_baseline_are_the_levers_and_results_md_lists_them(embedded_study):
    (name,) = optuna.get_all_study_names(embedded_study.db_url)
    trials = optuna.load_study(study_name=name, storage=embedded_study.db_url).get_trials()
    assert [t.user_attrs.get("lever") for t in trials[1:3]] == [{"prefill_chunk_size": 64}, {"prefill_chunk_size": 128}]
    assert all(t.user_attrs["request_speedup"] > 0 and t.user_attrs["rates"] for t in trials[1:3]
               if t.user_attrs.get("outcome") == "passed")
    text = (embedded_study.cwd / "RESULTS.md").read_text()
    assert "Ranked by request time on the workload" in text
    section = text.split("## First trials")[1].split("\n## ")[0]
    assert "| 1 | lever |" in section and "`prefill_chunk_size=64`" in section
    assert "| 2 | lever |" in section and "`prefill_chunk_size=128`" in section


@pytest.mark.long
def test_lever_table_measures_each_lever_and_the_champion_by_request_time(embedded_study, tmp_path):
    model = resolve_model(None, locks_dir=tmp_path / "locks", cache_dir=Path(embedded_study.env["AUTORESEARCH_CACHE"]))
    env = {**embedded_study.env, "OUT": str(tmp_path / "out"), "ROUNDS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(ROOT / ".ci/gpu/lever_table.py"), str(model.path),
                             str(embedded_study.cwd / "results.db")], env=env, capture_output=True, text=True,
                            timeout=1500, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    table = json.loads((tmp_path / "out" / "lever-table.json").read_text())
    rows = {r["setting"]: r for r in table["rows"]}
    assert {"defaults", "prefill_chunk_size=64", "prefill_chunk_size=128"} <= set(rows)
    assert rows["defaults"]["request_speedup"] == pytest.approx(1.0)
    singles = [r for n, r in rows.items() if n.startswith("prefill_chunk_size")]
    assert all(r["launches"] == 1 and r["request_speedup"] > 0 for r in singles)
    # the finalists' estimator: each launch's request time, with the ratio's interval (one launch a side: a point)
    assert all(r["request_interval"] == [pytest.approx(r["request_speedup"])] * 2 for r in singles)
    assert table["best_single"] == max(singles, key=lambda r: r["request_speedup"])["setting"]
    if "champion" in rows:  # the embedded study's champion may be the baseline: then there is none to compare
        best = rows[table["best_single"]]["request_speedup"]
        assert table["champion_over_best_single"] == pytest.approx(rows["champion"]["request_speedup"] / best)
    assert "best single lever: " in result.stdout
    assert len(list((tmp_path / "out").glob("bench-*-0.json"))) == len(rows)
    assert os.path.exists(tmp_path / "out" / "lever-table.json")
