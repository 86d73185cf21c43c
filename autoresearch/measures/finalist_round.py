"""A finalists' round: the reference and the candidates launched interleaved, looked at as the rule says, until
every verdict is decisive, the rule's most launches are made, or the stage's time runs out.

Why its own module: autoresearch.crown.finalists runs it on real launches, autoresearch.measures.error_rates on drawn
ones, so the error rates RESULTS.md states are the round's own.

Usage:
    result = sequential_round(launch, ["4", "7"], reference="0", history=baseline_readings, rule=rule)
    result.verdicts["4"].faster, result.sets, result.stopped
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoresearch.measures.faster import (
    FASTER,
    RULE,
    TIME,
    Claims,
    Measure,
    SpeedVerdict,
    VerdictRule,
    look,
    verdict_of,
)
from autoresearch.measures.launch_stats import Reading, log_diffs

__all__ = ["Launcher", "RoundResult", "sequential_round"]


@dataclass(frozen=True)
class RoundResult:
    verdicts: dict[str, SpeedVerdict]  # by candidate
    launches: dict[str, list[Reading]]  # every counted launch, the reference's under its name
    sets: int  # launch sets made (a set: the reference and each open candidate, interleaved)
    stopped: str  # why the round ended


Launcher = Callable[[str, int], "Reading | None"]  # (configuration, launch index) -> its reading, None: not counted


def sequential_round(launch: Launcher, candidates: Sequence[str], *, reference: str = "baseline",
                     history: Sequence[Reading] = (), rule: VerdictRule = RULE, measure: Measure = TIME,
                     may_continue: Callable[[int], bool] | None = None) -> RoundResult:
    """Launch the reference and the candidates interleaved (drift hits all alike), look at the rule's launch
    counts, one family per look over every candidate of the round (a closed one keeps its weight, unused), and
    stop each candidate once decisive. `may_continue(k)`: whether k more launches fit the stage's time, asked
    before each set past the first look (the first look's sets always run: the least the stage is reserved);
    a round cut short looks once more where it stopped."""
    runs: dict[str, list[Reading]] = {reference: [], **{c: [] for c in candidates}}
    claims = {c: Claims() for c in candidates}
    open_ = list(candidates)
    sets, spent, looked_at = 0, 0.0, 0
    stopped = f"{rule.max_launches} launches a side (the rule's most)"

    def look_at(n: int) -> None:
        nonlocal spent, looked_at, open_
        alpha, spent, looked_at = rule.spent(n) - spent, rule.spent(n), n
        diffs = {c: log_diffs(runs[reference], runs[c], history) if c in open_ and runs[c] and runs[reference]
                 else {} for c in candidates}
        look(diffs, claims, rule, alpha, FASTER)
        open_ = [c for c in open_ if not claims[c].decisive]

    for i in range(rule.max_launches):
        if not open_:
            stopped = "every verdict decisive"
            break
        if i >= rule.min_launches and may_continue is not None and not may_continue(1 + len(open_)):
            stopped = "the stage's time ran out"
            break
        for name in (reference, *open_):
            got = launch(name, i)
            if got is not None:
                runs[name].append(got)
        sets += 1
        if sets in rule.looks:
            look_at(sets)
    if open_ and looked_at < sets:  # cut short between looks: look once more with what is left up to here
        look_at(sets)
    if not open_:
        stopped = "every verdict decisive"
    verdicts = {}
    for c in candidates:
        if runs[c] and runs[reference]:
            verdicts[c] = verdict_of(runs[reference], runs[c], history, claims[c], rule, measure)
    return RoundResult(verdicts=verdicts, launches=runs, sets=sets, stopped=stopped)
