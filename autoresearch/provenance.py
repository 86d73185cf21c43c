"""Where a measurement came from: server versions, GPU, driver, clocks and power, host, project commit."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from typing import Any

from bench import BenchResult

__all__ = ["collect_provenance", "gpu_uuid", "project_commit"]


def project_commit() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True,
                                    timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": sha or None, "dirty": dirty}


def collect_provenance(*, server_info: dict[str, Any] | None, bench: BenchResult | None = None) -> dict[str, Any]:
    """Server info (engine and torch versions, config, memory), the GPU bench saw, host and commit.

    `server_info` is the server's /v1/server_info as the caller read it with bench's client (None: none).
    """
    gpu = None
    if bench is not None and bench.gpu is not None:
        identity = bench.gpu
        gpu = {"name": getattr(identity, "name", None), "driver": getattr(identity, "driver_version", None),
               "details": _asdict(identity)}
        windows = [r.gpu for p in (*bench.prefill, *bench.decode) for r in p.runs if getattr(r, "gpu", None)]
        if windows:
            gpu["windows"] = [_asdict(w) for w in windows[:50]]
    return {
        "server_info": server_info,
        "gpu": gpu,
        "host": {"node": platform.node(), "python": platform.python_version(), "platform": platform.platform()},
        "project": project_commit(),
    }


def _asdict(obj: Any) -> Any:
    import dataclasses

    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def gpu_uuid(details: dict) -> str | None:
    """The NVML UUID of the GPU a provenance record was measured on (tells apart cards of one model)."""
    return ((details.get("gpu") or {}).get("details") or {}).get("uuid")
