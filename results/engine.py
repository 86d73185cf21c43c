"""Engines for results.db (SQLite or PostgreSQL), and a private in-memory snapshot of a SQLite file to read."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine

__all__ = ["make_engine", "readable_storage"]

_SNAPSHOTS = itertools.count()


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


@contextlib.contextmanager
def readable_storage(url: str) -> Iterator[str]:
    """For a SQLite file, a consistent snapshot of it in memory, to read (reports and exports only read).

    The snapshot is consistent while a loop still writes (SQLite's backup API), and it works where
    the original cannot be opened at all: SQLite in WAL mode must create -shm and -wal files beside
    a database even to read it, which fails in a read-only folder (an archive, another user's copy);
    there the files are copied to a temporary folder first, the -wal with them, and that folder is
    removed once read. The snapshot lives while the block runs; nothing of it is left behind.
    Other databases, and a file that is not a database (the caller's error names it), are read in place.
    A SQLite file that does not exist is never created: FileNotFoundError.
    """
    if not url.startswith("sqlite:///"):
        yield url
        return
    path = Path(url.removeprefix("sqlite:///"))
    if not path.is_file():
        raise FileNotFoundError(f"no database at {path}")
    name = f"autoresearch-snapshot-{os.getpid()}-{next(_SNAPSHOTS)}"
    with contextlib.closing(sqlite3.connect(f"file:{name}?mode=memory&cache=shared", uri=True)) as keeper:
        try:
            _backup(path, keeper)
        except sqlite3.DatabaseError as exc:
            if "not a database" not in str(exc):
                raise
            yield url
            return
        yield f"sqlite:///file:{name}?mode=memory&cache=shared&uri=true"


def _backup(path: Path, target: sqlite3.Connection) -> None:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as source:
            source.backup(target)
    except sqlite3.OperationalError:  # a read-only folder: SQLite cannot make its -shm file there
        with tempfile.TemporaryDirectory(prefix="autoresearch-snapshot-") as folder:
            copy = Path(folder) / path.name
            shutil.copy2(path, copy)
            wal = path.with_name(path.name + "-wal")  # committed pages not yet in the main file
            if wal.is_file():
                shutil.copy2(wal, copy.with_name(copy.name + "-wal"))
            with contextlib.closing(sqlite3.connect(copy)) as source:
                source.backup(target)
