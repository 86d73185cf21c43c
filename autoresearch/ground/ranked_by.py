"""What ranks a study, as it records it: request time, energy per request, or (a study stored before request
time ranked) the geometric mean of the two speed-ups.

A study records its `ranked_by` when it is created (with the words in `ranking`, which optuna-dashboard shows
among the study's user attributes); a resumed study that measured a trial refuses another --rank-by. The
scalars themselves are autoresearch.measures.request_time's and autoresearch.measures.ranking's; this is only
the study's record of which one it uses, so that opening a study (autoresearch.ground.study) needs no measure.

Usage:
    settle_ranked_by(study, "energy", new=True)       # a new study (PlanError: a resumed one ranked otherwise)
    ranking_label(study.user_attrs.get(RANKED_BY_ATTR))
"""

from __future__ import annotations

import optuna

from autoresearch.ground.errors import PlanError

__all__ = ["ENERGY_RANKED", "GEOMEAN", "RANKED_BY", "RANKED_BY_ATTR", "RANK_BY", "mark_ranked_by_request_time",
           "ranking_label", "settle_ranked_by"]

# How a study's one number was computed, as its champion and RESULTS.md record it. A study stored
# before request time ranked has no `ranked_by`: it was ranked by the geometric mean.
RANKED_BY = "request_time"
ENERGY_RANKED = "energy_per_request"  # --rank-by energy: the same requests, joules in place of seconds
GEOMEAN = "geometric_mean"
RANK_BY = {"time": RANKED_BY, "energy": ENERGY_RANKED}  # --rank-by's choices, as a study records them
RANKED_BY_ATTR = "ranked_by"  # the study user attr
_LABEL_ATTR = "ranking"  # the words, for optuna-dashboard's study user attributes
_LABELS = {RANKED_BY: "request time on the workload: T(baseline) / T(candidate)",
           ENERGY_RANKED: "energy per request on the workload (--rank-by energy): E(baseline) / E(candidate), "
                          "joules under the user's own power limit",
           GEOMEAN: "the geometric mean of the decode and prefill speed-ups (the scalar before request time)"}


def ranking_label(ranked_by: str | None) -> str:
    """What ranked a study, in words; None (a study stored before `ranked_by` existed) is the geometric mean."""
    return _LABELS[ranked_by or GEOMEAN]


def mark_ranked_by_request_time(study: optuna.Study) -> None:
    study.set_user_attr(RANKED_BY_ATTR, RANKED_BY)


def settle_ranked_by(study: optuna.Study, rank_by: str, *, new: bool) -> None:
    """A new study (or one that completed no trial yet) records what ranks it; a resumed one that measured
    a trial keeps what it was ranked by, and another --rank-by is refused (PlanError, one line). A study
    stored before request time ranked (no `ranked_by`) counts as ranked by time."""
    stored = study.user_attrs.get(RANKED_BY_ATTR)
    measured = bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    if new or (stored is not None and not measured):
        study.set_user_attr(RANKED_BY_ATTR, RANK_BY[rank_by])
        study.set_user_attr(_LABEL_ATTR, ranking_label(RANK_BY[rank_by]))
        return
    have = "energy" if stored == ENERGY_RANKED else "time"
    if have != rank_by:
        raise PlanError(f"--rank-by: study {study.study_name} was ranked by {have}, this run gives {rank_by}; "
                        "resume with the stored value, or start afresh with --study NEW")
