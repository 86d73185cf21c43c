"""`python -m eval setup`: exactly the locked commit, refused when it differs, a clear error without GitHub.

A local git repository stands in for github.com (an outside boundary): same git commands, no network.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys

import pytest

from eval.errors import LockError, SourceUnavailable
from eval.paths import EvalPaths
from eval.prime.locks import default_locks_dir, load_locks
from eval.prime.sources import (
    checkout_dir,
    ensure_checkout,
    environment_problems,
    install_environments,
    verify_checkout,
)


def _git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def local_prime_environments(tmp_path):
    """A repository shaped like prime-environments with one environment at the locked path and version."""
    repo = tmp_path / "prime-environments"
    project = repo / "environments" / "math" / "aime25"
    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "aime25"\nversion = "0.1.0"\n')
    _git("init", "-q", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "env", cwd=repo)
    _git("config", "uploadpack.allowReachableSHA1InWant", "true", cwd=repo)
    locks = dataclasses.replace(
        load_locks(), repository=f"file://{repo}", commit=_git("rev-parse", "HEAD", cwd=repo)
    )
    return repo, locks


def test_setup_checks_out_exactly_the_locked_commit(local_prime_environments, tmp_path):
    repo, locks = local_prime_environments
    paths = EvalPaths(tmp_path / "cache")
    checkout = ensure_checkout(locks, paths)
    assert _git("rev-parse", "HEAD", cwd=checkout) == locks.commit
    assert environment_problems(locks.environments["aime25"], checkout) == []
    assert environment_problems(locks.environments["aime24"], checkout) == [
        "aime24: environments/math/aime24 does not exist at the locked commit"
    ]
    assert ensure_checkout(locks, paths) == checkout  # idempotent: verified, not refetched


def test_a_checkout_with_local_changes_or_another_commit_is_refused_not_reset(
    local_prime_environments, tmp_path
):
    repo, locks = local_prime_environments
    paths = EvalPaths(tmp_path / "cache")
    checkout = ensure_checkout(locks, paths)
    (checkout / "environments" / "math" / "aime25" / "pyproject.toml").write_text("tampered")
    with pytest.raises(SourceUnavailable, match="local changes"):
        verify_checkout(locks, checkout)
    moved = dataclasses.replace(locks, commit="0" * 40)
    with pytest.raises(SourceUnavailable, match="not reset automatically"):
        ensure_checkout(moved, paths)
    assert (checkout / "environments" / "math" / "aime25" / "pyproject.toml").read_text() == "tampered"


def test_an_environment_whose_version_differs_from_the_lock_is_not_installed(
    local_prime_environments, tmp_path
):
    repo, locks = local_prime_environments
    checkout = ensure_checkout(locks, EvalPaths(tmp_path / "cache"))
    bumped = dataclasses.replace(
        locks, environments={"aime25": dataclasses.replace(locks.environments["aime25"], version="0.2.0")}
    )
    with pytest.raises(LockError, match="declares version '0.1.0', the lock '0.2.0'"):
        install_environments(bumped, checkout)
    with pytest.raises(LockError, match="no environment pin"):
        install_environments(locks, checkout, ["gsm8k"])


def test_setup_without_github_fails_clearly_and_leaves_nothing_behind(tmp_path, repo_root):
    locks_dir = tmp_path / "locks"
    shutil.copytree(default_locks_dir(), locks_dir)
    lock = locks_dir / "prime-environments.toml"
    lock.write_text(
        lock.read_text().replace(
            "https://github.com/PrimeIntellect-ai/prime-envs.git", "http://127.0.0.1:9/prime-envs.git"
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "eval",
            "setup",
            "--locks-dir",
            str(locks_dir),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        cwd=repo_root,
        timeout=120,
    )
    assert result.returncode == 1
    assert "SourceUnavailable" in result.stdout and "needs access to github.com" in result.stdout.replace(
        "\n", " "
    )
    assert not checkout_dir(EvalPaths(tmp_path / "cache")).exists()
