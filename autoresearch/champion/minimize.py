"""The fewest changes that keep the champion's speed: remove them one at a time, cheapest first.

The confirmed champion differs from the baseline in many settings, most of them passengers TPE drew
along. Ranking round: the champion and each single removal (that setting back at the baseline's
value, with the settings that only apply with it) are launched `launches` times, interleaved; a
removal's cost is its request time against the champion's. Then, cheapest removal first, each one
is tried on the configuration reached so far, in fresh launches interleaved with fresh launches of
the champion, and kept out unless autoresearch.measures.faster's rule shows the result slower than the champion
(request time by more than the rule's minimum speed-up, or decode or prefill beyond its tolerance). A change that stayed in is tried again once a later removal changed the configuration it was
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
from dataclasses import dataclass

from autoresearch.champion.changes import changes_of, without
from autoresearch.champion.minimization import Attempt, BaselineCheck, Cost, Minimization
from autoresearch.ground.errors import AutoresearchError
from autoresearch.ground.ranked_by import ENERGY_RANKED
from autoresearch.measures.faster import ENERGY, FASTER, RULE, SLOWER, TIME, Measure, VerdictRule, judge_speed
from autoresearch.measures.launch_stats import Reading
from autoresearch.night.clock import versus_baseline_launches
from serving.config import ServingConfig
from serving.errors import ConfigError

__all__ = ["Launch", "MinimizeError", "against_baseline", "decision", "judge", "launch_bound", "minimize"]

log = logging.getLogger(__name__)


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


def launch_bound(n_changes: int, launches: int) -> int:
    """The most launches minimize() makes for n changes: the ranking round, 2n attempts and the round against the
    baseline."""
    return launches * (n_changes + 1) + 2 * n_changes * 2 * launches + versus_baseline_launches(launches)



def judge(champion: Sequence[Launch], candidate: Sequence[Launch], rule: VerdictRule = RULE,
          ranked: Measure = TIME, claim: str = SLOWER, history: Sequence[Launch] = ()) -> Cost:
    """The candidate against the reference's launches of the same round (the champion's; the baseline's for the
    minimal champion), by autoresearch.measures.faster's rule: a removal (claim SLOWER) is slower where its
    request time is shown slower than 1 / min_speedup, or decode or prefill shown slower than the tolerance; a
    subset or the minimal champion (claim FASTER) is faster where shown above min_speedup. The spread is pooled
    from these launches and `history`, the reference's launches of earlier rounds. `ranked=ENERGY`: the same rule
    on joules per request, decode and prefill in tokens per joule (every launch given has an energy reading);
    request time is kept beside it, not judged."""
    by_energy = ranked == ENERGY

    def side(launches: Sequence[Launch], energy: bool) -> list[Reading]:
        if energy:
            return [Reading(x.energy_j, {"decode energy": x.decode_tok_per_j, "prefill energy": x.prefill_tok_per_j})
                    for x in launches]
        return [Reading(x.request_time_s, {"decode": x.decode_tok_per_s, "prefill": x.prefill_tok_per_s})
                for x in launches]

    speed = judge_speed(side(champion, False), side(candidate, False), history=side(history, False), claim=claim,
                        rule=rule)
    points = {p["metric"]: (p["ratio"], p["low"], p["high"]) for p in speed.points}
    energy = judge_speed(side(champion, True), side(candidate, True), history=side(history, True), claim=claim,
                         rule=rule, measure=ENERGY) if by_energy else None
    return Cost(request=speed.interval, decode=points["decode"], prefill=points["prefill"],
                verdict=(energy or speed).verdict, launches=len(candidate),
                energy=energy.interval if energy else None, ranked_by=ranked.ranked_by, history=len(history))


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
             max_launches: int | None = None, rule: VerdictRule = RULE, ranked: Measure = TIME,
             baseline_history: Sequence[Launch] = ()) -> Minimization:
    """Remove the champion's changes, cheapest first, while the result is not measurably slower on request time
    (`ranked=ENERGY`: while it uses no measurably more energy per request); then judge the minimal champion
    against the baseline (`versus_baseline`), where it differs from the champion, its spread pooled with
    `baseline_history` (the baseline's earlier launches in the study).

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
    earlier = list(champ)  # every launch of the champion so far: later rounds pool its spread with them
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
        cost = judge(champ, runs["candidate"], rule, ranked, history=earlier)
        earlier += champ
        if cost.verdict == "slower":
            attempts.append(Attempt(name, removed, cost, False, decision(cost)))
            tried_on[name] = current.digest
        else:
            attempts.append(Attempt(name, removed, cost, True, decision(cost)))
            current = candidate
            present -= set(removed)
    kept = tuple(c.name for c in changes if c.name in present)
    versus = against_baseline(counted, baseline, current, launches=launches, rule=rule, ranked=ranked,
                              history=baseline_history) \
        if current.digest != champion.digest else None
    log.info("minimized %d changes to %d in %d launches (bound %d)%s%s", len(changes), len(kept), made, bound,
             "" if complete else ": stopped at the bound", f"; against the baseline: {versus.text()}" if versus else "")
    return Minimization(changes=changes, costs=costs, carried=carried, unremovable=unremovable, attempts=tuple(attempts), kept=kept,
                        minimal=current, launches=made, bound=bound, complete=complete, launches_per_config=launches,
                        ranked_by=ranked.ranked_by, versus_baseline=versus)


def against_baseline(measure: LaunchMeasure, baseline: ServingConfig, minimal: ServingConfig, *, launches: int,
                     rule: VerdictRule = RULE, ranked: Measure = TIME,
                     history: Sequence[Launch] = ()) -> BaselineCheck:
    """The minimal champion against the baseline: `launches` fresh launches of each, interleaved (labelled
    `baseline/baseline|minimal/<launch>`), judged by the rule that decides "faster" with the baseline as the
    reference. The spread is pooled from these launches and `history`, the baseline's earlier launches in the
    study (as the finalists' verdict pools it); two launches a side with no history show only a large gain, and a
    minimal champion not shown faster leaves the confirmed champion in place."""
    try:
        base, runs, why = _round(measure, baseline, [("minimal", minimal)], launches, "baseline", ranked,
                                 reference="baseline")
    except MinimizeError as exc:
        return BaselineCheck(cost=None, reason=str(exc))
    if not runs["minimal"]:
        return BaselineCheck(cost=None, reason="no launch of the minimal champion was measured"
                             + _unmeasured(why["minimal"]))
    past = [x for x in history if x.missing(ranked) is None]
    return BaselineCheck(cost=judge(base, runs["minimal"], rule, ranked, claim=FASTER, history=past))
