"""The commands a user types after the night, as a new user types them: on a committed study's database."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import optuna
import pytest

from autoresearch.__main__ import main
from autoresearch.cli import DEFAULT_STORAGE
from autoresearch.ground.model_source import _manifest_path, resolve_model
from autoresearch.ground.outputs import EXPORT_DEFAULTS, TABBYAPI_FILES, plot_path

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "examples" / "q27-champion" / "results.db"  # one study, q27-champion, with a champion


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A fresh working folder; the embedded model's cache is the session's (the old code resolved it)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path.parent / "autoresearch-cache-first-hour"))
    return tmp_path


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder that takes no new file: mode 555, or for root (whom modes do not stop) sysfs, which creates
    no file for anyone."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
    elif Path("/sys/kernel").is_dir():
        yield Path("/sys")
    else:
        pytest.skip("no read-only folder for root here")


def _error(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.strip().splitlines() if " INFO " not in line]


def test_report_and_export_read_the_databases_only_study(fresh, capsys):
    """Before: both failed with "no study 'offline-transformers-...'" (the embedded default's name)."""
    shutil.copy(COMMITTED, fresh / "results.db")
    assert main(["report"]) == 0
    assert (fresh / "RESULTS.md").read_text().startswith("# Results: q27-champion")
    assert main(["export"]) == 0
    assert (fresh / "champion.json").exists() and "trial " in capsys.readouterr().out


def test_a_database_of_several_studies_lists_them(fresh, capsys):
    shutil.copy(COMMITTED, fresh / "results.db")
    optuna.create_study(study_name="another", storage=DEFAULT_STORAGE)
    capsys.readouterr()
    assert main(["export"]) == 2
    assert _error(capsys) == ["error: sqlite:///results.db holds 2 studies (another, q27-champion): pass --study NAME"]
    assert not (fresh / "champion.json").exists()


def test_a_report_of_another_database_goes_beside_it_never_over_the_users(fresh):
    """Before: `report --study X --storage sqlite:///examples/...`, as the README suggests, overwrote ./RESULTS.md."""
    (fresh / "ex").mkdir()
    shutil.copy(COMMITTED, fresh / "ex" / "results.db")
    for mine in ("RESULTS.md", "RESULTS-pareto.png"):
        (fresh / mine).write_text("the user's own")
    assert main(["report", "--study", "q27-champion", "--storage", "sqlite:///ex/results.db"]) == 0
    assert all((fresh / mine).read_text() == "the user's own" for mine in ("RESULTS.md", "RESULTS-pareto.png"))
    assert (fresh / "ex" / "RESULTS.md").read_text().startswith("# Results: q27-champion")
    assert (fresh / "ex" / "RESULTS-pareto.png").stat().st_size > 1000


@pytest.mark.parametrize("fmt", ["serving", "tabbyapi"])
def test_export_in_a_read_only_folder_is_one_line_naming_out(fresh, read_only_folder, capsys, monkeypatch, fmt):
    """Before: a 24-line traceback ending in OSError."""
    shutil.copy(COMMITTED, fresh / "results.db")
    monkeypatch.chdir(read_only_folder)
    assert main(["export", "--study", "q27-champion", "--storage", f"sqlite:///{fresh / 'results.db'}", "--format",
                 fmt]) == 2
    (line,) = _error(capsys)
    assert line.startswith("error: cannot write the ") and line.endswith("; pass another --out"), line


def test_a_report_that_cannot_be_written_is_one_line_naming_results_md(fresh, capsys):
    """Before: a 41-line traceback from the plot's savefig."""
    shutil.copy(COMMITTED, fresh / "results.db")
    (fresh / "a-file").write_text("not a folder")
    assert main(["report", "--study", "q27-champion", "--results-md", "a-file/RESULTS.md"]) == 2
    (line,) = _error(capsys)
    assert line.startswith("error: cannot write the report under a-file") and \
        line.endswith("; pass another --results-md"), line


def test_a_run_that_cannot_write_says_every_flag_at_once(fresh, capsys):
    """Before: one path at a time: a user in a read-only folder fixed --results-md, then --storage, then --workdir."""
    (fresh / "a-file").write_text("not a folder")
    argv = ["--suite", "none", "--trials", "2", "--results-md", "a-file/R.md", "--storage", "sqlite:///a-file/r.db",
            "--workdir", "a-file/runs"]
    assert main(argv) == 2
    (line,) = [line for line in _error(capsys) if not line.startswith("Writing model shards")]
    assert line.endswith("; pass another --results-md, --storage and --workdir"), line
    assert sorted(p.name for p in fresh.iterdir()) == ["a-file"]


def test_what_the_commands_write_by_default_git_ignores():
    """Before: `export` left champion.json (and a --model run locks/models/) untracked at the repository's root."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = [EXPORT_DEFAULTS["serving"], *(EXPORT_DEFAULTS["tabbyapi"] / name for name in TABBYAPI_FILES),
             Path("RESULTS.md"), plot_path(Path("RESULTS.md")), Path(DEFAULT_STORAGE.removeprefix("sqlite:///")),
             Path("runs") / "a-study" / "loop.log", _manifest_path(Path("locks"), "a-model")]
    kept = [str(p) for p in paths
            if subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", str(p)]).returncode != 0]
    assert kept == []


def _documented_commands() -> list[tuple[str, list[str]]]:
    """Every `python -m autoresearch export|report` the README and docs/ show (code blocks and inline code, a
    command continued over lines joined), as (page, arguments), placeholders given a value."""
    import re
    import shlex

    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        name = str(page.relative_to(ROOT))
        text = re.sub(r"\\\n\s*", " ", page.read_text())  # a code block's command continued with a backslash
        spans = re.findall(r"`([^`]+)`", text) + [line for line in text.splitlines() if line.startswith("    ")]
        for span in spans:
            for match in re.finditer(r"python -m autoresearch (export|report)\b([^`#\n]*)", " ".join(span.split())):
                args = shlex.split(match.group(2))
                if any(flag in ("--out", "--results-md") and value.isupper()  # a path the reader picks
                       for flag, value in zip(args, args[1:], strict=False)):
                    continue
                found.append((name, [match.group(1), *(a.replace("NAME", "a-study").replace("DIR", "a-dir")
                                                       for a in args)]))
    return found


def _written(argv: list[str]) -> list[Path]:
    """What a documented command writes, relative to the repository's root (where the README runs it)."""
    from autoresearch.ground.outputs import report_path

    flags = dict(zip(argv[1::2], argv[2::2], strict=False))
    if argv[0] == "export":
        fmt = flags.get("--format", "serving")
        out = Path(flags["--out"]) if "--out" in flags else EXPORT_DEFAULTS[fmt]
        return [out] if fmt == "serving" else [out / name for name in TABBYAPI_FILES]
    results = Path(flags["--results-md"]) if "--results-md" in flags else \
        report_path(flags.get("--storage", DEFAULT_STORAGE)).relative_to(ROOT)
    return [results, plot_path(results)]


def test_the_commands_the_readme_and_docs_show_write_only_what_git_ignores(monkeypatch):
    """Before: the README typed `export --format tabbyapi --out tabby`, and tabby/ was not git-ignored (nor did a
    report of a committed example stay out of its committed RESULTS.md)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    monkeypatch.chdir(ROOT)
    commands = _documented_commands()
    assert ("README.md", ["export", "--format", "tabbyapi", "--out", "tabby"]) in commands  # the parse finds them
    kept = [f"{page}: {' '.join(argv)} writes {path}" for page, argv in commands for path in _written(argv)
            if subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", str(path)]).returncode]
    assert kept == []


def test_a_refused_model_run_writes_nothing(fresh, capsys, tiny_model_dir):
    """Before: --model DIR with a mistake found after hashing left locks/models/<name>.json behind."""
    assert main(["--model", str(tiny_model_dir), "--suite", "none", "--trials", "2", "--pin", "nosuch=1"]) == 2
    assert _error(capsys)[-1].startswith("error: --pin: cannot pin unknown knob 'nosuch'")
    assert sorted(p.name for p in fresh.iterdir()) == []


def test_a_models_manifest_is_written_once_the_run_is_accepted(fresh, tiny_model_dir):
    from autoresearch.ground.model_source import record_manifest

    model = resolve_model(str(tiny_model_dir), locks_dir=fresh / "locks", cache_dir=fresh / "cache")
    assert not model.manifest_path.exists() and model.pending_manifest is not None
    record_manifest(model)
    again = resolve_model(str(tiny_model_dir), locks_dir=fresh / "locks", cache_dir=fresh / "cache")
    assert again.pending_manifest is None and again.manifest_hash == model.manifest_hash  # reused: nothing to write


def test_a_checked_write_moves_every_file_in_only_once_all_read_back_and_a_refusal_leaves_nothing(tmp_path):
    from autoresearch.ground.outputs import write_checked

    old = tmp_path / "kept.txt"
    old.write_text("the earlier export")
    new = {old: "new", tmp_path / "made" / "deeper" / "b.txt": "b"}

    def refuse(read: dict[Path, str]) -> None:
        assert read == new  # read back from the temporary files, before anything is in place
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        write_checked(new, refuse)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"] and old.read_text() == "the earlier export"
    write_checked(new, lambda read: None)
    assert old.read_text() == "new" and (tmp_path / "made" / "deeper" / "b.txt").read_text() == "b"
    assert oct(old.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # as an ordinary write leaves it
    assert sorted(p.name for p in (tmp_path / "made" / "deeper").iterdir()) == ["b.txt"]  # no temporary left


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
