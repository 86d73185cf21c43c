"""Byte sizes as people write them: 24GiB, 24GB, 512MiB, or a plain number of bytes (a bare G is refused)."""

from __future__ import annotations

import re

from serving.errors import ConfigError

__all__ = ["parse_bytes"]

# A bare "G" is refused: people mean GiB and GB both, and 7% is the size of the effects we measure.
_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2,
          "gb": 1000**3, "gib": 1024**3, "tb": 1000**4, "tib": 1024**4}


def parse_bytes(text: str) -> int:
    """'24GiB' -> 25769803776; '24GB' -> 24e9; a plain number is bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise ConfigError(f"not a byte size: {text!r} (write e.g. 24GiB, 512MiB or 25769803776)")
    return int(float(match.group(1)) * _UNITS[unit])

