"""`python -m autoresearch`'s command line: each command's help lists its own flags, and every flag says what it does.

Before: one flat parser, so `export --help`, `report --help`, `plan --help` and `run --help` printed the same
~238 lines, five flags had no help, and `--suite`'s help left out offline-math.
"""

from __future__ import annotations

import argparse

import pytest

from autoresearch.__main__ import main
from autoresearch.cli import COMMANDS, build_parser, parse_args
from autoresearch.ground import workload
from autoresearch.trial import sweep
from eval.suites import SUITES


def _parsers(parser: argparse.ArgumentParser, name: str = "autoresearch"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def _help(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_every_flag_of_every_command_says_what_it_does():
    parsers = [*_parsers(build_parser()), ("sweep", sweep.build_parser()), ("workload", workload.build_parser())]
    silent = [f"{name} {'/'.join(a.option_strings)}" for name, parser in parsers for a in parser._actions
              if a.option_strings and not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()]
    assert not silent
    assert {name for name, _ in parsers} >= {f"autoresearch {c}" for c in COMMANDS}


def test_each_commands_help_lists_only_its_own_flags(capsys):
    run, export, report, plan = (_help(capsys, [c, "--help"]) for c in ("run", "export", "report", "plan"))
    assert "--pin" in run and "--bench-prefill" in run and "--format" not in run
    assert "--format" in export and "--full-champion" in export
    assert not any(f in export for f in ("--pin", "--bench-prefill", "--hours", "--task-alpha", "--results-md"))
    assert "--results-md" in report and "--format" not in report and "--pin" not in report
    assert "--decode-tok-s" in plan and "--hours" in plan and "--pin" not in plan and "--format" not in plan
    assert len(export.splitlines()) < len(run.splitlines()) / 4
    bare = _help(capsys, ["--help"])
    assert all(c in bare for c in COMMANDS) and "--pin" not in bare
    assert "--candidate" in _help(capsys, ["sweep", "--help"])  # its own parser, as before
    assert "--per-kind" in _help(capsys, ["workload", "--help"])


def test_the_suite_flags_help_names_every_suite(capsys):
    for command in ("run", "plan"):
        text = " ".join(_help(capsys, [command, "--help"]).split())
        assert all(name in text for name in SUITES), command
    assert "offline-math" in SUITES


def test_a_command_line_without_a_command_is_the_run_as_typed_before():
    assert parse_args([]).command == "run"
    broad = parse_args(["--suite", "broad", "--trials", "3"])
    assert (broad.command, broad.suite, broad.trials) == ("run", "broad", 3)
    assert parse_args(["-v"]).verbose and parse_args(["run", "--suite", "broad"]).suite == "broad"


def test_a_reading_command_carries_the_runs_defaults_for_the_plan_it_makes():
    args = parse_args(["export", "--study", "s", "--format", "tabbyapi"])
    assert (args.command, args.study, args.format) == ("export", "s", "tabbyapi")
    assert (args.pin, args.finalists, args.drift_every_trials, args.storage) == ([], 2, 5, "sqlite:///results.db")
    assert parse_args(["report", "--task-tier", "guard"]).task_tier == "guard"  # the tier the report states


def test_a_flag_of_another_command_is_refused_naming_the_command_that_takes_it(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["export", "--pin", "cache_tokens=32768"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--pin" in err and "flag of run" in err and "python -m autoresearch export" in err
