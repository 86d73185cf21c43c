"""The first trials after the baseline: the user's --enqueue, then the catalog's levers, in order, before TPE."""

from __future__ import annotations

import optuna
import pytest

from autoresearch.ground.model_source import ResolvedModel
from autoresearch.ground.plan import RunPlan, default_bench_plan, default_probe_config
from autoresearch.ground.study import open_study
from search_space import SpaceContext, build_space, read_model_info


def _open(tmp_path, model_dir, **kw):
    model = ResolvedModel(path=model_dir, name="tiny", manifest_hash="0" * 64, manifest_path=tmp_path / "m.json",
                          source="tiny")
    plan = RunPlan(model=model, engine="transformers", suite="none", study_name="s",
                   storage_url=f"sqlite:///{tmp_path / 'results.db'}", workdir=tmp_path, results_md=tmp_path / "R.md",
                   trials=10, bench_plan=default_bench_plan("transformers"),
                   probe_config=default_probe_config("transformers"), **kw)
    space = build_space(SpaceContext(engine="transformers", model=read_model_info(model_dir), cpu_count=2))
    return open_study(plan, space)


def _queue(study: optuna.Study) -> list[tuple[str, dict]]:
    """The waiting trials in the order Optuna hands them out: (role or source, changed params)."""
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    params = [t.system_attrs["fixed_params"] for t in waiting]  # an enqueued trial's params until it runs
    return [("lever" if t.user_attrs.get("lever") else "enqueued" if t.user_attrs.get("enqueued")
             else t.user_attrs["role"], {k: v for k, v in p.items() if params[0].get(k) != v})
            for t, p in zip(waiting, params, strict=True)]


def test_the_levers_follow_the_users_enqueues_in_catalog_order(tmp_path, tiny_model_dir):
    study = _open(tmp_path, tiny_model_dir, enqueued=({"dtype": "bfloat16"}, {"prefill_chunk_size": 128}))
    assert _queue(study) == [("baseline", {}), ("enqueued", {"dtype": "bfloat16"}),
                             ("enqueued", {"prefill_chunk_size": 128}), ("lever", {"prefill_chunk_size": 64})]
    # the user's 128 is not tried twice; resuming enqueues nothing again
    assert _queue(_open(tmp_path, tiny_model_dir, enqueued=({"dtype": "bfloat16"}, {"prefill_chunk_size": 128}))) \
        == _queue(study)


def test_no_levers_leaves_the_sampler_to_itself(tmp_path, tiny_model_dir):
    assert _queue(_open(tmp_path, tiny_model_dir, levers=False)) == [("baseline", {})]


@pytest.mark.parametrize("baseline_changes", [{"prefill_chunk_size": 64}])
def test_a_lever_equal_to_the_baseline_is_left_out(tmp_path, tiny_model_dir, baseline_changes):
    queue = _queue(_open(tmp_path, tiny_model_dir, baseline_changes=baseline_changes))
    assert [q[0] for q in queue] == ["baseline", "lever"]
    assert queue[1][1] == {"prefill_chunk_size": 128}


def test_an_enqueued_trial_not_run_yet_is_not_listed_as_the_baseline(tmp_path, tiny_model_dir):
    """Before: RESULTS.md's first-trials table read a waiting trial's changes from a config it does not have yet,
    and listed it as `(baseline)` (seen on the H200: a DFlash2 study stopped by --trials before its second lever)."""
    from autoresearch.ground.db import ResultsDB
    from autoresearch.report.snapshot import read_snapshot
    from eval import EvalStore

    study = _open(tmp_path, tiny_model_dir, enqueued=({"dtype": "bfloat16"},))
    plan_url = f"sqlite:///{tmp_path / 'results.db'}"
    model = ResolvedModel(path=tiny_model_dir, name="tiny", manifest_hash="0" * 64,
                          manifest_path=tmp_path / "m.json", source="tiny")
    plan = RunPlan(model=model, engine="transformers", suite="none", study_name="s", storage_url=plan_url,
                   workdir=tmp_path, results_md=tmp_path / "R.md", trials=10,
                   bench_plan=default_bench_plan("transformers"), probe_config=default_probe_config("transformers"))
    snapshot = read_snapshot(plan, study, ResultsDB(plan_url), EvalStore(plan_url))
    waiting = [row for row in snapshot.first_trials if row.outcome == "waiting"]
    assert waiting and all(row.changes == "not run yet" for row in waiting)
