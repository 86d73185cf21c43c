"""The suite's concurrency, decided once per study: by default what the memory model says fits beside the weights.

The task tier judges the baseline and every candidate at one concurrency (batching can change the numerics), so
it is one number per study, chosen in this order: --suite-concurrency when given; the number a study that has
measured something was measured with; under a VRAM budget, the most answers in flight (at most the suite's own
number) whose cache pages fit beside the baseline's weights (search_space.in_flight); else (the CPU engine) the
suite's own. It goes into the plan's suite overrides, so RunPlan.measured_settings stores it (a resume that gives
another --suite-concurrency is refused) and the trials, the task tier and the night plan all use the one number.

Usage:
    plan, concurrency = settle_suite_concurrency(plan, space)   # before the study is opened
    print(concurrency.line())
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import optuna

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.errors import PlanError
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.stored_study import sqlite_path, stored_concurrency
from autoresearch.trial.memory import memory_calibration
from eval.suites import SuiteOverrides, SuiteSpec, apply_overrides, get_suite
from results import readable_storage
from search_space import Budget, Calibration, MemoryModel, SearchSpace, answers_in_flight

__all__ = ["CONCURRENCY_KEY", "PROMPT_TOKENS", "Concurrency", "settle_suite_concurrency"]

CONCURRENCY_KEY = "suite_concurrency"  # the study's user attr: {"answers", "why"}, for resumes and RESULTS.md
# Room for one task's prompt beside its answer: the night plan assumes 300 tokens on average; some tasksets'
# prompts (LiveCodeBench's) run to a thousand
PROMPT_TOKENS = 1024
_FLAG = "--suite-concurrency"


@dataclass(frozen=True, slots=True)
class Concurrency:
    """The answers in flight and why that many; `decided` when this run chose it (a resume reuses the stored)."""

    answers: int
    why: str
    decided: bool = True

    def line(self) -> str:
        return f"suite concurrency: {self.answers} answers in flight ({self.why})"

    def to_attr(self) -> dict:
        return {"answers": self.answers, "why": self.why}


def settle_suite_concurrency(plan: RunPlan, space: SearchSpace) -> tuple[RunPlan, Concurrency | None]:
    """The plan with the study's concurrency in its suite overrides, and why (None: no suite).

    Raises:
        PlanError: under the VRAM budget not even one answer fits beside the baseline's weights.
    """
    if plan.suite == "none":
        return plan, None
    suite = apply_overrides(get_suite(plan.suite), SuiteOverrides(**plan.suite_overrides))
    given = plan.suite_overrides.get("max_concurrent")
    if given is not None:
        return plan, Concurrency(given, _FLAG)
    stored, calibration = _stored(plan)
    if stored is not None:  # the study measured something at its number: resumes keep it
        number = stored_concurrency(stored)
        why = (stored.get(CONCURRENCY_KEY) or {}).get("why") or "the suite's own"
        if number is None:  # decided before this rule existed, or without a VRAM budget
            return plan, Concurrency(suite.max_concurrent, f"as this study was measured: {why}", decided=False)
        return _with(plan, number), Concurrency(number, f"as this study was measured: {why}", decided=False)
    if plan.vram_bytes is None:
        return plan, Concurrency(suite.max_concurrent, "the suite's own: no VRAM budget to size it by")
    return _fitted(plan, space, suite, calibration)


def _fitted(plan: RunPlan, space: SearchSpace, suite: SuiteSpec, calibration: Calibration | None):
    longest = max(t.max_tokens for t in suite.tasksets)
    baseline = space.to_config(space.values_with(plan.baseline_changes))
    fit = answers_in_flight(MemoryModel(space.context.model, space.context.draft_model), baseline,
                            Budget(vram_bytes=plan.vram_bytes), calibration, tokens_per_answer=PROMPT_TOKENS + longest,
                            most=suite.max_concurrent)
    if fit.answers == 0:
        raise PlanError(f"--vram {plan.vram_bytes / 1024**3:.1f} GiB: not even one answer of {fit.tokens_per_answer} "
                        f"tokens (a {PROMPT_TOKENS}-token prompt and the suite's {longest}-token answer limit) fits "
                        "beside the baseline's weights; give a larger --vram, shorter answers (--suite-max-tokens), "
                        "or --suite-concurrency N")
    own = suite.max_concurrent
    if fit.answers == own:
        why = f"the suite's own {own}"
    elif fit.answers == fit.most:
        why = f"the baseline batches at most {fit.most} (cache_slots, max_batch_size)"
    elif fit.answers == fit.held < fit.fitted:
        why = f"fewer than the suite's own {own}, held by the baseline's cache"
    else:
        why = f"fewer than the suite's own {own}"
    why += f": {fit.describe()}"
    return _with(plan, fit.answers), Concurrency(fit.answers, why)


def _with(plan: RunPlan, answers: int) -> RunPlan:
    return dataclasses.replace(plan, suite_overrides={**plan.suite_overrides, "max_concurrent": answers})


def _stored(plan: RunPlan) -> tuple[dict | None, Calibration | None]:
    """The stored study's user attrs when it has measured something (a study that measured nothing takes a new
    run's settings: autoresearch.ground.study), and the memory model's calibration from its trials so far. Read
    from a snapshot: a database that does not exist is not created."""
    path = sqlite_path(plan.storage_url)
    if path is not None and not path.is_file():
        return None, None
    with contextlib.suppress(KeyError, FileNotFoundError), readable_storage(plan.storage_url) as url:
        study = optuna.load_study(study_name=plan.study_name, storage=url)
        measured = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        return (dict(study.user_attrs) if measured else None), memory_calibration(ResultsDB(url), plan.study_name)
    return None, None
