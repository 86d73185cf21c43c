"""Before a suite runs: is everything it needs here, and would verifiers accept its configs?

`preflight` checks that every taskset package is importable, every pinned dataset is cached and
verified, Docker answers and the runtime image is built, and fails with one line per missing piece,
each naming it and the command that fixes it. `dry_run` validates each taskset's EvalConfig with verifiers' own schema
without a model or a server. verifiers is imported only by `dry_run` (importing eval stays cheap).

Usage:
    preflight(suite, locks=load_locks(), paths=EvalPaths.default())
    entries = dry_run(suite, locks=locks, paths=paths, run_dir=new_run_dir(paths, suite.name))
"""

from __future__ import annotations

import copy
import importlib.util
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from eval.errors import (
    DataIntegrityError,
    EvalConfigError,
    MissingDataset,
    MissingEnvironment,
    RuntimeUnavailable,
)
from eval.locks import Locks
from eval.plugins import PLUGIN_MODULES
from eval.run_config import build_launch
from eval.runtime_image import image_id
from eval.snapshots import EvalPaths, check_dataset
from eval.suites import SuiteSpec
from openai_client import Endpoint

__all__ = ["DryRunEntry", "Missing", "dry_run", "is_installed", "missing_pieces", "preflight"]


def is_installed(plugin_id: str, kind: str = "tasksets") -> bool:
    """Whether verifiers could import the plugin `plugin_id` (a taskset or harness) in this interpreter."""
    if plugin_id in PLUGIN_MODULES:
        return True  # ships inside this package (eval.plugins)
    module = plugin_id.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()
    if importlib.util.find_spec(f"verifiers.v1.{kind}.{module}") is not None:
        return True
    return importlib.util.find_spec(module) is not None


def _docker_problem() -> str | None:
    try:
        probe = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=30
        )
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return f"docker CLI unusable ({type(exc).__name__})"
    if probe.returncode != 0:
        return (
            (probe.stderr or probe.stdout).strip().splitlines()[-1][:300]
            if (probe.stderr or probe.stdout)
            else "docker info failed"
        )
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class Missing:
    """One piece a suite needs that is not here: what, and the command that fixes it (one line)."""

    kind: Literal["environment", "dataset", "runtime"]
    name: str
    line: str


def missing_pieces(suite: SuiteSpec, *, locks: Locks, paths: EvalPaths, check_runtime: bool = True) -> list[Missing]:
    """Everything `suite` needs that is not here, in the order to fix it; empty when it can run."""
    missing: list[Missing] = []
    for taskset_id in sorted({t.taskset_id for t in suite.tasksets if not is_installed(t.taskset_id)}):
        fix = ("`python -m eval setup` (needs GitHub)" if taskset_id in locks.environments
               else "nothing: it has no entry in locks/prime-environments.toml")
        missing.append(Missing(kind="environment", name=taskset_id,
                               line=f"taskset {taskset_id} is not installed; fix: {fix}"))
    if not is_installed(suite.harness, "harnesses"):
        missing.append(Missing(kind="environment", name=f"harness {suite.harness}",
                               line=f"harness {suite.harness} is not installed; fix: `python -m eval setup`"))
    for name in sorted({t.dataset for t in suite.tasksets if t.dataset is not None}):
        try:
            check_dataset(paths, locks.datasets[name])
        except MissingDataset:
            missing.append(Missing(kind="dataset", name=name, line=(
                f"dataset {name} is not in {paths.hub_dir}; fix: `python -m eval data {name}` (needs the Hub; "
                "runs are offline and never download)")))
    if check_runtime and suite.runtime.type == "docker":
        if problem := _docker_problem():
            missing.append(Missing(kind="runtime", name="docker", line=(
                f"Docker is not usable ({problem}); fix: start the Docker engine (the Prime tasksets' network "
                "policies need a container runtime), or run the `offline` suite, which needs none")))
        elif image_id(image := suite.runtime.resolved_image) is None:
            fix = "`python -m eval image`" if suite.runtime.image is None else f"`docker pull {image}`"
            missing.append(Missing(kind="runtime", name=image,
                                   line=f"runtime image {image} is not in the local Docker engine; fix: {fix}"))
    return missing


_ERRORS = {"environment": MissingEnvironment, "dataset": MissingDataset, "runtime": RuntimeUnavailable}


def preflight(suite: SuiteSpec, *, locks: Locks, paths: EvalPaths, check_runtime: bool = True) -> None:
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
    suite: SuiteSpec, *, locks: Locks, paths: EvalPaths, run_dir: Path, model: str = "dry-run"
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
        if spec.dataset is not None and spec.dataset not in locks.datasets:
            raise EvalConfigError(
                f"taskset {spec.name}: dataset {spec.dataset!r} has no pin in locks/datasets.toml"
            )
        if spec.source == "prime" and spec.taskset_id not in locks.environments:
            raise EvalConfigError(
                f"taskset {spec.name}: environment {spec.taskset_id!r} has no pin in locks/prime-environments.toml"
            )
        launch = build_launch(suite, spec, endpoint, locks=locks, paths=paths, run_dir=run_dir)
        installed = is_installed(spec.taskset_id)
        _validate(launch.config, full=installed)
        ready = None
        if spec.dataset is not None:
            try:
                check_dataset(paths, locks.datasets[spec.dataset])
                ready = True
            except (MissingDataset, DataIntegrityError):
                ready = False
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
