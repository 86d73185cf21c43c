"""The task tier's guard: an exact sign test on the discordant pairs of one taskset, and the power it has.

Why a guard: a suite too small to claim "nothing lost" (broad's 3-10 tasks per taskset) can still catch a
configuration that breaks answers. Only the tasks the baseline and the candidate disagree on carry
evidence; when nothing was lost each of them is a fair coin, so the exact one-sided sign (McNemar) test
bounds false rejections at `alpha` for any share of flips, with no planning value. What it cannot do is
see small drops, so the guard states, computed exactly, which drop it catches with the policy's power,
and a pass means "no loss detected", never "accepted".

Power model: each paired task is a loss with probability flips / 2 + drop, a gain with probability
flips / 2, a tie otherwise (`flips` is the share of tasks a lossless change flips either way, e.g. a
changed kernel breaking near-ties). Power is summed over every (losses, gains) outcome: no simulation.

Usage:
    guard = SignGuard(n_tasks=10, alpha=0.0125)
    guard.rejects(lost=7, gained=0)                 # True: p = 0.5**7
    guard.power(drop=0.8)                           # P(reject) on 10 tasks at an 80-point drop, no flips
    guard.detectable_drop(power=0.8, flips=0.1)     # the smallest drop caught with 80% power (None: none is)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from eval.errors import EvalConfigError

__all__ = ["GuardStatement", "SignGuard", "sign_test_p", "state_guard"]


def sign_test_p(lost: int, gained: int) -> float:
    """P(at least `lost` of the lost+gained discordant pairs go against the candidate | no difference)."""
    n = lost + gained
    if n == 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(lost, n + 1)) / 2**n


@dataclass(frozen=True, kw_only=True)
class SignGuard:
    """The sign test on `n_tasks` paired tasks at this taskset's false-rejection rate `alpha`."""

    n_tasks: int
    alpha: float

    def __post_init__(self) -> None:
        if self.n_tasks < 0:
            raise EvalConfigError(f"n_tasks must be >= 0, got {self.n_tasks}")
        if not (math.isfinite(self.alpha) and 0.0 < self.alpha < 1.0):
            raise EvalConfigError(f"alpha must be in (0, 1), got {self.alpha}")

    def rejects(self, lost: int, gained: int) -> bool:
        return sign_test_p(lost, gained) <= self.alpha

    @property
    def can_reject(self) -> bool:
        """Whether any outcome rejects: all n tasks lost gives the smallest p, 0.5 ** n."""
        return self.n_tasks > 0 and 0.5**self.n_tasks <= self.alpha

    @property
    def min_losses(self) -> int | None:
        """The fewest losses (with nothing gained) that reject; None when no outcome does."""
        return next((k for k in range(1, self.n_tasks + 1) if 0.5**k <= self.alpha), None)

    @cached_property
    def _region(self) -> np.ndarray:
        """rejects[lost, gained] for lost + gained <= n_tasks (False elsewhere)."""
        n = self.n_tasks
        region = np.zeros((n + 1, n + 1), dtype=bool)
        for d in range(1, n + 1):
            tail = 0
            for lost in range(d, -1, -1):  # tail = sum_{i >= lost} C(d, i), exact in integers
                tail += math.comb(d, lost)
                region[lost, d - lost] = tail <= self.alpha * 2**d
        return region

    def power(self, drop: float, flips: float = 0.0) -> float:
        """P(reject) when the candidate loses `drop` accuracy and `flips` of the tasks flip either way besides.

        Exact: the multinomial over (losses, gains, ties) summed over the rejection region.
        """
        if not (0.0 <= drop and 0.0 <= flips and drop + flips <= 1.0 + 1e-12):
            raise EvalConfigError(f"need drop >= 0, flips >= 0, drop + flips <= 1; got {drop}, {flips}")
        if not self.can_reject:
            return 0.0
        n = self.n_tasks
        p_lost, p_gained = flips / 2.0 + drop, flips / 2.0
        p_tie = max(0.0, 1.0 - p_lost - p_gained)
        lost, gained = np.nonzero(self._region)
        ties = n - lost - gained
        log_coef = (math.lgamma(n + 1) - _lgamma(lost + 1) - _lgamma(gained + 1) - _lgamma(ties + 1))
        log_p = log_coef + _xlogy(lost, p_lost) + _xlogy(gained, p_gained) + _xlogy(ties, p_tie)
        return float(np.exp(log_p).sum())

    def detectable_drop(self, *, power: float = 0.8, flips: float = 0.0) -> float | None:
        """The smallest accuracy drop caught with at least `power` (to 0.1 point, rounded up); None: none is.

        The largest drop possible besides `flips` is 1 - flips (every other task lost).
        """
        high = 1.0 - flips
        if self.power(high, flips) < power:
            return None
        low = 0.0
        while high - low > 1e-6:  # power grows with the drop: more losses, same gains
            mid = (low + high) / 2.0
            low, high = (low, mid) if self.power(mid, flips) >= power else (mid, high)
        return math.ceil(high * 1000 - 1e-9) / 1000


def _lgamma(values: np.ndarray) -> np.ndarray:
    return np.array([math.lgamma(v) for v in values.tolist()], dtype=float)


def _xlogy(k: np.ndarray, p: float) -> np.ndarray:
    """k * log(p), with 0 * log(0) = 0 and k * log(0) = -inf."""
    if p > 0.0:
        return k * math.log(p)
    return np.where(k == 0, 0.0, -np.inf)


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardStatement:
    """What one taskset's guard can detect, in the numbers RESULTS.md puts into words."""

    name: str
    tasks: int
    alpha: float
    min_losses: int | None  # the fewest losses, none gained, that reject; None: nothing rejects
    smallest_p: float  # all tasks lost: the strongest evidence this many tasks can give
    power: float  # the power the drops below are caught with
    flips: float  # the share of tasks flipping either way besides, for `drop_at_flips`
    drop: float | None  # caught with `power` when nothing else flips; None: no drop is
    drop_at_flips: float | None


def state_guard(name: str, guard: SignGuard, *, power: float, flips: float) -> GuardStatement:
    """The guard's detection statement for one taskset, computed exactly."""
    return GuardStatement(name=name, tasks=guard.n_tasks, alpha=guard.alpha, min_losses=guard.min_losses,
                          smallest_p=0.5**guard.n_tasks, power=power, flips=flips,
                          drop=guard.detectable_drop(power=power),
                          drop_at_flips=guard.detectable_drop(power=power, flips=flips))
