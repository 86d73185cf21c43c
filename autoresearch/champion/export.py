"""The champion as a serving config: this project's, or TabbyAPI's config.yml + exl3.env.

`export` writes what the stored verdicts crowned: the confirmed champion, or the minimal champion of its own
minimization (autoresearch.champion.crowned: never another champion's) once it was shown faster than the
baseline and passed the gate (Minimization.why_not_exported); `--full-champion` always writes the confirmed
one. It prints the speed-up of what it wrote, with its interval. The TabbyAPI export says, in its files'
header and on the terminal, whether what TabbyAPI runs passed the gate (the subset of settings it can
express is judged by the loop like any candidate), and checks its config.yml against TabbyAPI's schema.
Every file is written beside its place, read back and checked, then moved there: a refused one leaves
nothing (autoresearch.ground.outputs.write_checked)."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
import yaml

from autoresearch.champion.change_costs import (
    SUBSET_OF,
    cost_text,
    signed_change,
    tried_subsets,
    verdict_text,
)
from autoresearch.champion.crowned import champion_minimization
from autoresearch.champion.minimization import Cost, Minimization
from autoresearch.champion.tabbyapi import TabbyExport, expressible_subset, to_tabbyapi
from autoresearch.champion.tabbyapi_schema import config_problems
from autoresearch.crown.finalists import load_champion
from autoresearch.ground.errors import PlanError, StudyError
from autoresearch.ground.outputs import EXPORT_DEFAULTS, write_checked
from autoresearch.ground.plan import RunPlan
from autoresearch.ground.ranked_by import ranking_label
from autoresearch.ground.study import load_stored_study, model_is_hybrid
from serving.config import ServingConfig

__all__ = ["export_champion"]


def _exported_config(study: optuna.Study, champion: dict, *, full: bool) -> tuple[ServingConfig, str, Minimization | None]:
    """The config `export` writes: the minimal champion of the champion's own minimization once it replaces the
    confirmed champion, else the confirmed one; with the words that name it, and that minimization."""
    config = ServingConfig.from_dict(champion["config"])  # validated before anyone serves it
    who = "the baseline" if champion["is_baseline"] else f"trial {champion['trial']}"
    stored, stale = champion_minimization(study)
    if stale:
        print(stale, file=sys.stderr)
    minimization = Minimization.from_dict(stored) if stored else None
    cut = next((c for c in (study.user_attrs.get("night") or {}).get("cuts") or [] if c.startswith("not minimized")),
               None)  # the night's clock cut the minimization (autoresearch.night.clock): said, not hidden
    confirmed = f"{who} (the confirmed champion{'; not minimized: the night was too short' if cut else ''})"
    if minimization is None or full or minimization.minimal.digest == config.digest:
        return config, confirmed, minimization
    why = minimization.why_not_exported(config)
    if why is not None:
        print(f"the minimal champion is not exported: {why}; exporting the confirmed champion", file=sys.stderr)
        return config, confirmed, minimization
    kept = len(minimization.kept)
    return minimization.minimal, f"the minimal champion ({kept} of {who}'s {len(minimization.changes)} changes)", \
        minimization


def _speed_words(champion: dict, config: ServingConfig, minimization: Minimization | None) -> str:
    """The measured speed-up of what is written, with its interval: the minimal champion's own against the
    baseline, or the confirmed champion's as the finalists' stage measured it."""
    if minimization is not None and config.digest == minimization.minimal.digest and \
            minimization.versus_baseline is not None:
        return minimization.versus_baseline.text()
    speed = champion.get("speed") or {}
    interval = f" [{speed['interval'][0]:.3f}, {speed['interval'][1]:.3f}]" if speed.get("interval") else ""
    return (f"decode {champion['decode_tok_per_s']:.2f} tok/s, prefill {champion['prefill_tok_per_s']:.1f} tok/s "
            f"({champion['speedup']:.3f}x{interval} the baseline as confirmed, by "
            f"{ranking_label(champion.get('ranked_by'))})")


def export_champion(plan: RunPlan, out: Path | None, *, fmt: str = "serving", full: bool = False) -> int:
    """Write the champion as this project's serving config (`serving`) or as TabbyAPI's files (`tabbyapi`).

    Raises:
        PlanError: the study has no champion yet, or TabbyAPI cannot serve its engine (nothing is written).
    """
    study = load_stored_study(plan)
    champion = load_champion(study)
    if champion is None:
        raise PlanError(f"study {plan.study_name} has no champion yet: the loop decides it after its last trial")
    if fmt == "tabbyapi" and plan.engine != "exllamav3":
        raise PlanError(f"export --format tabbyapi: study {plan.study_name} ran the {plan.engine} engine, and "
                        "TabbyAPI serves exllamav3 checkpoints only (export it with --format serving)")
    config, who, minimization = _exported_config(study, champion, full=full)
    if fmt == "tabbyapi":
        best = (minimization.extra.get("tabbyapi_subset") or {}) if minimization else {}
        if best.get("of") == "champion" and best.get("cost"):  # measured faster for TabbyAPI than the minimal's
            config = ServingConfig.from_dict(champion["config"])
            better = "to use less energy" if Cost.from_dict(best["cost"]).energy else "faster"
            who = (f"trial {champion['trial']} (the confirmed champion: of what TabbyAPI can express, its changes "
                   f"were measured {better} than the minimal champion's)")
        return _export_tabbyapi(plan, study, config, who, minimization, out or EXPORT_DEFAULTS["tabbyapi"], champion)
    out = out or EXPORT_DEFAULTS["serving"]
    write_checked({out: config.to_json() + "\n"}, lambda read: _same_config(read[out], config, out))
    print(f"wrote {out}: {who}, {_speed_words(champion, config, minimization)}")
    print(f"serve it:\n  python -m serving --model {plan.model.path} --config {out}")
    return 0


def _same_config(text: str, config: ServingConfig, out: Path) -> None:
    if ServingConfig.from_json(text).digest != config.digest:
        raise StudyError(f"{out} read back as another configuration than the one written")


def _tabbyapi_gate(runs: ServingConfig, champion: dict, minimization: Minimization | None) -> tuple[bool, str]:
    """Whether the configuration TabbyAPI runs passed the gate, and the words that say so (or why not)."""
    if runs.digest == ServingConfig.from_dict(champion["config"]).digest:
        return True, ("the baseline, the reference every gate judges against" if champion["is_baseline"]
                      else "passed: it is the confirmed champion, which passed the gate before it was crowned")
    verdicts = []
    if minimization is not None:
        verdicts.append((minimization.minimal.digest, minimization.extra.get("gate"), "the minimal champion"))
        subset = minimization.extra.get("tabbyapi_subset") or {}
        verdicts.append((subset.get("digest"), subset.get("gate"), "the TabbyAPI subset"))
    for digest, gate, what in verdicts:  # a verdict is of the configuration it judged (stored with it since #47)
        if gate is not None and gate.get("digest", digest) == runs.digest and gate.get("judged") is not False:
            return gate["passed"], f"{'passed' if gate['passed'] else 'FAILED'} ({what}'s gate): {gate['reason']}"
    return False, ("NOT JUDGED: no gate judged what TabbyAPI runs (the settings it cannot express at the values it "
                   "uses instead); a removal can expose an interaction, so its fidelity and tasks are unknown. The "
                   "loop judges the subset it measured after minimizing; run it again to judge this one")


def _export_tabbyapi(plan: RunPlan, study: optuna.Study, config: ServingConfig, who: str,
                     minimization: Minimization | None, out: Path, champion: dict) -> int:
    """Write config.yml, exl3.env and NOT-EXPRESSED.md, each saying whether what TabbyAPI runs passed the gate;
    config.yml is read back and checked against TabbyAPI's schema (a key it does not know it drops silently)
    before any of the three takes its place.

    Raises:
        StudyError: the written config.yml holds a key or value TabbyAPI would drop or refuse (nothing is left).
    """
    hybrid = model_is_hybrid(study)
    export = to_tabbyapi(config, model_path=plan.model.path, hybrid=hybrid)
    runs = config if export.equivalent else expressible_subset(config, hybrid=hybrid)
    passed, gate = _tabbyapi_gate(runs, champion, minimization)
    head = (f"# {who} of study {plan.study_name}, exported by `python -m autoresearch export --format tabbyapi`\n"
            f"# gate of what TabbyAPI runs (config digest {runs.digest[:12]}): {gate}\n")
    lines = _not_expressed(export, config, minimization, hybrid=hybrid)
    files = {out / "config.yml": head + yaml.safe_dump(export.config, sort_keys=False),
             out / "exl3.env": head + "".join(f"{k}={v}\n" for k, v in export.env.items()),
             out / "NOT-EXPRESSED.md": f"# What TabbyAPI cannot express of {who}\n\n" + "\n".join(lines)
             + f"\n\nGate of what TabbyAPI runs: {gate}\n"}

    def check(read: dict[Path, str]) -> None:
        problems = config_problems(yaml.safe_load(read[out / "config.yml"]))
        if problems:
            raise StudyError(f"{out}/config.yml holds what TabbyAPI would drop or refuse (nothing was written): "
                             f"{'; '.join(problems)}")

    write_checked(files, check)
    print(f"wrote {out}/config.yml, {out}/exl3.env and {out}/NOT-EXPRESSED.md: {who}")
    print("\n".join(lines))
    print(f"gate of what TabbyAPI runs: {gate}")
    if not passed:
        print(f"warning: {out}/config.yml has not passed the gate: {gate}", file=sys.stderr)
    print(f"serve it: cp {out}/config.yml <tabbyAPI>/config.yml && env $(grep -v '^#' {out}/exl3.env | xargs) "
          "python main.py")
    return 0


def _not_expressed(export: TabbyExport, config: ServingConfig, minimization: Minimization | None, *,
                   hybrid: bool) -> list[str]:
    """The settings TabbyAPI cannot express with their measured cost, and what TabbyAPI runs instead."""
    if export.equivalent:
        return ["TabbyAPI expresses every setting: it runs this configuration (it does not call exllamav3's "
                "warmup(): discard its first requests when timing it)."]
    costs = minimization.costs if minimization else {}
    lines = ["**Not equivalent.** TabbyAPI has no key for these settings and runs the value after the arrow:", ""]
    for u in export.unexpressed:
        cost = costs.get(u.field)
        energy = f"energy per request {signed_change(cost.energy, time=True)}, " if cost and cost.energy else ""
        measured = (f"removing it alone from the champion: {energy}request time "
                    f"{signed_change(cost.request, time=True)}, decode {signed_change(cost.decode)}" if cost else "its cost was not measured (no minimization "
                    "removed it alone)")
        lines.append(f"- `{u.field}={u.value}` -> `{u.tabby_runs}` ({u.why}); {measured}")
    subset = expressible_subset(config, hybrid=hybrid)
    stored = (minimization.extra.get("tabbyapi_subset") or {}) if minimization else {}
    tried = tried_subsets(stored)
    measured = next((t for t in tried if t["digest"] == subset.digest and t.get("cost")), None) or stored
    lines += ["", f"config.yml and exl3.env are the subset TabbyAPI can run (config digest `{subset.digest[:12]}`)."]
    if measured.get("digest") == subset.digest and measured.get("cost"):
        cost = Cost.from_dict(measured["cost"])
        lines.append(f"Measured against the champion ({cost.launches} fresh launches each, interleaved): "
                     f"{cost_text(cost)}; bench's verdict: {verdict_text(cost)}.")
        for other in (t for t in tried if t["digest"] != subset.digest and t.get("cost")):
            lines.append(f"{SUBSET_OF.get(other['of'], other['of']).capitalize()} subset (`{other['digest'][:12]}`), "
                         f"measured alike: {cost_text(Cost.from_dict(other['cost']))}.")
    elif measured.get("digest"):
        lines.append(f"Its speed has not been measured: the minimization measured the subset of the "
                     f"{measured.get('of', 'minimal')} champion (`{measured['digest'][:12]}`), which export writes "
                     "without --full-champion once it passed the gate.")
    else:
        lines.append("Its speed has not been measured: the minimization measures it when the minimal champion has "
                     "settings TabbyAPI cannot express.")
    return lines
