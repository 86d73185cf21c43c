"""A trial runner on real parts (Optuna in memory, SQLite results, the memory model of a headers-only
exllamav3 checkpoint), for testing the loop's decisions stage by stage in milliseconds. The launcher and
bench are the test doubles of tests.autoresearch.fakes.

Usage:
    env = StageEnv.make(tmp_path, small_model, vram_bytes=24 * GIB)
    env.baseline_done(floor={"decode_tok_per_s_client@1024/math": 0.1})   # the evidence candidates need
    trial = env.run(changes={"max_chunk_size": 4096})                         # one trial, to its end
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

import optuna

from autoresearch.ground.db import ResultsDB
from autoresearch.ground.model_source import ResolvedModel
from autoresearch.ground.plan import RunPlan, default_bench_plan, default_probe_config
from autoresearch.ground.study import CONSTRAINTS, baseline_trial_params, constraints_of, params_with
from autoresearch.measures.baseline import BaselineEvidence, save_baseline
from autoresearch.night.progress import Progress
from autoresearch.trial.runner import TrialRunner
from bench import NoiseFloor
from eval import EvalStore
from eval.fidelity import load_fidelity_measurement
from eval.records import FidelityMetrics, ProbeReference, ProbeScores, Reference
from results import to_jsonable
from search_space import (
    SearchSpace,
    SpaceContext,
    build_space,
    config_from_params,
    read_model_info,
    sample_config,
)
from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

from .fakes import bench_result

GIB = 1024**3
SMALL = {**QWEN38_27B, "num_hidden_layers": 4, "vocab_size": 4096, "hidden_size": 1024, "intermediate_size": 2048,
         "num_attention_heads": 8, "linear_num_key_heads": 8, "linear_num_value_heads": 16}


def write_small_model(directory: Path) -> ResolvedModel:
    """A headers-only exllamav3 checkpoint (no weights on disk), named rather than hashed."""
    path = write_exl3_checkpoint(directory, SMALL, sparse=True)
    return ResolvedModel(path=path, name="small-sparse", manifest_hash="5" * 64,
                         manifest_path=directory / "manifest.json", source=str(path))


def _floor_metrics() -> FidelityMetrics:
    return FidelityMetrics(n_probes=1, n_positions=1, kl_mean=1e-5, kl_p99=1e-4, kl_max=1e-4, top1_agreement=1.0,
                           greedy_match_fraction=1.0, greedy_full_matches=1, ref_token_logprob_delta_mean=0.0)


def stored_reference(store: EvalStore, plan: RunPlan) -> Reference:
    """A one-probe fidelity reference, stored as a capture stores it (what a fake server cannot answer)."""
    scores = ProbeScores(probe_id="p0", token_logprobs=(-0.1,), top=({3: -0.1},))
    probes = hashlib.sha256(plan.study_name.encode()).hexdigest()  # a shared database holds many studies
    reference = Reference(model_manifest_hash=plan.model.manifest_hash, probe_set_digest=probes, top_k=20,
                          probes=(ProbeReference(probe_id="p0", kind="math", prompt_ids=(1, 2),
                                                 continuation_ids=(3,), scores=scores),))
    reference_id = store.save_reference(reference, probe_config={}, server={}, label="baseline", self_agreement=1.0)
    return dataclasses.replace(reference, reference_id=reference_id)


def stored_measurement(store: EvalStore, reference: Reference, *, role: str, label: str):
    """A fidelity measurement at the noise floor's level against `reference`, stored as measure_fidelity stores one."""
    measurement_id = store.save_measurement(reference_id=reference.reference_id, role=role, label=label,
                                            metrics=_floor_metrics(), per_probe=[{"probe_id": "p0"}], elapsed_s=1.5,
                                            server={})
    return load_fidelity_measurement(store, measurement_id)


@dataclass
class StageEnv:
    plan: RunPlan
    space: SearchSpace
    study: optuna.Study
    db: ResultsDB
    store: EvalStore
    runner: TrialRunner

    @classmethod
    def make(cls, tmp_path: Path, model: ResolvedModel, *, study: optuna.Study | None = None, **plan_kw) -> StageEnv:
        kw = {"suite": "none", "trials": 20, "vram_bytes": 24 * GIB, "study_name": "stages",
              "storage_url": f"sqlite:///{tmp_path / 'results.db'}", **plan_kw}
        plan = RunPlan(model=model, engine="exllamav3", workdir=tmp_path / "runs",
                       results_md=tmp_path / "RESULTS.md", bench_plan=default_bench_plan("exllamav3"),
                       probe_config=default_probe_config("exllamav3"), port=0, **kw)
        space = build_space(SpaceContext(engine="exllamav3", model=read_model_info(model.path)), pinned=plan.pinned)
        db, store = ResultsDB(plan.storage_url), EvalStore(plan.storage_url)
        runner = TrialRunner(plan, space, db, store, Progress(study=plan.study_name, trials=plan.trials, hours=None,
                                                             live=False))
        # in the run's own SQLite, as the loop keeps it (a verdict written back needs an RDB storage)
        study = study or optuna.create_study(directions=["maximize", "maximize"], storage=plan.storage_url,
                                             study_name=plan.study_name)
        return cls(plan=plan, space=space, study=study, db=db, store=store, runner=runner)

    def params(self, changes: dict | None = None) -> dict:
        return params_with(self.space, changes or {}, flag="test") if changes else baseline_trial_params(self.plan,
                                                                                                      self.space)

    def digest(self, changes: dict | None = None) -> str:
        return config_from_params(self.space, self.params(changes)).digest

    def add_trial(self, changes: dict | None, values: tuple[float, float] | None, *, role: str = "candidate",
                  state: optuna.trial.TrialState = optuna.trial.TrialState.COMPLETE, feasible: bool = True,
                  **attrs) -> int:
        """A trial of another worker (optuna.trial.create_trial), feasible unless told otherwise."""
        params = self.params(changes)
        trial = optuna.trial.create_trial(
            state=state, values=list(values) if values is not None else None, params=params,
            distributions=self._distributions(params),
            user_attrs={"role": role, "config_digest": self.digest(changes), "outcome": "passed",
                        "config": config_from_params(self.space, params).to_dict(), **attrs},
            constraints=dict.fromkeys(CONSTRAINTS, -1.0 if feasible else 1.0))
        self.study.add_trial(trial)
        return self.study.get_trials(deepcopy=False)[-1].number

    def _distributions(self, params: dict) -> dict:
        """The distributions sample_config suggests these parameters from (in a throwaway study)."""
        scratch = optuna.create_study(directions=["maximize", "maximize"])
        scratch.enqueue_trial(params)
        trial = scratch.ask()
        sample_config(trial, self.space)
        return {k: v for k, v in trial.distributions.items() if k in params}

    def baseline_done(self, *, values: tuple[float, float] = (100.0, 1000.0),
                      floor: dict[str, float] | None = None, energy_floor: dict[str, float] | None = None,
                      **attrs) -> int:
        """The baseline's trial and evidence as a finished baseline leaves them (a one-probe reference)."""
        number = self.add_trial(None, values, role="baseline", outcome="baseline", **attrs)
        reference = stored_reference(self.store, self.plan)
        fidelity_floor = stored_measurement(self.store, reference, role="noise_floor", label="baseline#2")
        bench = bench_result(self.plan.bench_plan, *values)
        self.db.add_measurement(study=self.plan.study_name, trial=number, kind="bench", config_digest=self.digest(),
                                payload=to_jsonable(bench.to_dict()))
        save_baseline(self.study, BaselineEvidence(
            label="stages:baseline", reference=reference, fidelity_floor=fidelity_floor, suite=None, bench=bench,
            speed_floor=NoiseFloor(rel_diff=tuple(sorted((floor or {}).items()))) if floor else None,
            trial_number=number,
            energy_floor=NoiseFloor(rel_diff=tuple(sorted(energy_floor.items()))) if energy_floor else None))
        return number

    def run(self, changes: dict | None = None, *, role: str = "candidate") -> optuna.trial.FrozenTrial:
        """One trial of this configuration through the runner, as study.optimize runs it."""
        self.study.enqueue_trial(self.params(changes), user_attrs={"role": role})
        self.study.optimize(self.runner, n_trials=1, catch=())
        return self.study.get_trials(deepcopy=False)[-1]


def constraints(trial: optuna.trial.FrozenTrial) -> dict[str, float]:
    return dict(zip(CONSTRAINTS, constraints_of(trial), strict=True))
