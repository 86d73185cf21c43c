"""The loop's minimization on real processes: an embedded-default study (the baseline alone, gated on fidelity),
resumed with a champion of two changes stored in it, minimized in fresh launches of the CPU engine, and
RESULTS.md's table read back from the database."""

from __future__ import annotations

import json

import optuna
import pytest
import sqlalchemy as sa

from autoresearch.change_costs import MINIMIZATION_ATTR
from serving.config import ServingConfig

from .conftest import FAST, loop_env, run_loop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_a_stored_champion_is_minimized_in_fresh_launches_and_resumes_from_its_stored_launches(loop_cache, tmp_path):
    env = loop_env(loop_cache)
    first = run_loop(tmp_path, env, "--trials", "1", "--suite", "none", *FAST)
    assert first.returncode == 0, first.stdout + first.stderr[-5000:]
    url = f"sqlite:///{tmp_path / 'results.db'}"
    name = optuna.get_all_study_names(url)[0]
    study = optuna.load_study(study_name=name, storage=url)
    champion = ServingConfig.from_dict({"engine": "transformers", "args": {"threads": 1, "prefill_chunk_size": 64}})
    stored = study.user_attrs["champion"]
    study.set_user_attr("champion", stored | {"trial": 1, "config": champion.to_dict(), "is_baseline": False,
                                              "speedup": 1.1})  # as if trial 1 had been confirmed with these two
    args = ["--trials", "1", "--suite", "none", *FAST, "--minimize", "--minimize-launches", "1", "--minimize-max-launches", "5"]
    result = run_loop(tmp_path, env, *args)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    record = optuna.load_study(study_name=name, storage=url).user_attrs[MINIMIZATION_ATTR]
    assert [c["name"] for c in record["changes"]] == ["prefill_chunk_size", "threads"]
    assert record["launches"] == 5 and record["bound"] == 5 and len(record["attempts"]) == 1
    assert all(record["costs"][n] is not None for n in ("prefill_chunk_size", "threads"))
    with sa.create_engine(url).connect() as conn:
        rows = conn.execute(sa.text("select payload from ar_measurements where kind='minimize_bench'")).all()
    labels = sorted(json.loads(r[0])["label"] if isinstance(r[0], str) else r[0]["label"] for r in rows)
    assert labels[:3] == ["rank/champion/0", "rank/prefill_chunk_size/0", "rank/threads/0"] and len(labels) == 5
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## What each change bought (minimization)" in text and "`threads=1`" in text

    # resumed with the record gone: every decision replays from the stored launches, none is launched again
    optuna.load_study(study_name=name, storage=url).set_user_attr(MINIMIZATION_ATTR, None)
    again = run_loop(tmp_path, env, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert optuna.load_study(study_name=name, storage=url).user_attrs[MINIMIZATION_ATTR] == record
    with sa.create_engine(url).connect() as conn:
        assert conn.execute(sa.text("select count(*) from ar_measurements where kind='minimize_bench'")).scalar() == 5
