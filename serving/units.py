"""Byte sizes as people write them: 24GiB, 16G, 512MiB, or a plain number of bytes."""

from __future__ import annotations

import re

from serving.errors import ConfigError

__all__ = ["format_bytes", "parse_bytes"]

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1024**3, "gb": 1000**3, "gib": 1024**3, "t": 1024**4, "tb": 1000**4, "tib": 1024**4}


def parse_bytes(text: str) -> int:
    """'24GiB' -> 25769803776. A bare 'G' means GiB, as GPU memory is usually quoted."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise ConfigError(f"not a byte size: {text!r} (write e.g. 24GiB, 512MiB or 25769803776)")
    return int(float(match.group(1)) * _UNITS[unit])


def format_bytes(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB"
