"""Where the model comes from, and the manifest whose hash names it in every result.

A local folder is hashed once (files, sizes, SHA256) and the manifest is reused while no file's
size or mtime changed. A Hub repository id with a revision is downloaded (huggingface_hub), checked
against the manifest in locks/ if one was written before, and the manifest is written to locks/.
With no model at all, the embedded default is generated: the tiny synthetic Qwen3_5, seed 0.

Usage:
    model = resolve_model("turboderp/Qwen3.8-27B-exl3@4.00bpw", locks_dir=Path("locks"), cache_dir=...)
    model.path, model.manifest_hash
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from autoresearch.errors import ModelSourceError
from serving.manifest import build_manifest

__all__ = ["EMBEDDED_DEFAULT", "ResolvedModel", "build_manifest", "resolve_model"]

log = logging.getLogger(__name__)
EMBEDDED_DEFAULT = "embedded:tiny"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


@dataclass(frozen=True)
class ResolvedModel:
    path: Path
    name: str  # what results and the study name call it
    manifest_hash: str
    manifest_path: Path
    source: str  # the --model argument, or the embedded default
    is_embedded: bool = False


def _manifest_path(locks_dir: Path, name: str) -> Path:
    safe = re.sub(r"[^\w.-]+", "_", name).strip("_")
    return locks_dir / "models" / f"{safe}.json"


def _local(model_dir: Path, *, name: str, source: str, locks_dir: Path, embedded: bool = False) -> ResolvedModel:
    if not model_dir.is_dir():
        raise ModelSourceError(f"--model {model_dir} is not a folder (give a model folder or a Hub id like org/repo@rev)")
    if not (model_dir / "config.json").exists():
        raise ModelSourceError(f"{model_dir} has no config.json: not a model folder")
    path = _manifest_path(locks_dir, name)
    previous = None
    if path.exists():
        previous = json.loads(path.read_text())
        if previous.get("model_dir") != str(model_dir.resolve()):
            previous = None
    manifest = build_manifest(model_dir, previous)
    manifest.update(model_dir=str(model_dir.resolve()), source=source)
    if manifest != previous:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(manifest, indent=1) + "\n")
    return ResolvedModel(path=model_dir.resolve(), name=name, manifest_hash=manifest["manifest_hash"],
                         manifest_path=path, source=source, is_embedded=embedded)


def _hub(repo_spec: str, *, locks_dir: Path, cache_dir: Path) -> ResolvedModel:
    repo, _, revision = repo_spec.partition("@")
    revision = revision or "main"
    lock_path = _manifest_path(locks_dir, f"{repo}@{revision}")
    locked = json.loads(lock_path.read_text()) if lock_path.exists() else None
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise ModelSourceError("downloading from the Hub needs huggingface_hub: pip install huggingface_hub") from exc
    try:
        local = Path(snapshot_download(repo_id=repo, revision=revision, cache_dir=str(cache_dir)))
    except Exception as exc:  # network, auth, unknown revision: all end the same way for the user
        raise ModelSourceError(f"could not download {repo}@{revision}: {exc}") from exc
    manifest = build_manifest(local)
    if locked is not None and locked["manifest_hash"] != manifest["manifest_hash"]:
        bad = {f["path"] for f in locked["files"]} ^ {f["path"] for f in manifest["files"]}
        raise ModelSourceError(
            f"{repo}@{revision} does not match {lock_path}: manifest {manifest['manifest_hash'][:12]} != "
            f"{locked['manifest_hash'][:12]}{' (files differ: ' + ', '.join(sorted(bad)) + ')' if bad else ''}"
        )
    manifest.update(model_dir=str(local), source=repo_spec, repo=repo, revision=revision)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return ResolvedModel(path=local, name=f"{repo.split('/')[-1]}@{revision}", manifest_hash=manifest["manifest_hash"],
                         manifest_path=lock_path, source=repo_spec)


def model_of_study(study_attrs: dict, *, locks_dir: Path) -> ResolvedModel:
    """The model a stored study was made with, as it recorded it: reports and exports need no weights."""
    model = study_attrs["model"]
    return ResolvedModel(path=Path(model["source"]), name=model["name"], manifest_hash=model["manifest_hash"],
                         manifest_path=_manifest_path(locks_dir, model["name"]), source=model["source"],
                         is_embedded=model["source"] == EMBEDDED_DEFAULT)


def resolve_model(spec: str | None, *, locks_dir: Path, cache_dir: Path) -> ResolvedModel:
    """A local folder, `org/repo@revision` on the Hub, or None for the embedded default."""
    if spec is None or spec == EMBEDDED_DEFAULT:
        from serving.synthetic.tiny import write_tiny_model

        target = cache_dir / "tiny-seed0"
        if not (target / "model.safetensors").exists():
            log.info("generating the embedded default model (tiny synthetic Qwen3_5) in %s", target)
            write_tiny_model(target, seed=0)
        # Its manifest lives beside it: a generated model is not a pinned input of the repository.
        return _local(target, name="tiny-synthetic", source=EMBEDDED_DEFAULT, locks_dir=cache_dir, embedded=True)
    path = Path(os.path.expanduser(spec))
    if path.exists() or not _HUB_ID.match(spec):
        return _local(path, name=path.resolve().name, source=spec, locks_dir=locks_dir)
    return _hub(spec, locks_dir=locks_dir, cache_dir=cache_dir)
