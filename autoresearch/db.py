"""The project's tables in results.db, next to Optuna's: measurements, provenance, finalists, claims.

SQLAlchemy Core with table names prefixed `ar_` so they never collide with Optuna's schema (and no
Alembic version table of ours shares Optuna's `alembic_version`). Rows are append-only: a killed
loop loses at most the row it was writing.

Usage:
    db = ResultsDB("sqlite:///results.db")
    db.add_measurement(study="s", trial=3, kind="bench", config_digest=d, payload=result.to_dict())
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    insert,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from eval.store import create_tables, to_jsonable

__all__ = ["ResultsDB", "make_engine"]

metadata = MetaData()

measurements = Table(
    "ar_measurements", metadata,
    Column("id", Integer, primary_key=True),
    Column("study", String(200), nullable=False, index=True),
    Column("trial", Integer, nullable=True, index=True),  # Optuna trial number; NULL for finalist launches
    Column("kind", String(40), nullable=False),  # bench | memory | fidelity | suite | gate | launch
    Column("config_digest", String(64), nullable=False, index=True),
    Column("launch", Integer, nullable=False, default=0),  # which fresh launch of this config
    Column("payload", JSON, nullable=False),
    Column("created_at", DateTime, nullable=False),
)

provenance = Table(
    "ar_provenance", metadata,
    Column("id", Integer, primary_key=True),
    Column("study", String(200), nullable=False, index=True),
    Column("trial", Integer, nullable=True),
    Column("config_digest", String(64), nullable=False),
    Column("model_manifest_hash", String(64), nullable=False),
    Column("engine", String(40), nullable=False),
    Column("engine_version", String(80)),
    Column("torch_version", String(80)),
    Column("gpu_name", String(120)),
    Column("gpu_driver", String(80)),
    Column("details", JSON, nullable=False),  # clocks, power limit, host, git commit, server_info
    Column("created_at", DateTime, nullable=False),
)

finalists = Table(
    "ar_finalists", metadata,
    Column("id", Integer, primary_key=True),
    Column("study", String(200), nullable=False, index=True),
    Column("round", Integer, nullable=False),  # one confirmation round per loop end
    Column("trial", Integer, nullable=False),  # the trial whose config was re-measured
    Column("config_digest", String(64), nullable=False),
    Column("decode_tok_per_s", Float),
    Column("prefill_tok_per_s", Float),
    Column("verdict", Text, nullable=False),  # JSON: comparisons with the baseline, champion flag
    Column("created_at", DateTime, nullable=False),
)


claims = Table(
    "ar_claims", metadata,
    Column("id", Integer, primary_key=True),
    Column("study", String(200), nullable=False),
    Column("what", String(80), nullable=False),  # e.g. "confirm finalists"
    Column("key", String(200), nullable=False),  # what exactly, e.g. "after 12 finished trials"
    Column("worker", String(200), nullable=False),  # host:pid
    Column("created_at", DateTime, nullable=False),
    UniqueConstraint("study", "what", "key", name="uq_ar_claims_once"),
)


def make_engine(url: str) -> Engine:
    """SQLite waits for locks instead of failing and uses WAL so readers (dashboard) never block the loop."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60})

        @event.listens_for(engine, "connect")
        def _pragmas(conn, _record):
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class ResultsDB:
    def __init__(self, url: str):
        self.url = url
        self.engine = make_engine(url)
        create_tables(metadata, self.engine)

    def add_measurement(self, *, study: str, trial: int | None, kind: str, config_digest: str,
                        payload: dict[str, Any], launch: int = 0) -> int:
        with self.engine.begin() as conn:
            result = conn.execute(insert(measurements).values(
                study=study, trial=trial, kind=kind, config_digest=config_digest, launch=launch,
                payload=_plain(payload), created_at=_now()))
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
            return [dict(row._mapping) for row in conn.execute(query.order_by(measurements.c.id))]

    def add_provenance(self, *, study: str, trial: int | None, config_digest: str, model_manifest_hash: str,
                       engine: str, details: dict[str, Any]) -> None:
        gpu = details.get("gpu") or {}
        server = details.get("server_info") or {}
        with self.engine.begin() as conn:
            conn.execute(insert(provenance).values(
                study=study, trial=trial, config_digest=config_digest, model_manifest_hash=model_manifest_hash,
                engine=engine, engine_version=server.get("engine_version"), torch_version=server.get("torch_version"),
                gpu_name=gpu.get("name"), gpu_driver=gpu.get("driver"),
                details=_plain(details), created_at=_now()))

    def provenance(self, *, study: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(provenance).where(provenance.c.study == study).order_by(provenance.c.id))
            return [dict(row._mapping) for row in rows]

    def add_finalist(self, *, study: str, round_: int, trial: int, config_digest: str, decode: float | None,
                     prefill: float | None, verdict: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(finalists).values(
                study=study, round=round_, trial=trial, config_digest=config_digest, decode_tok_per_s=decode,
                prefill_tok_per_s=prefill, verdict=json.dumps(_plain(verdict)), created_at=_now()))

    def finalists(self, *, study: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(finalists).where(finalists.c.study == study).order_by(finalists.c.id))
            return [{**dict(row._mapping), "verdict": json.loads(row.verdict)} for row in rows]

    def claim(self, *, study: str, what: str, key: str, worker: str) -> str | None:
        """Take a piece of work once across every worker of a study: None when this worker got it, else
        the worker that holds it (the database's unique constraint decides, on SQLite and PostgreSQL)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(claims).values(study=study, what=what, key=key, worker=worker, created_at=_now()))
            return None
        except IntegrityError:
            with self.engine.connect() as conn:
                row = conn.execute(select(claims.c.worker).where(
                    (claims.c.study == study) & (claims.c.what == what) & (claims.c.key == key))).first()
            return row.worker if row else "another worker"

    def close(self) -> None:
        self.engine.dispose()


def _plain(value):
    """Plain JSON data; a value JSON cannot hold is a programming error, never stored as its repr."""
    return json.loads(json.dumps(to_jsonable(value), allow_nan=False))


def readable_storage(url: str) -> str:
    """For a SQLite file, a private snapshot of it to read (reports and exports only read).

    The snapshot is consistent while a loop still writes (SQLite's backup API), and it works where
    the original cannot be opened at all: SQLite in WAL mode must create -shm and -wal files beside
    a database even to read it, which fails in a read-only folder (an archive, another user's copy).
    There the files are copied instead, the -wal with them. Other databases are read in place.
    """
    if not url.startswith("sqlite:///"):
        return url
    path = Path(url.removeprefix("sqlite:///"))
    if not path.is_file():
        return url  # the loop's own "no study" or "not a database" message says what is wrong
    snapshot = Path(tempfile.mkdtemp(prefix="autoresearch-snapshot-")) / path.name
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as source, \
                contextlib.closing(sqlite3.connect(snapshot)) as target:
            source.backup(target)
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            return url
        snapshot.unlink(missing_ok=True)
        shutil.copy2(path, snapshot)
        wal = path.with_name(path.name + "-wal")  # committed pages not yet in the main file
        if wal.is_file():
            shutil.copy2(wal, snapshot.with_name(snapshot.name + "-wal"))
    return f"sqlite:///{snapshot}"
