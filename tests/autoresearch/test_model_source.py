"""Materializing a model is atomic and safe when several workers ask for it at the same moment."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from serving.synthetic.embedded import materialize

_RESOLVE = """
import json, sys
from pathlib import Path
from autoresearch.ground.model_source import resolve_model
cache = Path(sys.argv[1])
model = resolve_model(None, locks_dir=cache, cache_dir=cache)
print(json.dumps({"path": str(model.path), "hash": model.manifest_hash}))
"""


@pytest.mark.slow
def test_two_processes_generate_the_embedded_model_once_into_an_empty_cache(tmp_path):
    cache = tmp_path / "cache"
    root = Path(__file__).resolve().parents[2]
    procs = [subprocess.Popen([sys.executable, "-c", _RESOLVE, str(cache)], cwd=root, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    first, second = (json.loads(out.strip().splitlines()[-1]) for out, _ in outs)
    assert first == second  # the same folder, hashed in the same complete state
    assert sorted(p.name for p in cache.iterdir() if p.name.startswith(".tiny")) == []  # no temporary left


def test_concurrent_callers_build_once_and_see_only_a_complete_folder(tmp_path):
    target = tmp_path / "model"
    builds: list[int] = []
    started = threading.Event()

    def build(out: Path) -> None:
        builds.append(1)
        started.set()
        (out / "config.json").write_text("{}")
        threading.Event().wait(0.3)  # a slow build: the other caller must wait, not see half of it
        (out / "weights.bin").write_bytes(b"x" * 1000)

    seen: list[set[str]] = []

    def caller() -> None:
        folder = materialize(target, build, what="a test model")
        seen.append({p.name for p in folder.iterdir()})

    first = threading.Thread(target=caller)
    first.start()
    started.wait(5)
    assert not target.exists()  # being built elsewhere: not yet in place
    second = threading.Thread(target=caller)
    second.start()
    first.join(10)
    second.join(10)
    assert builds == [1]
    assert seen == [{"config.json", "weights.bin"}] * 2


def test_a_build_killed_half_way_is_redone(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "config.json").write_text("{}")  # an earlier build died here: no completion marker

    def build(out: Path) -> None:
        (out / "config.json").write_text('{"complete": true}')
        (out / "weights.bin").write_bytes(b"w")

    folder = materialize(target, build, what="a test model")
    assert {p.name for p in folder.iterdir()} == {"config.json", "weights.bin"}
    assert json.loads((folder / "config.json").read_text()) == {"complete": True}


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    target = tmp_path / "model"

    def build(out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        materialize(target, build, what="a test model")
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model.lock"]
