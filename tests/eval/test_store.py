"""results.db: eval's own tables beside Optuna's, round trips, and no silent overwrite of a reference."""

from __future__ import annotations

import optuna
import pytest
import sqlalchemy as sa

from eval.decision import FidelityPolicy, GatePolicy, TaskPolicy, compare_taskset, decide, decide_fidelity
from eval.errors import EvalConfigError, MissingReference
from eval.records import (
    EpisodeOutcome,
    FidelityMetrics,
    KindMetrics,
    ProbeReference,
    ProbeScores,
    Reference,
    SuiteResult,
    TasksetResult,
)
from eval.store import EvalStore
from results.schema import metadata


def _reference(manifest="m1", digest="d" * 64) -> Reference:
    probe = ProbeReference(
        probe_id="math-0",
        kind="math",
        prompt_ids=(1, 2, 3),
        continuation_ids=(4, 5),
        scores=ProbeScores(
            probe_id="math-0", token_logprobs=(-0.1, -0.2), top=({4: -0.1, 9: -2.5}, {5: -0.2, 1: -1.9})
        ),
    )
    return Reference(model_manifest_hash=manifest, probe_set_digest=digest, top_k=2, probes=(probe,))


def _metrics(kl=0.0) -> FidelityMetrics:
    return FidelityMetrics(
        n_probes=1,
        n_positions=2,
        kl_mean=kl,
        kl_p99=kl,
        kl_max=kl,
        top1_agreement=1.0,
        greedy_match_fraction=1.0,
        greedy_full_matches=1,
        ref_token_logprob_delta_mean=0.0,
        by_kind=(
            KindMetrics(kind="math", n_positions=2, kl_mean=kl, kl_p99=kl, kl_max=kl, top1_agreement=1.0),
        ),
    )


@pytest.fixture
def db_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'results.db'}"


def test_eval_tables_live_beside_optunas_in_the_same_sqlite_file(db_url):
    study = optuna.create_study(study_name="s", storage=db_url, directions=["maximize"])
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    store = EvalStore(db_url)
    tables = set(sa.inspect(store.engine).get_table_names())
    assert {"studies", "trials"} <= tables  # Optuna's, untouched
    ours = {t for t in tables if t.startswith("eval_")}
    assert ours == {name for name in metadata.tables if name.startswith("eval_")}
    assert len(optuna.load_study(study_name="s", storage=db_url).trials) == 1
    store.close()


def test_a_reference_round_trips_exactly_and_is_never_overwritten_silently(db_url):
    store = EvalStore(db_url)
    ref_id = store.save_reference(
        _reference(), probe_config={"top_k": 2}, server={"url": "x"}, label="base", self_agreement=1.0
    )
    loaded = store.load_reference("m1", "d" * 64)
    assert loaded.reference_id == ref_id
    assert loaded.probes == _reference().probes
    with pytest.raises(EvalConfigError, match="replace"):
        store.save_reference(_reference(), probe_config={}, server={}, label="again", self_agreement=1.0)
    store.save_measurement(
        reference_id=ref_id,
        role="noise_floor",
        label="b2",
        metrics=_metrics(),
        per_probe=[],
        elapsed_s=1.0,
        server={},
    )
    new_id = store.save_reference(
        _reference(), probe_config={}, server={}, label="again", self_agreement=1.0, replace=True
    )
    assert store.noise_floors(new_id) == []  # measurements against the old reference went with it
    with pytest.raises(MissingReference, match="capture one on the baseline"):
        store.load_reference("m2", "d" * 64)


def test_measurements_and_suite_results_round_trip(db_url):
    store = EvalStore(db_url)
    ref_id = store.save_reference(_reference(), probe_config={}, server={}, label="base", self_agreement=1.0)
    mid = store.save_measurement(
        reference_id=ref_id,
        role="candidate",
        label="kv4",
        metrics=_metrics(0.25),
        per_probe=[{"probe_id": "math-0"}],
        elapsed_s=2.0,
        server={"url": "u"},
    )
    assert store.load_measurement(mid) == _metrics(0.25)
    with pytest.raises(EvalConfigError):
        store.save_measurement(
            reference_id=ref_id,
            role="winner",
            label="x",
            metrics=_metrics(),
            per_probe=[],
            elapsed_s=0.0,
            server={},
        )
    episodes = (
        EpisodeOutcome(
            task_key="k1", task_idx=0, ok=True, reward=1.0, truncated=False, output_tokens=5, model_time_s=0.5
        ),
        EpisodeOutcome(
            task_key="k2",
            task_idx=1,
            ok=False,
            reward=None,
            truncated=False,
            output_tokens=0,
            model_time_s=0.0,
            error="ProviderError: down",
        ),
    )
    taskset = TasksetResult(
        name="rg-logic",
        taskset_id="eval-logic",
        max_tokens=64,
        tasks=2,
        rollouts=2,
        failures=1,
        truncations=0,
        reward_mean=1.0,
        output_tokens=5,
        model_time_s=0.5,
        output_tok_per_s=10.0,
        run_dir="/r",
        episodes=episodes,
    )
    run_id = store.save_suite_result(
        SuiteResult(suite="offline", run_dir="/r", tasksets=(taskset,)),
        label="base",
        base_url="http://x",
        plan={"suite": "offline"},
        provenance={"python": "3.11"},
    )
    loaded = store.load_suite_result(run_id)
    assert loaded.tasksets == (taskset,) and loaded.suite_run_id == run_id


def test_a_decision_is_stored_with_its_policy_and_evidence(db_url):
    store = EvalStore(db_url)
    policy = GatePolicy(fidelity=FidelityPolicy(noise_factor=4.0), tasks=TaskPolicy(min_drop=0.1))
    fidelity = decide_fidelity(_metrics(1.0), _metrics(0.0), policy.fidelity)
    result = TasksetResult(
        name="t",
        taskset_id="t",
        max_tokens=8,
        tasks=1,
        rollouts=1,
        failures=0,
        truncations=0,
        reward_mean=1.0,
        output_tokens=1,
        model_time_s=1.0,
        output_tok_per_s=1.0,
        run_dir="/r",
        episodes=(
            EpisodeOutcome(
                task_key="k",
                task_idx=0,
                ok=True,
                reward=1.0,
                truncated=False,
                output_tokens=1,
                model_time_s=1.0,
            ),
        ),
    )
    decision = decide(fidelity=fidelity, tasksets=[compare_taskset(result, result, policy.tasks)])
    decision_id = store.save_decision(
        decision, model_manifest_hash="m1", candidate_label="kv2", baseline_label="base", policy=policy
    )
    [row] = store.decision_rows("m1")
    assert row["id"] == decision_id and row["passed"] is False and row["failed_stage"] == "fidelity"
    assert row["policy"]["fidelity"]["noise_factor"] == 4.0 and row["policy"]["tasks"]["min_drop"] == 0.1
    assert row["evidence"]["fidelity"]["checks"][0]["name"] == "kl_mean"
    assert row["evidence"]["tasksets"][0]["lost"] == 0
    assert row["reasons"] and "kl_mean" in row["reasons"][0]


def test_a_results_db_from_before_the_decisive_top1_column_gains_it_and_keeps_its_rows(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store = EvalStore(url)
    ref_id = store.save_reference(_reference(), probe_config={}, server={}, label="b", self_agreement=1.0)
    old_id = store.save_measurement(reference_id=ref_id, role="candidate", label="old", metrics=_metrics(0.1),
                                    per_probe=[], elapsed_s=1.0, server={})
    store.close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # what an older version's table looked like, before the results store
        conn.execute(sa.text("ALTER TABLE eval_fidelity_measurements DROP COLUMN top1_decisive_agreement"))
        conn.execute(sa.text("DROP TABLE results_alembic_version"))
    engine.dispose()
    reopened = EvalStore(url)
    assert reopened.load_measurement(old_id).top1_decisive_agreement is None
    assert reopened.load_measurement(old_id).kl_mean == 0.1
    import dataclasses

    new_id = reopened.save_measurement(reference_id=ref_id, role="candidate", label="new",
                                       metrics=dataclasses.replace(_metrics(0.2), top1_decisive_agreement=0.99),
                                       per_probe=[], elapsed_s=1.0, server={})
    assert reopened.load_measurement(new_id).top1_decisive_agreement == 0.99
