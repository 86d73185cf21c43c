"""The lazy baseline and the judgments against it, decided where they are made (autoresearch.task_tier).

The model servers and verifiers are the outside boundary here: `ScriptedAnswers` is a test double that
writes verifiers-shaped traces.jsonl lines with scripted rewards, one task at a time in run order,
calling the stop rule after each, as eval.runner.answer_taskset does with a real worker.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from autoresearch.errors import BaselineUnmeasured
from autoresearch.forecast import expected_walk, quiet_walk
from autoresearch.task_tier import TaskTier, first_answers, first_walk
from eval.decision import TaskPolicy
from eval.suites import SuiteOverrides, apply_overrides, get_suite
from eval.traces import TraceTail, summarize_episodes

SUITE = get_suite("offline")  # two tasksets of 600 planned tasks
POLICY = TaskPolicy()


def _correct(side: str, taskset: str, position: int) -> bool:
    """The scripted answers: the baseline right on 2 of 3 tasks; candidates flip some of them."""
    base = position % 3 != 0
    if side == "baseline":
        return base
    # P(lost) = 2/3 lose, P(gained) = 1/3 gain: equal for the lossless ones
    lose, gain = {"lossless": (0.02, 0.04), "lossy": (0.25, 0.02), "other": (0.03, 0.06)}[side.split("-")[0]]
    u = random.Random(f"{side}/{taskset}/{position}").random()
    if base and u < lose:
        return False
    if not base and u < gain:
        return True
    return base


@dataclass
class ScriptedAnswers:
    """Test double of the model server plus verifiers: answers task positions in run order."""

    asked: dict[str, list[int]] = field(default_factory=dict)  # side/taskset -> positions answered
    kill_after: int | None = None  # raise KeyboardInterrupt after this many answers in the next call
    truncated: bool = False
    failing: int = 0  # the next answers that fail operationally (the server or the harness down)
    clock: float = field(default_factory=time.time)

    def __call__(self, server, spec, skip, chunk_dir, stop_when):
        side = server
        path = chunk_dir / "traces" / spec.name / "traces.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        tail = TraceTail(path, taskset=spec.name)
        n = spec.planned_tasks
        for written, position in enumerate(range(skip, n)):
            if self.kill_after is not None and written >= self.kill_after:
                self.kill_after = None
                raise KeyboardInterrupt("killed mid-chunk")
            self.asked.setdefault(f"{side}/{spec.name}", []).append(position)
            self.clock += 1.0
            reward = 1.0 if _correct(side, spec.name, position) else 0.0
            finish = "length" if self.truncated else "stop"
            ok = self.failing <= 0
            self.failing -= 1
            line = {"ok": ok, "errors": [] if ok else [{"type": "ProviderError", "message": "down"}],
                    "task": {"key": f"{spec.name}-{position}", "data": {"idx": position}},
                    "traces": [{"ok": True, "rewards": {"r": {"score": reward}}, "timing": {"start": self.clock},
                                "calls": [{"usage": {"completion_tokens": 20}, "finish_reason": finish,
                                           "time": {"start": self.clock, "end": self.clock + 0.5}}]}]}
            with path.open("a") as f:
                f.write(json.dumps(line) + "\n")
            if stop_when is not None and stop_when(tail.read()):
                return self._result(spec, tail), False
        return self._result(spec, tail), True

    @staticmethod
    def _result(spec, tail):
        return summarize_episodes(tail.read(), name=spec.name, taskset_id=spec.taskset_id,
                                  max_tokens=spec.max_tokens, run_dir="")


@contextmanager
def _serve(side: str, launches: list[str]):
    launches.append(side)
    yield side


def _walk_length(side: str, spec) -> tuple[str, int]:
    """The sequential test run directly on the scripted outcomes: where it stops, and how."""
    outcomes = []
    for p in range(spec.planned_tasks):
        b, c = _correct("baseline", spec.name, p), _correct(side, spec.name, p)
        outcomes.append("lost" if b and not c else "gained" if c and not b else "tie")
    walk = POLICY.design(len(SUITE.tasksets)).walk(outcomes)
    return walk.decision, walk.tasks_used


def _judge(tier, tmp_path, side, launches):
    return tier.judge(tmp_path / side, serve_candidate=lambda: _serve(side, launches),
                      serve_baseline=lambda: _serve("baseline", launches))


def test_the_baseline_answers_exactly_as_many_tasks_as_the_longest_walk(tmp_path):
    answers = ScriptedAnswers()
    tier = TaskTier(SUITE, POLICY, answer=answers, baseline_dir=tmp_path / "baseline")
    tier.baseline_first("baseline")
    first = first_answers(POLICY, SUITE)
    assert {k: len(v) for k, v in answers.asked.items()} == {f"baseline/{s.name}": first for s in SUITE.tasksets}
    launches: list[str] = []
    judged = {side: _judge(tier, tmp_path, side, launches) for side in ("lossless-a", "lossy-b", "other-c")}

    for side, judgment in judged.items():
        for verdict in judgment.verdicts:
            decision, used = _walk_length(side, SUITE.taskset(verdict.name))
            assert (verdict.decision, verdict.tasks_used) == (decision, used), side
            assert verdict.power == pytest.approx(POLICY.design(2).power_at(600))  # sized on the taskset
    assert judged["lossy-b"].passed is False and judged["lossy-b"].verdicts[0].decision == "rejected"
    assert judged["lossless-a"].passed and judged["other-c"].passed
    # the lossy candidate was rejected on its first taskset: the second was not run for it
    assert len(judged["lossy-b"].verdicts) == 1

    for spec in SUITE.tasksets:
        walks = [_walk_length(side, spec)[1] for side, j in judged.items()
                 if any(v.name == spec.name for v in j.verdicts)]
        positions = answers.asked[f"baseline/{spec.name}"]
        assert len(positions) == max(max(walks), first) == tier.baseline[spec.name].answered
        assert positions == list(range(len(positions)))  # in run order, none answered twice
        assert len(positions) < spec.planned_tasks
    assert launches.count("baseline") >= 1


def test_the_baseline_answers_a_quiet_walk_and_a_full_batch_first_but_never_past_a_lossless_walk():
    design = POLICY.design(2)
    walk = math.ceil(expected_walk(design, 600))
    fewest = first_walk(POLICY, 2)
    quiet = quiet_walk(design, 600)
    assert fewest < 8 < quiet < walk  # the offline suite: 8 requests in flight
    assert design.walk(["tie"] * (quiet - 1)).decision == "undecided"  # a candidate flipping nothing stops there
    assert design.walk(["tie"] * quiet).decision == "accepted"
    assert first_answers(POLICY, SUITE) == quiet  # its first judgment needs no relaunch of the baseline
    assert first_answers(POLICY, dataclasses.replace(SUITE, max_concurrent=1)) == quiet
    assert first_answers(POLICY, dataclasses.replace(SUITE, max_concurrent=100)) == 100
    assert first_answers(POLICY, dataclasses.replace(SUITE, max_concurrent=500)) == walk
    small = dataclasses.replace(SUITE, tasksets=tuple(dataclasses.replace(t, limit=20) for t in SUITE.tasksets))
    assert first_answers(POLICY, dataclasses.replace(small, max_concurrent=1)) == 20  # never past the taskset


def test_the_lazy_baseline_resumes_after_a_kill_without_answering_again(tmp_path):
    answers = ScriptedAnswers()
    tier = TaskTier(SUITE, POLICY, answer=answers, baseline_dir=tmp_path / "baseline")
    tier.baseline_first("baseline")
    launches: list[str] = []
    answers.kill_after = 5  # the first call after this: the candidate's first chunk, killed after 5 answers
    with pytest.raises(KeyboardInterrupt):
        _judge(tier, tmp_path, "lossless-a", launches)
    answers.kill_after = None
    # the baseline is killed mid-chunk too: a fresh loop (a new TaskTier on the same folders) picks up both
    tier = TaskTier(SUITE, POLICY, answer=answers, baseline_dir=tmp_path / "baseline")
    cand_before = len(answers.asked["lossless-a/rg-math"])
    assert cand_before == 5
    answers.kill_after = None
    original = answers.__call__

    def killing_baseline(server, spec, skip, chunk_dir, stop_when, _once=[True]):  # noqa: B006 - one kill
        if server == "baseline" and _once[0]:
            _once[0] = False
            answers.kill_after = 7
        return original(server, spec, skip, chunk_dir, stop_when)

    tier.answer = killing_baseline
    with pytest.raises(KeyboardInterrupt):
        _judge(tier, tmp_path, "lossless-a", launches)
    tier = TaskTier(SUITE, POLICY, answer=answers, baseline_dir=tmp_path / "baseline")
    judgment = _judge(tier, tmp_path, "lossless-a", launches)

    for key, positions in answers.asked.items():
        assert len(positions) == len(set(positions)), f"{key} answered a task twice"
        assert positions == list(range(len(positions))), key
    for verdict in judgment.verdicts:
        assert (verdict.decision, verdict.tasks_used) == _walk_length("lossless-a", SUITE.taskset(verdict.name))
        assert len(answers.asked[f"baseline/{verdict.name}"]) == max(verdict.tasks_used, first_answers(POLICY, SUITE))


def test_the_baseline_rules_apply_to_what_it_answered(tmp_path):
    answers = ScriptedAnswers(truncated=True)
    tier = TaskTier(SUITE, POLICY, answer=answers, baseline_dir=tmp_path / "baseline")
    with pytest.raises(BaselineUnmeasured, match="token budget") as caught:
        tier.baseline_first("baseline")
    assert caught.value.outcome == "baseline_tasks_invalid"


def test_baseline_answers_with_failures_are_answered_once_more_then_stop_the_study(tmp_path):
    first = first_answers(POLICY, SUITE)
    answers = ScriptedAnswers(failing=3)
    tier = TaskTier(SUITE, POLICY, answer=answers, baseline_dir=tmp_path / "baseline")
    result = tier.baseline_first("baseline")
    assert [t.failures for t in result.tasksets] == [0, 0] and [t.tasks for t in result.tasksets] == [first, first]
    assert {k: len(v) for k, v in answers.asked.items()} == {f"baseline/{s.name}": 2 * first for s in SUITE.tasksets}
    assert (tmp_path / "baseline" / f"{SUITE.tasksets[0].name}.set-aside-0").is_dir()  # kept, out of the way

    failing_again = ScriptedAnswers(failing=2 * first + 1)  # the second attempt fails too: not the reference
    tier = TaskTier(SUITE, POLICY, answer=failing_again, baseline_dir=tmp_path / "again")
    with pytest.raises(BaselineUnmeasured, match="failed operationally") as caught:
        tier.baseline_first("baseline")
    assert (caught.value.constraint, caught.value.outcome) == ("tasks", "baseline_tasks_invalid")


def test_a_smoke_tier_answers_everything_and_judges_nothing(tmp_path):
    small = apply_overrides(SUITE, SuiteOverrides(limit=4, max_tokens=16))
    smoke = TaskPolicy(mode="smoke")
    answers = ScriptedAnswers()
    tier = TaskTier(small, smoke, answer=answers, baseline_dir=tmp_path / "baseline")
    tier.baseline_first("baseline")
    judgment = _judge(tier, tmp_path, "lossy-b", [])
    assert judgment.passed and {v.decision for v in judgment.verdicts} == {"not judged (smoke)"}
    assert {k: len(v) for k, v in answers.asked.items()} == {
        f"{side}/{s.name}": 4 for side in ("baseline", "lossy-b") for s in small.tasksets}


def _finalist(number: int, tier: str | None):
    import optuna

    t = optuna.trial.create_trial(values=[1.0, 1.0], user_attrs={"task_tier": tier} if tier else {})
    t.number = number
    return t


def test_who_is_judged_fastest_qualified_finalist_first_until_one_passes():
    from autoresearch.finalists import _judge_tasks

    finalists = [_finalist(n, "pending") for n in (1, 2, 3, 4)]
    verdicts = {1: {"qualified": True, "speedup": 1.2}, 2: {"qualified": True, "speedup": 1.5},
                3: {"qualified": False, "speedup": 1.9, "reason": "slower on decode"},
                4: {"qualified": True, "speedup": 1.1}}
    judged: list[int] = []

    def judge(t):
        judged.append(t.number)
        return {"passed": t.number != 2, "reasons": [] if t.number != 2 else ["rg-math: lost 9, gained 0"]}

    _judge_tasks(finalists, verdicts, judge)
    assert judged == [2, 1]  # fastest qualified first; the unqualified 3 is never judged; 4 not needed
    assert verdicts[2]["qualified"] is False and "task tier failed: rg-math: lost 9" in verdicts[2]["reason"]
    assert verdicts[1]["qualified"] is True and verdicts[1]["task_tier"]["passed"]
    assert verdicts[4]["qualified"] is False and "not judged" in verdicts[4]["reason"]
    crowned = max((n for n, v in verdicts.items() if v["qualified"]), key=lambda n: verdicts[n]["speedup"])
    assert crowned == 1


def test_no_finalist_is_crowned_when_none_passes_and_judged_in_trial_needs_no_second_judgment():
    from autoresearch.finalists import _judge_tasks

    verdicts = {1: {"qualified": True, "speedup": 1.3}, 2: {"qualified": True, "speedup": 1.2}}
    _judge_tasks([_finalist(1, "pending"), _finalist(2, "pending")], verdicts,
                 lambda t: {"passed": False, "reasons": ["smoke run did not complete"]})
    assert not any(v["qualified"] for v in verdicts.values())  # the baseline stays
    judged: list[int] = []
    verdicts = {1: {"qualified": True, "speedup": 1.3}}
    _judge_tasks([_finalist(1, "judged")], verdicts, lambda t: judged.append(t.number) or {"passed": False})
    assert judged == [] and verdicts[1]["qualified"]  # --task-tier-scope every judged it in its trial
