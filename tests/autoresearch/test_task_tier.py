"""The lazy baseline and the judgments against it, decided where they are made (autoresearch.checks.task_tier).

The model servers and verifiers' rollouts are the outside boundary here: `ScriptedAnswers` is a test double
that answers each chunk the way the worker does (eval.dispatch: the tasks not answered yet in run order,
`concurrency` at a time, the stop rule asked before each task is sent, those in flight answered after a
stop), with tasks that take their own time, so they finish out of order: every seventh is slow, and so is
every task a lossy candidate gets wrong (a long or looping answer). It writes verifiers-shaped
traces.jsonl lines with scripted rewards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from autoresearch.checks.task_tier import TaskTier, first_answers, first_walk
from autoresearch.ground.errors import BaselineUnmeasured
from eval.decision import TaskPolicy
from eval.dispatch import answer_in_order
from eval.suites import SuiteOverrides, apply_overrides, get_suite
from eval.traces import TraceTail, summarize_episodes
from eval.walks import expected_walk, quiet_walk

SUITE = get_suite("offline")  # two tasksets of 600 planned tasks, 8 requests in flight
POLICY = TaskPolicy()
IN_FLIGHT = SUITE.max_concurrent


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


def _turns(side: str, taskset: str, position: int) -> int:
    """How long an answer takes (event-loop turns): slow every seventh task and wherever a candidate is wrong."""
    slow = position % 7 == 3 or (side != "baseline" and not _correct(side, taskset, position))
    return 60 + position % 11 if slow else 1 + position % 4


@dataclass
class ScriptedAnswers:
    """Test double of the model server plus verifiers' rollouts: answers concurrently and out of order."""

    asked: dict[str, list[int]] = field(default_factory=dict)  # side/taskset -> positions sent, in order
    chunks: list[dict] = field(default_factory=list)  # per chunk: side/taskset, sent, answered, in flight at stop
    concurrency: int = IN_FLIGHT
    kill_after: int | None = None  # KeyboardInterrupt after this many answers in the next chunk (others in flight)
    truncated: bool = False
    failing: int = 0  # the next answers that fail operationally (the server or the harness down)
    clock: float = field(default_factory=time.time)

    def __call__(self, server, spec, answered, chunk_dir, stop_when):
        side = server
        path = chunk_dir / "traces" / spec.name / "traces.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        tail = TraceTail(path, taskset=spec.name)
        chunk = {"name": f"{side}/{spec.name}", "sent": [], "answered": [], "in_flight_at_stop": None}
        self.chunks.append(chunk)
        todo = [p for p in range(spec.planned_tasks) if f"{spec.name}-{p}" not in answered]

        async def rollout(position: int) -> None:
            self.asked.setdefault(chunk["name"], []).append(position)
            chunk["sent"].append(position)
            self.clock += 1.0
            started = self.clock
            for _ in range(_turns(side, spec.name, position)):
                await asyncio.sleep(0)
            if self.kill_after is not None and len(chunk["answered"]) >= self.kill_after:
                self.kill_after = None
                raise KeyboardInterrupt("killed mid-chunk")
            reward = 1.0 if _correct(side, spec.name, position) else 0.0
            finish = "length" if self.truncated else "stop"
            ok = self.failing <= 0
            self.failing -= 1
            line = {"ok": ok, "errors": [] if ok else [{"type": "ProviderError", "message": "down"}],
                    "task": {"key": f"{spec.name}-{position}", "data": {"idx": position}},
                    "traces": [{"ok": True, "rewards": {"r": {"score": reward}}, "timing": {"start": started},
                                "calls": [{"usage": {"completion_tokens": 20}, "finish_reason": finish,
                                           "time": {"start": started, "end": started + 0.5}}]}]}
            with path.open("a") as f:
                f.write(json.dumps(line) + "\n")
            chunk["answered"].append(position)

        def stop_requested() -> bool:
            stop = stop_when is not None and stop_when(tail.read()) is not None
            if stop and chunk["in_flight_at_stop"] is None:
                chunk["in_flight_at_stop"] = sorted(set(chunk["sent"]) - set(chunk["answered"]))
            return stop

        dispatched = asyncio.run(answer_in_order(todo, rollout, max_concurrent=self.concurrency,
                                                 stop_requested=stop_requested))
        return summarize_episodes(tail.read(), name=spec.name, taskset_id=spec.taskset_id,
                                  max_tokens=spec.max_tokens, run_dir=""), dispatched.ran_all


@contextmanager
def _serve(side: str, launches: list[str]):
    launches.append(side)
    yield side


def _outcome(side: str, taskset: str, position: int) -> str:
    b, c = _correct("baseline", taskset, position), _correct(side, taskset, position)
    return "lost" if b and not c else "gained" if c and not b else "tie"


def _walk_length(side: str, spec, order: list[int] | None = None) -> tuple[str, int]:
    """The sequential test run directly on the scripted outcomes (in `order`, default the run order's
    positions): where it stops, and how."""
    outcomes = [_outcome(side, spec.name, p) for p in (range(spec.planned_tasks) if order is None else order)]
    walk = POLICY.design(len(SUITE.tasksets)).walk(outcomes)
    return walk.decision, walk.tasks_used


def _judge(tier, tmp_path, side, launches):
    return tier.judge(tmp_path / side, serve_candidate=lambda: _serve(side, launches),
                      serve_baseline=lambda: _serve("baseline", launches))


def test_the_baseline_answers_the_longest_walk_and_no_stop_drops_an_answer_in_flight(tmp_path):
    answers = ScriptedAnswers()
    tier = TaskTier(SUITE, POLICY, answer=answers, baseline_dir=tmp_path / "baseline")
    tier.baseline_first("baseline")
    first = first_answers(POLICY, SUITE)
    for spec in SUITE.tasksets:  # its first answers, and those in flight when it had them
        assert first <= len(answers.asked[f"baseline/{spec.name}"]) < first + IN_FLIGHT
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

    # every chunk was stopped by its rule with answers in flight, out of order; each of them was answered
    assert all(c["in_flight_at_stop"] for c in answers.chunks)
    for chunk in answers.chunks:
        assert sorted(chunk["answered"]) == sorted(chunk["sent"]), chunk["name"]
        assert chunk["answered"] != chunk["sent"]  # they finished out of order
    lossy = next(c for c in answers.chunks if c["name"] == "lossy-b/rg-math")
    assert any(_outcome("lossy-b", "rg-math", p) == "lost" for p in lossy["in_flight_at_stop"])  # its slow, wrong answers

    for spec in SUITE.tasksets:
        walks = [_walk_length(side, spec)[1] for side, j in judged.items()
                 if any(v.name == spec.name for v in j.verdicts)]
        positions = answers.asked[f"baseline/{spec.name}"]
        assert positions == list(range(len(positions))) and len(positions) == tier.baseline[spec.name].answered
        # the longest walk, plus the answers in flight when its rule saw the walk decide past the slow ones
        assert max(max(walks), first) <= len(positions) < max(max(walks), first) + 2 * IN_FLIGHT
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


def _answered_on_disk(root) -> dict[str, int]:
    """How many times each task key was answered, over every chunk under `root`."""
    counts: dict[str, int] = {}
    for path in root.rglob("traces.jsonl"):
        for line in path.read_text().splitlines():
            key = json.loads(line)["task"]["key"]
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_a_chunk_killed_mid_flight_leaves_holes_the_next_chunk_answers_first_and_none_twice(tmp_path):
    answers = ScriptedAnswers()
    tier = TaskTier(SUITE, POLICY, answer=answers, baseline_dir=tmp_path / "baseline")
    tier.baseline_first("baseline")
    launches: list[str] = []
    answers.kill_after = 5  # the candidate's first chunk dies after 5 answers, slow ones in flight
    with pytest.raises(KeyboardInterrupt):
        _judge(tier, tmp_path, "lossless-a", launches)
    killed = answers.chunks[-1]
    holes = set(killed["sent"]) - set(killed["answered"])
    assert len(killed["answered"]) == 5 and min(holes) < max(killed["answered"])  # not a prefix of the run order

    # a fresh loop (a new TaskTier on the same folders); the baseline's first chunk in it is killed too
    tier = TaskTier(SUITE, POLICY, answer=answers, baseline_dir=tmp_path / "baseline")
    original = answers.__call__

    def killing_baseline(server, spec, answered, chunk_dir, stop_when, _once=[True]):  # noqa: B006 - one kill
        if server == "baseline" and _once[0]:
            _once[0] = False
            answers.kill_after = 7
        return original(server, spec, answered, chunk_dir, stop_when)

    tier.answer = killing_baseline
    with pytest.raises(KeyboardInterrupt):
        _judge(tier, tmp_path, "lossless-a", launches)
    assert answers.chunks[-1]["name"].startswith("baseline/") and len(answers.chunks[-1]["answered"]) == 7
    tier = TaskTier(SUITE, POLICY, answer=answers, baseline_dir=tmp_path / "baseline")
    judgment = _judge(tier, tmp_path, "lossless-a", launches)

    kills = 0
    for name in {c["name"] for c in answers.chunks}:
        chunks = [c for c in answers.chunks if c["name"] == name]
        for before, after in zip(chunks, chunks[1:], strict=False):
            left = sorted(set(before["sent"]) - set(before["answered"]))
            kills += bool(left)
            assert after["sent"][:len(left)] == left, f"{name}: the holes are answered first"
        answered = [p for c in chunks for p in c["answered"]]
        assert sorted(answered) == list(range(len(answered))), f"{name}: none lost, none answered twice"
    assert kills == 2
    for side in ("baseline", "lossless-a"):
        assert set(_answered_on_disk(tmp_path / side).values()) == {1}, f"{side} answered a task twice"
    for verdict in judgment.verdicts:
        spec = SUITE.taskset(verdict.name)
        # the walk follows the baseline's run order: when each answer was sent (a killed chunk's holes later)
        sent = answers.asked[f"baseline/{spec.name}"]
        order = list(dict.fromkeys(reversed(sent)))[::-1]  # a task sent twice counts where it was answered
        assert (verdict.decision, verdict.tasks_used) == _walk_length("lossless-a", spec, order)


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
    assert [t.failures for t in result.tasksets] == [0, 0]
    for t in result.tasksets:  # the same answers twice: the first attempt's set aside
        assert first <= t.tasks < first + IN_FLIGHT and len(answers.asked[f"baseline/{t.name}"]) == 2 * t.tasks
    assert (tmp_path / "baseline" / f"{SUITE.tasksets[0].name}.set-aside-0").is_dir()  # kept, out of the way

    failing_again = ScriptedAnswers(failing=4 * first)  # the second attempt fails too: not the reference
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
    from autoresearch.crown.finalists import _judge_tasks

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
    from autoresearch.crown.finalists import _judge_tasks

    verdicts = {1: {"qualified": True, "speedup": 1.3}, 2: {"qualified": True, "speedup": 1.2}}
    _judge_tasks([_finalist(1, "pending"), _finalist(2, "pending")], verdicts,
                 lambda t: {"passed": False, "reasons": ["smoke run did not complete"]})
    assert not any(v["qualified"] for v in verdicts.values())  # the baseline stays
    judged: list[int] = []
    verdicts = {1: {"qualified": True, "speedup": 1.3}}
    _judge_tasks([_finalist(1, "judged")], verdicts, lambda t: judged.append(t.number) or {"passed": False})
    assert judged == [] and verdicts[1]["qualified"]  # --task-tier-scope every judged it in its trial
