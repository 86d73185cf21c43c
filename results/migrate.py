"""Migrations of the results tables, through Alembic, with a version table of our own.

`results_alembic_version` records the revision of the tables in results/schema.py; Optuna's
`alembic_version` (its own schema) is never read or written here. Every store opens through
`upgrade`, so a results.db written by any earlier version is brought to the current schema on
first open, rows kept. Workers that start together on one PostgreSQL database take turns (an
advisory lock); on SQLite a worker that loses a race retries and then finds the work done.

A new revision: copy results/migrations/versions/0001_one_store.py, set `down_revision` to the
current head, and write its `upgrade` with alembic's `op` against the tables as they were.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

__all__ = ["VERSION_TABLE", "current_revision", "head_revision", "upgrade"]

log = logging.getLogger(__name__)
# alembic's INFO lines (plugins at import, the dialect on every connection): ours says what ran. Set
# before alembic is first imported, which is why the functions below import it.
logging.getLogger("alembic").setLevel(logging.WARNING)

VERSION_TABLE = "results_alembic_version"
_SCRIPTS = Path(__file__).with_name("migrations")
_PG_LOCK = 0x72657375  # pg_advisory_xact_lock key of this migration ("resu")


def _config(connection: Connection | None = None):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = connection
    return config


@functools.cache
def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def upgrade(engine: Engine, attempts: int = 5) -> None:
    """Bring the results tables of this database to the head revision (a no-op when they are there)."""
    from alembic import command

    for attempt in range(attempts):
        with engine.connect() as conn:
            current = current_revision(conn)
        if current == head_revision():
            return
        try:
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":  # one migrating worker at a time; DDL is transactional
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
                command.upgrade(_config(conn), "head")
            log.info("results tables of %s: revision %s -> %s", engine.url.render_as_string(hide_password=True),
                     current or "(none)", head_revision())
            return
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 + attempt)  # another worker migrated SQLite first; the next look finds head
