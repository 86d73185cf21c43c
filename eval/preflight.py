"""Before a suite runs: is everything it needs here, and would verifiers accept its configs?

`preflight` checks that every taskset package is importable, every pinned dataset is cached and
verified, and the runtime is usable, and fails with one message that names everything missing and
the command that fixes it. `dry_run` validates each taskset's EvalConfig with verifiers' own schema
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
from typing import Any

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
from eval.snapshots import EvalPaths, check_dataset
from eval.suites import SuiteSpec
from openai_client import Endpoint

__all__ = ["DryRunEntry", "dry_run", "is_installed", "preflight"]


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


def preflight(suite: SuiteSpec, *, locks: Locks, paths: EvalPaths, check_runtime: bool = True) -> None:
    """Fail before any model call when something the suite needs is missing.

    Raises:
        MissingEnvironment: taskset packages are not installed (`python -m eval setup`).
        MissingDataset / DataIntegrityError: pinned data is missing or altered (`python -m eval data`).
        RuntimeUnavailable: the suite needs Docker and no engine answers.
    """
    missing_envs = sorted({t.taskset_id for t in suite.tasksets if not is_installed(t.taskset_id)})
    if not is_installed(suite.harness, "harnesses"):
        missing_envs.append(f"harness {suite.harness}")
    missing_data: list[str] = []
    for spec in suite.tasksets:
        if spec.dataset is None:
            continue
        try:
            check_dataset(paths, locks.datasets[spec.dataset])
        except MissingDataset:
            missing_data.append(spec.dataset)
    missing_data = sorted(set(missing_data))
    parts = []
    if missing_envs:
        hint = "run `python -m eval setup` (needs GitHub) to install them from the pinned prime-environments commit"
        unpinned = [n for n in missing_envs if n not in locks.environments]
        if unpinned:
            hint += f"; {unpinned} have no entry in locks/prime-environments.toml"
        parts.append(f"taskset environment(s) not installed: {', '.join(missing_envs)}; {hint}")
    if missing_data:
        parts.append(
            f"pinned dataset(s) not in {paths.hub_dir}: {', '.join(missing_data)}; run "
            + " && ".join(f"`python -m eval data {n}`" for n in missing_data)
            + " on a host that can reach the Hub (runs are offline and never download)"
        )
    if missing_envs:
        raise MissingEnvironment(f"suite {suite.name}: " + ". ".join(parts), names=tuple(missing_envs))
    if missing_data:
        raise MissingDataset(f"suite {suite.name}: " + ". ".join(parts), names=tuple(missing_data))
    if check_runtime and suite.runtime.type == "docker" and (problem := _docker_problem()):
        raise RuntimeUnavailable(
            f"suite {suite.name} runs its tasksets in the local Docker runtime, but Docker is not usable: "
            f"{problem}. Start the Docker engine (or run the `offline` suite, which needs none)"
        )


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
