"""Before crowning a champion, re-measure the finalists in fresh launches and decide on those numbers.

The best of many noisy search measurements is biased upward (the optimizer's curse), so search
repeats do not count here: the top feasible configurations and the baseline are each launched
`finalist_launches` times, interleaved (baseline, A, B, baseline, A, B, ...), and the champion is
the finalist that bench's rule calls faster than the baseline on at least one objective and slower
on none, ranked by the geometric mean of its two speed-ups. If none qualifies, the baseline stays.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from dataclasses import dataclass

import optuna

from autoresearch.db import ResultsDB
from autoresearch.objectives import objectives_from_bench, speedup_score
from autoresearch.plan import RunPlan
from autoresearch.servers import serve
from bench import BenchResult, Endpoint, compare, noise_floor, run_bench
from bench.errors import BenchError
from search_space import SearchSpace, config_from_params
from serving.errors import LaunchError

__all__ = ["Champion", "confirm_finalists", "feasible_front", "load_champion"]

log = logging.getLogger(__name__)
_CHAMPION = "champion"


@dataclass(frozen=True)
class Champion:
    trial: int
    config: dict
    decode_tok_per_s: float
    prefill_tok_per_s: float
    speedup: float
    is_baseline: bool


def feasible_front(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Feasible COMPLETE trials on the Pareto front (Optuna's best_trials filters by constraints)."""
    return [t for t in study.best_trials if all(c <= 0 for c in t.user_attrs.get("constraints", [1.0]))]


def _pooled(results: list[BenchResult]) -> dict[str, tuple[float, ...]]:
    pooled: dict[str, list[float]] = {}
    for result in results:
        for metric, values in result.samples().items():
            pooled.setdefault(metric, []).extend(values)
    return {k: tuple(v) for k, v in pooled.items()}


def confirm_finalists(plan: RunPlan, study: optuna.Study, space: SearchSpace, db: ResultsDB) -> Champion | None:
    """Re-measure, decide, store the decision in ar_finalists and the study; None without a baseline."""
    trials = study.get_trials(deepcopy=False)
    stored = load_champion(study)
    if stored is not None and stored.get("trials_at") == len(trials):  # decided, and nothing ran since
        return Champion(**{k: stored[k] for k in Champion.__dataclass_fields__})
    baseline = next((t for t in trials if t.user_attrs.get("role") == "baseline"
                     and t.state == optuna.trial.TrialState.COMPLETE), None)
    if baseline is None:
        return None
    baseline_values = tuple(baseline.values)
    front = [t for t in feasible_front(study) if t.user_attrs.get("role") != "baseline"]
    front.sort(key=lambda t: speedup_score(tuple(t.values), baseline_values), reverse=True)
    finalists = [t for t in front if speedup_score(tuple(t.values), baseline_values) > 1.0][: plan.finalists]
    if not finalists:
        champion = Champion(trial=baseline.number, config=baseline.user_attrs["config"],
                            decode_tok_per_s=baseline_values[0], prefill_tok_per_s=baseline_values[1],
                            speedup=1.0, is_baseline=True)
        study.set_user_attr(_CHAMPION, champion.__dict__ | {"reason": "no feasible candidate was faster in search",
                                                            "trials_at": len(trials)})
        return champion

    round_ = 1 + max((r["round"] for r in db.finalists(study=plan.study_name)), default=0)
    order = [baseline, *finalists]
    results: dict[int, list[BenchResult]] = {t.number: [] for t in order}
    for launch in range(plan.finalist_launches):
        for t in order:  # interleaved, so drift hits every configuration alike
            config = config_from_params(space, t.params)
            log_path = plan.study_dir / "logs" / f"final-{round_}-trial-{t.number:04d}-{launch}.log"
            try:
                with serve(model_dir=plan.model.path, config=config, log_path=log_path,
                           pid_dir=plan.study_dir / "servers", port=plan.port,
                           vram_limit_bytes=plan.vram_bytes if plan.emulate_vram else None,
                           host_memory_limit_bytes=plan.host_memory_limit_bytes,
                           startup_timeout_s=plan.startup_timeout_s) as server:
                    bench_plan = dataclasses.replace(plan.bench_plan, salt=secrets.token_hex(4))
                    result = run_bench(bench_plan, Endpoint(url=server.url))
            except (LaunchError, BenchError) as exc:
                log.warning("finalist trial %d launch %d failed: %s", t.number, launch, exc)
                continue
            results[t.number].append(result)
            db.add_measurement(study=plan.study_name, trial=None, kind="finalist_bench", config_digest=config.digest,
                               payload={"trial": t.number, "round": round_, "launch": launch, **result.to_dict()},
                               launch=launch)

    base_runs = results[baseline.number]
    if not base_runs:
        log.error("the baseline could not be re-measured in any confirmation launch; no champion decided")
        db.add_finalist(study=plan.study_name, round_=round_, trial=baseline.number,
                        config_digest=baseline.user_attrs["config_digest"], decode=None, prefill=None,
                        verdict={"baseline": True, "reason": "every confirmation launch of the baseline failed"})
        return None
    base_samples = _pooled(base_runs)
    floor = noise_floor(base_runs[0].samples(), base_runs[1].samples()) if len(base_runs) > 1 else None
    base_values = _values(base_runs)
    best: Champion | None = None
    for t in finalists:
        runs = results[t.number]
        if not runs:
            db.add_finalist(study=plan.study_name, round_=round_, trial=t.number,
                            config_digest=t.user_attrs["config_digest"], decode=None, prefill=None,
                            verdict={"qualified": False, "reason": "every confirmation launch failed"})
            continue
        values = _values(runs)
        comparisons = compare(base_samples, _pooled(runs), noise_floor=floor)
        client = [c for c in comparisons if "_client@" in c.metric]
        faster = any(c.verdict == "faster" for c in client)
        slower = any(c.verdict == "slower" for c in client)
        score = speedup_score(values, base_values)
        qualified = faster and not slower
        db.add_finalist(study=plan.study_name, round_=round_, trial=t.number, config_digest=t.user_attrs["config_digest"],
                        decode=values[0], prefill=values[1],
                        verdict={"qualified": qualified, "speedup": score, "baseline_values": base_values,
                                 "comparisons": [c.__dict__ if hasattr(c, "__dict__") else _slots(c) for c in comparisons]})
        if qualified and (best is None or score > best.speedup):
            best = Champion(trial=t.number, config=t.user_attrs["config"], decode_tok_per_s=values[0],
                            prefill_tok_per_s=values[1], speedup=score, is_baseline=False)
    db.add_finalist(study=plan.study_name, round_=round_, trial=baseline.number,
                    config_digest=baseline.user_attrs["config_digest"], decode=base_values[0], prefill=base_values[1],
                    verdict={"baseline": True, "noise_floor": floor.to_dict() if floor else None})
    if best is None:
        best = Champion(trial=baseline.number, config=baseline.user_attrs["config"], decode_tok_per_s=base_values[0],
                        prefill_tok_per_s=base_values[1], speedup=1.0, is_baseline=True)
        reason = "no finalist was confirmed faster than the baseline in fresh launches"
    else:
        launches = "1 fresh launch" if plan.finalist_launches == 1 else f"{plan.finalist_launches} fresh launches"
        reason = f"confirmed in {launches} against the baseline"
    study.set_user_attr(_CHAMPION, best.__dict__ | {"reason": reason, "round": round_, "trials_at": len(trials)})
    return best


def load_champion(study: optuna.Study) -> dict | None:
    return study.user_attrs.get(_CHAMPION)


def _values(runs: list[BenchResult]) -> tuple[float, float]:
    pairs = [objectives_from_bench(r) for r in runs]
    decode = sorted(p[0] for p in pairs)[len(pairs) // 2]
    prefill = sorted(p[1] for p in pairs)[len(pairs) // 2]
    return decode, prefill


def _slots(obj) -> dict:
    return {name: getattr(obj, name) for name in obj.__slots__}
