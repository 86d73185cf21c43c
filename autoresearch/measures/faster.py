"""The one rule that calls one configuration better than another (faster, or less energy), wherever the loop decides it.

Finalists against the baseline, a removal against the champion (autoresearch.champion.minimize), one TabbyAPI
subset against another, the minimal champion against the baseline: each is decided here, on fresh launches.

Why this shape (../docs/trial.md, "The speed verdict"): the unit of evidence is the launch. Runs inside one launch
share its state (allocations, autotuning, clocks), so they describe the launch and are not independent evidence
about the configuration; each launch gives one reading (`Reading`): its cost on the workload (mean request time,
or joules per request) and each point's median rate. Speeds are ratios, so the inference is on logs:

    d = mean log gain of the candidate's launches - mean over the reference's launches of the same round
    s^2 = launch-to-launch variance of the log, pooled from every launch of the reference the study holds
          (its search launches, drift readings, earlier rounds: `history`) and the candidate's own
    t = (d - bound) / (s sqrt(1/n_ref + 1/n_cand)), Student's t with the pooled degrees of freedom

so an interval narrows as launches are added, and a variance from two launches is one draw that t accounts for.

The claims, each a one-sided test (`VerdictRule` states their bounds):
- faster: the request time's speed-up is above `min_speedup` (a gain smaller than it is not worth a change, however
  sure); slower: it is below 1 / min_speedup;
- a point (a kind of request's decode, a prefill length) slower than `1 - tolerance` vetoes: the candidate is
  slower there beyond what the rule tolerates, whatever its request time.
Every claim of a round (all candidates' speed tests and all their points) is one family: Holm's step-down keeps
the chance of any false claim under `alpha`. A round looks after `min_launches` launches a side and after each
launch more up to `max_launches`, spending alpha over the looks (alpha x (j / K)^spending by look j of K, a
Bonferroni split across looks, so the union of the looks stays under alpha), and stops a candidate once its
verdict is decisive: vetoed, slower, shown unable to reach `min_speedup` (futility), or faster with every point
shown within the tolerance. What is undecided when launches or the stage's time run out is "not shown faster".

The same rule ranks by energy (--rank-by energy): each launch's joules per request in place of its time and
bench's energy points (tokens per joule); `measure=ENERGY` only changes the words.

Usage:
    rule = VerdictRule()
    v = judge_speed(ref_readings, cand_readings, history=baseline_readings, rule=rule)   # one comparison, one look
    v.faster, v.verdict, v.speedup, v.interval, v.text()
    # a finalists' round, launches added at the rule's looks: autoresearch.measures.finalist_round
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoresearch.ground.ranked_by import ENERGY_RANKED, RANKED_BY
from autoresearch.measures.launch_stats import (
    REQUEST,
    LogDiff,
    Reading,
    VerdictError,
    geometric_cost,
    log_diffs,
)

__all__ = ["ENERGY", "FASTER", "RULE", "SLOWER", "TIME", "Claims", "Measure", "SpeedVerdict", "VerdictRule", "judge_speed",
           "interval_text", "look", "measure_of", "verdict_of", "verdict_rule"]


@dataclass(frozen=True)
class Measure:
    """The cost a study ranks by (lower is better), in the words its verdicts use."""

    name: str  # what each launch gives: "request time", "energy per request"
    better: str  # the verdict "faster" in these words
    worse: str  # the verdict "slower"
    not_shown: str  # the verdict "same": neither shown better nor worse
    ranked_by: str  # as the study and its champion record it (autoresearch.measures.request_time)

    def words(self, verdict: str) -> str:
        """A verdict as bench words it (faster, same, slower) in this measure's words."""
        return {"faster": self.better, "slower": self.worse, "same": self.not_shown}[verdict]


TIME = Measure("request time", "faster", "slower", "not shown faster", RANKED_BY)
ENERGY = Measure("energy per request", "less energy", "more energy", "not shown to use less energy", ENERGY_RANKED)


def measure_of(ranked_by: str | None) -> Measure:
    """The measure a study ranked by `ranked_by` is judged on: energy per request, else time (the geometric mean's too)."""
    return ENERGY if ranked_by == ENERGY_RANKED else TIME


@dataclass(frozen=True)
class VerdictRule:
    """What "faster" means, stated once: the smallest speed-up worth a change, the slow-down a point tolerates,
    the family's error rate and the launches a round may take."""

    min_speedup: float = 1.02  # crown only a speed-up shown above this (request time, or energy by --rank-by energy)
    tolerance: float = 0.03  # a point shown slower than 1 - tolerance vetoes
    alpha: float = 0.05  # the chance of any false claim in a round (false crown, false veto, false "slower")
    looks: tuple[int, ...] = (2, 3, 5, 8)  # launches a side at which a round looks; the last is its most
    spending: float = 1.0  # alpha spent by n launches a side: alpha x (n / most) ** spending
    clear_level: float = 0.05  # one-sided level at which a point counts as within the tolerance (a stop, not a claim)

    def __post_init__(self) -> None:
        if not (self.min_speedup >= 1.0 and 0.0 <= self.tolerance < 1.0 and 0.0 < self.alpha < 1.0
                and 0.0 < self.clear_level < 1.0 and self.spending > 0):
            raise VerdictError(f"a verdict rule needs min_speedup >= 1, 0 <= tolerance < 1 and 0 < alpha < 1, got "
                               f"{self.min_speedup}, {self.tolerance} and {self.alpha}")
        if not self.looks or self.looks[0] < 2 or list(self.looks) != sorted(set(self.looks)):
            raise VerdictError(f"a round looks at increasing launch counts from 2 on (a launch-to-launch spread "
                               f"needs two launches a side), got {self.looks}")

    @classmethod
    def between(cls, first: int, most: int, **kw) -> VerdictRule:
        """Looks from `first` launches a side to `most`, each about 1.5x the one before (2..8: 2, 3, 5, 8)."""
        if not 2 <= first <= most:
            raise VerdictError(f"a round needs 2 <= first look <= most launches a side (a launch-to-launch spread "
                               f"needs two launches a side), got {first} and {most}")
        looks = [first]
        while looks[-1] < most:
            looks.append(min(most, max(looks[-1] + 1, math.ceil(looks[-1] * 1.5))))
        return cls(looks=tuple(looks), **kw)

    @property
    def min_launches(self) -> int:
        return self.looks[0]

    @property
    def max_launches(self) -> int:
        return self.looks[-1]

    def spent(self, launches: int) -> float:
        """The alpha spent by the look after `launches` launches a side (Lan-DeMets: by information, so a round
        cut short by its stage's time looks once more where it stops, with what is left up to there)."""
        return self.alpha * min(launches / self.max_launches, 1.0) ** self.spending

    def with_most(self, launches: int) -> VerdictRule:
        """The same rule with at most `launches` launches a side (the looks past it dropped, it a look)."""
        kept = tuple(n for n in self.looks if n < launches)
        return VerdictRule(self.min_speedup, self.tolerance, self.alpha, (*kept, launches), self.spending,
                           self.clear_level)

    def to_dict(self) -> dict:
        return {"min_speedup": self.min_speedup, "tolerance": self.tolerance, "alpha": self.alpha,
                "looks": list(self.looks), "spending": self.spending}

    @classmethod
    def from_dict(cls, d: Mapping) -> VerdictRule:
        known = {k: d[k] for k in ("min_speedup", "tolerance", "alpha", "spending") if k in d}
        return cls(**known, **({"looks": tuple(d["looks"])} if "looks" in d else {}))

    def text(self) -> str:
        return (f"faster: request time shown above {self.min_speedup:g}x; a point shown more than "
                f"{100 * self.tolerance:g}% slower vetoes; any false claim in a round at most {100 * self.alpha:g}%; "
                f"looks at {', '.join(map(str, self.looks))} launches a side")


RULE = VerdictRule()


def verdict_rule(plan) -> VerdictRule:
    """A run's rule (autoresearch.ground.plan.RunPlan): --min-speedup, --guard-tolerance, and the finalists' looks
    from --finalist-launches to --finalist-max-launches."""
    return VerdictRule.between(plan.finalist_launches, plan.finalist_max_launches, min_speedup=plan.min_speedup,
                               tolerance=plan.guard_tolerance)


def interval_text(low: float | None, high: float | None) -> str:
    """"[1.080, 1.150]", or what stands where no spread is known."""
    return "[no interval: one launch a side]" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


@dataclass(frozen=True)
class SpeedVerdict:
    """A candidate's cost against a reference (request time, or energy per request), and every point compared."""

    verdict: str  # faster, slower or same (same: neither shown faster nor slower)
    speedup: float  # cost(reference) / cost(candidate), each the geometric mean over its launches: above 1, better
    low: float | None  # the speed-up's interval at the level its claim was tested at (each tail); None: unknown
    high: float | None
    level: float  # that level (a Holm step of the look's alpha)
    p: float  # the one-sided p-value of "faster" (H0: speed-up <= min_speedup)
    rule: VerdictRule = RULE
    slower_on: tuple[str, ...] = ()  # points shown slower than 1 - tolerance (the veto)
    launches: tuple[int, int] = (0, 0)  # (reference, candidate) in this round
    history: int = 0  # further launches of the reference the spread was pooled with
    points: tuple[dict, ...] = ()  # each point: ratio, interval, verdict
    spread: Mapping[str, float] = field(default_factory=dict)  # launch-to-launch sd of each log metric, pooled
    df: int = 0
    looks: int = 1
    reason: str | None = None  # why nothing could be decided (no spread known), where so
    measure: Measure = TIME

    @property
    def faster(self) -> bool:
        return self.verdict == "faster"

    @property
    def interval(self) -> tuple[float, float, float]:
        return self.speedup, self.low, self.high

    def text(self) -> str:
        """The verdict in words with its interval, e.g. "faster: request time 1.120x [1.080, 1.150] (...)"."""
        m = self.measure
        what = m.words(self.verdict)
        where = f"; {m.worse} beyond {100 * self.rule.tolerance:g}% on {', '.join(self.slower_on)}" \
            if self.slower_on else ""
        why = f"; {self.reason}" if self.reason else ""
        return (f"{what}: {m.name} {self.speedup:.3f}x {interval_text(self.low, self.high)} (needs > "
                f"{self.rule.min_speedup:g}x; {self.launches[1]} vs {self.launches[0]} launches, "
                f"{self.looks} look{'s' if self.looks != 1 else ''}){where}{why}")

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "speedup": self.speedup, "interval": [self.low, self.high],
                "level": self.level, "p": self.p, "rule": self.rule.to_dict(), "slower_on": list(self.slower_on),
                "launches": list(self.launches), "history": self.history, "points": list(self.points),
                "spread": dict(self.spread), "df": self.df, "looks": self.looks, "reason": self.reason,
                "measure": self.measure.ranked_by}


# ---- the family of claims at one look ----

FASTER, SLOWER, VETO = "faster", "slower", "veto"
Hypothesis = tuple[str, str, str]  # (candidate, claim, metric)


@dataclass
class Claims:
    """One candidate's claims and what the looks so far decided (rejections are final: a Bonferroni split across
    looks keeps their union under alpha)."""

    faster: bool = False
    slower: bool = False
    vetoed: set[str] = field(default_factory=set)
    cleared: bool = False  # every point shown within the tolerance at clear_level (a stop, not a claim)
    futile: bool = False  # request time shown below min_speedup at clear_level (a stop, not a claim)
    level: float = 0.0  # the one-sided level its request-time claim was last tested at
    looks: int = 0

    @property
    def decisive(self) -> bool:
        return bool(self.vetoed) or self.slower or self.futile or (self.faster and self.cleared)


def _graph(candidates: Sequence[str], points: Mapping[str, Sequence[str]], claim: str
           ) -> tuple[dict[Hypothesis, float], dict[Hypothesis, dict[Hypothesis, float]]]:
    """The family's initial weights and where a rejected claim passes its weight (Bretz et al. 2009's graphs).

    claim FASTER (finalists, a subset chosen over another, the minimal champion): each candidate's "faster" holds
    1/m of alpha and passes it, once shown, to its points' vetoes (a veto only matters for a candidate that would
    be crowned); a veto passes its weight to the other candidates' "faster" (the vetoed one is out).
    claim SLOWER (a removal against the champion): "slower" and each point's veto share alpha equally and pass
    to each other (any of them keeps the change)."""
    w: dict[Hypothesis, float] = {}
    g: dict[Hypothesis, dict[Hypothesis, float]] = {}
    m = len(candidates)
    for c in candidates:
        vetoes = [(c, VETO, p) for p in points[c]]
        if claim == FASTER:
            w[(c, FASTER, REQUEST)] = 1.0 / m
            g[(c, FASTER, REQUEST)] = {v: 1.0 / len(vetoes) for v in vetoes}
            others = [(o, FASTER, REQUEST) for o in candidates if o != c]
            for v in vetoes:
                w[v] = 0.0
                g[v] = {o: 1.0 / len(others) for o in others}
        else:
            family = [(c, SLOWER, REQUEST), *vetoes]
            for h in family:
                w[h] = 1.0 / (m * len(family))
                rest = [o for o in family if o != h]
                g[h] = {o: 1.0 / len(rest) for o in rest}
    return w, g


def _reject(h: Hypothesis, w: dict[Hypothesis, float], g: dict[Hypothesis, dict[Hypothesis, float]]) -> None:
    """Remove a rejected claim: its weight passes along its edges, and the edges are rewired around it."""
    wh, out = w.pop(h), g.pop(h)
    for j in w:
        w[j] += wh * out.get(j, 0.0)
    for j in list(g):
        gj = g[j]
        gjh = gj.pop(h, 0.0)
        new = {}
        for k in w:
            if k == j:
                continue
            denom = 1.0 - gjh * out.get(j, 0.0)
            new[k] = (gj.get(k, 0.0) + gjh * out.get(k, 0.0)) / denom if denom > 1e-12 else 0.0
        g[j] = {k: v for k, v in new.items() if v > 0}


def look(diffs: Mapping[str, Mapping[str, LogDiff]], claims: Mapping[str, Claims], rule: VerdictRule,
          alpha: float, claim: str) -> None:
    """One look: the graph procedure at `alpha` over the candidates in `diffs` (what earlier looks rejected stays
    rejected and passes its weight first), then the stops."""
    names = list(diffs)
    w, g = _graph(names, {c: sorted(m for m in diffs[c] if m != REQUEST) for c in names}, claim)
    for c in names:
        claims[c].looks += REQUEST in diffs[c]
        done = {(c, FASTER, REQUEST)} if claims[c].faster else set()
        done |= {(c, SLOWER, REQUEST)} if claims[c].slower else set()
        done |= {(c, VETO, m) for m in claims[c].vetoed}
        for h in done & set(w):
            _reject(h, w, g)

    def p_of(h: Hypothesis) -> float:
        c, kind, m = h
        d = diffs[c].get(m)
        if d is None:  # closed before this look: not tested again
            return 1.0
        if kind == FASTER:
            return d.p_above(rule.min_speedup)
        return d.p_below(1 / rule.min_speedup if kind == SLOWER else 1 - rule.tolerance)

    while True:
        shown = [h for h in w if w[h] > 0 and p_of(h) <= w[h] * alpha]
        if not shown:
            break
        h = min(shown, key=p_of)
        c, kind, m = h
        if kind == FASTER:
            claims[c].faster = True
            claims[c].level = w[h] * alpha
        elif kind == SLOWER:
            claims[c].slower = True
            claims[c].level = w[h] * alpha
        else:
            claims[c].vetoed.add(m)
        _reject(h, w, g)
    for c in names:
        request = diffs[c].get(REQUEST)
        if request is None:
            continue
        for kind in (FASTER, SLOWER):
            if (c, kind, REQUEST) in w and w[(c, kind, REQUEST)] > 0:
                claims[c].level = w[(c, kind, REQUEST)] * alpha
        claims[c].futile = request.p_below(rule.min_speedup) < rule.clear_level
        claims[c].cleared = all(d.p_above(1 - rule.tolerance) < rule.clear_level
                                for m, d in diffs[c].items() if m != REQUEST)


def verdict_of(reference: Sequence[Reading], candidate: Sequence[Reading], history: Sequence[Reading],
             claims: Claims, rule: VerdictRule, measure: Measure) -> SpeedVerdict:
    diffs = log_diffs(reference, candidate, history)
    request = diffs.get(REQUEST)
    df = request.df if request else 0
    reason = None
    if request is None or df < 1:
        reason = "no launch-to-launch spread known (one launch a side and none before): nothing can be shown"
    level = claims.level or rule.alpha
    low, high = request.interval(level) if request else (None, None)
    verdict = "slower" if claims.vetoed or claims.slower else "faster" if claims.faster else "same"
    points = tuple({**d.to_dict(rule.alpha), "verdict": "slower" if m in claims.vetoed else "same"}
                   for m, d in diffs.items() if m != REQUEST)
    return SpeedVerdict(
        verdict=verdict, speedup=geometric_cost(reference) / geometric_cost(candidate), low=low, high=high,
        level=level, p=request.p_above(rule.min_speedup) if request else 1.0, rule=rule,
        slower_on=tuple(sorted(claims.vetoed)), launches=(len(reference), len(candidate)), history=len(history),
        points=points, spread={m: d.se / math.sqrt(1 / len(reference) + 1 / len(candidate))
                               for m, d in diffs.items() if d.df >= 1},
        df=df, looks=max(claims.looks, 1), reason=reason, measure=measure)


def judge_speed(reference: Sequence[Reading], candidate: Sequence[Reading], *, history: Sequence[Reading] = (),
                claim: str = FASTER, rule: VerdictRule = RULE, measure: Measure = TIME,
                alpha: float | None = None) -> SpeedVerdict:
    """One candidate against the reference's launches of the same round, at one look with `alpha` (default the
    rule's). `claim`: what is at stake, FASTER (the minimal champion against the baseline, a subset chosen over
    another) or SLOWER (a removal against the champion: kept where shown slower). `history`: further launches of
    the reference (the spread is pooled with them). Each side needs a launch."""
    if not reference or not candidate:
        raise VerdictError("a verdict needs a launch on each side: nothing measured is not a speed")
    claims = Claims()
    diffs = log_diffs(reference, candidate, history)
    look({"candidate": diffs}, {"candidate": claims}, rule, rule.alpha if alpha is None else alpha, claim)
    return verdict_of(reference, candidate, history, claims, rule, measure)
