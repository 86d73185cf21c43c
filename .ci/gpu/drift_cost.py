"""What the drift check cost one study, from its results.db: the baseline's re-measurement launches and
their time against the search's, and each reading's ratio to the first (as RESULTS.md's Baseline drift).

    python .ci/gpu/drift_cost.py sqlite:///results.db [--study NAME] > drift-cost.json
"""

from __future__ import annotations

import argparse
import json
import sys

import optuna

from autoresearch.checks.readings import KIND, read_readings
from autoresearch.ground.db import ResultsDB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("storage")
    parser.add_argument("--study")
    args = parser.parse_args(argv)
    names = optuna.get_all_study_names(args.storage)
    name = args.study or (names[0] if len(names) == 1 else None)
    if name is None:
        print(f"give --study, one of {names}", file=sys.stderr)
        return 2
    study = optuna.load_study(study_name=name, storage=args.storage)
    db = ResultsDB(args.storage)
    finished = [t for t in study.get_trials(deepcopy=False) if t.datetime_complete and t.datetime_start]
    search_s = sum((t.datetime_complete - t.datetime_start).total_seconds() for t in finished)
    checks = db.measurements(study=name, kind=KIND)
    check_s = sum(r["payload"].get("elapsed_s", 0.0) for r in checks)
    trial_launches = sum(len(db.measurements(study=name, kind=k)) for k in ("bench", "bench_error", "launch"))
    readings = read_readings(study, db, name)
    first = next((r for r in readings if r.measured), None)
    out = {
        "study": name, "trials": len(finished), "search_seconds": round(search_s, 1),
        "drift_checks": len(checks), "drift_check_seconds": round(check_s, 1),
        "drift_share_of_search_time": round(check_s / search_s, 4) if search_s else None,
        "trial_launches": trial_launches, "drift_launches_per_trial_launch": round(len(checks) / trial_launches, 3)
        if trial_launches else None,
        "readings": [{"source": r.source, "at": r.at.isoformat(), "decode": r.decode, "prefill": r.prefill,
                      "decode_vs_first": r.decode / first.decode if r.measured else None,
                      "prefill_vs_first": r.prefill / first.prefill if r.measured else None,
                      "error": r.error, "conditions": r.conditions} for r in readings],
        "held_trials": [{"trial": t.number, **t.user_attrs["drift"]} for t in study.get_trials(deepcopy=False)
                        if (t.user_attrs.get("drift") or {}).get("hold")],
    }
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
