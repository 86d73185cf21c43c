"""Pinned datasets in the project's own cache: verified by size and SHA256, never repaired silently."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from eval.errors import DataIntegrityError, MissingDataset, SourceUnavailable
from eval.paths import EvalPaths
from eval.prime.locks import DatasetBinding, DatasetPin, FilePin
from eval.prime.snapshots import check_dataset, download_dataset, snapshot_dir

REVISION = "0123456789abcdef0123456789abcdef01234567"


def _pin(files: dict[str, bytes]) -> DatasetPin:
    return DatasetPin(
        name="toy",
        repo="example/toy-dataset",
        revision=REVISION,
        binding=DatasetBinding(kind="hub_cache"),
        files=tuple(
            FilePin(path=p, size=len(b), sha256=hashlib.sha256(b).hexdigest()) for p, b in files.items()
        ),
    )


FILES = {"README.md": b"# toy\n", "data/train-00000-of-00001.jsonl": b'{"q": "1+1", "a": "2"}\n'}


def _write(paths: EvalPaths, pin: DatasetPin, files: dict[str, bytes]) -> None:
    root = snapshot_dir(paths, pin)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_a_complete_snapshot_verifies(tmp_path):
    paths, pin = EvalPaths(tmp_path), _pin(FILES)
    _write(paths, pin, FILES)
    assert (
        check_dataset(paths, pin)
        == tmp_path / "huggingface/hub/datasets--example--toy-dataset/snapshots" / REVISION
    )


def test_a_missing_dataset_names_the_command_that_fetches_it(tmp_path):
    paths, pin = EvalPaths(tmp_path), _pin(FILES)
    with pytest.raises(MissingDataset, match=r"python -m eval data toy") as info:
        check_dataset(paths, pin)
    assert info.value.names == ("toy",)
    assert "README.md" in str(info.value)


def test_an_altered_file_is_an_integrity_error_not_a_download(tmp_path):
    paths, pin = EvalPaths(tmp_path), _pin(FILES)
    _write(paths, pin, {**FILES, "README.md": b"# tox\n"})
    with pytest.raises(DataIntegrityError, match="README.md: sha256"):
        check_dataset(paths, pin)
    # download must refuse to "repair" it, before touching the network
    with pytest.raises(DataIntegrityError):
        download_dataset(paths, pin, endpoint="http://127.0.0.1:9")


def test_an_unpinned_file_beside_the_pinned_ones_is_refused(tmp_path):
    paths, pin = EvalPaths(tmp_path), _pin(FILES)
    _write(paths, pin, {**FILES, "data/extra.jsonl": b"{}\n"})
    with pytest.raises(DataIntegrityError, match="not in the pin"):
        check_dataset(paths, pin)


def test_a_main_ref_naming_another_revision_is_refused(tmp_path):
    paths, pin = EvalPaths(tmp_path), _pin(FILES)
    _write(paths, pin, FILES)
    ref = tmp_path / "huggingface/hub/datasets--example--toy-dataset/refs/main"
    ref.parent.mkdir(parents=True)
    ref.write_text("f" * 40)
    with pytest.raises(DataIntegrityError, match="refs/main"):
        check_dataset(paths, pin)


class _FakeHubWithoutTheRepo(BaseHTTPRequestHandler):
    """An outside-boundary fake: a Hub endpoint that knows no repository (404 on everything)."""

    def do_HEAD(self):
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD

    def log_message(self, *args):
        pass


def test_a_download_the_hub_cannot_serve_is_a_clear_source_error(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeHubWithoutTheRepo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        paths, pin = EvalPaths(tmp_path), _pin(FILES)
        with pytest.raises(SourceUnavailable, match="needs access to huggingface.co") as info:
            download_dataset(paths, pin, endpoint=f"http://127.0.0.1:{server.server_address[1]}")
        assert "example/toy-dataset" in str(info.value)
    finally:
        server.shutdown()
        server.server_close()
