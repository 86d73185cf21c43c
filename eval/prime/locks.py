"""Typed views of locks/: the prime-environments commit, every dataset pin, the offline packages.

Parsed once and validated strictly (eval.lockfiles' rules): an unknown key, a non-hex revision or
hash, or an environment naming a dataset with no pin is a LockError naming the file and key. Every
suite run records these pins' digests (eval.runner); the offline tasksets read only their own pins
(eval.lockfiles.offline_package_pins).

Usage:
    locks = load_locks()                 # locks/ of this checkout, or $EVAL_LOCKS_DIR
    locks.environments["aime25"].path    # "environments/math/aime25"
    locks.datasets["aime25"].files[0].sha256
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from eval.errors import LockError
from eval.lockfiles import (
    FilePin,
    OfflinePackagePin,
    check_keys,
    default_locks_dir,
    file_pins,
    parse_offline_packages,
    read_lock_file,
)

__all__ = [
    "DatasetBinding",
    "DatasetPin",
    "EnvironmentPin",
    "FilePin",
    "Locks",
    "OfflinePackagePin",
    "default_locks_dir",
    "load_locks",
]

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetBinding:
    kind: Literal["knob", "cwd", "hub_cache"]
    knob: str | None = None
    subdir: str = ""
    extra_knobs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetPin:
    name: str
    repo: str
    revision: str
    binding: DatasetBinding
    files: tuple[FilePin, ...]

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvironmentPin:
    name: str  # the taskset id verifiers imports
    path: str  # inside the prime-environments checkout
    package: str
    version: str
    dataset: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Locks:
    directory: Path
    repository: str
    commit: str
    verifiers_version: str
    verifiers_wheel_sha256: str
    environments: dict[str, EnvironmentPin]
    datasets: dict[str, DatasetPin]
    offline_packages: dict[str, OfflinePackagePin]
    digests: dict[str, str]  # lock file name -> sha256 of its bytes, for provenance


def _dataset(name: str, table: dict[str, Any], where: str) -> DatasetPin:
    check_keys(where, table, {"repo", "revision", "binding", "files"}, {"repo", "revision", "binding", "files"})
    if not _REPO.match(table["repo"]):
        raise LockError(f"{where}.repo: {table['repo']!r} is not 'owner/name'")
    if not _HEX40.match(table["revision"]):
        raise LockError(f"{where}.revision: must be a full 40-hex commit id, got {table['revision']!r}")
    b = table["binding"]
    check_keys(f"{where}.binding", b, {"kind", "knob", "subdir", "extra_knobs"}, {"kind"})
    if b["kind"] not in ("knob", "cwd", "hub_cache"):
        raise LockError(f"{where}.binding.kind: {b['kind']!r}; expected knob, cwd or hub_cache")
    if (b["kind"] == "knob") != ("knob" in b):
        raise LockError(f"{where}.binding: 'knob' is required with kind 'knob' and allowed only then")
    binding = DatasetBinding(
        kind=b["kind"],
        knob=b.get("knob"),
        subdir=b.get("subdir", ""),
        extra_knobs=tuple(sorted((str(k), str(v)) for k, v in b.get("extra_knobs", {}).items())),
    )
    files = file_pins(where, table["files"])
    if not files:
        raise LockError(f"{where}: a dataset pin needs at least one file")
    return DatasetPin(name=name, repo=table["repo"], revision=table["revision"], binding=binding, files=files)


def load_locks(directory: Path | None = None) -> Locks:
    """Read and validate every lock file. Raises: LockError naming the file and key."""
    directory = directory or default_locks_dir()
    sources, sources_digest = read_lock_file(directory / "prime-environments.toml")
    datasets_raw, datasets_digest = read_lock_file(directory / "datasets.toml")
    offline_raw, offline_digest = read_lock_file(directory / "offline-data.toml")

    where = "prime-environments.toml"
    check_keys(
        where,
        sources,
        {"schema", "prime_environments", "verifiers", "environments"},
        {"prime_environments", "verifiers", "environments"},
    )
    pe = sources["prime_environments"]
    check_keys(f"{where} [prime_environments]", pe, {"repository", "commit"}, {"repository", "commit"})
    if not _HEX40.match(pe["commit"]):
        raise LockError(f"{where} [prime_environments].commit must be a full 40-hex commit id")
    vf = sources["verifiers"]
    check_keys(f"{where} [verifiers]", vf, {"version", "wheel", "wheel_sha256"}, {"version", "wheel_sha256"})

    datasets = {
        name: _dataset(name, table, f"datasets.toml [datasets.{name}]")
        for name, table in datasets_raw.get("datasets", {}).items()
    }
    environments: dict[str, EnvironmentPin] = {}
    for name, table in sources["environments"].items():
        w = f"{where} [environments.{name}]"
        check_keys(w, table, {"path", "package", "version", "dataset"}, {"path", "package", "version"})
        if table.get("dataset") is not None and table["dataset"] not in datasets:
            raise LockError(f"{w}: dataset {table['dataset']!r} has no pin in datasets.toml")
        environments[name] = EnvironmentPin(
            name=name,
            path=table["path"],
            package=table["package"],
            version=table["version"],
            dataset=table.get("dataset"),
        )
    offline = parse_offline_packages(offline_raw)
    return Locks(
        directory=directory,
        repository=pe["repository"],
        commit=pe["commit"],
        verifiers_version=vf["version"],
        verifiers_wheel_sha256=vf["wheel_sha256"],
        environments=environments,
        datasets=datasets,
        offline_packages=offline,
        digests={
            "prime-environments.toml": sources_digest,
            "datasets.toml": datasets_digest,
            "offline-data.toml": offline_digest,
        },
    )
