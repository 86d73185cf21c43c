"""Does this machine reproduce a published speed table? Up to one factor per metric family, within noise.

Two machines of the same GPU model differ by several percent (power cap, clocks, driver,
neighbours). So a table is reproduced when one factor per family (decode, prefill) scales
every published row onto the measured ones, each row within its noise, and that factor lies within
the table's stated machine-to-machine bounds. The factor says "this machine is x% slower"; the
per-row check says "the differences between configurations are the published ones".

The table is JSON: {"source": ..., "factor_bounds": [lo, hi], "floors": {family: rel},
"rows": {row: {metric: value | [low, high]}}}; a metric is a BenchResult.samples() key such as
"decode_tok_per_s_server@1024/math", its family the part before "@".

Usage:
    python -m bench reference TABLE.json ROW=RESULT.json [ROW=RESULT.json ...] [--json OUT]
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import BenchConfigError
from bench.records import BenchResult
from bench.stats import Summary, summarize

__all__ = ["ReferenceCheck", "ReferenceTable", "RowCheck", "check_reference"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ReferenceTable:
    source: str
    factor_bounds: tuple[float, float]  # machine-to-machine spread allowed for a family's factor
    floors: dict[str, float]  # family -> relative noise floor between launches
    rows: dict[str, dict[str, tuple[float, float]]]  # row -> metric -> (low, high)

    @classmethod
    def from_json(cls, path: Path) -> ReferenceTable:
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            rows = {
                row: {
                    m: (float(v[0]), float(v[1])) if isinstance(v, list) else (float(v), float(v))
                    for m, v in metrics.items()
                }
                for row, metrics in d["rows"].items()
            }
            lo, hi = (float(x) for x in d["factor_bounds"])
            floors = {k: float(v) for k, v in d["floors"].items()}
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise BenchConfigError(f"{path} is not a reference table ({type(exc).__name__}: {exc})") from exc
        for metric in {m for metrics in rows.values() for m in metrics}:
            if _family(metric) not in floors:
                raise BenchConfigError(f"{path}: no noise floor for the family of {metric!r}")
        return cls(source=str(d.get("source", path)), factor_bounds=(lo, hi), floors=floors, rows=rows)


@dataclass(frozen=True, kw_only=True, slots=True)
class RowCheck:
    row: str
    metric: str
    published: tuple[float, float]
    measured: float
    deviation: float  # from the published value (range) scaled by the family factor; 0 inside the range
    tolerance: float  # max(family floor, 2 x this median's relative interval half-width)

    @property
    def ok(self) -> bool:
        return abs(self.deviation) <= self.tolerance


@dataclass(frozen=True, kw_only=True, slots=True)
class ReferenceCheck:
    source: str
    factors: dict[str, float]  # family -> median of measured / published-midpoint over rows
    factor_bounds: tuple[float, float]
    rows: tuple[RowCheck, ...]
    missing: tuple[str, ...]  # "row metric" published for a measured row but not measured
    unmeasured: tuple[str, ...]  # published rows with no result at all

    @property
    def factors_ok(self) -> bool:
        lo, hi = self.factor_bounds
        return all(lo <= f <= hi for f in self.factors.values())

    @property
    def ok(self) -> bool:
        return self.factors_ok and not self.missing and not self.unmeasured and all(r.ok for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "ok": self.ok,
            "factors": self.factors,
            "factor_bounds": list(self.factor_bounds),
            "missing": list(self.missing),
            "unmeasured": list(self.unmeasured),
            "rows": [
                {
                    "row": r.row,
                    "metric": r.metric,
                    "published": list(r.published),
                    "measured": r.measured,
                    "deviation": r.deviation,
                    "tolerance": r.tolerance,
                    "ok": r.ok,
                }
                for r in self.rows
            ],
        }


def _family(metric: str) -> str:
    return metric.split("@", 1)[0]


def check_reference(table: ReferenceTable, results: Mapping[str, BenchResult]) -> ReferenceCheck:
    """Fit one factor per family over every measured row, then check each row against it."""
    unknown = sorted(set(results) - set(table.rows))
    if unknown:
        raise BenchConfigError(
            f"rows {unknown} are not in the table {table.source}; it has {sorted(table.rows)}"
        )
    measured: list[tuple[str, str, tuple[float, float], Summary]] = []
    missing = []
    for row, metrics in table.rows.items():
        if row not in results:
            continue
        samples = results[row].samples()
        for metric, published in metrics.items():
            if samples.get(metric):
                measured.append((row, metric, published, summarize(samples[metric])))
            else:
                missing.append(f"{row} {metric}")
    factors = {
        family: statistics.median(
            s.median / ((lo + hi) / 2) for _, m, (lo, hi), s in measured if _family(m) == family
        )
        for family in sorted({_family(m) for _, m, _, _ in measured})
    }
    checks = []
    for row, metric, (lo, hi), summary in measured:
        f = factors[_family(metric)]
        value = summary.median
        if value < lo * f:
            deviation = value / (lo * f) - 1
        elif value > hi * f:
            deviation = value / (hi * f) - 1
        else:
            deviation = 0.0
        tolerance = max(table.floors[_family(metric)], 2 * summary.rel_ci_half_width)
        checks.append(
            RowCheck(
                row=row,
                metric=metric,
                published=(lo, hi),
                measured=value,
                deviation=deviation,
                tolerance=tolerance,
            )
        )
    return ReferenceCheck(
        source=table.source,
        factors=factors,
        factor_bounds=table.factor_bounds,
        rows=tuple(checks),
        missing=tuple(missing),
        unmeasured=tuple(r for r in table.rows if r not in results),
    )
