"""The embedded default model by name, `embedded:tiny`: the tiny synthetic Qwen3_5 (seed 0), generated once.

`python -m autoresearch` runs it when given no --model, and its `export` prints `python -m serving --model
embedded:tiny`: the loop and the server resolve the name here, to the same folder in the cache
(AUTORESEARCH_CACHE, default ~/.cache/exl3-autoresearch), so the printed command serves what the study ran.
Generating it is atomic and safe when several workers ask at once (`materialize`).

Usage:
    model_dir = embedded_model_dir(default_cache_dir())   # generated on first use
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["EMBEDDED_DEFAULT", "default_cache_dir", "embedded_model_dir", "file_lock", "materialize"]

log = logging.getLogger(__name__)
EMBEDDED_DEFAULT = "embedded:tiny"


def default_cache_dir() -> Path:
    """Where generated and downloaded models live: AUTORESEARCH_CACHE, else ~/.cache/exl3-autoresearch."""
    return Path(os.environ.get("AUTORESEARCH_CACHE", Path.home() / ".cache" / "exl3-autoresearch"))


def embedded_model_dir(cache_dir: Path) -> Path:
    """The embedded default's folder under `cache_dir`, generated the first time it is asked for."""
    from serving.synthetic.tiny import write_tiny_model

    return materialize(cache_dir / "tiny-seed0", lambda out: write_tiny_model(out, seed=0),
                       what="the embedded default model (tiny synthetic Qwen3_5)")


def materialize(target: Path, build: Callable[[Path], object], *, what: str) -> Path:
    """`target`, built by `build(folder)` once, safely when several workers ask at the same moment.

    Under an exclusive lock file the first worker builds into a temporary sibling and renames it
    into place; the others wait on the lock and find it complete. A folder counts as complete only
    with its marker beside it (written after the rename), so a build killed half-way is redone,
    never hashed; the marker stays outside the folder, out of the model's manifest.
    """
    complete = target.with_name(target.name + ".complete")
    if complete.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.with_name(target.name + ".lock")):
        if complete.exists():  # another worker built it while this one waited
            return target
        log.info("generating %s in %s", what, target)
        partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            build(partial)
            if target.exists():  # an unfinished or unmarked earlier build
                shutil.rmtree(target)
            os.rename(partial, target)
            complete.write_text("")
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        yield
