"""The results store: the schema of everything the project writes beside Optuna's tables.

- `schema`: the tables (ar_* for the loop, eval_* for the gate), `UTCDateTime` and `Json`.
- `jsonable`: `to_jsonable` and `from_jsonable`, the one serializer of records (bench's too).
- `migrate`: Alembic migrations with their own version table (`results_alembic_version`).
- `engine`: engines for SQLite (WAL) and PostgreSQL; a private snapshot of a SQLite file to read.

`connect(url)` is how a store opens a database: an engine whose results tables are at the current
schema. autoresearch.ground.db.ResultsDB and eval.store.EvalStore read and write through it; this package
imports neither.

Usage:
    engine = results.connect("sqlite:///results.db")
    with engine.connect() as conn:
        rows = conn.execute(sa.select(results.schema.measurements)).all()
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from results import schema
from results.engine import make_engine, readable_storage
from results.jsonable import from_jsonable, to_jsonable
from results.migrate import upgrade
from results.schema import now

__all__ = ["connect", "from_jsonable", "make_engine", "now", "readable_storage", "schema", "to_jsonable", "upgrade"]


def connect(url_or_engine: str | Engine) -> Engine:
    """An engine for this database (a URL, or an engine made elsewhere), its results tables migrated."""
    engine = make_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    upgrade(engine)
    return engine
