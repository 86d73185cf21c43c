"""The night plan, replayed on a stored task-tier study (.ci/gpu/task-tier-study.sh's settings): the plan the
loop makes from what it had measured once the baseline finished, and after each judgment, each against the
stages the later trials measured. Why: a plan is only as good as its forecast of trials it had not seen.
Run with the project's current forecast, so a study stored before a change to it can be replayed with it.
    python .ci/gpu/plan_replay.py results.db"""
import dataclasses
import statistics
import sys

import optuna

from autoresearch.checks.task_tier import first_answers
from autoresearch.ground.db import ResultsDB
from autoresearch.night_plan import assumed_rates, forecast_for, rates_at, task_judgments
from eval.decision import TaskPolicy
from eval.suites import SuiteOverrides, apply_overrides, get_suite

url = f"sqlite:///{sys.argv[1]}"
study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
db = ResultsDB(url)
suite = dataclasses.replace(apply_overrides(get_suite("offline"), SuiteOverrides(max_tokens=1024)), max_concurrent=64)
policy = TaskPolicy()
trials = study.get_trials()
base = next(t for t in trials if t.user_attrs.get("role") == "baseline")
runs = [r["payload"] for r in db.measurements(study=study.study_name, kind="suite", trial=base.number)]
judged = [t for t in trials if t.user_attrs.get("task_tier") == "judged"]
judgments = task_judgments(study, db, base.number, runs)  # in the loop's order: judgment k is judged[k]'s


def plan(rates):  # as the loop makes it for task-tier-study.sh's run
    return forecast_for(rates, policy=policy, hours=None, trials=5, finalists=2, finalist_launches=1, scope="every",
                        judging=True, baseline_first=first_answers(policy, suite))


for k in range(len(judged)):
    last = judged[k - 1].number if k else base.number
    seen = [t for t in trials if t.number <= last]
    rates = rates_at(seen, runs, judgments[:k], suite, assumed_rates(suite, "exllamav3", {}))
    f = plan(rates)
    print(f"== plan with {k} judged (made after trial {last}), predicting trials {[t.number for t in judged[k:]]}")
    print(f.text())
    for stage, predicted in f.stage_s().items():
        vals = [t.user_attrs["stage_s"][stage] for t in trials if t.user_attrs.get("role") == "candidate"
                and stage in (t.user_attrs.get("stage_s") or {}) and t.number > last]
        # A cheap stage against the typical later trial (the median: the plan takes its rates as medians too; a
        # first launch of a new kind pays one-time compiles), the tasks against their mean: the plan's figure is
        # the expected judgment, the baseline's relaunches spread over all of them. Within 25% of it.
        med = statistics.median(vals) if vals else float("nan")
        mean = statistics.mean(vals) if vals else float("nan")
        m, other = (mean, f"median {med:.1f}") if stage == "tasks" else (med, f"mean {mean:.1f}")
        print(f"  {stage:9} predicted {predicted:7.1f}  measured {'mean' if stage == 'tasks' else 'median'} "
              f"{m:7.1f} ({other}) over {len(vals)} later trials  "
              f"{'within 25%' if abs(m - predicted) <= 0.25 * m else 'OFF'}")
        if stage == "tasks" and vals:
            # The walks are the candidates' (how many tasks they flip), not a rate the study had measured: the
            # same plan given the walks the later candidates took shows whether the rest of it (seconds per
            # task, answering calls, the baseline's relaunches) held apart from the walk it assumed.
            later = {t.name: tuple(int(j["walks"][t.name]) for j in judgments[k:] if t.name in j["walks"])
                     for t in rates.tasksets}
            given = dataclasses.replace(rates, tasksets=tuple(dataclasses.replace(t, walks=later[t.name] or t.walks)
                                                              for t in rates.tasksets))
            g = plan(given).stage_s()["tasks"]
            print(f"  {'':9} given the later walks ({', '.join(f'{n} {list(w)}' for n, w in later.items())}): "
                  f"predicted {g:.1f}  {'within 25%' if abs(m - g) <= 0.25 * m else 'OFF'}")
