"""The task tier, judged where it can change the outcome, against a baseline that answers lazily.

Who is judged (`--task-tier-scope`, RunPlan.task_tier_scope):
- finalists (default): every trial keeps the cheap stages (feasibility, launch, bench, dominance,
  fidelity); a candidate that passes fidelity is marked `task_tier: pending`. The finalists' stage
  judges the finalists it confirmed faster, fastest first, until one passes: only that one is
  crowned. A suite that cannot judge (`--task-tier smoke`) runs its smoke run on the finalist instead,
  and one whose smoke run does not complete is not crowned either.
- every: each candidate that passes fidelity is judged inside its trial (the behaviour before).

The lazy baseline: the baseline answers each taskset in the suite's run order only as far as some
candidate's sequential walk needs it. A judgment alternates launches: the candidate answers ahead of
the baseline's answers (at most `lookahead` tasks, the expected walk of a lossless change) and stops
as soon as its walk decides on the tasks both answered; where it is still undecided, the baseline is
launched and answers on from where it stopped, until the walk decides or it has caught up. So the
baseline never answers more than the longest walk of the candidates judged, nor more than the suite.

Answers live on disk as chunks, `<root>/<taskset>/chunk-NNN/` (verifiers' traces.jsonl, appended per
finished episode), and are known by their task keys: each chunk answers the tasks of the run order whose
keys no earlier chunk answered, so the holes a killed chunk left (its requests in flight) come first,
and no task is answered twice. A chunk stopped by its rule sends no further task but answers those in
flight (eval.dispatch): the slowest answers, the long or looping ones, are never dropped.

Usage:
    tier = TaskTier(suite, policy, answer=eval_answerer(...), baseline_dir=study_dir / "answers" / "baseline")
    judgment = tier.judge(study_dir / "answers" / "trial-0007", serve_candidate=..., serve_baseline=...)
    judgment.passed, judgment.verdicts
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoresearch.ground.errors import BaselineUnmeasured
from eval.decision import TaskPolicy, TasksetVerdict, baseline_problems, compare_taskset
from eval.records import EpisodeOutcome, SuiteResult, TasksetResult
from eval.suites import SuiteSpec, TasksetSpec
from eval.traces import TraceTail, summarize_episodes
from eval.walks import lookahead, quiet_walk

__all__ = ["Answer", "Answers", "Judgment", "TaskTier", "first_answers", "first_walk"]

log = logging.getLogger(__name__)
StopRule = Callable[[list[EpisodeOutcome]], str | None]
# (server, taskset, keys answered already, chunk_dir, stop_when) -> (what this chunk answered, whether it ran to
# the taskset's end); it answers the other tasks in run order and writes its traces.jsonl under chunk_dir as
# episodes finish, answering those in flight when stop_when fires (eval.runner.answer_taskset does)
Answer = Callable[[Any, TasksetSpec, frozenset[str], Path, StopRule], tuple[TasksetResult, bool]]
_COMPLETE = "complete"


def first_walk(policy: TaskPolicy, tasksets: int) -> int:
    """The fewest paired tasks any walk can decide in."""
    design = policy.design(tasksets)
    reject = design.losses_to_reject
    accept = math.ceil(design.accept_at / design.step_gained - 1e-12)
    return max(min(reject, accept), 1)


def first_answers(policy: TaskPolicy, suite: SuiteSpec) -> int:
    """What the baseline answers in its own trial: at least the fewest tasks any walk decides in, a full
    batch of the suite's requests in flight (they cost about one request's wall time, and give the plan a
    throughput and answer-length sample rather than a worker's start-up over three answers) and the walk of a
    candidate that flips nothing (answering less makes the first such judgment relaunch the baseline), but
    never more than a lossless candidate's expected walk on the smallest taskset."""
    n = len(suite.tasksets)
    design = policy.design(n)
    sizes = [spec.planned_tasks or 600 for spec in suite.tasksets]
    expected = min(lookahead(design, size) for size in sizes)
    quiet = min(quiet_walk(design, size) for size in sizes)
    return max(first_walk(policy, n), min(expected, max(suite.max_concurrent, quiet)))


class Answers:
    """One side's answers on one taskset, merged over its chunks in run order."""

    def __init__(self, root: Path, spec: TasksetSpec):
        self.root = root / spec.name
        self.spec = spec

    def _chunks(self) -> list[Path]:
        return sorted(p for p in self.root.glob("chunk-*") if p.is_dir()) if self.root.is_dir() else []

    def episodes(self) -> list[EpisodeOutcome]:
        """Every finished answer; a task answered again in a later chunk keeps its first answer."""
        out: list[EpisodeOutcome] = []
        for chunk in self._chunks():
            seen = {e.task_key for e in out}
            for path in sorted(chunk.rglob("traces.jsonl")):
                out.extend(e for e in TraceTail(path, taskset=self.spec.name).read() if e.task_key not in seen)
        return out

    def result(self, extra: list[EpisodeOutcome] = ()) -> TasksetResult:
        episodes = self.episodes()
        seen = {e.task_key for e in episodes}
        episodes += [e for e in extra if e.task_key not in seen]
        return summarize_episodes(episodes, name=self.spec.name, taskset_id=self.spec.taskset_id,
                                  max_tokens=self.spec.max_tokens, run_dir=str(self.root))

    def keys(self) -> frozenset[str]:
        """The tasks answered so far (in no particular order: concurrent answers finish out of order)."""
        return frozenset(e.task_key for e in self.episodes())

    @property
    def answered(self) -> int:
        return len(self.keys())

    @property
    def exhausted(self) -> bool:
        planned = self.spec.planned_tasks
        return (self.root / _COMPLETE).exists() or (planned is not None and self.answered >= planned)

    def set_aside(self) -> None:
        """Keep these answers on disk beside the next attempt's, out of its way (`<taskset>.set-aside-N`)."""
        if not self.root.is_dir():
            return
        attempt = 0
        while (aside := self.root.with_name(f"{self.root.name}.set-aside-{attempt}")).exists():
            attempt += 1
        self.root.rename(aside)

    def answer(self, answer: Answer, server: Any, stop_when: StopRule | None) -> None:
        """Answer the tasks no chunk answered yet, in run order, until `stop_when` (seeing every answer so far)
        says stop."""
        if self.exhausted:
            return
        prior = self.episodes()
        seen = {e.task_key for e in prior}
        chunk = self.root / f"chunk-{len(self._chunks()):03d}"
        chunk.mkdir(parents=True)

        def rule(new: list[EpisodeOutcome]) -> str | None:
            return stop_when(prior + [e for e in new if e.task_key not in seen]) if stop_when is not None else None

        _, complete = answer(server, self.spec, frozenset(seen), chunk, rule)
        if complete:
            (self.root / _COMPLETE).write_text(f"ran to the end after {self.answered} tasks\n")


@dataclass(frozen=True)
class Judgment:
    passed: bool
    verdicts: tuple[TasksetVerdict, ...]  # in suite order; a rejection ends the judgment
    baseline: SuiteResult  # both sides restricted to the tasks both answered (what the verdicts paired)
    candidate: SuiteResult
    planned: dict[str, int | None]  # per taskset, the size the verdict's power is computed on
    baseline_answered: dict[str, int]
    candidate_answered: dict[str, int]


def _restrict(result: TasksetResult, keys: set[str]) -> TasksetResult:
    return summarize_episodes([e for e in result.episodes if e.task_key in keys], name=result.name,
                              taskset_id=result.taskset_id, max_tokens=result.max_tokens, run_dir=result.run_dir)


def _as_result(spec: TasksetSpec, episodes: list[EpisodeOutcome]) -> TasksetResult:
    return summarize_episodes(episodes, name=spec.name, taskset_id=spec.taskset_id, max_tokens=spec.max_tokens,
                              run_dir="")


def _decided(verdict: TasksetVerdict) -> bool:
    return verdict.decision in ("rejected", "accepted")


class TaskTier:
    """The suite's baseline answers (lazy, on disk) and the judgments of candidates against them."""

    def __init__(self, suite: SuiteSpec, policy: TaskPolicy, *, answer: Answer, baseline_dir: Path):
        self.suite = suite
        self.policy = policy
        self.answer = answer
        self.baseline = {spec.name: Answers(baseline_dir, spec) for spec in suite.tasksets}
        design = policy.design(len(suite.tasksets))
        self.lookahead = {spec.name: lookahead(design, spec.planned_tasks or 600) for spec in suite.tasksets}

    # ---- the baseline's own trial ----

    def baseline_first(self, server: Any) -> SuiteResult:
        """In the baseline's trial: first_answers() (the whole suite in smoke mode), then
        the baseline rules on what it answered. Answers with failed episodes are set aside and answered once
        more (a transient failure of the server or the harness is not the reference's fault).

        Raises:
            BaselineUnmeasured: failed episodes (again), answers dominated by the token budget, or tasksets
                too small for the claimed power.
        """
        self._answer_first(server)
        problems = self.baseline_problems()
        if problems and any(a.result().failures for a in self.baseline.values()):
            log.warning("the baseline's answers had operational failures; answering once more: %s", problems)
            for answers in self.baseline.values():
                answers.set_aside()
            self._answer_first(server)
        self.check_baseline()
        return self.baseline_result()

    def _answer_first(self, server: Any) -> None:
        first = first_answers(self.policy, self.suite)
        for spec in self.suite.tasksets:
            answers = self.baseline[spec.name]
            enough = (lambda eps, n=first: f"answered {n}" if len({e.task_key for e in eps}) >= n else None) \
                if self.policy.judge else None
            if answers.answered < first or not self.policy.judge:
                answers.answer(self.answer, server, enough)

    def baseline_result(self) -> SuiteResult:
        return SuiteResult(suite=self.suite.name, run_dir=str(next(iter(self.baseline.values())).root.parent),
                           tasksets=tuple(a.result() for a in self.baseline.values()))

    def baseline_problems(self) -> list[str]:
        """Why the baseline's answers so far cannot be the reference (eval's rules); empty when they can."""
        if not self.policy.decides:  # smoke: recorded, nothing judged against it
            return []
        k = len(self.suite.tasksets)
        return [p for spec in self.suite.tasksets for p in
                baseline_problems(self.baseline[spec.name].result(), self.policy, k, spec.planned_tasks)]

    def check_baseline(self) -> None:
        if problems := self.baseline_problems():
            raise BaselineUnmeasured("the baseline's answers cannot be the reference: " + "; ".join(problems),
                                     constraint="tasks", outcome="baseline_tasks_invalid")

    # ---- a candidate ----

    def verdict(self, spec: TasksetSpec, candidate: Answers) -> tuple[TasksetVerdict, TasksetResult, TasksetResult,
                                                                         int | None]:
        """The walk on the tasks both sides answered; sized on the whole taskset until both ran out."""
        base, cand = self.baseline[spec.name].result(), candidate.result()
        common = {e.task_key for e in base.episodes} & {e.task_key for e in cand.episodes}
        base, cand = _restrict(base, common), _restrict(cand, common)
        final = self._over(spec, candidate)
        planned = None if final or not self.policy.judge else spec.planned_tasks
        verdict = compare_taskset(base, cand, self.policy, tasksets=len(self.suite.tasksets), planned_tasks=planned)
        return verdict, base, cand, planned

    def _over(self, spec: TasksetSpec, cand: Answers) -> bool:
        """Both sides ran out of tasks: the walk ends here, decided or not."""
        base = self.baseline[spec.name]
        return cand.exhausted and (base.exhausted or cand.keys() <= base.keys())

    def judge(self, candidate_dir: Path, *, serve_candidate: Callable[[], AbstractContextManager[Any]],
              serve_baseline: Callable[[], AbstractContextManager[Any]], server: Any = None,
              release: Callable[[], None] | None = None) -> Judgment:
        """Judge one candidate, launching each side as the walks need it. `server`: the candidate's, already
        up, answered on first; `release()` stops it before the baseline's server starts (one GPU).

        Raises:
            BaselineUnmeasured: the baseline's answers break its rules (the study cannot judge anyone).
            TasksetRunError, EvalError: from eval, unchanged (a smoke run that does not complete).
        """
        specs = list(self.suite.tasksets)
        cand = {spec.name: Answers(candidate_dir, spec) for spec in specs}
        done: dict[str, TasksetVerdict] = {}
        first = server
        while not self._settle(specs, cand, done):
            waiting = [s for s in specs if s.name not in done]
            if any(not self._needs_baseline(s, cand[s.name]) for s in waiting):  # the candidate answers ahead
                with (nullcontext(first) if first is not None else serve_candidate()) as up:
                    first = None
                    self._phase(waiting, cand, done, up, candidate=True)
                continue
            first = None
            if release is not None:  # one server at a time: the candidate's goes down first
                release()
                release = None
            with serve_baseline() as up:
                self._phase(waiting, cand, done, up, candidate=False)
        return self._judgment(specs, cand, done)

    def _settle(self, specs: list[TasksetSpec], cand: dict[str, Answers], done: dict[str, TasksetVerdict]) -> bool:
        """Record decided tasksets; True when the judgment is over (all decided, or one rejected)."""
        for spec in specs:
            if spec.name in done:
                continue
            verdict = self.verdict(spec, cand[spec.name])[0]
            c = cand[spec.name]
            if _decided(verdict) or self._over(spec, c) or (not self.policy.judge and c.exhausted):
                done[spec.name] = verdict
        return len(done) == len(specs) or any(v.decision == "rejected" for v in done.values())

    def _needs_baseline(self, spec: TasksetSpec, cand: Answers) -> bool:
        base = self.baseline[spec.name]
        return self.policy.judge and not base.exhausted and (cand.exhausted or not cand.keys() <= base.keys())

    def _phase(self, waiting: list[TasksetSpec], cand: dict[str, Answers], done: dict[str, TasksetVerdict],
               server: Any, *, candidate: bool) -> None:
        """One launch of one side: it answers every waiting taskset it is behind on."""
        for spec in waiting:
            c = cand[spec.name]
            if candidate and not self._needs_baseline(spec, c):
                c.answer(self.answer, server, self._candidate_rule(spec, c))
            elif not candidate and self._needs_baseline(spec, c):
                self.baseline[spec.name].answer(self.answer, server, self._baseline_rule(spec, c))
                self.check_baseline()
            if self._settle(list(self.suite.tasksets), cand, done):
                return

    def _candidate_rule(self, spec: TasksetSpec, cand: Answers) -> StopRule | None:
        if not self.policy.judge:
            return None  # a smoke run answers everything
        base = self.baseline[spec.name].result()  # unchanged while the candidate answers
        limit = base.tasks + self.lookahead[spec.name]

        def rule(episodes: list[EpisodeOutcome]) -> str | None:
            if _decided(self._walk(spec, base, _as_result(spec, episodes))):
                return "the walk decided"
            return f"{limit} answered, ahead of the baseline" if len({e.task_key for e in episodes}) >= limit \
                else None

        return rule

    def _baseline_rule(self, spec: TasksetSpec, cand: Answers) -> StopRule:
        answered = cand.result()  # unchanged while the baseline answers
        target = {e.task_key for e in answered.episodes}

        def rule(episodes: list[EpisodeOutcome]) -> str | None:
            if _decided(self._walk(spec, _as_result(spec, episodes), answered)):
                return "the walk decided"
            return "caught up with the candidate" if target <= {e.task_key for e in episodes} else None

        return rule

    def _walk(self, spec: TasksetSpec, base: TasksetResult, cand: TasksetResult) -> TasksetVerdict:
        common = {e.task_key for e in base.episodes} & {e.task_key for e in cand.episodes}
        return compare_taskset(_restrict(base, common), _restrict(cand, common), self.policy,
                               tasksets=len(self.suite.tasksets), planned_tasks=spec.planned_tasks,
                               observed_power=False)

    def _judgment(self, specs: list[TasksetSpec], cand: dict[str, Answers],
                  done: dict[str, TasksetVerdict]) -> Judgment:
        verdicts, bases, cands, planned = [], [], [], {}
        for spec in specs:
            if spec.name not in done:  # not run: an earlier taskset was rejected
                bases.append(self.baseline[spec.name].result())  # the suite's tasksets count in alpha's share
                continue
            verdict, base, c, size = self.verdict(spec, cand[spec.name])
            verdicts.append(verdict)
            bases.append(base)
            cands.append(c)
            planned[spec.name] = size
        root = str(next(iter(cand.values())).root.parent)
        return Judgment(passed=bool(verdicts) and all(v.passed for v in verdicts), verdicts=tuple(verdicts),
                        baseline=SuiteResult(suite=self.suite.name, run_dir=str(self.baseline_result().run_dir),
                                             tasksets=tuple(bases)),
                        candidate=SuiteResult(suite=self.suite.name, run_dir=root, tasksets=tuple(cands)),
                        planned=planned, baseline_answered={k: a.answered for k, a in self.baseline.items()},
                        candidate_answered={k: a.answered for k, a in cand.items()})

