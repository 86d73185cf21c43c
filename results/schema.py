"""Every table the project writes beside Optuna's, in one MetaData, and the two column types that
serialize what goes into them.

- `ar_*`: the loop's measurements, provenance, finalists and claims (autoresearch.ground.db reads and writes them).
- `eval_*`: fidelity references and measurements, suite runs, taskset results, gate decisions
  (eval.store reads and writes them).

Prefixed names never collide with Optuna's schema. Timestamps are `UTCDateTime` (tz-aware UTC on
both SQLite and PostgreSQL); structured columns are `Json` (plain JSON, converted by `results.jsonable.to_jsonable`
on the way in: the one serializer of records). A change here needs a migration in
results/migrations/versions/ (see results/migrate.py).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa

from results.jsonable import to_jsonable

__all__ = ["Json", "UTCDateTime", "metadata", "now"]


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class UTCDateTime(sa.TypeDecorator):
    """A tz-aware UTC datetime in and out. SQLite keeps no offset (stored as UTC wall time, read back
    with UTC attached); PostgreSQL stores `timestamptz`. Naive values are refused on the way in."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the results store keeps UTC, tz-aware")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


class Json(sa.TypeDecorator):
    """sqlalchemy JSON that stores `to_jsonable(value)`."""

    impl = sa.JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect) -> Any:
        return to_jsonable(value)


metadata = sa.MetaData()


def _created_at() -> sa.Column:
    return sa.Column("created_at", UTCDateTime, nullable=False, default=now)


# --- the loop (autoresearch) -------------------------------------------------------------------
measurements = sa.Table(
    "ar_measurements", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("study", sa.String(200), nullable=False, index=True),
    sa.Column("trial", sa.Integer, nullable=True, index=True),  # Optuna trial number; NULL for finalist launches
    sa.Column("kind", sa.String(40), nullable=False),  # bench | memory | fidelity | suite | gate | launch
    sa.Column("config_digest", sa.String(64), nullable=False, index=True),
    sa.Column("launch", sa.Integer, nullable=False, default=0),  # which fresh launch of this config
    sa.Column("payload", Json, nullable=False),
    _created_at(),
)

provenance = sa.Table(
    "ar_provenance", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("study", sa.String(200), nullable=False, index=True),
    sa.Column("trial", sa.Integer, nullable=True),
    sa.Column("config_digest", sa.String(64), nullable=False),
    sa.Column("model_manifest_hash", sa.String(64), nullable=False),
    sa.Column("engine", sa.String(40), nullable=False),
    sa.Column("engine_version", sa.String(80)),
    sa.Column("torch_version", sa.String(80)),
    sa.Column("gpu_name", sa.String(120)),
    sa.Column("gpu_driver", sa.String(80)),
    sa.Column("details", Json, nullable=False),  # clocks, power limit, host, git commit, server_info
    _created_at(),
)

finalists = sa.Table(
    "ar_finalists", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("study", sa.String(200), nullable=False, index=True),
    sa.Column("round", sa.Integer, nullable=False),  # one confirmation round per loop end
    sa.Column("trial", sa.Integer, nullable=False),  # the trial whose config was re-measured
    sa.Column("config_digest", sa.String(64), nullable=False),
    sa.Column("decode_tok_per_s", sa.Float),
    sa.Column("prefill_tok_per_s", sa.Float),
    sa.Column("verdict", Json, nullable=False),  # comparisons with the baseline, champion flag, worker
    _created_at(),
)

claims = sa.Table(
    "ar_claims", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("study", sa.String(200), nullable=False),
    sa.Column("what", sa.String(80), nullable=False),  # e.g. "confirm finalists"
    sa.Column("key", sa.String(200), nullable=False),  # what exactly, e.g. "after 12 finished trials"
    sa.Column("worker", sa.String(200), nullable=False),  # host:pid
    _created_at(),
    # the holder's last sign of life (NULL: written before revision 0002; created_at stands in): a
    # claim whose holder stopped beating for longer than the grace period is taken over, on any host
    sa.Column("heartbeat_at", UTCDateTime, nullable=True),
    sa.Column("finished_at", UTCDateTime, nullable=True),  # the work is done: never taken over
    sa.UniqueConstraint("study", "what", "key", name="uq_ar_claims_once"),
)

# --- the gate (eval) ---------------------------------------------------------------------------
fidelity_references = sa.Table(
    "eval_fidelity_references", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("model_manifest_hash", sa.String(128), nullable=False),
    sa.Column("probe_set_digest", sa.String(64), nullable=False),
    _created_at(),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("top_k", sa.Integer, nullable=False),
    sa.Column("n_probes", sa.Integer, nullable=False),
    sa.Column("n_positions", sa.Integer, nullable=False),
    # fraction of positions where the baseline's teacher-forced argmax is its own greedy token:
    # below 1 the engine is not deterministic between generation and scoring (worth knowing)
    sa.Column("self_agreement", sa.Float, nullable=False),
    sa.Column("probe_config", Json, nullable=False),
    sa.Column("server", Json, nullable=False),
    sa.Column("payload", sa.LargeBinary, nullable=False),  # zlib(JSON) of every probe's ids and top-k
    sa.UniqueConstraint("model_manifest_hash", "probe_set_digest", name="uq_eval_reference_key"),
)

fidelity_measurements = sa.Table(
    "eval_fidelity_measurements", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("reference_id", sa.ForeignKey("eval_fidelity_references.id"), nullable=False),
    sa.Column("role", sa.String(20), nullable=False),  # "noise_floor" or "candidate"
    sa.Column("label", sa.String(200), nullable=False),
    _created_at(),
    sa.Column("n_probes", sa.Integer, nullable=False),
    sa.Column("n_positions", sa.Integer, nullable=False),
    sa.Column("kl_mean", sa.Float, nullable=False),
    sa.Column("kl_p99", sa.Float, nullable=False),
    sa.Column("kl_max", sa.Float, nullable=False),
    sa.Column("top1_agreement", sa.Float, nullable=False),
    sa.Column("top1_decisive_agreement", sa.Float, nullable=True),  # NULL in rows from before it existed
    sa.Column("greedy_match_fraction", sa.Float, nullable=False),
    sa.Column("greedy_full_matches", sa.Integer, nullable=False),
    sa.Column("ref_token_logprob_delta_mean", sa.Float, nullable=False),
    sa.Column("by_kind", Json, nullable=False),
    sa.Column("per_probe", Json, nullable=False),
    sa.Column("elapsed_s", sa.Float, nullable=False),
    sa.Column("server", Json, nullable=False),
)

suite_runs = sa.Table(
    "eval_suite_runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("suite", sa.String(50), nullable=False),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("model_manifest_hash", sa.String(128), nullable=True),
    _created_at(),
    sa.Column("base_url", sa.String(500), nullable=False),
    sa.Column("run_dir", sa.String(1000), nullable=False),
    sa.Column("plan", Json, nullable=False),
    sa.Column("provenance", Json, nullable=False),
)

taskset_results = sa.Table(
    "eval_taskset_results", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("suite_run_id", sa.ForeignKey("eval_suite_runs.id"), nullable=False),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("taskset_id", sa.String(200), nullable=False),
    sa.Column("max_tokens", sa.Integer, nullable=False),
    sa.Column("tasks", sa.Integer, nullable=False),
    sa.Column("rollouts", sa.Integer, nullable=False),
    sa.Column("failures", sa.Integer, nullable=False),
    sa.Column("truncations", sa.Integer, nullable=False),
    sa.Column("reward_mean", sa.Float, nullable=True),
    sa.Column("output_tokens", sa.Integer, nullable=False),
    sa.Column("model_time_s", sa.Float, nullable=False),
    sa.Column("output_tok_per_s", sa.Float, nullable=True),
    sa.Column("run_dir", sa.String(1000), nullable=False),
    sa.Column("episodes", Json, nullable=False),
    sa.UniqueConstraint("suite_run_id", "name", name="uq_eval_taskset_per_run"),
)

decisions = sa.Table(
    "eval_decisions", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    _created_at(),
    sa.Column("model_manifest_hash", sa.String(128), nullable=False),
    sa.Column("candidate_label", sa.String(200), nullable=False),
    sa.Column("baseline_label", sa.String(200), nullable=False),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("failed_stage", sa.String(20), nullable=True),
    sa.Column("reasons", Json, nullable=False),
    sa.Column("policy", Json, nullable=False),
    sa.Column("evidence", Json, nullable=False),
    sa.Column("floor_measurement_id", sa.ForeignKey("eval_fidelity_measurements.id"), nullable=True),
    sa.Column("candidate_measurement_id", sa.ForeignKey("eval_fidelity_measurements.id"), nullable=True),
    sa.Column("baseline_suite_run_id", sa.ForeignKey("eval_suite_runs.id"), nullable=True),
    sa.Column("candidate_suite_run_id", sa.ForeignKey("eval_suite_runs.id"), nullable=True),
)
