"""The fewest changes that keep the champion's speed: remove them one at a time, cheapest first.

The confirmed champion differs from the baseline in many settings, most of them passengers TPE drew
along. Ranking round: the champion and each single removal (that setting back at the baseline's
value, with the settings that only apply with it) are launched `launches` times, interleaved; a
removal's cost is its request time against the champion's. Then, cheapest removal first, each one
is tried on the configuration reached so far, in fresh launches interleaved with fresh launches of
the champion, and kept out unless autoresearch.measures.faster's rule calls the result slower than the champion
(request time beyond its noise, or decode or prefill beyond theirs). A change that stayed in is tried again once a later removal changed the configuration it was
tried on, so the stop rule holds at the end: removing any change still in makes it measurably slower.
Last, a minimal champion that differs from the champion is launched against the baseline, interleaved: a
removal is judged against the champion's noise, and removals each inside it can add up to the whole speed-up
(a change worth 4% removed at [0.938, 0.986] under a 5% margin), so the minimal champion replaces the
confirmed one only where the same rule calls it faster than the baseline (`Minimization.versus_baseline`).

A study ranked by energy (`ranked=ENERGY`) is minimized by the same rule on its measure: a removal's cost is its
joules per request against the champion's (beside them, decode and prefill in tokens per joule), its floor
energy's launch-to-launch noise, and a removal stays out unless the result uses measurably more energy; a
removal that costs time but no energy is taken. A launch without an energy reading does not count there
(never 0 J), and why is said where it leaves a removal unmeasured.

The bound: a ranking round of launches x (n + 1) launches, at most 2n attempts of 2 x launches each and the
round against the baseline (2 x launches, kept for it from the start), so at most launches x (5n + 3) for n
changes; reaching it stops with the configuration reached so far (every removal in it measured not slower)
and says so.

Usage:
    result = minimize(champion, baseline, measure, launches=2)   # measure(config, label) -> Launch | None
    minimize(champion, baseline, measure, ranked=ENERGY)           # a study ranked by energy
    result.minimal, result.kept, result.costs, result.versus_baseline   # None: nothing was removed
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoresearch.ground.errors import AutoresearchError
from autoresearch.ground.ranked_by import ENERGY_RANKED, RANKED_BY
from autoresearch.measures.faster import ENERGY, TIME, Measure, judge_speed, measure_of, request_floor
from autoresearch.night.clock import versus_baseline_launches
from bench.stats import Comparison, DifferenceRule, compare_one
from search_space.catalog import EXL3_KNOBS
from serving.config import ServingConfig
from serving.errors import ConfigError

__all__ = ["BaselineCheck", "Change", "Cost", "Launch", "Minimization", "MinimizeError", "against_baseline", "changes_of",
           "decision", "launch_bound", "minimize", "without"]

log = logging.getLogger(__name__)
_UNSET = "(exllamav3 default)"  # an EXL3_* variable the config leaves to exllamav3
_RULE = DifferenceRule()  # bench's own, as autoresearch.measures.faster's


class MinimizeError(AutoresearchError):
    """The champion could not be measured in a round: nothing can be compared against it."""


@dataclass(frozen=True)
class Launch:
    """One fresh launch's measurement: the workload's mean request time and the two objectives, and in a study
    ranked by energy its joules per request and the two objectives in tokens per joule (None where the launch
    read no energy, `energy_unmeasured` saying why: it then does not count, never 0 J)."""

    request_time_s: float
    decode_tok_per_s: float
    prefill_tok_per_s: float
    energy_j: float | None = None
    decode_tok_per_j: float | None = None
    prefill_tok_per_j: float | None = None
    energy_unmeasured: str | None = None

    def missing(self, ranked: Measure) -> str | None:
        """Why this launch cannot be judged on `ranked` (None: it can)."""
        if ranked == ENERGY and self.energy_j is None:
            return self.energy_unmeasured or "no energy reading"
        return None


LaunchMeasure = Callable[[ServingConfig, str], Launch | None]  # None: the launch failed or left a point unmeasured


@dataclass(frozen=True)
class Change:
    """One setting in which the champion differs from the baseline (`where`: args or env)."""

    name: str
    value: Any
    baseline: Any
    where: str

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


# Settings that apply only with another one: removing the parent puts them back too.
_CARRIED = {"draft_mode": ("ngram_match_min", "num_draft_tokens", "dynamic_draft_tokens", "draft_confidence",
                           "sparse_draft_head", "draft_model_dir"),
            "cache_kind": ("cache_k_bits", "cache_v_bits"),
            "dynamic_draft_tokens": ("draft_confidence",),
            "max_chunk_size": ("shared_chunk_size",)}

# A setting's default while its parent is on, where the baseline (parent off) has none: the catalog's.
_DEFAULT_UNDER_PARENT = {k.name: k.default for k in EXL3_KNOBS if k.name in ("ngram_match_min", "cache_k_bits",
                                                                               "cache_v_bits")}


def changes_of(config: ServingConfig, baseline: ServingConfig) -> tuple[Change, ...]:
    """Every setting in which `config` differs from `baseline`, in the report's order (args, then env)."""
    a, b = config.to_dict(), baseline.to_dict()
    out = [Change(k, v, b["args"].get(k), "args") for k, v in sorted(a["args"].items()) if b["args"].get(k) != v]
    env_names = sorted(set(a["env"]) | set(b["env"]))
    out += [Change(k, a["env"].get(k, _UNSET), b["env"].get(k, _UNSET), "env") for k in env_names
            if a["env"].get(k) != b["env"].get(k)]
    return tuple(out)


def without(config: ServingConfig, baseline: ServingConfig, name: str) -> tuple[ServingConfig, tuple[str, ...]]:
    """`config` with setting `name` back at the baseline's value, and the names put back with it.

    Raises:
        ConfigError: the setting cannot be put back alone (the config would break a serving rule).
    """
    data, base = config.to_dict(), baseline.to_dict()
    if name.startswith(("EXL3_", "EXLLAMA")) or name in data["env"]:
        env = dict(data["env"])
        env.pop(name, None)
        if name in base["env"]:
            env[name] = base["env"][name]
        return ServingConfig.from_dict({**data, "env": env}), (name,)
    try:
        return ServingConfig.from_dict({**data, "args": {**data["args"], name: base["args"][name]}}), (name,)
    except ConfigError:
        if name in _DEFAULT_UNDER_PARENT:  # e.g. ngram_match_min while n-gram drafting stays: its default there
            return ServingConfig.from_dict({**data, "args": {**data["args"], name: _DEFAULT_UNDER_PARENT[name]}}), (name,)
        carried = [c for c in _CARRIED.get(name, ()) if data["args"][c] != base["args"][c]]
        if not carried:
            raise
        put_back = {k: base["args"][k] for k in (name, *carried)}
        return ServingConfig.from_dict({**data, "args": {**data["args"], **put_back}}), (name, *carried)


@dataclass(frozen=True)
class Cost:
    """What removing a change did, relative to the champion's launches of the same round: each objective's
    ratio (without / champion, higher is faster) with bench's interval, and bench's verdict on the study's
    measure (request time; energy per request in a study ranked by energy, whose ratio `energy` holds)."""

    request: tuple[float, float, float]  # ratio, low, high of the request rate (1 / request time)
    decode: tuple[float, float, float]
    prefill: tuple[float, float, float]
    verdict: str  # bench's on the measure: faster (less energy), same or slower (more energy)
    launches: int
    energy: tuple[float, float, float] | None = None  # E(champion) / E(without), low, high: ranked by energy only
    ranked_by: str = RANKED_BY

    @property
    def measure(self) -> Measure:
        return measure_of(self.ranked_by)

    @property
    def ranked(self) -> tuple[float, float, float]:
        """The ratio of the measure the study ranks by (above 1: better without the change)."""
        return self.energy if self.ranked_by == ENERGY_RANKED else self.request

    @property
    def request_cost(self) -> float:
        """How much longer a request takes without the change: T(without) / T(champion) - 1."""
        return 1 / self.request[0] - 1

    def to_dict(self) -> dict:
        energy = {"energy": list(self.energy), "ranked_by": self.ranked_by} if self.ranked_by == ENERGY_RANKED else {}
        return {"request": list(self.request), "decode": list(self.decode), "prefill": list(self.prefill),
                "verdict": self.verdict, "launches": self.launches} | energy

    @classmethod
    def from_dict(cls, d: dict) -> Cost:
        return cls(request=tuple(d["request"]), decode=tuple(d["decode"]), prefill=tuple(d["prefill"]),
                   verdict=d["verdict"], launches=d["launches"],
                   energy=tuple(d["energy"]) if d.get("energy") else None, ranked_by=d.get("ranked_by", RANKED_BY))


@dataclass(frozen=True)
class Attempt:
    """One removal tried on the configuration reached so far, judged against fresh champion launches."""

    name: str
    removed: tuple[str, ...]  # the change and the settings put back with it
    cost: Cost | None  # None: the configuration without it was never measured
    accepted: bool
    reason: str

    def to_dict(self) -> dict:
        return {"name": self.name, "removed": list(self.removed), "cost": self.cost.to_dict() if self.cost else None,
                "accepted": self.accepted, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict) -> Attempt:
        return cls(name=d["name"], removed=tuple(d["removed"]), cost=Cost.from_dict(d["cost"]) if d["cost"] else None,
                   accepted=d["accepted"], reason=d["reason"])


@dataclass(frozen=True)
class BaselineCheck:
    """The minimal champion against the baseline, in fresh launches interleaved with the baseline's: whether it is
    itself faster (autoresearch.measures.faster's rule, the baseline the reference; ranked by energy: less energy)."""

    cost: Cost | None  # minimal against baseline, ratios above 1 better; None: not measured (`reason` says why)
    reason: str = ""

    @property
    def faster(self) -> bool:
        return self.cost is not None and self.cost.verdict == "faster"

    def text(self) -> str:
        """Its own measured speed-up with the interval, e.g. "1.040x [1.012, 1.071] the baseline on request time
        (faster; decode 1.050x, prefill 1.000x; 2 fresh launches each, interleaved)"."""
        if self.cost is None:
            return f"not measured against the baseline: {self.reason}"
        c = self.cost
        r, lo, hi = c.ranked
        return (f"{r:.3f}x [{lo:.3f}, {hi:.3f}] the baseline on {c.measure.name} ({c.measure.words(c.verdict)}; "
                f"decode {c.decode[0]:.3f}x, prefill {c.prefill[0]:.3f}x; {c.launches} fresh launches each, "
                "interleaved)")

    def to_dict(self) -> dict:
        return {"cost": self.cost.to_dict() if self.cost else None, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict) -> BaselineCheck:
        return cls(cost=Cost.from_dict(d["cost"]) if d.get("cost") else None, reason=d.get("reason", ""))


@dataclass(frozen=True)
class Minimization:
    """The outcome: each change's removal cost, the attempts in order, and the minimal champion."""

    changes: tuple[Change, ...]
    costs: dict[str, Cost | None]  # the ranking round; None: that removal was not measured
    carried: dict[str, tuple[str, ...]]  # change -> the settings put back with it when removed alone
    unremovable: dict[str, str]  # change -> why it cannot be removed alone
    attempts: tuple[Attempt, ...]
    kept: tuple[str, ...]  # the changes the minimal champion keeps
    minimal: ServingConfig
    launches: int  # launches made
    bound: int  # the most launches it could have made
    complete: bool  # the stop rule was reached (False: the bound was)
    launches_per_config: int = 2
    extra: dict = field(default_factory=dict)  # e.g. the TabbyAPI-expressible subset's measured cost
    ranked_by: str = RANKED_BY  # the measure its removals were judged on (autoresearch.ground.ranked_by)
    # the minimal champion against the baseline; None where nothing was removed (the confirmed verdict stands),
    # or stored before it was measured (then the minimal champion does not replace the confirmed one)
    versus_baseline: BaselineCheck | None = None

    def why_not_exported(self, champion: ServingConfig) -> str | None:
        """Why export writes the confirmed `champion` and not this minimal champion (None: the minimal one, or they
        are the same configuration): it must be shown faster than the baseline by the rule that decides "faster",
        and pass the gate (the verdict stored in `extra["gate"]`, of this configuration)."""
        if self.minimal.digest == champion.digest:
            return None
        if self.versus_baseline is None:
            return "it was never measured against the baseline (stored before that round existed)"
        if not self.versus_baseline.faster:
            return f"it was not shown faster than the baseline: {self.versus_baseline.text()}"
        gate = self.extra.get("gate")
        if gate is None:
            return "its gate has not been run"
        if gate.get("digest", self.minimal.digest) != self.minimal.digest:
            return "its stored gate verdict is of another configuration"
        if not gate["passed"]:
            return f"its gate was not run: {gate['reason']}" if gate.get("judged") is False else \
                f"it failed the gate: {gate['reason']}"
        return None

    def to_dict(self) -> dict:
        return {"changes": [{"name": c.name, "value": c.value, "baseline": c.baseline, "where": c.where}
                            for c in self.changes],
                "costs": {k: v.to_dict() if v else None for k, v in self.costs.items()},
                "carried": {k: list(v) for k, v in self.carried.items()},
                "unremovable": self.unremovable, "attempts": [a.to_dict() for a in self.attempts],
                "kept": list(self.kept), "minimal": self.minimal.to_dict(), "launches": self.launches,
                "bound": self.bound, "complete": self.complete, "launches_per_config": self.launches_per_config,
                "extra": self.extra} | ({"ranked_by": self.ranked_by} if self.ranked_by == ENERGY_RANKED else {}) \
            | ({"versus_baseline": self.versus_baseline.to_dict()} if self.versus_baseline else {})

    @classmethod
    def from_dict(cls, d: dict) -> Minimization:
        return cls(changes=tuple(Change(**c) for c in d["changes"]),
                   costs={k: Cost.from_dict(v) if v else None for k, v in d["costs"].items()},
                   carried={k: tuple(v) for k, v in d["carried"].items()},
                   unremovable=d["unremovable"], attempts=tuple(Attempt.from_dict(a) for a in d["attempts"]),
                   kept=tuple(d["kept"]), minimal=ServingConfig.from_dict(d["minimal"]), launches=d["launches"],
                   bound=d["bound"], complete=d["complete"], launches_per_config=d["launches_per_config"],
                   extra=d.get("extra", {}), ranked_by=d.get("ranked_by", RANKED_BY),
                   versus_baseline=BaselineCheck.from_dict(d["versus_baseline"]) if d.get("versus_baseline") else None)


def launch_bound(n_changes: int, launches: int) -> int:
    """The most launches minimize() makes for n changes: the ranking round, 2n attempts and the round against the
    baseline."""
    return launches * (n_changes + 1) + 2 * n_changes * 2 * launches + versus_baseline_launches(launches)



def judge(champion: Sequence[Launch], candidate: Sequence[Launch], rule: DifferenceRule = _RULE,
          ranked: Measure = TIME) -> Cost:
    """The candidate against the champion's launches of the same round, by autoresearch.measures.faster's rule: request
    time beyond its noise, decode and prefill each beyond theirs. The noise floors are the champion's own
    launch-to-launch differences (its first two launches), as the finalists' are the baseline's; with one
    launch none is known (the rule's minimum effect). `ranked=ENERGY`: the same rule on joules per request,
    decode and prefill in tokens per joule (every launch given has an energy reading); request time is kept
    beside it, not judged."""
    def points(rates: Callable[[Launch], float], name: str) -> Comparison:
        ref = [rates(x) for x in champion]
        return compare_one(name, ref, [rates(x) for x in candidate], rule=rule, floor_rel=request_floor(ref))

    by_energy = ranked == ENERGY
    decode = points(lambda x: x.decode_tok_per_s, "decode")
    prefill = points(lambda x: x.prefill_tok_per_s, "prefill")
    times = [x.request_time_s for x in champion]
    speed = judge_speed(times, [x.request_time_s for x in candidate], floor_rel=request_floor(times),
                        points=() if by_energy else (decode, prefill), rule=rule)
    energy = None
    if by_energy:
        joules = [x.energy_j for x in champion]
        energy = judge_speed(joules, [x.energy_j for x in candidate], floor_rel=request_floor(joules), rule=rule,
                             points=(points(lambda x: x.decode_tok_per_j, "decode energy"),
                                     points(lambda x: x.prefill_tok_per_j, "prefill energy")), measure=ENERGY)
    return Cost(request=speed.interval, decode=(decode.ratio, decode.ratio_ci_low, decode.ratio_ci_high),
                prefill=(prefill.ratio, prefill.ratio_ci_low, prefill.ratio_ci_high),
                verdict=(energy or speed).verdict, launches=len(candidate),
                energy=energy.interval if energy else None, ranked_by=ranked.ranked_by)


def decision(cost: Cost) -> str:
    """A removal's outcome in the words of the measure it was judged on ("kept: ..." or "removed: ...")."""
    if cost.ranked_by != ENERGY_RANKED:
        return ("kept: without it, measurably slower than the champion" if cost.verdict == "slower"
                else f"removed: without it, {cost.verdict} as the champion")
    return {"slower": "kept: without it, measurably more energy per request than the champion",
            "faster": "removed: without it, less energy per request than the champion",
            "same": "removed: without it, not shown to use more energy per request than the champion"}[cost.verdict]


def _round(measure: LaunchMeasure, champion: ServingConfig, others: list[tuple[str, ServingConfig]], launches: int,
           label: str, ranked: Measure = TIME, reference: str = "champion",
           ) -> tuple[list[Launch], dict[str, list[Launch]], dict[str, list[str]]]:
    """`launches` fresh launches of the champion (or the `reference` so named) and each other config, interleaved
    (drift hits all alike); the launches that count on `ranked`, and by config, why the others measured did not."""
    runs: dict[str, list[Launch]] = {name: [] for name in (reference, *(n for n, _ in others))}
    why: dict[str, list[str]] = {name: [] for name in runs}
    for i in range(launches):
        for name, config in ((reference, champion), *others):
            at = f"{label}/{name}/{i}"
            if (got := measure(config, at)) is None:
                continue
            if (missing := got.missing(ranked)) is not None:
                log.warning("minimization launch %s does not count: %s", at, missing)
                why[name].append(f"{at}: {missing}")
            else:
                runs[name].append(got)
    champ = runs.pop(reference)
    if not champ:
        compared = "removals" if reference == "champion" else "the minimal champion"
        raise MinimizeError(f"{label}: no launch of the {reference} was measured; nothing to compare {compared} "
                            "against" + _unmeasured(why[reference]))
    return champ, runs, why


def _unmeasured(why: list[str]) -> str:
    """Why a removal was not measured, appended to the words that say so ("" where every launch failed)."""
    return f" ({'; '.join(why)})" if why else ""


def minimize(champion: ServingConfig, baseline: ServingConfig, measure: LaunchMeasure, *, launches: int = 2,
             max_launches: int | None = None, rule: DifferenceRule = _RULE, ranked: Measure = TIME) -> Minimization:
    """Remove the champion's changes, cheapest first, while the result is not measurably slower on request time
    (`ranked=ENERGY`: while it uses no measurably more energy per request); then judge the minimal champion
    against the baseline (`versus_baseline`), where it differs from the champion.

    `measure(config, label)` launches `config` fresh and measures it (None when that launch failed);
    labels are unique within one minimization, so a resumed run can answer from stored launches.

    Raises:
        MinimizeError: a round's champion launches all failed.
    """
    changes = changes_of(champion, baseline)
    bound = launch_bound(len(changes), launches)
    if max_launches is not None:
        bound = min(bound, max_launches)
    made = 0

    def counted(config: ServingConfig, label: str) -> Launch | None:
        nonlocal made
        made += 1
        return measure(config, label)

    single: list[tuple[str, ServingConfig]] = []
    unremovable: dict[str, str] = {}
    carried: dict[str, tuple[str, ...]] = {}
    for c in changes:
        try:
            config, removed = without(champion, baseline, c.name)
            single.append((c.name, config))
            carried[c.name] = removed[1:]
        except ConfigError as exc:
            unremovable[c.name] = f"cannot be removed alone: {exc}"
    champ, runs, why = _round(counted, champion, single, launches, "rank", ranked)
    costs = {name: judge(champ, runs[name], rule, ranked) if runs[name] else None for name, _ in single}
    costs |= {name: None for name in unremovable}
    order = sorted((n for n, c in costs.items() if c is not None), key=lambda n: (-costs[n].ranked[0], n))
    for name, cost in costs.items():
        if cost is None and name not in unremovable:
            unremovable[name] = "its removal was never measured " + (f"({'; '.join(why[name])})" if why[name]
                                                                      else "(every launch failed)")

    current, present = champion, {c.name for c in changes}
    attempts: list[Attempt] = []
    tried_on: dict[str, str] = {}  # kept change -> digest of the configuration it was tried on
    step, complete = 0, False
    while True:
        pending = [n for n in order if n in present and tried_on.get(n) != current.digest]
        if not pending:
            complete = True
            break
        name = pending[0]
        if made + 2 * launches + versus_baseline_launches(launches) > bound:  # the last round keeps its launches
            break
        step += 1
        try:
            candidate, removed = without(current, baseline, name)
        except ConfigError as exc:
            attempts.append(Attempt(name, (name,), None, False, f"cannot be removed here: {exc}"))
            tried_on[name] = current.digest
            continue
        champ, runs, why = _round(counted, champion, [("candidate", candidate)], launches, f"step{step}", ranked)
        if not runs["candidate"]:
            attempts.append(Attempt(name, removed, None, False, "kept: no launch without it was measured"
                                    + _unmeasured(why["candidate"])))
            tried_on[name] = current.digest
            continue
        cost = judge(champ, runs["candidate"], rule, ranked)
        if cost.verdict == "slower":
            attempts.append(Attempt(name, removed, cost, False, decision(cost)))
            tried_on[name] = current.digest
        else:
            attempts.append(Attempt(name, removed, cost, True, decision(cost)))
            current = candidate
            present -= set(removed)
    kept = tuple(c.name for c in changes if c.name in present)
    versus = against_baseline(counted, baseline, current, launches=launches, rule=rule, ranked=ranked) \
        if current.digest != champion.digest else None
    log.info("minimized %d changes to %d in %d launches (bound %d)%s%s", len(changes), len(kept), made, bound,
             "" if complete else ": stopped at the bound", f"; against the baseline: {versus.text()}" if versus else "")
    return Minimization(changes=changes, costs=costs, carried=carried, unremovable=unremovable, attempts=tuple(attempts), kept=kept,
                        minimal=current, launches=made, bound=bound, complete=complete, launches_per_config=launches,
                        ranked_by=ranked.ranked_by, versus_baseline=versus)


def against_baseline(measure: LaunchMeasure, baseline: ServingConfig, minimal: ServingConfig, *, launches: int,
                     rule: DifferenceRule = _RULE, ranked: Measure = TIME) -> BaselineCheck:
    """The minimal champion against the baseline: `launches` fresh launches of each, interleaved (labelled
    `baseline/baseline|minimal/<launch>`), judged by the rule that decides "faster" with the baseline as the
    reference (its own launch-to-launch noise the floor)."""
    try:
        base, runs, why = _round(measure, baseline, [("minimal", minimal)], launches, "baseline", ranked,
                                 reference="baseline")
    except MinimizeError as exc:
        return BaselineCheck(cost=None, reason=str(exc))
    if not runs["minimal"]:
        return BaselineCheck(cost=None, reason="no launch of the minimal champion was measured"
                             + _unmeasured(why["minimal"]))
    return BaselineCheck(cost=judge(base, runs["minimal"], rule, ranked))
