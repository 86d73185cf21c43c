"""A workload: the tasks a user's server will answer, by kind, with the share of each, as data.

Drafting gains depend on the text (n-gram drafting gains far more on code than on math, on the same
server). Decode measured on a corpus of one kind ranks drafting configurations by a
text the user never sends. A workload carries the user's own tasks instead (autoresearch builds one from a
task suite: `python -m autoresearch workload --suite offline`), so bench's decode points are the suite's
kinds, each prompt is a real task of that kind behind its own system prompt and request fields (the
chat template's thinking switch), and the decode objective weights the kinds as the suite does.

bench stays independent of eval: a workload is a JSON file, and any OpenAI-compatible server is
measured on it the same way. The plan records its name, digest and weights (`Workload.summary`);
the tasks themselves travel beside the plan and are checked against the digest.

Usage:
    wl = Workload.load(Path("workload.json"))
    plan = BenchPlan(decode_kinds=wl.kind_names, workload=wl.summary(), ...)
    run_bench(plan, endpoint, workload=wl)
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.corpus import CorpusItem
from bench.errors import BenchConfigError

__all__ = ["Workload", "WorkloadKind"]

FORMAT = "bench-workload/1"


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadKind:
    """One kind of task (a suite's taskset): its tasks, its system prompt and its share of the work.

    `proxy` names where the items come from when they are not the suite's own tasks (a taskset whose
    data is not on this machine is stood in for by bench's corpus of the same kind, and says so).
    """

    name: str
    weight: float
    items: tuple[CorpusItem, ...]
    system: str | None = None
    proxy: str | None = None

    def __post_init__(self) -> None:
        if not self.name or any(c.isspace() or c in "@/" for c in self.name):
            raise BenchConfigError(f"workload kind name {self.name!r}: one word without '@' or '/'")
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise BenchConfigError(f"workload kind {self.name}: weight must be positive, got {self.weight}")
        if len(self.items) < 2:
            raise BenchConfigError(
                f"workload kind {self.name}: needs at least 2 tasks (one asked, others as context), "
                f"got {len(self.items)}"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    name: str
    kinds: tuple[WorkloadKind, ...]
    # sent with every decode request, e.g. {"chat_template_kwargs": {"enable_thinking": true}}
    request_fields: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        names = [k.name for k in self.kinds]
        if not names:
            raise BenchConfigError(f"workload {self.name!r} has no kinds")
        if len(set(names)) != len(names):
            raise BenchConfigError(f"workload {self.name!r}: kind names must be unique, got {names}")
        if not isinstance(self.request_fields, dict):
            raise BenchConfigError(f"workload {self.name!r}: request_fields must be a JSON object")

    @property
    def kind_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.kinds)

    def kind(self, name: str) -> WorkloadKind:
        for k in self.kinds:
            if k.name == name:
                return k
        raise BenchConfigError(f"workload {self.name!r} has no kind {name!r}; it has {list(self.kind_names)}")

    def weights(self) -> dict[str, float]:
        """Each kind's share, normalised to sum to 1."""
        total = sum(k.weight for k in self.kinds)
        return {k.name: k.weight / total for k in self.kinds}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "name": self.name,
            "description": self.description,
            "request_fields": self.request_fields,
            "kinds": [
                {"name": k.name, "weight": float(k.weight), "system": k.system, "proxy": k.proxy,
                 "items": [{"id": i.id, "text": i.text, "answer": i.answer} for i in k.items]}
                for k in self.kinds
            ],
        }

    @property
    def sha256(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def summary(self) -> dict[str, Any]:
        """What a bench plan records: enough to know which workload and how its kinds were weighted."""
        return {
            "name": self.name,
            "sha256": self.sha256,
            "weights": self.weights(),
            "request_fields": self.request_fields,
            "proxies": {k.name: k.proxy for k in self.kinds if k.proxy},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Workload:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise BenchConfigError(f"not a workload: expected format {FORMAT!r}, got {d.get('format') if isinstance(d, dict) else type(d).__name__!r}")
        try:
            kinds = tuple(
                WorkloadKind(
                    name=k["name"], weight=float(k["weight"]), system=k.get("system"), proxy=k.get("proxy"),
                    items=tuple(
                        CorpusItem(id=str(i["id"]), kind=k["name"], text=i["text"], answer=str(i["answer"]))
                        for i in k["items"]
                    ),
                )
                for k in d["kinds"]
            )
            return cls(name=d["name"], kinds=kinds, request_fields=d.get("request_fields") or {},
                       description=d.get("description", ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise BenchConfigError(f"workload {d.get('name')!r} is malformed: {type(exc).__name__}: {exc}") from None

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Workload:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise BenchConfigError(f"cannot read workload {path}: {exc}") from None
        return cls.from_dict(data)
