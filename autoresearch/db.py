"""The loop's rows in results.db: measurements, provenance, finalists, claims (tables in results.schema).

Rows are append-only: a killed loop loses at most the row it was writing. Opening migrates the
database's results tables (results.connect).

Usage:
    db = ResultsDB("sqlite:///results.db")
    db.add_measurement(study="s", trial=3, kind="bench", config_digest=d, payload=result.to_dict())
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError

import results
from results.schema import claims, finalists, measurements, provenance

__all__ = ["ResultsDB"]


def _rows(conn, query) -> list[dict[str, Any]]:
    return [dict(row._mapping) for row in conn.execute(query)]


class ResultsDB:
    def __init__(self, url: str):
        self.url = url
        self.engine = results.connect(url)

    def add_measurement(self, *, study: str, trial: int | None, kind: str, config_digest: str,
                        payload: dict[str, Any], launch: int = 0) -> int:
        with self.engine.begin() as conn:
            result = conn.execute(insert(measurements).values(
                study=study, trial=trial, kind=kind, config_digest=config_digest, launch=launch, payload=payload))
            return result.inserted_primary_key[0]

    def measurements(self, *, study: str, kind: str | None = None, trial: int | None = None,
                     config_digest: str | None = None) -> list[dict[str, Any]]:
        query = select(measurements).where(measurements.c.study == study)
        if kind is not None:
            query = query.where(measurements.c.kind == kind)
        if trial is not None:
            query = query.where(measurements.c.trial == trial)
        if config_digest is not None:
            query = query.where(measurements.c.config_digest == config_digest)
        with self.engine.connect() as conn:
            return _rows(conn, query.order_by(measurements.c.id))

    def add_provenance(self, *, study: str, trial: int | None, config_digest: str, model_manifest_hash: str,
                       engine: str, details: dict[str, Any]) -> None:
        gpu = details.get("gpu") or {}
        server = details.get("server_info") or {}
        with self.engine.begin() as conn:
            conn.execute(insert(provenance).values(
                study=study, trial=trial, config_digest=config_digest, model_manifest_hash=model_manifest_hash,
                engine=engine, engine_version=server.get("engine_version"), torch_version=server.get("torch_version"),
                gpu_name=gpu.get("name"), gpu_driver=gpu.get("driver"), details=details))

    def provenance(self, *, study: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return _rows(conn, select(provenance).where(provenance.c.study == study).order_by(provenance.c.id))

    def add_finalist(self, *, study: str, round_: int, trial: int, config_digest: str, decode: float | None,
                     prefill: float | None, verdict: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(finalists).values(
                study=study, round=round_, trial=trial, config_digest=config_digest, decode_tok_per_s=decode,
                prefill_tok_per_s=prefill, verdict=verdict))

    def finalists(self, *, study: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return _rows(conn, select(finalists).where(finalists.c.study == study).order_by(finalists.c.id))

    def claim(self, *, study: str, what: str, key: str, worker: str,
              holder_gone: Callable[[str], bool] = lambda _: False) -> str | None:
        """Take a piece of work once across every worker of a study: None when this worker got it, else
        the worker that holds it (the database's unique constraint decides, on SQLite and PostgreSQL).

        A claim whose holder is gone (`holder_gone(holder)`: a worker killed before it finished) is taken
        over: its row is deleted and the claim tried once more, so two survivors still get it once."""
        where = (claims.c.study == study) & (claims.c.what == what) & (claims.c.key == key)
        for _ in range(2):
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(claims).values(study=study, what=what, key=key, worker=worker))
                return None
            except IntegrityError:
                with self.engine.connect() as conn:
                    row = conn.execute(select(claims.c.worker).where(where)).first()
                holder = row.worker if row else "another worker"
                if row is None or not holder_gone(holder):
                    return holder
                with self.engine.begin() as conn:
                    conn.execute(delete(claims).where(where & (claims.c.worker == holder)))
        return holder

    def close(self) -> None:
        self.engine.dispose()
