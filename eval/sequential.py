"""The task tier's test: a sequential probability ratio test on the discordant pairs of a paired run.

Why this test: the baseline and the candidate answer the same tasks, so only the tasks they
disagree on (discordant pairs) carry evidence. When nothing was lost, each discordant pair is a
fair coin ("lost" or "gained"), whatever the share of tasks that flip; a candidate that is worse by
`min_drop` accuracy points loses a discordant pair with probability 1/2 + min_drop / (2 d), where
d is the share of tasks that flip either way (`planned_discordance` in the design). Wald's test walks
the pairs in the baseline's run order and stops as soon as the evidence is clear either way:

- reject (the candidate lost answers) when the log-likelihood ratio reaches log(1 / alpha). By
  Ville's inequality a lossless change is rejected with probability at most alpha, for any share of
  flips, any taskset size and any stopping point: the false-rejection bound needs no planning value;
- accept (nothing lost) when it falls to log(beta / (1 - alpha)), or when so few tasks were lost that
  a min_drop loss is implausible (`futility`): a candidate that changes almost no answer stops early
  instead of running the whole taskset on ties;
- a taskset that runs out undecided is accepted. That costs power, never false rejections, and
  `operating_characteristics` computes exactly how much power, so a taskset too small for the
  claimed detection is refused before it runs (`tasks_needed`).

Power depends on the true share of flips: the design is sized at `planned_discordance`, and the
report restates the power at the discordance a run actually showed.

Usage:
    design = SequentialDesign(min_drop=0.05, alpha=0.05, power=0.8, planned_discordance=0.15)
    design.tasks_needed(max_tasks=500)                       # smallest taskset with the claimed power
    walk = design.walk(["tie", "lost", "lost", ...])        # the decision on outcomes in run order
    design.operating_characteristics(n_tasks=300, drop=0.05, discordance=0.15).reject
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Literal

import numpy as np

from eval.errors import EvalConfigError

__all__ = ["OperatingCharacteristics", "Outcome", "SequentialDesign", "Walk"]

Outcome = Literal["lost", "gained", "tie"]
Decision = Literal["rejected", "accepted", "undecided"]

_MAX_P_LOST = 0.99  # a planned drop as large as the flips themselves: cap the alternative short of certainty


@cache
def _futile_losses(min_drop: float, futility: float, t: int) -> int:
    """The most losses in t tasks that make a min_drop loss implausible (-1: none does).

    A candidate min_drop worse loses at least a min_drop share of all tasks (it needs as many flips),
    so l losses in t tasks with P(Binomial(t, min_drop) <= l) < futility is clear evidence of no such drop.
    """
    log_p, log_q = math.log(min_drop), math.log1p(-min_drop)
    cdf, most = 0.0, -1
    for k in range(t + 1):
        cdf += math.exp(math.lgamma(t + 1) - math.lgamma(k + 1) - math.lgamma(t - k + 1) + k * log_p + (t - k) * log_q)
        if cdf >= futility:
            break
        most = k
    return most


@dataclass(frozen=True, kw_only=True, slots=True)
class OperatingCharacteristics:
    """Exact probabilities of the truncated test on `n_tasks` tasks at a true (drop, discordance)."""

    n_tasks: int
    drop: float
    discordance: float
    reject: float  # the power when drop > 0, the false-rejection rate when drop == 0
    accept_early: float
    undecided: float  # ran out of tasks: accepted at the end
    expected_tasks: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Walk:
    """The test run over outcomes in order: where it stopped and why."""

    decision: Decision
    tasks_used: int  # outcomes consumed up to and including the deciding one
    lost: int
    gained: int
    llr: float


@dataclass(frozen=True, kw_only=True)
class SequentialDesign:
    min_drop: float = 0.05  # accuracy points (as a fraction) the test must detect
    alpha: float = 0.05  # false rejections of a lossless change, at most (this taskset)
    power: float = 0.80  # at min_drop, with planned_discordance
    planned_discordance: float = 0.10  # share of tasks that flip either way, for sizing only
    futility: float = 0.02  # accept once so few losses make a min_drop loss this improbable

    def __post_init__(self) -> None:
        for name in ("min_drop", "alpha", "planned_discordance", "futility"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 < value < 1.0):
                raise EvalConfigError(f"{name} must be in (0, 1), got {value}")
        if not (math.isfinite(self.power) and self.alpha < self.power < 1.0):
            raise EvalConfigError(f"power must be in (alpha, 1), got {self.power}")
        if self.min_drop > self.planned_discordance:
            raise EvalConfigError(
                f"min_drop {self.min_drop} cannot exceed planned_discordance {self.planned_discordance}: "
                "a drop needs at least as many flipped tasks"
            )

    @cached_property
    def p_lost(self) -> float:
        """P(a discordant pair is a loss) under the alternative the test is sized for."""
        return min(0.5 + self.min_drop / (2.0 * self.planned_discordance), _MAX_P_LOST)

    @property
    def step_lost(self) -> float:
        return math.log(2.0 * self.p_lost)

    @property
    def step_gained(self) -> float:
        return math.log(2.0 * (1.0 - self.p_lost))

    @property
    def reject_at(self) -> float:
        return math.log(1.0 / self.alpha)

    @property
    def accept_at(self) -> float:
        return math.log((1.0 - self.power) / (1.0 - self.alpha))

    @property
    def losses_to_reject(self) -> int:
        """Net of nothing gained: the fewest losses that can ever reject. Fewer paired tasks cannot judge."""
        return math.ceil(self.reject_at / self.step_lost - 1e-12)

    def walk(self, outcomes: Iterable[Outcome]) -> Walk:
        lost = gained = used = 0
        llr = 0.0
        for outcome in outcomes:
            used += 1
            if outcome == "lost":
                lost += 1
            elif outcome == "gained":
                gained += 1
            elif outcome != "tie":
                raise ValueError(f"unknown outcome {outcome!r}")
            llr = lost * self.step_lost + gained * self.step_gained
            if llr >= self.reject_at - 1e-12:
                return Walk(decision="rejected", tasks_used=used, lost=lost, gained=gained, llr=llr)
            if llr <= self.accept_at + 1e-12 or lost <= _futile_losses(self.min_drop, self.futility, used):
                return Walk(decision="accepted", tasks_used=used, lost=lost, gained=gained, llr=llr)
        return Walk(decision="undecided", tasks_used=used, lost=lost, gained=gained, llr=llr)

    def operating_characteristics(self, *, n_tasks: int, drop: float, discordance: float) -> OperatingCharacteristics:
        """Exact, by dynamic programming over (lost, gained) counts; no simulation."""
        return self._curve(n_tasks, drop, discordance)[-1]

    def _curve(self, n_tasks: int, drop: float, discordance: float) -> list[OperatingCharacteristics]:
        """The characteristics after 1..n_tasks tasks, in one pass (a longer taskset only adds tasks).

        The undecided states are a narrow band of (lost, gained) counts, kept sparse; states below
        1e-15 probability are dropped (their total is far under any reported digit).
        """
        if n_tasks < 1:
            raise EvalConfigError(f"n_tasks must be >= 1, got {n_tasks}")
        if not (0.0 <= drop <= discordance <= 1.0):
            raise EvalConfigError(f"need 0 <= drop <= discordance <= 1, got drop {drop}, discordance {discordance}")
        p_l, p_g, p_t = (discordance + drop) / 2.0, (discordance - drop) / 2.0, 1.0 - discordance
        stride = n_tasks + 2
        lost, gained, prob = np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1)
        reject = accept = expected = 0.0
        curve = []
        for t in range(1, n_tasks + 1):
            expected += float(prob.sum())  # P(still running before task t)
            keys = np.concatenate([(lost + 1) * stride + gained, lost * stride + gained + 1, lost * stride + gained])
            weights = np.concatenate([prob * p_l, prob * p_g, prob * p_t])
            keys, inverse = np.unique(keys, return_inverse=True)
            prob = np.bincount(inverse, weights=weights)
            lost, gained = keys // stride, keys % stride
            llr = lost * self.step_lost + gained * self.step_gained
            rejected = llr >= self.reject_at - 1e-12
            accepted = ~rejected & ((llr <= self.accept_at + 1e-12) | (lost <= _futile_losses(self.min_drop, self.futility, t)))
            reject += float(prob[rejected].sum())
            accept += float(prob[accepted].sum())
            keep = ~(rejected | accepted) & (prob > 1e-15)
            lost, gained, prob = lost[keep], gained[keep], prob[keep]
            curve.append(OperatingCharacteristics(
                n_tasks=t, drop=drop, discordance=discordance, reject=reject, accept_early=accept,
                undecided=float(prob.sum()), expected_tasks=expected,
            ))
        return curve

    def tasks_needed(self, *, max_tasks: int = 2000) -> int | None:
        """The smallest taskset with the design's power at (min_drop, planned_discordance); None beyond max_tasks."""
        for oc in self._curve(max_tasks, self.min_drop, self.planned_discordance):
            if oc.reject >= self.power:
                return oc.n_tasks
        return None

    def power_at(self, n_tasks: int, discordance: float | None = None) -> float:
        """Exact power against a min_drop loss on n_tasks tasks (at the planned discordance unless given)."""
        d = self.planned_discordance if discordance is None else max(discordance, self.min_drop)
        return _power(self, n_tasks, round(d, 6))


@cache
def _power(design: SequentialDesign, n_tasks: int, discordance: float) -> float:
    return design.operating_characteristics(n_tasks=n_tasks, drop=design.min_drop, discordance=discordance).reject
