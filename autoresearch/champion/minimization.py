"""What a minimization found, as the study stores it: each removal's cost, the attempts, the minimal champion and
its own speed-up against the baseline (autoresearch.champion.minimize decides; export, the TabbyAPI export and
RESULTS.md read these records, and ask `Minimization.why_not_exported` which config export writes).

Usage:
    m = Minimization.from_dict(study.user_attrs["minimization"])
    m.minimal, m.kept, m.costs["draft_mode"].request, m.versus_baseline.text()
    why = m.why_not_exported(champion)   # None: export writes the minimal champion
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoresearch.champion.changes import Change
from autoresearch.ground.ranked_by import ENERGY_RANKED, RANKED_BY
from autoresearch.measures.faster import Measure, interval_text, measure_of
from serving.config import ServingConfig

__all__ = ["Attempt", "BaselineCheck", "Cost", "Minimization"]


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
    history: int = 0  # earlier launches of the reference its spread was pooled with

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
                "verdict": self.verdict, "launches": self.launches} | energy | (
                    {"history": self.history} if self.history else {})

    @classmethod
    def from_dict(cls, d: dict) -> Cost:
        return cls(request=tuple(d["request"]), decode=tuple(d["decode"]), prefill=tuple(d["prefill"]),
                   verdict=d["verdict"], launches=d["launches"],
                   energy=tuple(d["energy"]) if d.get("energy") else None, ranked_by=d.get("ranked_by", RANKED_BY),
                   history=d.get("history", 0))


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
        pooled = f", the spread pooled with the baseline's {c.history} earlier launches" if c.history else ""
        return (f"{r:.3f}x {interval_text(lo, hi)} the baseline on {c.measure.name} ({c.measure.words(c.verdict)}; "
                f"decode {c.decode[0]:.3f}x, prefill {c.prefill[0]:.3f}x; {c.launches} fresh launches each, "
                f"interleaved{pooled})")

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
