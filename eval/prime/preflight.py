"""Before a Prime suite runs: its pinned tasksets installed, their data verified, Docker and its image here.

eval.preflight asks this module only for a suite that needs it (`SuiteSpec.needs_prime`): each missing
piece is one `Missing` line naming it and the command that fixes it (`python -m eval setup`, `python -m
eval data NAME`, start Docker, `python -m eval image`). For --dry-run, `check_pins` refuses a taskset
whose environment or dataset has no pin, and `is_dataset_ready` says whether its data is here.

Usage:
    missing = missing_prime_pieces(suite, locks=load_locks(), paths=EvalPaths.default())
"""

from __future__ import annotations

import subprocess

from eval.errors import DataIntegrityError, EvalConfigError, MissingDataset
from eval.missing import Missing, is_installed
from eval.paths import EvalPaths
from eval.prime.locks import Locks, load_locks
from eval.prime.runtime_image import image_id
from eval.prime.snapshots import check_dataset
from eval.suites import SuiteSpec, TasksetSpec

__all__ = ["check_pins", "is_dataset_ready", "missing_prime_pieces"]


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


def missing_prime_pieces(suite: SuiteSpec, *, locks: Locks | None, paths: EvalPaths,
                         check_runtime: bool = True) -> list[Missing]:
    """The tasksets `suite` runs that are not installed, its pinned datasets not cached, and Docker or its
    image where the suite runs there; in that order, empty when all are here. `locks`: None reads locks/.

    Raises:
        DataIntegrityError: a cached dataset differs from its pin.
    """
    locks = locks or load_locks()
    missing: list[Missing] = []
    for taskset_id in sorted({t.taskset_id for t in suite.tasksets if not is_installed(t.taskset_id)}):
        fix = ("`python -m eval setup` (needs GitHub)" if taskset_id in locks.environments
               else "nothing: it has no entry in locks/prime-environments.toml")
        missing.append(Missing(kind="environment", name=taskset_id,
                               line=f"taskset {taskset_id} is not installed; fix: {fix}"))
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


def check_pins(spec: TasksetSpec, *, locks: Locks | None) -> None:
    """Raises EvalConfigError when `spec` names a dataset, or is a Prime taskset, that locks/ does not pin."""
    locks = locks or load_locks()
    if spec.dataset is not None and spec.dataset not in locks.datasets:
        raise EvalConfigError(
            f"taskset {spec.name}: dataset {spec.dataset!r} has no pin in locks/datasets.toml"
        )
    if spec.source == "prime" and spec.taskset_id not in locks.environments:
        raise EvalConfigError(
            f"taskset {spec.name}: environment {spec.taskset_id!r} has no pin in locks/prime-environments.toml"
        )


def is_dataset_ready(name: str, *, locks: Locks | None, paths: EvalPaths) -> bool:
    """Whether the pinned dataset `name` is cached and verified (no network)."""
    locks = locks or load_locks()
    try:
        check_dataset(paths, locks.datasets[name])
    except (MissingDataset, DataIntegrityError):
        return False
    return True
