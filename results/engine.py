"""Engines for results.db (SQLite or PostgreSQL), and a private snapshot of a SQLite file to read."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine

__all__ = ["make_engine", "readable_storage"]


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
