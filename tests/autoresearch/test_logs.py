"""The terminal gets one line per event; the study's log file gets the tracebacks."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap


def test_tracebacks_and_optunas_failed_trial_warnings_stay_off_the_terminal(tmp_path):
    """Before: Optuna printed 'Trial 1 failed ... because of the following error' and a full traceback for
    a port in use, a deferred trial, Ctrl-C and a crash (its own handler, straight to the terminal)."""
    script = textwrap.dedent(f"""
        import logging, optuna
        from pathlib import Path
        from autoresearch.ground.logs import log_to_file, setup_logging
        setup_logging(verbose=False)
        with log_to_file(Path({str(tmp_path / 'loop.log')!r})):
            study = optuna.create_study()
            def objective(trial):
                raise KeyboardInterrupt
            try:
                study.optimize(objective, n_trials=1)
            except KeyboardInterrupt:
                logging.getLogger("autoresearch").info("interrupted, one line")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "failed with" not in run.stderr, run.stderr
    assert "interrupted, one line" in run.stderr
    logged = (tmp_path / "loop.log").read_text()
    assert "Trial 0 failed with parameters" in logged and "Traceback (most recent call last)" in logged
    assert "KeyboardInterrupt" in logged


def test_verbose_shows_the_traceback(tmp_path):
    script = textwrap.dedent("""
        import logging
        from autoresearch.ground.logs import setup_logging
        setup_logging(verbose=True)
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("autoresearch").warning("it failed", exc_info=True)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "it failed" in run.stderr and "ValueError: boom" in run.stderr


def test_the_log_file_handler_is_removed_after_the_run(tmp_path):
    from autoresearch.ground.logs import log_to_file

    root = logging.getLogger()
    before = list(root.handlers)
    with log_to_file(tmp_path / "loop.log"):
        assert len(root.handlers) == len(before) + 1
    assert root.handlers == before
