"""The Docker image the Prime suites' harness runs in: built from eval/prime/runtime/, named by its content.

Why: verifiers' Docker runtime otherwise installs uv and the stock `null` harness's dependencies into a
floating base image, unpinned from PyPI, on every container start; the baseline and the candidates
could then run different code. The image pins its base by digest, installs uv by hash and pre-syncs
each harness program from a committed uv lock at the path verifiers writes it to, so a run resolves
nothing. The tag is a digest of everything the build reads, so a changed lock means a new image and
preflight says to build it.

Usage:
    tag = image_tag()                          # exl3-eval-runtime:<12 hex>
    context = write_context(Path(".cache/eval/runtime-image"))
    build_command(context)                     # ["docker", "build", "-t", tag, context]
    image_id(tag)                              # the local engine's image id, recorded with each run
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from eval.errors import LockError

__all__ = ["IMAGE_NAME", "RUNTIME_DIR", "build_command", "image_id", "image_tag", "program_sources",
           "write_context"]

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
IMAGE_NAME = "exl3-eval-runtime"


def _locked_programs() -> dict[str, Path]:
    """sha256 of each harness program the image pre-syncs -> its committed uv lock."""
    return {p.name.removesuffix(".py.lock"): p for p in sorted((RUNTIME_DIR / "scripts").glob("*.py.lock"))}


def image_tag() -> str:
    """The image's name and a tag that changes with anything the build reads (no verifiers import)."""
    digest = hashlib.sha256()
    for path in [RUNTIME_DIR / "Dockerfile", RUNTIME_DIR / "uv-requirements.txt", *_locked_programs().values()]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{IMAGE_NAME}:{digest.hexdigest()[:12]}"


def program_sources() -> dict[str, bytes]:
    """The installed verifiers' harness programs, by sha256, exactly as its runtimes write them.

    Raises:
        LockError: the installed verifiers' `null` harness program has no committed lock (another version).
    """
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

    source = CHAT_PROGRAM_SOURCE.encode() if isinstance(CHAT_PROGRAM_SOURCE, str) else CHAT_PROGRAM_SOURCE
    sha = hashlib.sha256(source).hexdigest()
    if sha not in _locked_programs():
        raise LockError(
            f"the installed verifiers' chat program (sha256 {sha[:12]}) has no lock in {RUNTIME_DIR / 'scripts'} "
            f"(locked: {sorted(k[:12] for k in _locked_programs())}); write it to {sha}.py and run "
            f"`uv lock --script {sha}.py --python 3.11` there, then commit the .py.lock"
        )
    return {sha: source}


def write_context(directory: Path) -> Path:
    """The build context: the Dockerfile, uv's hashes, and each program beside its lock."""
    sources = program_sources()
    if directory.exists():
        shutil.rmtree(directory)
    (directory / "scripts").mkdir(parents=True)
    for name in ("Dockerfile", "uv-requirements.txt"):
        shutil.copy2(RUNTIME_DIR / name, directory / name)
    for sha, source in sources.items():
        (directory / "scripts" / f"{sha}.py").write_bytes(source)
        shutil.copy2(_locked_programs()[sha], directory / "scripts" / f"{sha}.py.lock")
    return directory


def build_command(context: Path, tag: str | None = None) -> list[str]:
    return ["docker", "build", "-t", tag or image_tag(), str(context)]


def image_id(tag: str) -> str | None:
    """The local engine's id (sha256:...) of `tag`; None when it is not built or Docker does not answer.

    A locally built image has no registry digest: its id is the content digest of its config.
    """
    try:
        probe = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag],
                               capture_output=True, text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return probe.stdout.strip() or None if probe.returncode == 0 else None
