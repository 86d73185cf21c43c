"""Pinned Hub datasets in the project's own cache: download, verify, locate.

The cache is a standard Hugging Face hub cache under `<cache>/huggingface/hub`, owned by this
project (never the user's ~/.cache), so offline runs resolve exactly the pinned snapshot. Files are
verified by size and SHA256 on download and again before every run; nothing is repaired silently.

Usage:
    paths = EvalPaths.default()
    download_dataset(paths, locks.datasets["aime25"])      # needs the Hub
    check_dataset(paths, locks.datasets["aime25"])         # offline; raises if missing or altered
    bind_dataset(paths, locks.datasets["aime25"], work=run_dir / "aime25")   # how a worker reads it
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from eval.errors import DataIntegrityError, MissingDataset, SourceUnavailable
from eval.paths import EvalPaths
from eval.prime.locks import DatasetPin

__all__ = ["DatasetLaunch", "bind_dataset", "check_dataset", "dataset_problems", "download_dataset", "snapshot_dir"]

log = logging.getLogger(__name__)


def repo_dir(paths: EvalPaths, pin: DatasetPin) -> Path:
    return paths.hub_dir / ("datasets--" + pin.repo.replace("/", "--"))


def snapshot_dir(paths: EvalPaths, pin: DatasetPin) -> Path:
    return repo_dir(paths, pin) / "snapshots" / pin.revision


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetLaunch:
    """How one worker reads a pinned dataset: taskset knobs, a working directory, symlinks to create."""

    knobs: dict[str, str]
    cwd: Path | None  # None: the taskset's own directory
    symlinks: tuple[tuple[Path, Path], ...] = ()  # (link, target)


def bind_dataset(paths: EvalPaths, pin: DatasetPin, *, work: Path) -> DatasetLaunch:
    """Bind the verified snapshot of `pin` the way its taskset reads it (locks/datasets.toml's binding):
    a knob pointing at it, or a working directory where the Hub name is a symlink to it, or (hub_cache)
    our cache's refs/main, which needs nothing here."""
    snapshot = snapshot_dir(paths, pin)
    binding = pin.binding
    if binding.kind == "knob":
        knobs = {binding.knob: str(snapshot / binding.subdir) if binding.subdir else str(snapshot)}
        return DatasetLaunch(knobs=knobs | dict(binding.extra_knobs), cwd=None)
    if binding.kind == "cwd":
        # The taskset hard-codes the Hub name: datasets resolves a relative local dir first.
        cwd = work / "local-datasets"
        return DatasetLaunch(knobs={}, cwd=cwd, symlinks=((cwd / pin.repo, snapshot),))
    return DatasetLaunch(knobs={}, cwd=None)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dataset_problems(paths: EvalPaths, pin: DatasetPin) -> tuple[list[str], list[str]]:
    """(missing files, integrity problems) of one dataset's snapshot; both empty when it is usable."""
    snapshot = snapshot_dir(paths, pin)
    missing: list[str] = []
    bad: list[str] = []
    pinned = {f.path for f in pin.files}
    for f in pin.files:
        path = snapshot / f.path
        if not path.is_file():
            missing.append(f.path)
            continue
        size = path.stat().st_size
        if size != f.size:
            bad.append(f"{f.path}: {size} bytes, pinned {f.size}")
        elif (actual := _sha256(path)) != f.sha256:
            bad.append(f"{f.path}: sha256 {actual}, pinned {f.sha256}")
    if snapshot.is_dir():
        # Dataset auto-discovery must never see an unpinned data file beside the pinned ones.
        for path in snapshot.rglob("*"):
            if not path.is_dir() and path.relative_to(snapshot).as_posix() not in pinned:
                bad.append(f"{path.relative_to(snapshot).as_posix()}: not in the pin (remove it)")
    ref = repo_dir(paths, pin) / "refs" / "main"
    if ref.is_file() and ref.read_text().strip() != pin.revision:
        bad.append(f"refs/main names {ref.read_text().strip()}, pinned {pin.revision}")
    return missing, bad


def check_dataset(paths: EvalPaths, pin: DatasetPin) -> Path:
    """The verified snapshot directory of `pin`.

    Raises:
        MissingDataset: a pinned file is not cached; the message names the command that fetches it.
        DataIntegrityError: a cached file differs from its pin.
    """
    missing, bad = dataset_problems(paths, pin)
    if bad:
        raise DataIntegrityError(
            f"dataset {pin.name} ({pin.repo}@{pin.revision[:12]}) in {snapshot_dir(paths, pin)} does not "
            f"match locks/datasets.toml: {'; '.join(bad)}. Delete {repo_dir(paths, pin)} and run "
            f"`python -m eval data {pin.name}` again"
        )
    if missing:
        raise MissingDataset(
            f"dataset {pin.name} ({pin.repo}@{pin.revision[:12]}) is not in {paths.hub_dir}: missing "
            f"{', '.join(missing)}. Run `python -m eval data {pin.name}` on a host that can reach the Hub",
            names=(pin.name,),
        )
    return snapshot_dir(paths, pin)


def download_dataset(paths: EvalPaths, pin: DatasetPin, *, endpoint: str | None = None) -> Path:
    """Download exactly the pinned files at the pinned revision, then verify them.

    Raises:
        SourceUnavailable: the Hub cannot be reached (or HF_HUB_OFFLINE is set in this process).
        DataIntegrityError: a downloaded file differs from its pin.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    paths.hub_dir.mkdir(parents=True, exist_ok=True)
    missing, bad = dataset_problems(paths, pin)
    if bad:
        check_dataset(paths, pin)  # raises DataIntegrityError with the repair instructions
    for f in pin.files:
        if f.path not in missing:
            continue
        log.info("downloading %s %s@%s (%d bytes)", pin.name, pin.repo, pin.revision[:12], f.size)
        try:
            hf_hub_download(
                pin.repo,
                f.path,
                repo_type="dataset",
                revision=pin.revision,
                cache_dir=paths.hub_dir,
                endpoint=endpoint,
            )
        except OfflineModeIsEnabled as exc:
            raise SourceUnavailable(
                f"cannot download {pin.name}: HF_HUB_OFFLINE is set in this shell; unset it for `eval data`"
            ) from exc
        except (HfHubHTTPError, OSError) as exc:
            raise SourceUnavailable(
                f"cannot download {pin.repo}@{pin.revision[:12]} file {f.path} from the Hub "
                f"({type(exc).__name__}: {str(exc)[:300]}); `python -m eval data {pin.name}` needs "
                "access to huggingface.co"
            ) from exc
    # Loaders that resolve the Hub name offline read refs/main: bind it to the pinned commit, in our
    # own cache only. An existing different ref was reported above as an integrity problem.
    ref = repo_dir(paths, pin) / "refs" / "main"
    ref.parent.mkdir(parents=True, exist_ok=True)
    if not ref.exists():
        ref.write_text(pin.revision)
    return check_dataset(paths, pin)
