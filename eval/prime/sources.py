"""`python -m eval setup`: the pinned prime-environments checkout and its installed tasksets.

The checkout lives in the project's cache (`.cache/eval/sources/prime-environments`), is fetched
at exactly the locked commit (never a branch), and is refused rather than reset when it sits at
another commit or has local changes. Each environment is installed from its path into the current
interpreter with `pip install --no-deps` (the eval extra already provides verifiers and datasets;
an environment must not replace the pinned verifiers), after checking its declared version and Python;
then its other declared dependencies are installed under a constraint that keeps verifiers pinned, and
verifiers' own loader must accept it (eval.prime.environment_checks).

Usage:
    checkout = ensure_checkout(locks, paths)      # needs GitHub on first use
    install_environments(locks, checkout)
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from eval.errors import LockError, SourceUnavailable
from eval.paths import EvalPaths
from eval.prime.environment_checks import loading_problem, python_problem, unmet_requirements
from eval.prime.locks import EnvironmentPin, Locks

__all__ = [
    "checkout_dir",
    "ensure_checkout",
    "environment_problems",
    "install_environments",
    "verify_checkout",
]

log = logging.getLogger(__name__)


def checkout_dir(paths: EvalPaths) -> Path:
    return paths.cache_dir / "sources" / "prime-environments"


def _git(args: list[str], cwd: Path, *, timeout_s: float = 600) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as exc:
        raise SourceUnavailable("`git` is not installed; `python -m eval setup` needs it") from exc
    except subprocess.TimeoutExpired as exc:
        raise SourceUnavailable(f"git {' '.join(args[:2])} timed out after {timeout_s:.0f} s") from exc


def verify_checkout(locks: Locks, checkout: Path) -> None:
    """Raises SourceUnavailable when `checkout` is not a clean tree at the locked commit."""
    if not (checkout / ".git").exists():
        raise SourceUnavailable(
            f"no prime-environments checkout at {checkout}; run `python -m eval setup` (needs GitHub)"
        )
    head = _git(["rev-parse", "HEAD"], checkout).stdout.strip()
    if head != locks.commit:
        raise SourceUnavailable(
            f"{checkout} is at {head or 'no commit'}, locks/prime-environments.toml pins {locks.commit}; "
            "it is not reset automatically: delete it and run `python -m eval setup`"
        )
    dirty = _git(["status", "--porcelain"], checkout).stdout.strip()
    if dirty:
        raise SourceUnavailable(f"{checkout} has local changes; refusing to install from it:\n{dirty[:500]}")


def ensure_checkout(locks: Locks, paths: EvalPaths) -> Path:
    """The verified checkout, fetching the locked commit if there is none yet.

    Raises:
        SourceUnavailable: GitHub cannot be reached, or an existing checkout differs from the lock.
    """
    checkout = checkout_dir(paths)
    if (checkout / ".git").exists():
        verify_checkout(locks, checkout)
        return checkout
    if checkout.exists() and any(checkout.iterdir()):
        raise SourceUnavailable(f"{checkout} exists but is not a git checkout; remove it first")
    checkout.mkdir(parents=True, exist_ok=True)
    try:
        _fetch(locks, checkout)
    except SourceUnavailable:
        shutil.rmtree(checkout)  # ours and empty before: a half-made checkout would block the next try
        raise
    verify_checkout(locks, checkout)
    return checkout


def _fetch(locks: Locks, checkout: Path) -> None:
    for args in (["init", "-q"], ["remote", "add", "origin", locks.repository]):
        result = _git(args, checkout)
        if result.returncode != 0:
            raise SourceUnavailable(f"git {' '.join(args)} failed: {result.stderr.strip()[-500:]}")
    log.info("fetching %s at %s", locks.repository, locks.commit)
    fetched = _git(["fetch", "--depth", "1", "origin", locks.commit], checkout)
    if fetched.returncode != 0:
        raise SourceUnavailable(
            f"cannot fetch {locks.repository} at {locks.commit}: {fetched.stderr.strip()[-500:]}. "
            "`python -m eval setup` needs access to github.com; the task suites cannot be installed "
            "without it (the `offline` suite needs nothing from GitHub)"
        )
    result = _git(["checkout", "-q", "--detach", "FETCH_HEAD"], checkout)
    if result.returncode != 0:
        raise SourceUnavailable(f"git checkout of {locks.commit} failed: {result.stderr.strip()[-500:]}")


def _declared_version(project_dir: Path) -> str | None:
    pyproject = project_dir / "pyproject.toml"
    if not pyproject.is_file():
        return None
    return tomllib.loads(pyproject.read_text()).get("project", {}).get("version")


def environment_problems(pin: EnvironmentPin, checkout: Path) -> list[str]:
    """What is wrong with one environment's source in the checkout (empty when it matches the lock)."""
    project = checkout / pin.path
    if not project.is_dir():
        return [f"{pin.name}: {pin.path} does not exist at the locked commit"]
    declared = _declared_version(project)
    if declared != pin.version:
        return [
            f"{pin.name}: {pin.path}/pyproject.toml declares version {declared!r}, the lock {pin.version!r}"
        ]
    return []


def install_environments(locks: Locks, checkout: Path, names: list[str] | None = None) -> list[str]:
    """pip-install the named environments (all by default) from the checkout; returns their names.

    Raises:
        LockError: a name has no pin, or the checkout's source differs from the pin.
        SourceUnavailable: pip failed (the message carries its output's tail).
    """
    names = names or sorted(locks.environments)
    unknown = [n for n in names if n not in locks.environments]
    if unknown:
        raise LockError(f"no environment pin for {unknown}; pinned: {sorted(locks.environments)}")
    problems = [p for n in names for p in environment_problems(locks.environments[n], checkout)]
    problems += [p for n in names if (p := python_problem(n, checkout / locks.environments[n].path))]
    if problems:
        raise LockError("the checkout does not match locks/prime-environments.toml: " + "; ".join(problems))
    for name in names:
        project = checkout / locks.environments[name].path
        log.info("installing %s from %s", name, project)
        _pip(["--no-deps", str(project)], f"pip install of {name} from {project}")
        if unmet := unmet_requirements(locks.environments[name].package):
            # Its own dependencies, never a different verifiers: the pinned one constrains the resolver.
            log.info("installing %s's declared dependencies: %s", name, unmet)
            constraint = Path(checkout).parent / "verifiers-constraint.txt"
            constraint.write_text(f"verifiers=={locks.verifiers_version}\n")
            _pip(["-c", str(constraint), *unmet], f"installing {name}'s dependencies {unmet}")
    if problems := [p for n in names if (p := loading_problem(n))]:
        raise LockError("installed, but verifiers 0.4.0's loading rules refuse: " + "; ".join(problems))
    return names


def _pip(args: list[str], what: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise SourceUnavailable(f"{what} failed:\n{result.stderr[-1500:]}")
