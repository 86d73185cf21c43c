"""The champion as a serving config, and the command that serves it; regenerating RESULTS.md."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna

from autoresearch.db import ResultsDB
from autoresearch.errors import StudyError
from autoresearch.finalists import load_champion
from autoresearch.plan import RunPlan
from autoresearch.report import write_report
from autoresearch.request_time import ranking_label
from eval import EvalStore
from serving.config import ServingConfig

__all__ = ["export_champion", "regenerate_report"]


def _load(plan: RunPlan) -> optuna.Study:
    try:
        return optuna.load_study(study_name=plan.study_name, storage=plan.storage_url)
    except KeyError as exc:
        raise StudyError(f"no study {plan.study_name!r} in {plan.storage_url}; run the loop first") from exc


def export_champion(plan: RunPlan, out: Path) -> int:
    study = _load(plan)
    champion = load_champion(study)
    if champion is None:
        raise StudyError(f"study {plan.study_name} has no champion yet: the loop decides it after its last trial")
    config = ServingConfig.from_dict(champion["config"])  # validated before anyone serves it
    out.write_text(config.to_json() + "\n")
    who = "the baseline" if champion["is_baseline"] else f"trial {champion['trial']}"
    print(f"wrote {out}: {who}, decode {champion['decode_tok_per_s']:.2f} tok/s, prefill "
          f"{champion['prefill_tok_per_s']:.1f} tok/s ({champion['speedup']:.3f}x the baseline by "
          f"{ranking_label(champion.get('ranked_by'))})")
    print(f"serve it:\n  python -m serving --model {plan.model.path} --config {out}")
    return 0


def regenerate_report(plan: RunPlan) -> int:
    study = _load(plan)
    path = write_report(plan, study, ResultsDB(plan.storage_url), EvalStore(plan.storage_url))
    print(f"wrote {path}", file=sys.stderr)
    return 0
