"""results.db tables of the eval package: fidelity references and measurements, suite runs, decisions.

The tables (results.schema, `eval_` prefix) live in the loop's own database (SQLite or PostgreSQL,
the URL is passed in), beside Optuna's; this module turns eval's records into their rows and back. Every row carries what it
was measured against (model manifest hash, probe-set digest, server info) for provenance.

Usage:
    store = EvalStore("sqlite:///results.db")
    ref_id = store.save_reference(reference, probe_config=..., server=..., label="baseline")
    reference = store.load_reference(manifest_hash, probe_digest)
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

import results
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
from results.schema import (
    decisions,
    fidelity_measurements,
    fidelity_references,
    suite_runs,
    taskset_results,
)

__all__ = ["EvalStore"]


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


def _insert(conn: sa.Connection, table: sa.Table, **values: Any) -> int:
    """One row into `table`; its new id."""
    return int(conn.execute(sa.insert(table).values(**values)).inserted_primary_key[0])


def _metrics_from_row(row: Any) -> FidelityMetrics:
    """The row's columns are FidelityMetrics' own fields (by_kind stored as JSON)."""
    values = {f.name: getattr(row, f.name) for f in dataclasses.fields(FidelityMetrics) if f.name != "by_kind"}
    return FidelityMetrics(**values, by_kind=tuple(KindMetrics(**k) for k in row.by_kind))


class EvalStore:
    """The eval tables in one database (opening migrates the results tables: results.connect)."""

    def __init__(self, url_or_engine: str | Engine):
        self.engine = results.connect(url_or_engine)

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
            return _insert(conn, fidelity_references, model_manifest_hash=key[0], probe_set_digest=key[1],
                           label=label, top_k=reference.top_k, n_probes=len(reference.probes),
                           n_positions=reference.n_positions, self_agreement=self_agreement,
                           probe_config=probe_config, server=server, payload=_encode_probes(reference.probes))

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
        with self.engine.begin() as conn:
            return _insert(conn, fidelity_measurements, reference_id=reference_id, role=role, label=label,
                           per_probe=per_probe, elapsed_s=elapsed_s, server=server, **values)

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
            run_id = _insert(conn, suite_runs, suite=result.suite, label=label, model_manifest_hash=model_manifest_hash,
                             base_url=base_url, run_dir=result.run_dir, plan=plan, provenance=provenance)
            for t in result.tasksets:
                values = {f.name: getattr(t, f.name) for f in dataclasses.fields(t) if f.name != "episodes"}
                _insert(conn, taskset_results, suite_run_id=run_id, episodes=t.episodes, **values)
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
        replace_id: int | None = None,
    ) -> int:
        """One row per decided candidate; `replace_id` rewrites an earlier row of the same candidate (its
        decision completed by a later tier), so no stale verdict is left beside the final one."""
        evidence = {
            "fidelity": decision.fidelity,
            "tasksets": decision.tasksets,
            **dict(extra_evidence or {}),
        }
        values = dict(model_manifest_hash=model_manifest_hash, candidate_label=candidate_label,
                      baseline_label=baseline_label, passed=decision.passed, failed_stage=decision.failed_stage,
                      reasons=list(decision.reasons), policy=policy, evidence=evidence,
                      floor_measurement_id=floor_measurement_id, candidate_measurement_id=candidate_measurement_id,
                      baseline_suite_run_id=baseline_suite_run_id, candidate_suite_run_id=candidate_suite_run_id)
        with self.engine.begin() as conn:
            if replace_id is None:
                return _insert(conn, decisions, **values)
            updated = conn.execute(sa.update(decisions).where(decisions.c.id == replace_id).values(**values))
            if updated.rowcount != 1:
                raise KeyError(f"no eval_decisions row {replace_id} to replace")
            return replace_id

    def decision_rows(self, model_manifest_hash: str | None = None) -> list[dict[str, Any]]:
        """Stored decisions as dicts, oldest first (for reports and tests)."""
        query = sa.select(decisions).order_by(decisions.c.id)
        if model_manifest_hash is not None:
            query = query.where(decisions.c.model_manifest_hash == model_manifest_hash)
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]
