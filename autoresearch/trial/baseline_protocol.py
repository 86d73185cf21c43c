"""The baseline's protocol: what every candidate is judged against, measured in two launches of the
baseline's configuration, and the baseline trial that runs it (its evidence is stored and read by
autoresearch.measures.baseline).

`BaselineProtocol` is the baseline's half of autoresearch.trial.runner.TrialRunner, which inherits it: the
stages both kinds of trial share (feasibility, launch, bench, the stored rows) are the runner's methods.
`python -m autoresearch sweep` runs the same protocol without its speed and task stages.
"""

from __future__ import annotations

import optuna

from autoresearch.ground.errors import BaselineFailed
from autoresearch.ground.outcome import TrialOutcome
from autoresearch.ground.study import OK, baseline_trial_params
from autoresearch.measures.baseline import (
    BaselineEvidence,
    measured_or_stop,
    save_baseline,
    stored_reference,
    wait_for_baseline,
)
from autoresearch.measures.energy import record_energy
from autoresearch.measures.objectives import objectives_from_bench
from autoresearch.measures.pool import save_pool
from autoresearch.measures.ranking import RATES, REQUEST_SPEEDUP, objective_rates, save_request_mix
from autoresearch.measures.request_time import RequestMix
from autoresearch.trial.record import TrialRecord
from bench import BenchResult, noise_floor
from eval import capture_reference, measure_fidelity
from eval.errors import EvalError
from serving.config import ServingConfig
from serving.errors import LaunchError

__all__ = ["BaselineProtocol"]


class BaselineProtocol:
    """The baseline trial and its evidence (a mixin of TrialRunner: `self` is the runner)."""

    def _baseline(self, trial: optuna.Trial, config: ServingConfig, record: TrialRecord) -> tuple[float, float]:
        """The baseline protocol; a baseline that fails in any stage ends its trial with the reason and
        stops the study (BaselineFailed): nothing can be judged against it."""
        first = self._earlier_baseline(trial)
        if first is not None:  # two workers starting together both enqueue one
            self._duplicate(trial, record, first, f"trial {first} is already the baseline")
        label = f"{self.plan.study_name}:baseline"
        self._stage(record, "feasibility")
        if not self._fits(trial, config, record):
            record.end(TrialOutcome.INFEASIBLE)
            raise BaselineFailed("the baseline cannot run: " + "; ".join(record.reasons), constraint="fits",
                                 outcome=TrialOutcome.INFEASIBLE)
        record.constraints["fits"] = OK
        self._stage(record, "launch")
        try:
            evidence = self._baseline_evidence(trial, config, record, label)
        except BaselineFailed as exc:
            record.fail(exc.constraint, str(exc))
            record.end(TrialOutcome(exc.outcome))
            raise
        except LaunchError as exc:
            self._launch_failed(trial, config, record, exc)
            raise BaselineFailed(f"the baseline could not be launched: {exc.reason}: {exc}", constraint="launch_ok",
                                 outcome=TrialOutcome(exc.reason)) from exc
        except EvalError as exc:  # the reference, the noise floor or the suite could not be run on it
            stage = trial.user_attrs.get("stage", "?")
            constraint = "tasks" if stage == "tasks" else "fidelity"
            record.fail(constraint, f"the baseline's {stage} stage failed: {type(exc).__name__}: {exc}")
            record.end(TrialOutcome.EVAL_ERROR)
            raise BaselineFailed(record.reasons[-1], constraint=constraint, outcome=TrialOutcome.EVAL_ERROR) from exc
        bench, floor = evidence.bench, evidence.fidelity_floor
        trial.set_user_attr(RATES, objective_rates(bench))
        trial.set_user_attr(REQUEST_SPEEDUP, 1.0)
        record_energy(trial, bench, RequestMix.from_bench(bench))
        save_request_mix(trial.study, RequestMix.from_bench(bench))  # before the evidence: candidates wait on that
        save_pool(trial.study, self.db, self.plan.study_name, baseline=trial.number)  # the search's reference
        save_baseline(trial.study, evidence)
        self._measure(trial, config, "fidelity", {"measurement_id": floor.measurement_id, "metrics": floor.metrics,
                                                  "role": "noise_floor"})
        record.constraints.update(fidelity=OK, tasks=OK)
        return record.end(TrialOutcome.BASELINE, objectives_from_bench(bench))

    def _baseline_evidence(self, trial: optuna.Trial, config: ServingConfig, record: TrialRecord,
                           label: str) -> BaselineEvidence:
        """What every candidate is judged against, measured in two launches of the baseline's configuration.

        - launch 0: speed first (a baseline that cannot be measured stops the study: BaselineUnmeasured, as
          it does where its second launch cannot be measured), then the fidelity reference (the stored one
          for this model and probe set, else captured here), then the baseline's first answers on the task
          suite (autoresearch.checks.task_tier: the fewest tasks any walk needs; the rest is answered lazily, as far
          as candidates' walks need it; first answers with failed episodes are answered once more, and
          answers that still cannot be the reference stop the study);
        - launch 1, a fresh process of the same configuration: speed again, then the fidelity noise floor.
          Bench comes first in both launches, as in every candidate's: a server warmed by the fidelity
          probes decoded 27% faster at 1K on the real 0.5B, and that order effect became "noise".

        `python -m autoresearch sweep` runs the same protocol without its speed and task stages.
        """
        reference = stored_reference(self.store, self.plan.model.manifest_hash, self.probe_set)
        suite = None
        with self._server(trial, config, launch=0) as server:
            self._stage(record, "bench")  # first: a baseline that cannot be measured stops the study at once
            bench = self._baseline_bench(trial, config, record, server, launch=0)
            self._stage(record, "reference")
            if reference is None:
                reference = capture_reference(server.url, self.probe_set, store=self.store, label=label,
                                              model_manifest_hash=self.plan.model.manifest_hash, replace=False)
            if self.tier is not None:
                self._stage(record, "tasks")
                suite = self.tier.baseline_first(server, label=label, trial=trial.number, config_digest=config.digest)
        self._stage(record, "relaunch")  # timed apart from the floor: the plan's launch and fidelity rates
        with self._server(trial, config, launch=1) as server:
            self._stage(record, "bench again")
            second = self._baseline_bench(trial, config, record, server, launch=1)  # bench first, as in launch 0
            self._stage(record, "noise floor")
            floor = measure_fidelity(server.url, reference, store=self.store, role="noise_floor", label=label + "#2")
        return BaselineEvidence(label=label, reference=reference, fidelity_floor=floor, suite=suite, bench=bench,
                                speed_floor=noise_floor(bench.samples(), second.samples()), trial_number=trial.number,
                                energy_floor=noise_floor(bench.energy_samples(), second.energy_samples()))

    def _baseline_bench(self, trial: optuna.Trial, config: ServingConfig, record: TrialRecord, server,
                        launch: int) -> BenchResult:
        """The baseline's speed in this launch, or BaselineUnmeasured (measured_or_stop)."""
        record.constraints["launch_ok"] = OK

        def bench_and_objectives() -> tuple[float, float, BenchResult]:
            bench = self._bench(trial, config, server, launch=launch)
            return (*objectives_from_bench(bench), bench)

        decode, prefill, bench = measured_or_stop(bench_and_objectives, launch=launch,
                                                  server_failure=lambda: self._server_failure(server))
        record.constraints["measured"] = OK
        if launch == 0:
            trial.set_user_attr("decode_tok_per_s", decode)
            trial.set_user_attr("prefill_tok_per_s", prefill)
        return bench

    def _wait_for_baseline(self, trial: optuna.Trial) -> BaselineEvidence:
        return wait_for_baseline(trial, store=self.store, db=self.db, study_name=self.plan.study_name,
                                 baseline_params=lambda: baseline_trial_params(self.plan, self.space),
                                 grace_s=self.plan.grace_s)
