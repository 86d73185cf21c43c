"""Where the model comes from, and the manifest whose hash names it in every result.

A local folder is hashed once (files, sizes, SHA256) and the manifest is reused while no file's
size or mtime changed. A Hub repository id with a revision is downloaded (huggingface_hub), checked
against the manifest in locks/ if one was written before, and the manifest is written to locks/.
With no model at all, the embedded default is generated: the tiny synthetic Qwen3_5, seed 0
(serving.synthetic.embedded, which `python -m serving --model embedded:tiny` resolves alike).
A new or changed manifest is written only once the run is accepted (`record_manifest`): a refused run
writes nothing.

Usage:
    model = resolve_model("turboderp/Qwen3.8-27B-exl3@4.00bpw", locks_dir=Path("locks"), cache_dir=...)
    model.path, model.manifest_hash
    record_manifest(model)  # once the study is open
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch.ground.errors import ModelSourceError, PlanError
from serving.manifest import build_manifest
from serving.synthetic.embedded import EMBEDDED_DEFAULT, embedded_model_dir, file_lock

__all__ = ["EMBEDDED_DEFAULT", "ResolvedModel", "build_manifest", "record_manifest", "resolve_model"]

log = logging.getLogger(__name__)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


@dataclass(frozen=True)
class ResolvedModel:
    path: Path
    name: str  # what results and the study name call it
    manifest_hash: str
    manifest_path: Path
    source: str  # the --model argument, or the embedded default
    is_embedded: bool = False
    pending_manifest: str | None = field(default=None, repr=False, compare=False)  # to write at manifest_path


def record_manifest(model: ResolvedModel) -> None:
    """Write the manifest resolving found new or changed. It only saves the next run hashing (a Hub model's
    is checked against it): one that cannot be written is a warning, not a stop."""
    if model.pending_manifest is None:
        return
    try:
        _write_atomically(model.manifest_path, model.pending_manifest)
    except OSError as exc:
        log.warning("cannot write the model's manifest %s (%s): the next run hashes the model again",
                    model.manifest_path, exc.strerror or exc)


def _file_name(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_")


def _manifest_path(locks_dir: Path, name: str) -> Path:
    return locks_dir / "models" / f"{_file_name(name)}.json"


def _local(model_dir: Path, *, name: str, source: str, locks_dir: Path, embedded: bool = False) -> ResolvedModel:
    # a wrong --model is a usage mistake (exit 2), found before anything is hashed or created
    if not model_dir.is_dir():
        raise PlanError(f"--model {model_dir} is not a folder (give a model folder or a Hub id like org/repo@rev)")
    if not (model_dir / "config.json").exists():
        raise PlanError(f"--model {model_dir} has no config.json: not a model folder")
    path = _manifest_path(locks_dir, name)
    previous = None
    if path.exists():
        previous = json.loads(path.read_text())
        if previous.get("model_dir") != str(model_dir.resolve()):
            previous = None
    manifest = build_manifest(model_dir, previous)
    manifest.update(model_dir=str(model_dir.resolve()), source=source)
    return ResolvedModel(path=model_dir.resolve(), name=name, manifest_hash=manifest["manifest_hash"],
                         manifest_path=path, source=source, is_embedded=embedded,
                         pending_manifest=json.dumps(manifest, indent=1) + "\n" if manifest != previous else None)


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
        # huggingface_hub locks each file itself; ours makes workers wait for one whole snapshot
        with file_lock(cache_dir / f"{_file_name(repo_spec)}.lock"):
            local = Path(snapshot_download(repo_id=repo, revision=revision, cache_dir=str(cache_dir)))
    except ModelSourceError:
        raise
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
    return ResolvedModel(path=local, name=f"{repo.split('/')[-1]}@{revision}", manifest_hash=manifest["manifest_hash"],
                         manifest_path=lock_path, source=repo_spec, pending_manifest=json.dumps(manifest, indent=1) + "\n")


def model_of_study(study_attrs: dict, *, locks_dir: Path) -> ResolvedModel:
    """The model a stored study was made with, as it recorded it: reports and exports need no weights."""
    model = study_attrs["model"]
    return ResolvedModel(path=Path(model["source"]), name=model["name"], manifest_hash=model["manifest_hash"],
                         manifest_path=_manifest_path(locks_dir, model["name"]), source=model["source"],
                         is_embedded=model["source"] == EMBEDDED_DEFAULT)


def resolve_model(spec: str | None, *, locks_dir: Path, cache_dir: Path) -> ResolvedModel:
    """A local folder, `org/repo@revision` on the Hub, or None for the embedded default."""
    if spec is None or spec == EMBEDDED_DEFAULT:
        target = embedded_model_dir(cache_dir)
        # Its manifest lives beside it: a generated model is not a pinned input of the repository.
        return _local(target, name="tiny-synthetic", source=EMBEDDED_DEFAULT, locks_dir=cache_dir, embedded=True)
    path = Path(os.path.expanduser(spec))
    if path.exists() or not _HUB_ID.match(spec):
        return _local(path, name=path.resolve().name, source=spec, locks_dir=locks_dir)
    return _hub(spec, locks_dir=locks_dir, cache_dir=cache_dir)


def _write_atomically(path: Path, text: str) -> None:
    """Readers (another worker) see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
