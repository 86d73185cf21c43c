"""A model folder's manifest: every file's path, size and SHA256, and one hash over them.

The manifest hash names the model in every result (fidelity references, studies, provenance), so
there is exactly one definition of it, here beside the server that loads such folders.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

__all__ = ["build_manifest", "manifest_hash"]

log = logging.getLogger(__name__)
_SKIP = {"SYNTHETIC.json"}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def build_manifest(model_dir: Path, previous: dict | None = None) -> dict:
    """Files, sizes and SHA256 of a model folder; hashes are reused for files whose size and mtime match."""
    known = {f["path"]: f for f in (previous or {}).get("files", [])}
    files = []
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file() and p.name not in _SKIP):
        rel = path.relative_to(model_dir).as_posix()
        stat = path.stat()
        old = known.get(rel)
        if old and old["size"] == stat.st_size and old.get("mtime_ns") == stat.st_mtime_ns:
            sha = old["sha256"]
        else:
            log.info("hashing %s (%d bytes)", rel, stat.st_size)
            sha = _sha256(path)
        files.append({"path": rel, "size": stat.st_size, "sha256": sha, "mtime_ns": stat.st_mtime_ns})
    # The manifest hash covers names, sizes and contents, not mtimes: a copy hashes the same.
    canonical = json.dumps([[f["path"], f["size"], f["sha256"]] for f in files], separators=(",", ":"))
    return {"schema": 1, "files": files, "manifest_hash": hashlib.sha256(canonical.encode()).hexdigest()}


def manifest_hash(model_dir: Path) -> str:
    return build_manifest(model_dir)["manifest_hash"]
