"""traces.jsonl -> TasksetResult on a recorded verifiers 0.4.0 episode and variations of it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from eval.errors import TasksetRunError
from eval.traces import TraceTail, episode_outcome, summarize_traces

RECORDED = Path(__file__).parent / "data" / "verifiers-0.4.0-episode.jsonl"


@pytest.fixture
def episode() -> dict:
    """One real episode: the tiny model on a MATH-500 task, 24-token budget (finish_reason length)."""
    return json.loads(RECORDED.read_text())


def test_a_recorded_episode_reduces_to_its_reward_truncation_and_tokens(episode):
    outcome = episode_outcome(episode, taskset="mmath-math500")
    call = episode["traces"][0]["calls"][0]
    assert outcome.ok and outcome.reward == 0.0
    assert outcome.truncated  # the call finished on length
    assert outcome.task_key == episode["task"]["key"] and outcome.task_key.startswith("mmath:MATH500:")
    assert outcome.output_tokens == call["usage"]["completion_tokens"] == 24
    assert outcome.model_time_s == pytest.approx(call["time"]["end"] - call["time"]["start"])


def test_weighted_rewards_sum_as_verifiers_does(episode):
    episode["traces"][0]["rewards"] = {
        "correct": {"score": 1.0, "weight": 1.0},
        "format": {"score": 0.5, "weight": 0.2},
    }
    assert episode_outcome(episode, taskset="mmath-math500").reward == pytest.approx(1.1)


def test_an_operational_failure_has_no_reward_rather_than_zero(episode):
    episode["ok"] = False
    trace = episode["traces"][0]
    trace.update(ok=False, stop_condition="provider_error", rewards={}, calls=[])
    trace["errors"] = [{"type": "ProviderError", "message": "All connection attempts failed"}]
    outcome = episode_outcome(episode, taskset="mmath-math500")
    assert (outcome.ok, outcome.reward) == (False, None)
    assert "All connection attempts failed" in outcome.error


def test_a_taskset_summary_counts_failures_apart_and_never_averages_them_in(tmp_path, episode):
    good = copy.deepcopy(episode)
    good["traces"][0]["rewards"] = {"correct": {"score": 1.0, "weight": 1.0}}
    good["traces"][0]["calls"][0]["finish_reason"] = "stop"
    failed = copy.deepcopy(episode)
    failed["ok"] = False
    failed["task"]["key"] = "mmath:MATH500:999"
    failed["traces"][0].update(
        ok=False, rewards={}, calls=[], errors=[{"type": "HarnessError", "message": "x"}]
    )
    lines = [episode, good, failed]
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = summarize_traces(path, name="mmath-math500", taskset_id="eval-mmath", max_tokens=24)
    assert (result.tasks, result.rollouts, result.failures, result.truncations) == (2, 3, 1, 1)
    assert result.reward_mean == pytest.approx(0.5)  # (0 + 1) / 2 ok episodes
    assert result.output_tokens == 48
    assert result.output_tok_per_s == pytest.approx(48 / result.model_time_s)


@pytest.mark.parametrize("stage", ["setup", "agent", "finalize", "scoring"])
def test_a_stage_deadline_is_an_operational_failure_although_verifiers_says_ok(episode, stage):
    # verifiers 0.4.0 leaves ok=true and reward 0 on a trace whose stage deadline expired
    trace = episode["traces"][0]
    trace.update(is_timeout=True, stop_condition=f"{stage}_timeout", rewards={"correct": {"score": 0.0}})
    outcome = episode_outcome(episode, taskset="mmath-math500")
    assert (outcome.ok, outcome.reward) == (False, None)
    assert f"{stage}_timeout" in outcome.error


def test_an_episode_deadline_and_an_error_stop_are_operational_failures(episode):
    timed_out = copy.deepcopy(episode)
    timed_out["is_timeout"] = True
    assert not episode_outcome(timed_out, taskset="mmath-math500").ok and "deadline" in episode_outcome(timed_out, taskset="mmath-math500").error
    errored = copy.deepcopy(episode)
    errored["traces"][0]["stop_condition"] = "sandbox_error"
    assert not episode_outcome(errored, taskset="mmath-math500").ok


def test_the_start_of_the_first_trace_is_the_dispatch_order(episode):
    assert episode_outcome(episode, taskset="mmath-math500").started_at == episode["traces"][0]["timing"]["start"]


def test_a_line_still_being_written_is_not_an_episode(tmp_path, episode):
    path = tmp_path / "traces.jsonl"
    whole = json.dumps(episode)
    path.write_text(whole + "\n" + whole[:100])
    result = summarize_traces(path, name="t", taskset_id="t", max_tokens=24)
    assert result.rollouts == 1


@pytest.mark.parametrize("rewards", [{}, {"correct": None}, {"correct": {"score": 1.0}, "format": None}])
def test_an_ok_episode_whose_scorer_never_ran_is_an_operational_failure_not_a_wrong_answer(episode, rewards):
    # verifiers 0.4: a None reward means scoring did not run; an ok episode without one measured nothing
    episode["traces"][0]["rewards"] = rewards
    outcome = episode_outcome(episode, taskset="mmath-math500")
    assert (outcome.ok, outcome.reward) == (False, None)
    assert "scorer never ran" in outcome.error


def test_an_ok_episode_without_a_trace_is_an_operational_failure(episode):
    episode["traces"] = []
    outcome = episode_outcome(episode, taskset="mmath-math500")
    assert (outcome.ok, outcome.reward) == (False, None) and "no trace" in outcome.error


def test_a_task_without_a_key_is_refused_with_its_tasksets_name(tmp_path, episode):
    keyed = copy.deepcopy(episode)
    for task in (episode["task"], (unkeyed := copy.deepcopy(episode))["task"]):
        task.pop("key", None)
        task.pop("hash", None)
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in (keyed, episode, unkeyed)))
    with pytest.raises(TasksetRunError, match="taskset mmath-math500: an episode's task has no key"):
        summarize_traces(path, name="mmath-math500", taskset_id="eval-mmath", max_tokens=24)
    with pytest.raises(TasksetRunError, match="taskset rg-logic"):
        TraceTail(path, taskset="rg-logic").read()
