"""results.db tables of the eval package: fidelity references and measurements, suite runs, decisions.

The tables live in the loop's own database (SQLite or PostgreSQL, the URL is passed in) under their
own MetaData and the `eval_` prefix, so they never touch Optuna's schema. Every row carries what it
was measured against (model manifest hash, probe-set digest, server info) for provenance.

Usage:
    store = EvalStore("sqlite:///results.db")
    ref_id = store.save_reference(reference, probe_config=..., server=..., label="baseline")
    reference = store.load_reference(manifest_hash, probe_digest)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from eval.decision import GateDecision
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

__all__ = ["EvalStore", "metadata", "to_jsonable"]

metadata = sa.MetaData()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


fidelity_references = sa.Table(
    "eval_fidelity_references",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("model_manifest_hash", sa.String(128), nullable=False),
    sa.Column("probe_set_digest", sa.String(64), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, default=_now),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("top_k", sa.Integer, nullable=False),
    sa.Column("n_probes", sa.Integer, nullable=False),
    sa.Column("n_positions", sa.Integer, nullable=False),
    # fraction of positions where the baseline's teacher-forced argmax is its own greedy token:
    # below 1 the engine is not deterministic between generation and scoring (worth knowing)
    sa.Column("self_agreement", sa.Float, nullable=False),
    sa.Column("probe_config", sa.JSON, nullable=False),
    sa.Column("server", sa.JSON, nullable=False),
    sa.Column("payload", sa.LargeBinary, nullable=False),  # zlib(JSON) of every probe's ids and top-k
    sa.UniqueConstraint("model_manifest_hash", "probe_set_digest", name="uq_eval_reference_key"),
)

fidelity_measurements = sa.Table(
    "eval_fidelity_measurements",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("reference_id", sa.ForeignKey("eval_fidelity_references.id"), nullable=False),
    sa.Column("role", sa.String(20), nullable=False),  # "noise_floor" or "candidate"
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, default=_now),
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
    sa.Column("by_kind", sa.JSON, nullable=False),
    sa.Column("per_probe", sa.JSON, nullable=False),
    sa.Column("elapsed_s", sa.Float, nullable=False),
    sa.Column("server", sa.JSON, nullable=False),
)

suite_runs = sa.Table(
    "eval_suite_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("suite", sa.String(50), nullable=False),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("model_manifest_hash", sa.String(128), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, default=_now),
    sa.Column("base_url", sa.String(500), nullable=False),
    sa.Column("run_dir", sa.String(1000), nullable=False),
    sa.Column("plan", sa.JSON, nullable=False),
    sa.Column("provenance", sa.JSON, nullable=False),
)

taskset_results = sa.Table(
    "eval_taskset_results",
    metadata,
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
    sa.Column("episodes", sa.JSON, nullable=False),
    sa.UniqueConstraint("suite_run_id", "name", name="uq_eval_taskset_per_run"),
)

decisions = sa.Table(
    "eval_decisions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, default=_now),
    sa.Column("model_manifest_hash", sa.String(128), nullable=False),
    sa.Column("candidate_label", sa.String(200), nullable=False),
    sa.Column("baseline_label", sa.String(200), nullable=False),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("failed_stage", sa.String(20), nullable=True),
    sa.Column("reasons", sa.JSON, nullable=False),
    sa.Column("policy", sa.JSON, nullable=False),
    sa.Column("evidence", sa.JSON, nullable=False),
    sa.Column("floor_measurement_id", sa.ForeignKey("eval_fidelity_measurements.id"), nullable=True),
    sa.Column("candidate_measurement_id", sa.ForeignKey("eval_fidelity_measurements.id"), nullable=True),
    sa.Column("baseline_suite_run_id", sa.ForeignKey("eval_suite_runs.id"), nullable=True),
    sa.Column("candidate_suite_run_id", sa.ForeignKey("eval_suite_runs.id"), nullable=True),
)


def to_jsonable(value: Any) -> Any:
    """Dataclasses, tuples and mappings to plain JSON types (for evidence columns)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):  # NaN and infinities are not JSON
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def _encode_probes(probes: tuple[ProbeReference, ...]) -> bytes:
    rows = [
        {
            "probe_id": p.probe_id,
            "kind": p.kind,
            "prompt_ids": list(p.prompt_ids),
            "continuation_ids": list(p.continuation_ids),
            "token_logprobs": list(p.scores.token_logprobs),
            "top": [[[t, lp] for t, lp in row.items()] for row in p.scores.top],
        }
        for p in probes
    ]
    return zlib.compress(json.dumps(rows, separators=(",", ":")).encode(), 6)


def _decode_probes(blob: bytes) -> tuple[ProbeReference, ...]:
    rows = json.loads(zlib.decompress(blob))
    return tuple(
        ProbeReference(
            probe_id=r["probe_id"],
            kind=r["kind"],
            prompt_ids=tuple(r["prompt_ids"]),
            continuation_ids=tuple(r["continuation_ids"]),
            scores=ProbeScores(
                probe_id=r["probe_id"],
                token_logprobs=tuple(r["token_logprobs"]),
                top=tuple({int(t): float(lp) for t, lp in row} for row in r["top"]),
            ),
        )
        for r in rows
    )


def _metrics_from_row(row: Any) -> FidelityMetrics:
    return FidelityMetrics(
        n_probes=row.n_probes,
        n_positions=row.n_positions,
        kl_mean=row.kl_mean,
        kl_p99=row.kl_p99,
        kl_max=row.kl_max,
        top1_agreement=row.top1_agreement,
        greedy_match_fraction=row.greedy_match_fraction,
        greedy_full_matches=row.greedy_full_matches,
        ref_token_logprob_delta_mean=row.ref_token_logprob_delta_mean,
        by_kind=tuple(KindMetrics(**k) for k in row.by_kind),
        top1_decisive_agreement=row.top1_decisive_agreement,
    )


# Columns added after the first release, as (table, column, SQL type): added in place, nullable, so a
# results.db from an older version keeps every row it holds.
_ADDED_COLUMNS = (("eval_fidelity_measurements", "top1_decisive_agreement", "FLOAT"),)


def _add_missing_columns(engine: Engine) -> None:
    def has(table: str, column: str) -> bool:
        return column in {c["name"] for c in sa.inspect(engine).get_columns(table)}

    for table, column, sql_type in _ADDED_COLUMNS:
        if has(table, column):
            continue
        try:
            with engine.begin() as conn:
                conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}"))
        except (sa.exc.ProgrammingError, sa.exc.OperationalError):
            if not has(table, column):  # not a concurrent worker adding it first: a real failure
                raise


def create_tables(meta: sa.MetaData, engine: Engine, attempts: int = 5) -> None:
    """create_all, tolerating a concurrent creator: workers sharing one PostgreSQL start together."""
    for attempt in range(attempts):
        try:
            meta.create_all(engine)
            return
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 + attempt)  # the other worker's CREATE commits; checkfirst then sees it


class EvalStore:
    """The eval tables in one database. Creates them (only them) on first use."""

    def __init__(self, url_or_engine: str | Engine):
        if isinstance(url_or_engine, Engine):
            self.engine = url_or_engine
        else:
            connect_args = {"timeout": 60} if str(url_or_engine).startswith("sqlite") else {}
            self.engine = sa.create_engine(url_or_engine, connect_args=connect_args)
        create_tables(metadata, self.engine)
        _add_missing_columns(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # --- fidelity references -------------------------------------------------------------------
    def save_reference(
        self,
        reference: Reference,
        *,
        probe_config: Mapping[str, Any],
        server: Mapping[str, Any],
        label: str,
        self_agreement: float,
        replace: bool = False,
    ) -> int:
        """Store a reference under (manifest hash, probe digest).

        Raises:
            EvalConfigError: one exists already and `replace` is false (a silent overwrite would
                invalidate every measurement made against the old one).
        """
        key = (reference.model_manifest_hash, reference.probe_set_digest)
        with self.engine.begin() as conn:
            existing = conn.execute(
                sa.select(fidelity_references.c.id).where(
                    fidelity_references.c.model_manifest_hash == key[0],
                    fidelity_references.c.probe_set_digest == key[1],
                )
            ).scalar_one_or_none()
            if existing is not None:
                if not replace:
                    raise EvalConfigError(
                        f"a fidelity reference for manifest {key[0]} and probe set {key[1][:12]} exists "
                        f"(row {existing}); pass replace=True (--replace) to capture a new one"
                    )
                conn.execute(
                    sa.delete(fidelity_measurements).where(fidelity_measurements.c.reference_id == existing)
                )
                conn.execute(sa.delete(fidelity_references).where(fidelity_references.c.id == existing))
            result = conn.execute(
                sa.insert(fidelity_references).values(
                    model_manifest_hash=key[0],
                    probe_set_digest=key[1],
                    label=label,
                    top_k=reference.top_k,
                    n_probes=len(reference.probes),
                    n_positions=reference.n_positions,
                    self_agreement=self_agreement,
                    probe_config=to_jsonable(dict(probe_config)),
                    server=to_jsonable(dict(server)),
                    payload=_encode_probes(reference.probes),
                )
            )
            return int(result.inserted_primary_key[0])

    def load_reference(self, model_manifest_hash: str, probe_set_digest: str) -> Reference:
        """Raises: MissingReference when none is stored for this key."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(fidelity_references).where(
                    fidelity_references.c.model_manifest_hash == model_manifest_hash,
                    fidelity_references.c.probe_set_digest == probe_set_digest,
                )
            ).one_or_none()
        if row is None:
            raise MissingReference(
                f"no fidelity reference for model manifest {model_manifest_hash} and probe set "
                f"{probe_set_digest[:12]}; capture one on the baseline first (python -m eval fidelity capture)"
            )
        return Reference(
            model_manifest_hash=row.model_manifest_hash,
            probe_set_digest=row.probe_set_digest,
            top_k=row.top_k,
            probes=_decode_probes(row.payload),
            reference_id=row.id,
        )

    # --- fidelity measurements -----------------------------------------------------------------
    def save_measurement(
        self,
        *,
        reference_id: int,
        role: str,
        label: str,
        metrics: FidelityMetrics,
        per_probe: list[dict[str, Any]],
        elapsed_s: float,
        server: Mapping[str, Any],
    ) -> int:
        if role not in ("noise_floor", "candidate"):
            raise EvalConfigError(f"measurement role must be 'noise_floor' or 'candidate', got {role!r}")
        values = {f.name: getattr(metrics, f.name) for f in dataclasses.fields(metrics)}
        values["by_kind"] = to_jsonable(metrics.by_kind)
        with self.engine.begin() as conn:
            result = conn.execute(
                sa.insert(fidelity_measurements).values(
                    reference_id=reference_id,
                    role=role,
                    label=label,
                    per_probe=to_jsonable(per_probe),
                    elapsed_s=elapsed_s,
                    server=to_jsonable(dict(server)),
                    **values,
                )
            )
            return int(result.inserted_primary_key[0])

    def load_measurement(self, measurement_id: int) -> FidelityMetrics:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(fidelity_measurements).where(fidelity_measurements.c.id == measurement_id)
            ).one_or_none()
        if row is None:
            raise EvalConfigError(f"no fidelity measurement with id {measurement_id}")
        return _metrics_from_row(row)

    def noise_floors(self, reference_id: int) -> list[tuple[int, FidelityMetrics]]:
        """Every noise-floor measurement against a reference, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(fidelity_measurements)
                .where(
                    fidelity_measurements.c.reference_id == reference_id,
                    fidelity_measurements.c.role == "noise_floor",
                )
                .order_by(fidelity_measurements.c.id)
            ).all()
        return [(row.id, _metrics_from_row(row)) for row in rows]

    # --- suite runs ----------------------------------------------------------------------------
    def save_suite_result(
        self,
        result: SuiteResult,
        *,
        label: str,
        base_url: str,
        plan: Mapping[str, Any],
        provenance: Mapping[str, Any],
        model_manifest_hash: str | None = None,
    ) -> int:
        with self.engine.begin() as conn:
            run_id = int(
                conn.execute(
                    sa.insert(suite_runs).values(
                        suite=result.suite,
                        label=label,
                        model_manifest_hash=model_manifest_hash,
                        base_url=base_url,
                        run_dir=result.run_dir,
                        plan=to_jsonable(dict(plan)),
                        provenance=to_jsonable(dict(provenance)),
                    )
                ).inserted_primary_key[0]
            )
            for t in result.tasksets:
                values = {f.name: getattr(t, f.name) for f in dataclasses.fields(t) if f.name != "episodes"}
                conn.execute(
                    sa.insert(taskset_results).values(
                        suite_run_id=run_id, episodes=to_jsonable(t.episodes), **values
                    )
                )
        return run_id

    def load_suite_result(self, suite_run_id: int) -> SuiteResult:
        with self.engine.connect() as conn:
            run = conn.execute(sa.select(suite_runs).where(suite_runs.c.id == suite_run_id)).one_or_none()
            if run is None:
                raise EvalConfigError(f"no suite run with id {suite_run_id}")
            rows = conn.execute(
                sa.select(taskset_results)
                .where(taskset_results.c.suite_run_id == suite_run_id)
                .order_by(taskset_results.c.id)
            ).all()
        tasksets = []
        for row in rows:
            values = {f.name: getattr(row, f.name) for f in dataclasses.fields(TasksetResult)}
            values["episodes"] = tuple(EpisodeOutcome(**e) for e in row.episodes)
            tasksets.append(TasksetResult(**values))
        return SuiteResult(
            suite=run.suite, run_dir=run.run_dir, tasksets=tuple(tasksets), suite_run_id=run.id
        )

    # --- decisions -----------------------------------------------------------------------------
    def save_decision(
        self,
        decision: GateDecision,
        *,
        model_manifest_hash: str,
        candidate_label: str,
        baseline_label: str,
        policy: Any,
        floor_measurement_id: int | None = None,
        candidate_measurement_id: int | None = None,
        baseline_suite_run_id: int | None = None,
        candidate_suite_run_id: int | None = None,
        extra_evidence: Mapping[str, Any] | None = None,
    ) -> int:
        evidence = {
            "fidelity": to_jsonable(decision.fidelity),
            "tasksets": to_jsonable(decision.tasksets),
            **to_jsonable(dict(extra_evidence or {})),
        }
        with self.engine.begin() as conn:
            result = conn.execute(
                sa.insert(decisions).values(
                    model_manifest_hash=model_manifest_hash,
                    candidate_label=candidate_label,
                    baseline_label=baseline_label,
                    passed=decision.passed,
                    failed_stage=decision.failed_stage,
                    reasons=list(decision.reasons),
                    policy=to_jsonable(policy),
                    evidence=evidence,
                    floor_measurement_id=floor_measurement_id,
                    candidate_measurement_id=candidate_measurement_id,
                    baseline_suite_run_id=baseline_suite_run_id,
                    candidate_suite_run_id=candidate_suite_run_id,
                )
            )
            return int(result.inserted_primary_key[0])

    def decision_rows(self, model_manifest_hash: str | None = None) -> list[dict[str, Any]]:
        """Stored decisions as dicts, oldest first (for reports and tests)."""
        query = sa.select(decisions).order_by(decisions.c.id)
        if model_manifest_hash is not None:
            query = query.where(decisions.c.model_manifest_hash == model_manifest_hash)
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]
