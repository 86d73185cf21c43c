"""The API key: read from a file that only its owner can read, never logged, never stored."""

from __future__ import annotations

import ipaddress
import os
import stat
from pathlib import Path

from serving.errors import AuthSetupError

__all__ = ["is_loopback", "read_api_key"]


def read_api_key(path: Path) -> str:
    """The key in `path`; the file must be the current user's own, with mode 0600 or 0400."""
    try:
        info = path.stat()
    except OSError as exc:
        raise AuthSetupError(f"cannot read the API key file {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise AuthSetupError(f"the API key file {path} is not a regular file")
    if info.st_uid != os.getuid():
        raise AuthSetupError(f"the API key file {path} belongs to uid {info.st_uid}, not to you (uid {os.getuid()})")
    mode = stat.S_IMODE(info.st_mode)
    if mode not in (0o600, 0o400):
        raise AuthSetupError(f"the API key file {path} has mode {mode:04o}; run: chmod 600 {path}")
    key = path.read_text().strip()
    if not key or any(ch.isspace() for ch in key):
        raise AuthSetupError(f"the API key file {path} must hold one key with no spaces")
    return key


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
