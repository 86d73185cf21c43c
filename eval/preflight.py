"""Before a suite runs: is everything it needs here, and would verifiers accept its configs?

`preflight` checks that every taskset and the harness are importable and, for a suite that needs the
Prime/Docker supply chain (`SuiteSpec.needs_prime`: eval.prime checks it), that its pinned tasksets are
installed, its pinned data cached and verified, Docker answering and the runtime image built; it fails
with one line per missing piece, each naming it and the command that fixes it. `dry_run` validates each
taskset's EvalConfig with verifiers' own schema without a model or a server. verifiers is imported only
by `dry_run` (importing eval stays cheap). The offline suites need nothing of eval.prime.

Usage:
    preflight(suite, paths=EvalPaths.default())
    entries = dry_run(suite, paths=paths, run_dir=new_run_dir(paths, suite.name))
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.errors import (
    EvalConfigError,
    MissingDataset,
    MissingEnvironment,
    RuntimeUnavailable,
)
from eval.missing import Missing, is_installed
from eval.paths import EvalPaths
from eval.run_config import build_launch
from eval.suites import SuiteSpec
from openai_client import Endpoint

if TYPE_CHECKING:  # the Prime suites' pins; the offline suites need none
    from eval.prime import Locks

__all__ = ["DryRunEntry", "Missing", "dry_run", "is_installed", "missing_pieces", "preflight"]


_ORDER = ("environment", "dataset", "runtime")  # the order to fix them in


def missing_pieces(suite: SuiteSpec, *, locks: Locks | None = None, paths: EvalPaths,
                   check_runtime: bool = True) -> list[Missing]:
    """Everything `suite` needs that is not here, in the order to fix it; empty when it can run.

    `locks` (None: locks/ of this checkout) is read only for a suite that needs eval.prime.

    Raises:
        DataIntegrityError: a cached pinned dataset differs from its pin.
    """
    missing: list[Missing] = []
    if suite.needs_prime:
        from eval.prime import missing_prime_pieces

        missing += missing_prime_pieces(suite, locks=locks, paths=paths, check_runtime=check_runtime)
    if not is_installed(suite.harness, "harnesses"):
        missing.append(Missing(kind="environment", name=f"harness {suite.harness}",
                               line=f"harness {suite.harness} is not installed; fix: `python -m eval setup`"))
    return sorted(missing, key=lambda m: _ORDER.index(m.kind))  # stable: the harness after the tasksets


_ERRORS = {"environment": MissingEnvironment, "dataset": MissingDataset, "runtime": RuntimeUnavailable}


def preflight(suite: SuiteSpec, *, locks: Locks | None = None, paths: EvalPaths, check_runtime: bool = True) -> None:
    """Fail before any model call when something the suite needs is missing: one line per missing piece.

    Raises (the kind of the first missing piece; the message names every one):
        MissingEnvironment: taskset packages are not installed (`python -m eval setup`).
        MissingDataset: pinned data is missing (`python -m eval data NAME`).
        DataIntegrityError: pinned data is altered.
        RuntimeUnavailable: the suite needs Docker and no engine answers, or its image is not built.
    """
    missing = missing_pieces(suite, locks=locks, paths=paths, check_runtime=check_runtime)
    if missing:
        first = missing[0].kind
        error = _ERRORS[first]
        message = f"suite {suite.name} cannot run here:\n" + "\n".join(m.line for m in missing)
        if error is RuntimeUnavailable:
            raise error(message)
        raise error(message, names=tuple(m.name for m in missing if m.kind == first))


@dataclass(frozen=True, kw_only=True, slots=True)
class DryRunEntry:
    """What --dry-run established for one taskset."""

    name: str
    config: dict[str, Any]  # the EvalConfig data verifiers validated (no secrets in it)
    validated: str  # "full" or "without taskset knobs (environment not installed)"
    environment_installed: bool
    dataset: str | None
    dataset_ready: bool | None  # None when the taskset has no Hub dataset


def _validate(config: dict[str, Any], full: bool) -> None:
    from pydantic import ValidationError
    from verifiers.v1.configs.cli.eval import EvalConfig

    data = copy.deepcopy(config)  # validation mutates its input
    if not full:
        data["env"]["taskset"] = {"id": ""}
    try:
        EvalConfig.model_validate(data)
    except ValidationError as exc:
        raise EvalConfigError(
            f"taskset {config['run']['name']}: verifiers rejects the config: {exc}"
        ) from exc


def dry_run(
    suite: SuiteSpec, *, locks: Locks | None = None, paths: EvalPaths, run_dir: Path, model: str = "dry-run"
) -> list[DryRunEntry]:
    """Validate every taskset's EvalConfig without a model or a server; nothing is run or downloaded.

    With the environment installed the whole config is validated by verifiers, taskset knobs
    included; without it, everything but the taskset's own knobs (which only its package defines).

    Raises:
        EvalConfigError: verifiers rejects a config, or a taskset names an unpinned dataset.
    """
    from eval.plugins import register_plugins

    register_plugins()
    endpoint = Endpoint(url="http://127.0.0.1:1", model=model)
    entries = []
    for spec in suite.tasksets:
        if spec.dataset is not None or spec.source == "prime":
            from eval.prime import check_pins

            check_pins(spec, locks=locks)
        launch = build_launch(suite, spec, endpoint, locks=locks, paths=paths, run_dir=run_dir)
        installed = is_installed(spec.taskset_id)
        _validate(launch.config, full=installed)
        ready = None  # None when the taskset has no pinned Hub dataset
        if spec.dataset is not None:
            from eval.prime import is_dataset_ready

            ready = is_dataset_ready(spec.dataset, locks=locks, paths=paths)
        entries.append(
            DryRunEntry(
                name=spec.name,
                config=launch.config,
                validated="full" if installed else "without taskset knobs (environment not installed)",
                environment_installed=installed,
                dataset=spec.dataset,
                dataset_ready=ready,
            )
        )
    return entries
