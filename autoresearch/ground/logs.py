"""Where the loop's log lines go: one line per event on the terminal, everything in the study's log file.

An ordinary failure (a port in use, a deferred trial, Ctrl-C, a server crash) is one line the
loop writes itself. Optuna's own "Trial N failed ... because of the following error" warning and
every traceback go to the log file (`runs/<study>/loop.log`), and to the terminal only with -v.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["log_to_file", "setup_logging"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Terse(logging.Formatter):
    """Formats the message without its traceback (the log file has it)."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


def _not_optuna_failure(record: logging.LogRecord) -> bool:
    """Optuna's failed-trial warnings repeat what the loop says in its own line (or the error line)."""
    return not (record.name.startswith("optuna") and record.getMessage().startswith("Trial ")
                and " failed with " in record.getMessage())


def setup_logging(verbose: bool) -> None:
    """The terminal handler; Optuna's records pass through it (not through Optuna's own handler)."""
    import optuna

    level = logging.DEBUG if verbose else logging.INFO
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(show_path=False, rich_tracebacks=verbose)
        formatter = logging.Formatter("%(message)s") if verbose else _Terse("%(message)s")
    else:
        handler = logging.StreamHandler()
        formatter = logging.Formatter(_FORMAT) if verbose else _Terse(_FORMAT)
    handler.setFormatter(formatter)
    if not verbose:
        handler.addFilter(_not_optuna_failure)
    logging.basicConfig(level=level, handlers=[handler])  # a no-op where logging is set up (pytest)
    for noisy in ("httpx", "optuna", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()


@contextlib.contextmanager
def log_to_file(path: Path) -> Iterator[Path]:
    """Within the block, every record, tracebacks included, also goes to `path` (appended)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        handler.close()
