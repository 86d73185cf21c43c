"""What the stored verdicts crowned: the champion's own minimization, and whether its minimal config replaces it.

A minimization belongs to the champion it minimized, and stores which one (`minimized`: trial, round, config
digest). A later round that crowns another configuration, or leaves the crown to the baseline, leaves it
another champion's: export, RESULTS.md and the TabbyAPI export then read none of it, and the loop drops it
(`drop_dethroned`; a minimization of a configuration crowned again replays the launches it stored). The minimal
champion replaces the confirmed one only where it was itself shown faster than the baseline
(autoresearch.champion.minimization.BaselineCheck) and passed the gate (`Minimization.why_not_exported`, which
export, its TabbyAPI files and RESULTS.md all ask).

Usage:
    stored, note = champion_minimization(study)    # None and why, where none or another champion's is stored
"""

from __future__ import annotations

import optuna

from autoresearch.champion.change_costs import (
    MINIMIZATION_ATTR,
    MINIMIZE_KIND,
    ChangeCosts,
    read_change_costs,
)
from autoresearch.crown.finalists import load_champion
from autoresearch.ground.db import ResultsDB
from serving.config import ServingConfig

__all__ = ["champion_change_costs", "champion_minimization", "drop_dethroned", "minimized_digest", "minimized_stamp",
           "unfinished_launches"]


def minimized_stamp(trial: int, config: ServingConfig, round_: int | None) -> dict:
    """What a minimization stores of the champion it minimized."""
    return {"trial": trial, "round": round_, "config_digest": config.digest}


def _of(stored: dict) -> dict:
    """The champion a stored minimization minimized (one stored before the stamp: its config digest alone)."""
    return stored.get("minimized") or {"config_digest": stored.get("champion_digest")}


def minimized_digest(stored: dict | None) -> str | None:
    """The config digest of the champion a stored minimization minimized (None: no minimization)."""
    return _of(stored)["config_digest"] if stored else None


def _belongs(stored: dict, champion: dict | None) -> bool:
    if champion is None or champion["is_baseline"]:
        return False
    return minimized_digest(stored) == ServingConfig.from_dict(champion["config"]).digest


def _whose(stored: dict) -> str:
    of = _of(stored)
    if of.get("trial") is None:
        return f"of configuration {str(of['config_digest'])[:12]}"
    crowned = f", crowned in round {of['round']}" if of.get("round") is not None else ""
    return f"of trial {of['trial']}{crowned}"


def champion_minimization(study: optuna.Study) -> tuple[dict | None, str | None]:
    """The stored minimization when it is the stored champion's; else None and, where one is stored, why it is
    not read (the crown moved since it ran)."""
    stored = study.user_attrs.get(MINIMIZATION_ATTR)
    if not stored:
        return None, None
    champion = load_champion(study)
    if _belongs(stored, champion):
        return stored, None
    if champion is None:
        return None, f"the stored minimization is {_whose(stored)}, and the study has no champion: not used"
    now = "the baseline" if champion["is_baseline"] else f"trial {champion['trial']}"
    if champion.get("round") is not None:
        now += f", crowned in round {champion['round']}"
    return None, f"the stored minimization is {_whose(stored)}, not of the champion ({now}): not used"


def drop_dethroned(study: optuna.Study) -> str | None:
    """Drop a stored minimization that is not the stored champion's (its launches stay in ar_measurements);
    returns what was dropped, or None."""
    stored, note = champion_minimization(study)
    if stored is None and note is not None:
        study.set_user_attr(MINIMIZATION_ATTR, None)
        return note.removesuffix(": not used") + ": dropped"
    return None


def champion_change_costs(study: optuna.Study) -> ChangeCosts | None:
    """RESULTS.md's "What each change bought": the champion's own minimization (None: none of it is stored)."""
    stored, _ = champion_minimization(study)
    return read_change_costs(stored, ServingConfig.from_dict(load_champion(study)["config"])) if stored else None


def unfinished_launches(study: optuna.Study, db: ResultsDB, study_name: str) -> int:
    """The launches stored by a minimization of the champion that has not ended (0: none, or it ended): another
    champion's launches do not count."""
    champion = load_champion(study)
    if champion_minimization(study)[0] or champion is None or champion["is_baseline"]:
        return 0
    key = ServingConfig.from_dict(champion["config"]).digest
    return sum(r["payload"].get("minimization") == key for r in db.measurements(study=study_name, kind=MINIMIZE_KIND))
