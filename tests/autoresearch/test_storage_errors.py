"""A results database that cannot be used is one clear line and exit status 2; a read-only copy reports."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from autoresearch.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "q27-champion" / "results.db"


def _output(command: str, folder) -> list[str]:
    """The flag that moves the command's output out of the working folder."""
    return ["--results-md", str(folder / "RESULTS.md")] if command == "report" else ["--out", str(folder / "c.json")]


@pytest.mark.parametrize("command", ["report", "export"])
def test_a_corrupt_database_is_one_line_and_exit_2(tmp_path, capsys, command):
    bad = tmp_path / "results.db"
    bad.write_bytes(b"this is not SQLite" * 100)
    code = main([command, "--study", "q27-champion", "--storage", f"sqlite:///{bad}", *_output(command, tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [f"StorageError: cannot use sqlite:///{bad}: file is not a database"]


def test_a_read_only_copy_of_a_study_reports(tmp_path):
    """The database in a folder nothing may be written to, as an archive or another user's copy is."""
    archive = tmp_path / "archive"
    archive.mkdir()
    shutil.copy(EXAMPLE, archive / "results.db")
    if os.geteuid() == 0:  # root writes through permissions: make the folder immutable instead
        if subprocess.run(["chattr", "+i", str(archive)], capture_output=True).returncode != 0:
            pytest.skip("running as root on a filesystem without chattr +i")
    else:
        archive.chmod(0o555)
    try:
        probe = subprocess.run(["touch", str(archive / "results.db-shm")], capture_output=True)
        assert probe.returncode != 0  # SQLite could not create its WAL index there either
        out = tmp_path / "RESULTS.md"
        code = main(["report", "--study", "q27-champion", "--storage", f"sqlite:///{archive / 'results.db'}",
                     "--results-md", str(out)])
        assert sorted(p.name for p in archive.iterdir()) == ["results.db"]  # nothing was written beside it
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(archive)], check=True)
        archive.chmod(0o755)
    assert code == 0
    text = out.read_text()
    assert f"from `sqlite:///{archive / 'results.db'}`" in text  # named as the user named it
    assert "## Champion" in text and "**trial 1**" in text


def test_a_claim_is_taken_once_and_names_its_holder(tmp_path):
    from autoresearch.ground.db import ResultsDB

    first, second = ResultsDB(f"sqlite:///{tmp_path / 'r.db'}"), ResultsDB(f"sqlite:///{tmp_path / 'r.db'}")
    assert first.claim(study="s", what="confirm finalists", key="after 4", worker="a:1") is None
    assert second.claim(study="s", what="confirm finalists", key="after 4", worker="b:2") == "a:1"
    assert second.claim(study="s", what="confirm finalists", key="after 5", worker="b:2") is None


def test_a_claim_held_by_a_killed_worker_is_taken_over_once(tmp_path):
    """The confirming worker killed mid-round (kill -9) must not keep every later worker from confirming."""
    import socket
    import subprocess
    import sys

    from autoresearch.ground.db import ResultsDB
    from autoresearch.ground.plan import worker_gone

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_name = f"{socket.gethostname()}:{dead.stdout.strip()}"
    assert worker_gone(dead_name)
    assert not worker_gone(f"{socket.gethostname()}:{os.getpid()}")
    assert not worker_gone("other-host:1"), "a worker on another host cannot be checked from here"

    url = f"sqlite:///{tmp_path / 'results.db'}"
    first, second, third = ResultsDB(url), ResultsDB(url), ResultsDB(url)
    assert first.claim(study="s", what="confirm finalists", key="after 16", worker=dead_name) is None
    alive = f"{socket.gethostname()}:{os.getpid()}"
    assert second.claim(study="s", what="confirm finalists", key="after 16", worker=alive,
                        holder_gone=worker_gone) is None
    assert third.claim(study="s", what="confirm finalists", key="after 16", worker="c:3",
                       holder_gone=worker_gone) == alive, "a live holder keeps its claim"


def test_report_and_export_leave_no_copy_behind_and_name_the_users_database(tmp_path, monkeypatch, capsys):
    """Before: each call left a full copy of results.db in a temp folder, and errors named that copy."""
    import tempfile

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    db = tmp_path / "results.db"
    shutil.copy(EXAMPLE, db)
    out = tmp_path / "RESULTS.md"
    assert main(["report", "--study", "q27-champion", "--storage", f"sqlite:///{db}", "--results-md", str(out)]) == 0
    assert main(["export", "--study", "q27-champion", "--storage", f"sqlite:///{db}",
                 "--out", str(tmp_path / "c.json")]) == 0
    assert main(["export", "--study", "nosuch", "--storage", f"sqlite:///{db}", "--out", str(tmp_path / "d.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"error: sqlite:///{db} holds no study 'nosuch'; it holds q27-champion"
    assert list(temp.iterdir()) == []
    beside = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-shm", "-wal")))  # SQLite's own
    assert beside == ["RESULTS-pareto.png", "RESULTS.md", "c.json", "results.db", "tmp"]


@pytest.mark.parametrize("command", ["report", "export"])
def test_report_and_export_never_create_a_database(tmp_path, capsys, command):
    """Before: `report` where there was no results.db created an empty one."""
    db = tmp_path / "results.db"
    code = main([command, "--study", "q27-champion", "--storage", f"sqlite:///{db}", *_output(command, tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [f"StorageError: no database at sqlite:///{db}: run the loop first, or pass --storage"]
    assert list(tmp_path.iterdir()) == []
