"""--baseline: the reference every candidate is judged against can be the defaults with changes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest

from autoresearch.ground.errors import PlanError, StudyError
from autoresearch.ground.model_source import ResolvedModel
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.study import open_study
from search_space import SpaceContext, build_space, read_model_info
from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

GIB = 1024**3


@pytest.fixture(scope="module")
def q27(tmp_path_factory) -> ResolvedModel:
    root = tmp_path_factory.mktemp("q27")
    checkpoint = write_exl3_checkpoint(root / "q27", QWEN38_27B, sparse=True)  # headers only: nothing is launched
    return ResolvedModel(path=checkpoint, name="q27-sparse", manifest_hash="0" * 64,
                         manifest_path=root / "manifest.json", source=str(checkpoint))


def _plan(tmp_path: Path, model: ResolvedModel, **kw) -> RunPlan:
    return RunPlan(model=model, engine="exllamav3", suite="none", study_name="baseline-choice",
                   storage_url=f"sqlite:///{tmp_path / 'results.db'}", workdir=tmp_path / "runs",
                   results_md=tmp_path / "RESULTS.md", trials=5, vram_bytes=24 * GIB,
                   pinned={"cache_slots": 1}, **kw)


def _space(plan: RunPlan):
    return build_space(SpaceContext(engine=plan.engine, model=read_model_info(plan.model.path)), pinned=plan.pinned)


def test_the_baseline_and_enqueued_candidates_start_from_the_chosen_baseline(tmp_path, q27):
    plan = _plan(tmp_path, q27, baseline_changes={"EXL3_INT8_GEMV": 0},
                 enqueued=({"max_chunk_size": 8192}, {"EXL3_INT8_GEMV": 2}), levers=False)
    study = open_study(plan, _space(plan))
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [t.user_attrs["role"] for t in waiting] == ["baseline", "candidate", "candidate"]
    baseline, chunk, int8 = (t.system_attrs["fixed_params"] for t in waiting)
    assert (baseline["EXL3_INT8_GEMV"], baseline["max_chunk_size"]) == (0, 2048)
    assert (chunk["EXL3_INT8_GEMV"], chunk["max_chunk_size"]) == (0, 8192)  # changes of the chosen baseline
    assert (int8["EXL3_INT8_GEMV"], int8["max_chunk_size"]) == (2, 2048)  # exllamav3's own defaults


def test_a_study_refuses_to_resume_against_another_baseline(tmp_path, q27):
    plan = _plan(tmp_path, q27, baseline_changes={"EXL3_INT8_GEMV": 0})
    open_study(plan, _space(plan))
    for other in ({}, {"EXL3_INT8_GEMV": 1}):
        with pytest.raises(StudyError, match="another model, engine, suite or bench plan"):
            open_study(dataclasses.replace(plan, baseline_changes=other), _space(plan))
    open_study(plan, _space(plan))  # the same baseline resumes


def test_an_enqueued_change_activates_knobs_at_their_defaults_unless_named(tmp_path, q27):
    plan = _plan(tmp_path, q27, enqueued=({"draft_mode": "ngram"}, {"draft_mode": "ngram", "num_draft_tokens": 6}),
                 levers=False)
    space = _space(plan)
    study = open_study(plan, space)
    _, plain, named = (t.system_attrs["fixed_params"] for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,)))
    assert plain["draft_mode"] == "ngram"
    assert plain["num_draft_tokens"] == 4  # what exllamav3 drafts per step by default with n-gram drafting
    assert plain["ngram_match_min"] == space.knob("ngram_match_min").default
    assert named["num_draft_tokens"] == 6


@pytest.mark.parametrize(("changes", "message"), [
    ({"num_draft_tokens": 4}, "does not apply with these values: it needs"),
    ({"no_such_knob": 1}, "not a knob of this search space"),
    ({"cache_slots": 2}, "pinned"),
    ({"max_chunk_size": 3000}, "outside"),
])
def test_a_bad_baseline_is_a_clear_plan_error(tmp_path, q27, changes, message):
    plan = _plan(tmp_path, q27, baseline_changes=changes)
    with pytest.raises(PlanError, match=message):
        open_study(plan, _space(plan))


def test_the_gate_policy_is_part_of_what_a_study_measures(tmp_path, q27):
    from autoresearch.__main__ import _gate_policy
    from autoresearch.cli import parse_args

    args = parse_args(["--min-floor-top1-disagreement", "0.01"])
    policy = _gate_policy(args, mode="judge")
    assert policy.fidelity.min_floor_top1_disagreement == 0.01 and policy.fidelity.min_floor_kl_mean == 1e-4
    loose = _gate_policy(parse_args(["--min-floor-kl-p99", "0.02", "--min-floor-kl-mean", "0.01"]),
                         mode="judge")
    assert (loose.fidelity.min_floor_kl_p99, loose.fidelity.min_floor_kl_mean) == (0.02, 0.01)
    tasks = _gate_policy(parse_args(["--task-min-drop", "0.08", "--task-tier", "smoke"]), mode="judge")
    assert (tasks.tasks.min_drop, tasks.tasks.judge) == (0.08, False)  # the flag decides over the default
    plan = _plan(tmp_path, q27)
    open_study(plan, _space(plan))
    with pytest.raises(StudyError):
        open_study(dataclasses.replace(plan, gate_policy=policy), _space(plan))
    with pytest.raises(PlanError, match="min_floor_top1_disagreement must be >= 0"):
        _gate_policy(parse_args(["--min-floor-top1-disagreement", "-1"]), mode="judge")
    with pytest.raises(PlanError, match="min_drop"):
        _gate_policy(parse_args(["--task-min-drop", "0.5"]), mode="judge")  # above the planned flips


def test_a_draft_model_opens_its_drafting_mode_and_is_part_of_what_a_study_measures(tmp_path, q27):
    from autoresearch.__main__ import make_plan
    from autoresearch.cli import parse_args

    plan = _plan(tmp_path, q27)
    drafted = dataclasses.replace(plan, draft_model=q27)  # the checkpoint as its own drafter: same vocabulary
    assert drafted.key != plan.key
    context = SpaceContext(engine="exllamav3", model=read_model_info(q27.path), draft_model=read_model_info(q27.path))
    space = build_space(context, pinned=plan.pinned)
    def modes(s):
        return next(k for k in s.knobs if k.name == "draft_mode").domain.values()

    assert "draft_model" in modes(space) and "draft_model" not in modes(_space(plan))
    with pytest.raises(PlanError, match="exllamav3 engine only"):
        make_plan(parse_args(["--engine", "transformers", "--draft-model", str(q27.path)]))


def test_broad_with_a_model_runs_its_task_tier_as_a_guard_and_refuses_it_as_a_judge(tmp_path, q27, monkeypatch):
    import autoresearch.__main__ as cli
    from autoresearch.__main__ import make_plan
    from autoresearch.cli import parse_args

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path / "cache"))
    # the preflight (tasksets, data, Docker here?) has tests of its own; this one is about the tier's mode
    monkeypatch.setattr(cli, "_check_suite_can_run", lambda suite, overrides: None)
    argv = ["--model", str(q27.path), "--trials", "3", "--vram", "24GiB"]
    plan = make_plan(parse_args(argv))  # broad is the default suite with --model
    assert (plan.suite, plan.gate_policy.tasks.mode) == ("broad", "guard")
    with pytest.raises(PlanError, match="cannot make the claim it is asked to: aime25: 3 tasks detect"):
        make_plan(parse_args([*argv, "--task-tier", "judge"]))
    assert make_plan(parse_args([*argv, "--task-tier", "smoke"])).gate_policy.tasks.mode == "smoke"
    offline = make_plan(parse_args([*argv, "--suite", "offline"]))
    assert offline.gate_policy.tasks.mode == "judge"
