"""Where `report` and `export` read and write when the user does not say, checked before any work.

After the night a user types `report` or `export` alone: the study is the database's only one. A report
of a study goes beside its database (for the run's own results.db that is the run's RESULTS.md), so
reading a committed study (`--storage sqlite:///examples/DIR/results.db`) never overwrites the user's
own RESULTS.md. Every output that cannot be written is one line naming the flags that move it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from autoresearch.ground.errors import PlanError
from autoresearch.ground.stored_study import sqlite_path, study_to_read

__all__ = ["EXPORT_DEFAULTS", "check_writable", "plot_path", "report_path", "settle_reading_command", "write_checked"]

# export's files by --format when --out is not given, in the working folder (.gitignore lists both)
EXPORT_DEFAULTS = {"serving": Path("champion.json"), "tabbyapi": Path("tabbyapi-export")}
TABBYAPI_FILES = ("config.yml", "exl3.env", "NOT-EXPRESSED.md")


def plot_path(results_md: Path) -> Path:
    """The Pareto plot written beside a report."""
    return results_md.with_name(results_md.stem + "-pareto.png")


def report_path(storage_shown: str) -> Path:
    """A report's default place: beside its SQLite database, else RESULTS.md in the working folder."""
    database = sqlite_path(storage_shown)
    return database.parent / "RESULTS.md" if database is not None else Path("RESULTS.md").resolve()


def settle_reading_command(args: argparse.Namespace, storage_shown: str) -> None:
    """Fill in the study and the output `report`/`export` were not given (in `args`), and refuse at once
    (PlanError, one line) an output that cannot be written. `args.storage` is the database to read."""
    args.study = study_to_read(args.storage, storage_shown, args.study)  # before the model is resolved
    if args.command == "report":
        args.results_md = args.results_md or report_path(storage_shown)
        check_writable([(args.results_md, "the report", "--results-md"),
                        (plot_path(args.results_md), "the report's plot", "--results-md")])
    elif args.command == "export":
        args.out = args.out or EXPORT_DEFAULTS[args.format]
        if args.format == "tabbyapi":
            check_writable([(args.out / name, f"the TabbyAPI export's {name}", "--out") for name in TABBYAPI_FILES])
        else:
            check_writable([(args.out, "the exported config", "--out")])


def check_writable(outputs: list[tuple]) -> None:
    """One PlanError line for the outputs that cannot be written (the first of each flag), naming every flag
    that moves them: a user in a read-only folder learns them all at once. `outputs`: (path, what, flag), a
    4th item "folder" for a folder to write files in."""
    problems, flags = [], []
    for path, what, flag, *kind in outputs:
        if flag in flags:
            continue
        problem = _unwritable_dir(path, what) if kind == ["folder"] else _unwritable_file(path, what)
        if problem:
            problems.append(problem)
            flags.append(flag)
    if problems:
        named = flags[0] if len(flags) == 1 else ", ".join(flags[:-1]) + " and " + flags[-1]
        raise PlanError("; ".join(problems) + f"; pass another {named}")


def _first_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _unwritable_dir(path: Path, what: str) -> str | None:
    """Why `path` cannot take a new file (None: it can): it exists, or can be made under its first existing ancestor."""
    existing = _first_existing(path.resolve())
    if not existing.is_dir():
        return f"cannot write {what} under {path}: {existing} is not a folder"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return f"cannot write {what} under {path}: {existing}: {exc.strerror or exc}"
    return None


def _unwritable_file(path: Path, what: str) -> str | None:
    if path.is_dir():
        return f"cannot write {what} to {path}: it is a folder"
    if path.exists():
        if not os.access(path, os.W_OK) and os.geteuid() != 0:
            return f"cannot write {what} to {path}: permission denied"
        try:
            with open(path, "ab"):
                pass
        except OSError as exc:
            return f"cannot write {what} to {path}: {exc.strerror or exc}"
        return None
    return _unwritable_dir(path.parent, what)


def write_checked(files: dict[Path, str], check: Callable[[dict[Path, str]], None]) -> None:
    """Write `files` (path -> text) so that a reader never sees half of one and a refused one leaves nothing:
    each is written to a temporary file beside it, all are read back and given to `check` (path -> the text as
    read), and only then moved into place. A check that raises (or a write that fails) leaves every path as it
    was: the temporary files are removed, and any folder made for them."""
    made: list[Path] = []
    temps: dict[Path, Path] = {}
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path in files:
            for folder in reversed([path.parent, *path.parent.parents]):
                if not folder.exists():
                    folder.mkdir()
                    made.append(folder)
        for path, text in files.items():
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            temps[path] = Path(name)
            os.fchmod(fd, 0o666 & ~umask)  # as an ordinary write would leave it (mkstemp's is 0600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        check({path: temp.read_text() for path, temp in temps.items()})
        for path, temp in temps.items():
            os.replace(temp, path)
    except BaseException:
        for temp in temps.values():
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
