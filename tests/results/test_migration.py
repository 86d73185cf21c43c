"""A results.db written before the results store (the committed examples') opens, migrates and reports.

The PostgreSQL case rebuilds an old database there (the old code's column types: naive ar_* timestamps,
the finalists' verdict as Text) from an example's rows, and needs AUTORESEARCH_TEST_POSTGRES_URL.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sqlite3
import uuid
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from autoresearch.__main__ import main
from autoresearch.ground.db import ResultsDB
from eval.store import EvalStore
from results.migrate import VERSION_TABLE, head_revision
from results.schema import metadata

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(ROOT.glob("examples/*/results.db"))
PG_URL = os.environ.get("AUTORESEARCH_TEST_POSTGRES_URL")


def _counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: conn.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in names
                if n.startswith(("ar_", "eval_"))}


def _study_name(url: str) -> str:
    [name] = optuna.get_all_study_names(url)
    return name


def _assert_readable(url: str, study: str, counts: dict[str, int]) -> None:
    db, store = ResultsDB(url), EvalStore(url)
    engine = db.engine
    with engine.connect() as conn:
        assert conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar_one() == head_revision()
        for name, n in counts.items():  # no row lost
            assert conn.execute(sa.select(sa.func.count()).select_from(metadata.tables[name])).scalar_one() == n
    assert set(metadata.tables) <= set(sa.inspect(engine).get_table_names())  # ar_claims came later: now there
    claim_columns = {c["name"] for c in sa.inspect(engine).get_columns("ar_claims")}
    assert {"heartbeat_at", "finished_at"} <= claim_columns  # revision 0002
    rows = db.measurements(study=study)
    assert len(rows) == counts["ar_measurements"] > 0
    assert all(isinstance(r["payload"], dict) and r["created_at"].tzinfo == dt.UTC for r in rows)
    for row in db.finalists(study=study):
        assert isinstance(row["verdict"], dict) and row["created_at"].tzinfo == dt.UTC
    for row in store.decision_rows():
        assert isinstance(row["policy"], dict) and row["created_at"].tzinfo == dt.UTC
    assert all(isinstance(r["details"], dict) for r in db.provenance(study=study))
    db.close()
    store.close()


def _report(url: str, study: str, out: Path) -> str:
    assert main(["report", "--study", study, "--storage", url, "--results-md", str(out)]) == 0
    return out.read_text()


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
@pytest.mark.parametrize("old_column", [True, False], ids=["with-altered-column", "before-the-alter"])
def test_an_example_database_from_before_the_store_migrates_and_reports(tmp_path, example, old_column):
    path = tmp_path / "results.db"
    shutil.copy(example, path)
    if not old_column:  # as written before the hand-made ALTER ever ran on it
        with sqlite3.connect(path) as conn:
            conn.execute("ALTER TABLE eval_fidelity_measurements DROP COLUMN top1_decisive_agreement")
    counts = _counts(path)
    url = f"sqlite:///{path}"
    study = _study_name(url)
    with sqlite3.connect(path) as conn:
        optuna_version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    _assert_readable(url, study, counts)
    _assert_readable(url, study, counts)  # a second open finds the head revision and changes nothing
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == optuna_version  # Optuna's
    text = _report(url, study, tmp_path / "RESULTS.md")
    assert text.startswith(f"# Results: {study}") and "## Champion" in text and "## Provenance" in text


@pytest.mark.postgres
@pytest.mark.skipif(not PG_URL, reason="set AUTORESEARCH_TEST_POSTGRES_URL (.ci/postgres starts one)")
def test_an_old_postgresql_database_migrates_and_reports(tmp_path):
    example = ROOT / "examples" / "real-0.5b-study" / "results.db"
    source = sa.create_engine(f"sqlite:///{example}")
    admin = sa.create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    name = f"migrate_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    url = sa.make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    target = sa.create_engine(url)
    try:
        old = sa.MetaData()  # the tables as the old code left them: reflected from the example
        old.reflect(source, only=lambda n, _m: n.startswith(("ar_", "eval_")))
        for table in old.tables.values():
            for column in table.c:
                column.type = column.type.as_generic()  # SQLite's DATETIME is `timestamp` (naive) here
            if table.name.startswith("eval_") and "created_at" in table.c:  # the old eval store's timestamptz
                table.c.created_at.type = sa.DateTime(timezone=True)
        old.create_all(target)
        with source.connect() as src, target.begin() as dst:
            for table in old.sorted_tables:
                rows = [dict(r._mapping) for r in src.execute(sa.select(table))]
                if table.name.startswith("eval_") and "created_at" in table.c:
                    rows = [{**r, "created_at": r["created_at"].replace(tzinfo=dt.UTC)} for r in rows]
                if rows:
                    dst.execute(sa.insert(table), rows)
        inspector = sa.inspect(target)
        assert isinstance(next(c["type"] for c in inspector.get_columns("ar_finalists") if c["name"] == "verdict"),
                          sa.Text)
        target.dispose()
        study = _study_name(f"sqlite:///{example}")
        optuna.copy_study(from_study_name=study, from_storage=f"sqlite:///{example}", to_storage=url)
        counts = _counts(example)
        _assert_readable(url, study, counts)
        migrated = sa.create_engine(url)
        columns = {c["name"]: c["type"] for c in sa.inspect(migrated).get_columns("ar_finalists")}
        migrated.dispose()
        assert isinstance(columns["verdict"], sa.JSON) and columns["created_at"].timezone
        with sqlite3.connect(example) as conn:
            first = conn.execute("SELECT created_at FROM ar_measurements ORDER BY id LIMIT 1").fetchone()[0]
        [row, *_] = ResultsDB(url).measurements(study=study)
        assert row["created_at"] == dt.datetime.fromisoformat(first).replace(tzinfo=dt.UTC)  # UTC, not shifted
        text = _report(url, study, tmp_path / "RESULTS.md")
        assert "## Champion" in text and "## Provenance" in text
    finally:
        target.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
        source.dispose()
