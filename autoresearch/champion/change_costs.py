"""RESULTS.md's "What each change bought": the stored minimization as table rows.

Each row is one change of the confirmed champion: what removing it alone did to request time, decode
and prefill in the ranking round (median ratio and bench's interval, as a signed change), and whether
the minimal champion keeps it; in a study ranked by energy, its energy per request first, and the
verdicts in energy's words. Nothing is measured here; the numbers are the stored record's.

Usage:
    table = read_change_costs(stored, champion_config)   # stored: the champion's own (autoresearch.champion.crowned)
"""

from __future__ import annotations

from dataclasses import dataclass

from autoresearch.champion.minimization import Cost, Minimization
from autoresearch.ground.ranked_by import ENERGY_RANKED
from serving.config import ServingConfig

__all__ = ["MINIMIZATION_ATTR", "MINIMIZE_KIND", "ChangeCostRow", "ChangeCosts", "SUBSET_OF", "cost_text", "gate_words",
           "read_change_costs", "signed_change", "tabbyapi_subsets", "tried_subsets", "verdict_text"]

MINIMIZATION_ATTR = "minimization"
MINIMIZE_KIND = "minimize_bench"  # ar_measurements' kind for a minimization's launch


def signed_change(ratio: tuple[float, float, float], *, time: bool = False) -> str:
    """A stored (ratio, low, high) of rates as a signed change, e.g. "-23.1% [-25.0, -21.2]"; `time`: of the
    time a request takes instead (1 / ratio), so a slower configuration reads "+"."""
    r, lo, hi = ratio
    if lo is None or hi is None:  # no launch-to-launch spread known: a change without an interval
        return f"{((1 / r if time else r) - 1) * 100:+.1f}% [no interval]"
    if time:
        r, lo, hi = 1 / r, 1 / hi, 1 / lo
    return f"{(r - 1) * 100:+.1f}% [{(lo - 1) * 100:+.1f}, {(hi - 1) * 100:+.1f}]"


def cost_text(cost: Cost) -> str:
    """What a configuration costs against the champion, as RESULTS.md and NOT-EXPRESSED.md say it (ranked by
    energy: its energy per request first, "+" more joules)."""
    energy = f"energy per request {signed_change(cost.energy, time=True)}, " if cost.energy else ""
    return (f"{energy}request time {signed_change(cost.request, time=True)}, decode {signed_change(cost.decode)}, "
            f"prefill {signed_change(cost.prefill)}")


def verdict_text(cost: Cost) -> str:
    """Bench's verdict on the measure the cost was judged on: faster, same or slower (by time, as stored), or
    less energy, not shown to use less energy or more energy."""
    if cost.ranked_by != ENERGY_RANKED:
        return cost.verdict
    return cost.measure.words(cost.verdict)


def gate_words(gate: dict) -> str:
    """A stored gate verdict as RESULTS.md and the loop say it: passed, failed, or not run and why."""
    word = "passed" if gate["passed"] else "not run" if gate.get("judged") is False else "failed"
    return f"{word}: {gate['reason']}"


@dataclass(frozen=True)
class ChangeCostRow:
    change: str  # e.g. "draft_mode=ngram"
    carried: str  # settings put back with it, e.g. "ngram_match_min, num_draft_tokens"; "" when none
    request: str  # request time without it, against the champion ("-" when not measured)
    decode: str
    prefill: str
    verdict: str  # bench's on the study's measure in the ranking round
    kept: str  # "kept" or "removed", and why
    energy: str = "-"  # energy per request without it, against the champion (a study ranked by energy)


@dataclass(frozen=True)
class ChangeCosts:
    rows: list[ChangeCostRow]
    launches_per_config: int
    launches: int
    bound: int
    complete: bool
    attempts: int
    minimal_changes: str  # the minimal champion's changes, e.g. "draft_mode=ngram, max_chunk_size=8192"
    minimal_cost: str | None  # the minimal champion's cost against the champion (the measure's), from its last attempt
    gate: str | None  # the minimal champion's gate verdict, as stored
    tabbyapi: tuple[str, ...] = ()  # each expressible subset measured for TabbyAPI, with its cost; the exported one said
    by_energy: bool = False  # the removals were judged on energy per request (--rank-by energy)
    versus_baseline: str | None = None  # the minimal champion's own speed-up against the baseline (None: it is the champion)
    exported: str | None = None  # which of the two `export` writes, and why


SUBSET_OF = {"minimal": "the minimal champion's", "champion": "the confirmed champion's"}


def tried_subsets(stored: dict | None) -> list[dict]:
    """The expressible subsets a minimization measured for TabbyAPI (its "tabbyapi_subset" record): each
    with "of", "digest", "config" and "cost"; a record from before both were measured holds one, itself."""
    stored = stored or {}
    return stored.get("tried") or ([stored] if stored.get("digest") else [])


def tabbyapi_subsets(stored: dict | None) -> tuple[str, ...]:
    """The subsets TabbyAPI can run that the minimization measured (autoresearch.champion.minimal_champion), one line each:
    whose subset, its digest, its request time, decode and prefill against the champion (ranked by energy, its
    energy per request first), and which one export writes (the faster, or the one using less energy)."""
    out = []
    for t in tried_subsets(stored):
        cost = Cost.from_dict(t["cost"]) if t.get("cost") else None
        measured = f"{cost_text(cost)} ({cost.launches} launches)" if cost else "not measured"
        chosen = "; `export --format tabbyapi` writes it" if t["digest"] == stored.get("digest") and cost else ""
        out.append(f"{SUBSET_OF.get(t['of'], t['of'])} subset (`{t['digest'][:12]}`): {measured}{chosen}")
    return tuple(out)


def _row(m: Minimization, name: str) -> ChangeCostRow:
    change = next(c for c in m.changes if c.name == name)
    cost: Cost | None = m.costs.get(name)
    tries = [a for a in m.attempts if a.name == name]
    carried = ", ".join(m.carried.get(name, ()))
    if name in m.kept:
        why = tries[-1].reason if tries else m.unremovable.get(name, "not tried (the launch bound was reached)")
        kept = f"kept ({why.removeprefix('kept: ')})"
    else:
        kept = "removed" if tries and tries[-1].accepted else "removed with another change"
    return ChangeCostRow(change=str(change), carried=carried,
                         request=signed_change(cost.request, time=True) if cost else "-",
                         decode=signed_change(cost.decode) if cost else "-",
                         prefill=signed_change(cost.prefill) if cost else "-",
                         verdict=verdict_text(cost) if cost else "not measured", kept=kept,
                         energy=signed_change(cost.energy, time=True) if cost and cost.energy else "-")


def read_change_costs(stored: dict | None, champion: ServingConfig | None = None) -> ChangeCosts | None:
    """The table of a stored minimization of the confirmed `champion` (the study's user attribute), or None when
    none ran; with `champion`, which of the two export writes."""
    if not stored:
        return None
    m = Minimization.from_dict(stored)
    exported = None
    if champion is not None:
        why = m.why_not_exported(champion)
        exported = ("`export` writes the confirmed champion: the minimal champion is it" if m.minimal == champion
                    else f"`export` writes the confirmed champion: {why}" if why
                    else "`export` writes the minimal champion")
    accepted = [a for a in m.attempts if a.accepted]
    kept = [str(c) for c in m.changes if c.name in m.kept]
    gate = m.extra.get("gate")
    return ChangeCosts(rows=[_row(m, c.name) for c in m.changes], launches_per_config=m.launches_per_config,
                       launches=m.launches, bound=m.bound, complete=m.complete, attempts=len(m.attempts),
                       minimal_changes=", ".join(kept) or "(none: the baseline)",
                       minimal_cost=signed_change(accepted[-1].cost.ranked, time=True) if accepted else None,
                       gate=None if gate is None else gate_words(gate),
                       tabbyapi=tabbyapi_subsets(m.extra.get("tabbyapi_subset")),
                       by_energy=m.ranked_by == ENERGY_RANKED,
                       versus_baseline=m.versus_baseline.text() if m.versus_baseline else None, exported=exported)
