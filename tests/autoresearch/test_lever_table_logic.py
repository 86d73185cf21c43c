""".ci/gpu/lever_table.py's decision, on scripted bench records (its launches are the GPU run's): each
setting's request-time speed-up over the defaults, the best single lever, and champion / best single."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import optuna
import pytest

from autoresearch.ground.ranked_by import mark_ranked_by_request_time
from autoresearch.measures.ranking import save_request_mix
from serving.config import ServingConfig

from .test_objectives import _result
from .test_ranking import MIX

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("lever_table", ROOT / ".ci/gpu/lever_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _launch(decode: float, prefill: float):
    return _result({8192: [prefill * s for s in (0.99, 1.0, 1.01)]}, {(1024, "math"): [decode] * 3})


def test_the_table_ranks_single_levers_and_the_champion_by_request_time():
    study = optuna.create_study(directions=["maximize", "maximize"])
    mark_ranked_by_request_time(study)
    save_request_mix(study, MIX)  # decode-heavy: 1,000 prompt tokens, 3,000 answer tokens
    config = ServingConfig.from_dict({"engine": "exllamav3"})
    settings = dict.fromkeys(("defaults", "max_chunk_size=16384", "draft_mode=ngram", "champion"), config)
    records = {"defaults": [_launch(40.0, 1000.0)] * 2, "max_chunk_size=16384": [_launch(30.0, 2000.0)] * 2,
               "draft_mode=ngram": [_launch(48.0, 1000.0)], "champion": [_launch(47.0, 2000.0)] * 2}
    table = _module()._table(study, settings, records, {name: [] for name in settings})
    rows = {r["setting"]: r for r in table["rows"]}
    base_s = 1.0 + 3000.0 / 40.0
    assert rows["defaults"]["request_speedup"] == pytest.approx(1.0)
    assert rows["max_chunk_size=16384"]["request_speedup"] == pytest.approx(base_s / (0.5 + 100.0))  # < 1: slower
    assert rows["max_chunk_size=16384"]["prefill_speedup"] == pytest.approx(2.0)
    assert table["best_single"] == "draft_mode=ngram"
    ratio = (base_s / (0.5 + 3000.0 / 47.0)) / (base_s / (1.0 + 3000.0 / 48.0))
    assert table["champion_over_best_single"] == pytest.approx(ratio)
    assert table["champion_within_5pct"] is True


def test_a_setting_never_measured_is_reported_without_a_number():
    study = optuna.create_study(directions=["maximize", "maximize"])
    config = ServingConfig.from_dict({"engine": "exllamav3"})
    settings = {"defaults": config, "draft_mode=ngram": config}
    table = _module()._table(study, settings, {"defaults": [_launch(40.0, 1000.0)], "draft_mode=ngram": []},
                             {"defaults": [], "draft_mode=ngram": ["round 0: LaunchError: out of memory"]})
    row = next(r for r in table["rows"] if r["setting"] == "draft_mode=ngram")
    assert row["launches"] == 0 and "request_speedup" not in row and row["errors"]
    assert table["best_single"] is None and table["champion_over_best_single"] is None
