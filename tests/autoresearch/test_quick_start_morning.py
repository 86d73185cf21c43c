"""The Quick start's morning commands, typed as a newcomer types them after `python -m autoresearch`: on the
committed embedded-default study (examples/cpu-broad-standins: the tiny synthetic model on the CPU engine),
copied to a fresh folder as the run leaves results.db there. Real parts throughout: the CLI, SQLite, Optuna
and, for the printed serve command, a real `python -m serving` process answering over HTTP."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from autoresearch.__main__ import main
from serving.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]
EMBEDDED = ROOT / "examples" / "cpu-broad-standins" / "results.db"  # one study, the embedded default's


@pytest.fixture
def morning(tmp_path, monkeypatch):
    """A fresh folder holding the run's results.db, the embedded model's cache the session's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path.parent / "autoresearch-cache-first-hour"))
    shutil.copy(EMBEDDED, tmp_path / "results.db")
    return tmp_path


def _lines(text: str) -> list[str]:
    return [line for line in text.strip().splitlines() if " INFO " not in line]


def _serve_command(capsys) -> list[str]:
    assert main(["export"]) == 0
    out = capsys.readouterr().out.splitlines()
    command = out[out.index("serve it:") + 1].strip()
    assert command == "python -m serving --model embedded:tiny --config champion.json"
    return [sys.executable if word == "python" else word for word in shlex.split(command)]


def test_the_printed_serve_command_answers_a_chat_completion(morning, capsys):
    """Before: export printed `python -m serving --model embedded:tiny --config champion.json`, which refused:
    "--model embedded:tiny is not a folder". The server takes the embedded model by that name now (seconds)."""
    command = _serve_command(capsys)
    port = free_port()
    server = subprocess.Popen([*command, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, server.stdout.read()
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.5)
        with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as response:
            model = json.load(response)["data"][0]["id"]
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "What is 2 + 2?"}],
                           "max_tokens": 8}).encode()
        request = urllib.request.Request(f"{url}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.load(response)
        assert answer["choices"][0]["message"]["role"] == "assistant"
        assert answer["usage"]["completion_tokens"] > 0
    finally:
        server.terminate()
        server.wait(30)


def test_export_format_tabbyapi_of_the_quick_start_study_is_a_one_line_refusal_writing_nothing(morning, capsys):
    """Before: exit 1 and "StudyError: study ... ran the transformers engine; ..." (a refusal of an unsupported
    combination, not a failed run)."""
    assert main(["export", "--format", "tabbyapi"]) == 2
    (line,) = _lines(capsys.readouterr().err)
    assert line.startswith("error: export --format tabbyapi: study broad-transformers-") and \
        line.endswith("ran the transformers engine, and TabbyAPI serves exllamav3 checkpoints only (export it "
                      "with --format serving)")
    assert sorted(p.name for p in morning.iterdir() if not p.name.startswith("results.db")) == []


def test_plan_in_the_folder_of_the_run_plans_from_the_databases_only_study(morning, capsys):
    """Before: "error: state the machine's rates (...), or name a stored study (--study, --storage)", though
    --study's help says "default: the database's only study"."""
    assert main(["plan", "--hours", "1"]) in (0, 1)  # 1: the night cannot make its claim (the plan says why)
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("Night plan for --hours 1 (task tier on finalists); rates measured by this study: ")


def test_plan_without_a_database_or_rates_says_what_to_give(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--hours", "1"]) == 2
    (line,) = _lines(capsys.readouterr().err)
    assert line.startswith("error: plan: no database at sqlite:///results.db to read a study's rates from: state "
                           "the machine's rates (--decode-tok-s and --prefill-tok-s")
    assert list(tmp_path.iterdir()) == []  # no database created


def test_the_plans_header_names_its_rates_once(capsys):
    """Before: "...; rates stated rates: decode 43 tok/s, prefill 700 tok/s."."""
    argv = ["plan", "--hours", "8", "--decode-tok-s", "43", "--prefill-tok-s", "700", "--answer-tokens", "3000"]
    assert main(argv) in (0, 1)
    assert capsys.readouterr().out.splitlines()[0] == \
        "Night plan for --hours 8 (task tier on finalists); stated rates: decode 43 tok/s, prefill 700 tok/s."


@pytest.mark.parametrize(("argv", "expected"), [
    (["export", "--study", "nosuch"], "error: sqlite:///results.db holds no study 'nosuch'; it holds broad-"),
    (["report", "--study", "nosuch"], "error: sqlite:///results.db holds no study 'nosuch'; it holds broad-"),
    (["plan", "--hours", "1", "--study", "nosuch"], "error: sqlite:///results.db holds no study 'nosuch'; it holds "),
    (["export", "--format", "yaml"], "error: argument --format: invalid choice: 'yaml' (choose from 'serving', "),
    (["plan"], "error: plan: give --hours H, the night to plan"),
])
def test_every_refusal_of_the_morning_commands_is_one_plain_line_with_exit_status_2(morning, capsys, monkeypatch,
                                                                                    argv, expected):
    """Before: a study named wrong was "StudyError: ..." with exit 1 (export and report generated the embedded model
    first), plan's named the database's in-memory snapshot, and argparse printed its usage above its error."""
    cache = morning.parent / f"refusal-cache-{morning.name}"  # this test's own: nothing may be generated
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(cache))
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's refusal
        status = exit_.code
    assert status == 2
    (line,) = _lines(capsys.readouterr().err)
    assert line.startswith(expected), line
    assert not cache.exists()  # nothing generated for a refused command
    assert sorted(p.name for p in morning.iterdir() if not p.name.startswith("results.db")) == []
