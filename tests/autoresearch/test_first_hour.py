"""A new user's mistakes: one line, exit status 2, found before anything slow runs or anything is created."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autoresearch.__main__ import main, make_plan
from autoresearch.cli import parse_args
from autoresearch.ground import model_source


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A fresh working folder, as a user's clone is; the model cache is the session's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path.parent / "autoresearch-cache-first-hour"))
    return tmp_path


def _error(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_an_unknown_suite_is_named_as_such_with_every_suite_listed(fresh, capsys):
    """Before: 'the embedded default runs the offline suite; --suite nosuch needs a real model'."""
    assert main(["--suite", "nosuch"]) == 2
    err = _error(capsys)
    assert len(err) == 1 and err[0].startswith("error: unknown suite 'nosuch'; suites: ")
    assert {"offline", "broad", "none"} <= {s.strip() for s in err[0].split("suites: ")[1].split(",")}


@pytest.mark.parametrize("argv, message", [
    (["--trials", "0"], "--trials 0: must be > 0"),
    (["--hours", "-1"], "--hours -1.0: must be > 0"),
    (["--vram", "banana", "--model", "/models/never-hashed"], "--vram 'banana': cannot read 'banana' as a size"),
    (["--port", "70000"], "--port 70000: a TCP port is 1-65535"),
    (["--pin", "cache_tokens"], "--pin 'cache_tokens': write KNOB=VALUE"),
    (["--bench-decode", "1k"], "--bench-decode '1k': write token counts"),
])
def test_a_flag_mistake_is_refused_before_the_model_is_touched(fresh, capsys, monkeypatch, argv, message):
    """Before: --trials 0 took 8-14 s to be refused, and --vram banana hashed the model first."""
    monkeypatch.setattr(model_source, "resolve_model", lambda *a, **k: pytest.fail("the model was resolved"))
    started = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - started < 5
    err = _error(capsys)
    assert len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert sorted(p.name for p in fresh.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["--pin", "nosuch=1"], "--pin: cannot pin unknown knob 'nosuch'"),
    (["--enqueue", "nosuch=1"], "--enqueue: nosuch is not a knob of this search space"),
    (["--results-md", "a-file/RESULTS.md"], "cannot write the report under"),
    (["--storage", "sqlite:///a-file/results.db"], "cannot write the results database under"),
    (["--workdir", "a-file/runs"], "cannot write server logs and suite runs under"),
])
def test_a_mistake_found_with_the_model_creates_nothing(fresh, capsys, argv, message):
    """Before: --pin nosuch exited 1; --enqueue nosuch created results.db and runs/ first; a results
    path that cannot be written was found after the first trial (or as a raw OSError)."""
    (fresh / "a-file").write_text("not a folder")
    assert main(["--suite", "none", "--trials", "2", *argv]) == 2
    err = [line for line in _error(capsys) if not line.startswith("Writing model shards")]  # the first run's model
    assert len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert sorted(p.name for p in fresh.iterdir()) == ["a-file"]


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "is not a folder (give a model folder or a Hub id like org/repo@rev)"),
    (lambda d: d.mkdir(), "has no config.json: not a model folder"),
])
def test_a_model_folder_that_is_not_there_is_a_usage_mistake(fresh, capsys, make, message):
    """Before: --model /nonexistent exited 1, the status of a run that failed."""
    make(fresh.parent / f"{fresh.name}-model")
    assert main(["--model", str(fresh.parent / f"{fresh.name}-model"), "--trials", "2"]) == 2
    err = _error(capsys)
    assert len(err) == 1 and err[0].startswith("error: --model ") and err[0].endswith(message), err
    assert sorted(p.name for p in fresh.iterdir()) == []


def test_a_model_that_is_not_exl3_gets_the_engine_search_space_picks(fresh, tiny_model_dir):
    """Before: the loop picked exllamav3 for any --model (and on a CPU machine its server crashed)."""
    from serving.config import engine_for_checkpoint

    args = parse_args(["--model", str(tiny_model_dir), "--suite", "none", "--trials", "2"])
    plan = make_plan(args)
    assert plan.engine == engine_for_checkpoint(tiny_model_dir) == "transformers"


def test_the_exllamav3_engine_where_it_cannot_run_says_which_and_why(fresh, capsys, tiny_model_dir):
    from search_space import gpu_memory_bytes

    if gpu_memory_bytes() is not None:
        pytest.skip("a GPU is visible: the exllamav3 engine may run here")
    code = main(["--model", str(tiny_model_dir), "--engine", "exllamav3", "--vram", "24GiB", "--suite", "none",
                 "--trials", "2"])
    err = _error(capsys)
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: the exllamav3 engine cannot run here: "), err
    assert not Path(fresh / "results.db").exists()
