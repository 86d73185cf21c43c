"""Where a measurement came from: server versions, GPU, driver, clocks and power, host, project commit.

Usage:
    info = server_info(server.url)          # /v1/server_info through bench's client, None where absent
    record_provenance(db, study=..., trial=n, config=config, model_manifest_hash=h, server_info=info, bench=result)
"""

from __future__ import annotations

import logging
import platform
import subprocess
from pathlib import Path
from typing import Any

from autoresearch.ground.db import ResultsDB
from bench import BenchResult
from openai_client import Client, ClientError, Endpoint
from serving.config import ServingConfig

__all__ = ["collect_provenance", "gpu_uuid", "project_commit", "record_provenance", "server_info"]

log = logging.getLogger(__name__)


def server_info(url: str) -> dict | None:
    """The server's /v1/server_info through the one client (openai_client); None where it has none or does not answer."""
    try:
        with Client(Endpoint(url=url), timeout_s=30) as client:
            return client.server_info()
    except ClientError as exc:
        log.warning("no /v1/server_info from %s: %s", url, exc)
        return None


def record_provenance(db: ResultsDB, *, study: str, trial: int, config: ServingConfig, model_manifest_hash: str,
                      server_info: dict | None, bench: BenchResult) -> None:
    """Store one trial's provenance; warn where the study's trials ran on more than one GPU."""
    details = collect_provenance(server_info=server_info, bench=bench)
    uuid = gpu_uuid(details)
    earlier = {gpu_uuid(r["details"]) for r in db.provenance(study=study)}
    if uuid and earlier - {uuid, None}:
        log.warning("trial %d runs on GPU %s, other trials of this study on %s: search speeds are not comparable "
                    "across GPUs (finalists are re-measured together)", trial, uuid,
                    ", ".join(sorted(e for e in earlier if e and e != uuid)))
    db.add_provenance(study=study, trial=trial, config_digest=config.digest, model_manifest_hash=model_manifest_hash,
                      engine=config.engine, details=details)


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
