"""A configuration that cannot fit is rejected without a launch; an out-of-memory launch is recorded."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import optuna
import pytest

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.model_source import ResolvedModel, resolve_model
from autoresearch.ground.plan import RunPlan, default_bench_plan, default_probe_config
from autoresearch.ground.study import open_study
from autoresearch.ground.workload import suite_workload
from autoresearch.measures.objectives import NOT_MEASURED
from autoresearch.night.progress import Progress
from autoresearch.trial.runner import TrialRunner
from eval import EvalStore, GatePolicy
from eval.decision import TaskPolicy
from eval.suites import SuiteOverrides, apply_overrides, get_suite
from search_space import SpaceContext, baseline_params, build_space, read_model_info
from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

pytestmark = pytest.mark.slow
GIB = 1024**3


@functools.cache
def _workload():
    """The decode workload the command line gives the embedded default (FAST's shrunk offline suite)."""
    return suite_workload(apply_overrides(get_suite("offline"), SuiteOverrides(limit=1, max_tokens=16)))


def _plan(tmp_path: Path, model, engine: str, **kw) -> RunPlan:
    return RunPlan(model=model, engine=engine, suite="offline", study_name=kw.pop("study_name", "outcomes"),
                   storage_url=f"sqlite:///{tmp_path / 'results.db'}", workdir=tmp_path / "runs",
                   results_md=tmp_path / "RESULTS.md", trials=kw.pop("trials", 5),
                   bench_plan=default_bench_plan(engine, _workload()), workload=_workload(),
                   probe_config=default_probe_config(engine),
                   suite_overrides={"limit": 1, "max_tokens": 16}, port=0,
                   gate_policy=kw.pop("gate_policy", GatePolicy(tasks=TaskPolicy(mode="smoke"))), **kw)


def _runner(plan: RunPlan):
    space = build_space(SpaceContext(engine=plan.engine, model=read_model_info(plan.model.path)), pinned=plan.pinned)
    study = open_study(plan, space)
    db = ResultsDB(plan.storage_url)
    runner = TrialRunner(plan, space, db, EvalStore(plan.storage_url), Progress(study=plan.study_name, trials=5,
                                                                                   hours=None, live=False))
    return study, space, db, runner


def test_infeasible_configuration_is_rejected_without_a_launch(tmp_path):
    checkpoint = write_exl3_checkpoint(tmp_path / "q27", QWEN38_27B, sparse=True)  # headers only
    # Hashing 14.6 GiB of holes proves nothing here; the manifest is named, not computed.
    model = ResolvedModel(path=checkpoint, name="q27-sparse", manifest_hash="0" * 64,
                          manifest_path=tmp_path / "manifest.json", source=str(checkpoint))
    plan = _plan(tmp_path, model, "exllamav3", vram_bytes=24 * GIB, pinned={"cache_slots": 1})
    _, space, db, runner = _runner(plan)
    study = optuna.create_study(study_name="candidates-only", storage=plan.storage_url,
                                directions=["maximize", "maximize"])
    # 262144 tokens of fp16 KV (16 GiB) on top of 12+ GiB of weights cannot fit in 24 GiB.
    study.enqueue_trial({**baseline_params(space), "cache_tokens": 262144})
    study.optimize(runner, n_trials=1)
    trial = study.get_trials()[-1]
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.user_attrs["outcome"] == "infeasible" and trial.constraints["fits"] > 0
    assert "exceeds the usable" in trial.user_attrs["reasons"][0] and "not launched" in trial.user_attrs["reasons"][0]
    assert trial.values == list(NOT_MEASURED)  # no speed was measured, and none is claimed
    assert not (plan.study_dir / "logs").exists()  # no server was started
    assert db.measurements(study=plan.study_name, kind="launch") == []

    # a cache smaller than bench's longest request (8192 tokens of context + 128 decoded) is refused unlaunched too
    study.enqueue_trial({**baseline_params(space), "cache_tokens": 8192})
    study.optimize(runner, n_trials=1)
    small = study.get_trials()[-1]
    assert small.user_attrs["outcome"] == "infeasible" and small.constraints["fits"] > 0
    assert small.user_attrs["reasons"][0] == ("a 8192-token cache cannot hold bench's longest request "
                                              "(8320 tokens; not launched)")
    assert not (plan.study_dir / "logs").exists()


def test_out_of_memory_is_recorded_with_its_reason_and_the_loop_goes_on(tmp_path, embedded_study):
    shutil.copy(embedded_study.cwd / "results.db", tmp_path / "results.db")
    name = optuna.get_all_study_names(embedded_study.db_url)[0]
    model = resolve_model(None, locks_dir=tmp_path / "locks", cache_dir=Path(embedded_study.env["AUTORESEARCH_CACHE"]))
    plan = _plan(tmp_path, model, "transformers", study_name=name, trials=10,
                 host_memory_limit_bytes=200 * 1024**2)  # below what the server needs to import torch
    # A resumed study refuses a new memory limit (autoresearch.ground.study): here the copy is told it was measured
    # under this one, as a study whose baseline fitted and whose later candidates need more would be.
    stored = optuna.load_study(study_name=name, storage=plan.storage_url)
    stored.set_user_attr("settings", {**stored.user_attrs["settings"], "--host-memory-limit": 200 * 1024**2})
    study, space, db, runner = _runner(plan)
    before = len(study.get_trials())
    # two configurations the study has not run, named: a sampled one may repeat a stored trial (pruned as a
    # duplicate, never launched), and the sampler's seed includes the worker's pid
    for chunk in (512, 256):
        study.enqueue_trial({**study.get_trials()[0].params, "prefill_chunk_size": chunk})
    study.optimize(runner, n_trials=2)  # both candidates fail the same way; the loop keeps going
    new = study.get_trials()[before:]
    assert len(new) == 2 and all(t.state == optuna.trial.TrialState.COMPLETE for t in new)
    for trial in new:
        assert trial.user_attrs["failure"] == "oom_at_load"
        assert trial.constraints["launch_ok"] > 0 and trial.values == list(NOT_MEASURED)
        assert "out of memory" in " ".join(trial.user_attrs["reasons"])
    rows = db.measurements(study=name, kind="launch")
    assert [r["payload"]["reason"] for r in rows[-2:]] == ["oom_at_load", "oom_at_load"]
