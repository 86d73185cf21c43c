"""What `python -m search_space` shows: a rich table on a terminal, `key: value` lines or JSON otherwise.

Fed only by a `SpaceSummary`, which holds the space, its baseline and the baseline's fit; the
numbers come from the memory model and the catalog, never from here.

Usage:
    summary = SpaceSummary(space=space, baseline=space.baseline_config(), fit=check)
    print(render_text(summary))  |  render_rich(summary, Console())  |  json.dumps(summary_dict(summary))
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from search_space.budget import FitCheck
from search_space.domains import USE_DEFAULT, UseDefault
from search_space.knobs import Knob
from search_space.space import SearchSpace
from serving.config import ServingConfig

__all__ = ["SpaceSummary", "render_rich", "render_text", "summary_dict"]

GiB = 1024**3


@dataclass(frozen=True)
class SpaceSummary:
    space: SearchSpace
    baseline: ServingConfig
    fit: FitCheck | None  # None for the CPU engine, whose memory is not modelled


def summary_dict(summary: SpaceSummary) -> dict[str, Any]:
    space = summary.space
    out: dict[str, Any] = {
        "model": str(space.context.model.directory),
        "engine": space.context.engine,
        "knobs": [_knob_dict(k, space) for k in space.knobs],
        "baseline": summary.baseline.to_dict(),
        "baseline_digest": summary.baseline.digest,
        "space_size": _size_json(space.size()),
    }
    if summary.fit is not None:
        out["memory"] = {
            **summary.fit.estimate.components(),
            "predicted_peak_bytes": summary.fit.predicted_peak_bytes,
            "vram_budget_bytes": summary.fit.budget.vram_bytes,
            "reserve_bytes": summary.fit.budget.reserve_bytes,
            "fits": summary.fit.fits,
        }
    return out


def render_text(summary: SpaceSummary) -> str:
    """Greppable `key: value` lines, one knob per line."""
    space = summary.space
    lines = [f"model: {space.context.model.directory}", f"engine: {space.context.engine}"]
    for knob in space.knobs:
        lines.append(
            f"knob: {knob.name} domain={_domain(knob, space)} default={_value(knob.default)} "
            f"applied_as={knob.applied_as.describe()} when={knob.describe_when()} "
            f"may_change_outputs={'yes' if knob.may_change_outputs else 'no'}"
        )
    lines.append(f"baseline: {json.dumps(summary.baseline.to_dict(), sort_keys=True)}")
    lines.append(f"baseline_digest: {summary.baseline.digest}")
    if summary.fit is not None:
        fit = summary.fit
        for name, value in fit.estimate.components().items():
            lines.append(f"baseline_{name}: {value}")
        lines.append(f"vram_budget_bytes: {fit.budget.vram_bytes}")
        lines.append(f"vram_usable_bytes: {fit.budget.usable_bytes}")
        lines.append(f"baseline_fits: {'yes' if fit.fits else 'no'}")
    lines.append(f"space_size: {_size_text(space.size())}")
    return "\n".join(lines)


def render_rich(summary: SpaceSummary, console: Console) -> None:
    space = summary.space
    table = Table(title=f"{space.context.engine} knobs for {space.context.model.directory.name}")
    table.add_column("knob", no_wrap=True, style="bold")
    table.add_column("domain")
    table.add_column("default", no_wrap=True)
    table.add_column("applied as", overflow="fold")
    table.add_column("applies when")
    table.add_column("may change outputs", no_wrap=True)
    for knob in space.knobs:
        table.add_row(knob.name, _domain(knob, space), _value(knob.default), knob.applied_as.describe(),
                      knob.describe_when(), "yes" if knob.may_change_outputs else "no")
    console.print(table)
    console.print(f"[bold]baseline[/bold] ({summary.baseline.digest[:12]}): "
                  f"{json.dumps(summary.baseline.to_dict(), sort_keys=True)}", soft_wrap=True)
    if summary.fit is not None:
        fit = summary.fit
        parts = ", ".join(f"{k.removesuffix('_bytes')} {v / GiB:.2f}" for k, v in fit.estimate.components().items())
        verdict = "[green]fits[/green]" if fit.fits else "[red]does not fit[/red]"
        console.print(f"[bold]baseline VRAM[/bold] (GiB): {parts}; budget {fit.budget.vram_bytes / GiB:.2f} "
                      f"less {fit.budget.reserve_bytes / GiB:.2f} reserve: {verdict}")
    console.print(f"[bold]space size[/bold]: {_size_text(space.size())} configurations")


def _knob_dict(knob: Knob, space: SearchSpace) -> dict[str, Any]:
    return {
        "name": knob.name,
        "domain": knob.domain.describe(),
        "default": _json_value(knob.default),
        "applied_as": knob.applied_as.describe(),
        "applies_when": knob.describe_when(),
        "may_change_outputs": knob.may_change_outputs,
        "pinned": knob.name in space.pinned,
        "pinned_value": _json_value(space.pinned[knob.name]) if knob.name in space.pinned else None,
        "note": knob.note,
    }


def _json_value(value: Any) -> Any:
    return UseDefault.OPTUNA_TOKEN if value is USE_DEFAULT else value


def _domain(knob: Knob, space: SearchSpace) -> str:
    if knob.name in space.pinned:
        return f"pinned {_value(space.pinned[knob.name])}"
    return knob.domain.describe()


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "default" if value is USE_DEFAULT else str(value)


def _size_text(size: int | float) -> str:
    if math.isinf(size):
        return "infinite (a continuous domain)"
    return f"{size} (~10^{math.log10(size):.1f})" if size >= 10**6 else str(size)


def _size_json(size: int | float) -> int | str:
    return "infinite" if math.isinf(size) else size
