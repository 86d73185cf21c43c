"""Unique, natural prompts of a requested size, built from the bundled corpus.

Every prompt starts with its own nonce, so its first tokens differ from every other prompt's and no
prefix cache (exllamav3 pages, vLLM blocks, radix trees, recurrent-state checkpoints) can match any
of it beyond what the server puts before it (a chat template's fixed opening, a BOS): repeated
prompts hit the cache and flatter prefill. The text after the nonce is real problems
(math, code, multiple choice), never random tokens, because speculative decoding depends on it.

Sizes are asked in tokens of the served model, which bench cannot tokenize itself. `TokenScale`
turns a token target into characters from the server's own usage.prompt_tokens of earlier requests
(an affine fit: chat-template overhead plus characters per token), refined point by point.

Usage:
    source = PromptSource(salt="9f2c")
    p = source.prefill(chars=30_000, serial=7)              # mixed study set, unique nonce
    p = source.decode("math", chars=4_000, serial=8)        # worked examples, then one open problem
    scale = TokenScale.from_probes((40, 20), (4000, 1150))  # (chars, prompt_tokens) pairs
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.corpus import KINDS, CorpusItem, PromptKind, load_corpus
from bench.errors import BenchConfigError
from bench.workload import Workload

__all__ = ["Prompt", "PromptSource", "TokenScale"]

_INSTRUCTIONS: dict[PromptKind, str] = {
    "math": "Solve the last problem. Reason step by step and put the final answer in \\boxed{}.",
    "code": "Complete the last function. Explain your approach briefly, then write the full Python code.",
    "mc": "Answer the last question. Think step by step, then give the letter of the correct option.",
}
_LABELS: dict[PromptKind, str] = {"math": "Mathematics", "code": "Python", "mc": "Multiple choice"}
_STRIDE = 7919  # a prime: consecutive serials start far apart in the corpus
_NONCE_LETTERS = 10
_MIN_CONTEXT_CHARS = 64  # less room than this for solved tasks: none


@dataclass(frozen=True, kw_only=True, slots=True)
class Prompt:
    text: str
    kind: PromptKind | str  # "mixed" for prefill study sets; a workload's kind name
    system: str | None = None  # a workload kind's system prompt (chat API), behind the nonce
    fields: dict[str, Any] = field(default_factory=dict)  # a workload's request fields (thinking switch)

    @property
    def chars(self) -> int:
        return len(self.text) + len(self.system or "")

    @property
    def sha256(self) -> str:
        whole = self.text if self.system is None else f"{self.system}\n\n{self.text}"
        return hashlib.sha256(whole.encode("utf-8")).hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenScale:
    """prompt_tokens ~= overhead_tokens + chars / chars_per_token, for one server and one API."""

    overhead_tokens: float
    chars_per_token: float

    def __post_init__(self) -> None:
        if not self.chars_per_token > 0:
            raise BenchConfigError(f"chars_per_token must be positive, got {self.chars_per_token}")

    @classmethod
    def from_probes(cls, small: tuple[int, int], large: tuple[int, int]) -> TokenScale:
        """Fit from two (chars, prompt_tokens) observations of different sizes."""
        (c1, t1), (c2, t2) = small, large
        if c2 <= c1 or t2 <= t1:
            raise BenchConfigError(
                f"token probes must grow with size; got {t1} tokens for {c1} chars and {t2} for {c2}: "
                "the server's usage.prompt_tokens does not follow the prompt"
            )
        cpt = (c2 - c1) / (t2 - t1)
        return cls(overhead_tokens=max(0.0, t1 - c1 / cpt), chars_per_token=cpt)

    def chars_for(self, target_tokens: int) -> int:
        return max(1, round((target_tokens - self.overhead_tokens) * self.chars_per_token))

    def refined(self, observations: Sequence[tuple[int, int]]) -> TokenScale:
        """Re-fit the density from (chars, prompt_tokens) observations pooled, keeping the overhead.

        Pooling matters: one item's density varies (code is denser than prose), and chasing the
        last observation makes the next prompt overshoot the other way.
        """
        chars = sum(c for c, _ in observations)
        body_tokens = sum(t for _, t in observations) - self.overhead_tokens * len(observations)
        if not observations or body_tokens <= 0:
            return self
        return TokenScale(overhead_tokens=self.overhead_tokens, chars_per_token=chars / body_tokens)


class PromptSource:
    """Builds prompts from the corpus; `salt` + `serial` make each one unique and reproducible."""

    def __init__(self, salt: str, corpus: dict[PromptKind, tuple[CorpusItem, ...]] | None = None,
                 workload: Workload | None = None):
        if not salt or any(c.isspace() for c in salt):
            raise BenchConfigError(f"prompt salt must be a non-empty word, got {salt!r}")
        self._salt = salt
        self._corpus = corpus if corpus is not None else load_corpus()
        self._workload = workload

    def _nonce(self, serial: int) -> str:
        """Unique from its first character: the prompt's very first tokens differ from every other's.

        A tag that began with text shared by the run (the salt, "Session") would be a prefix the
        server caches: 13 tokens of every prompt on exllamav3. Letters, not digits: tokenizers that
        split digits one by one would share a first token with every tenth prompt.
        """
        digest = hashlib.sha256(f"{self._salt}:{serial}".encode()).digest()
        return "".join(chr(ord("a") + b % 26) for b in digest[:_NONCE_LETTERS]).capitalize() + "."

    def probe(self, chars: int, serial: int) -> Prompt:
        """A mixed prompt used only to learn the server's token scale (and to warm it up)."""
        return self.prefill(chars, serial)

    def prefill(self, chars: int, serial: int) -> Prompt:
        """A study set mixing all kinds, about `chars` characters long."""
        head = f"{self._nonce(serial)} Below is a study set of problems with their answers.\n\n"
        tail = "\n\nList the topics this study set covers."
        body = _fill(self._mixed_items(serial), chars - len(head) - len(tail))
        return Prompt(text=head + body + tail, kind="mixed")

    def decode(self, kind: PromptKind | str, chars: int, serial: int) -> Prompt:
        """Worked examples of `kind`, then one open problem of that kind and its instruction."""
        if self._workload is not None and kind in self._workload.kind_names:
            return self._workload_decode(kind, chars, serial)
        if kind not in KINDS:
            raise BenchConfigError(f"unknown prompt kind {kind!r}; expected one of {', '.join(KINDS)}")
        items = self._corpus[kind]
        question = items[(serial * _STRIDE) % len(items)]
        head = f"{self._nonce(serial)} Here are worked examples.\n\n"
        tail = f"\n\nNow the last problem.\n\n{_open(question)}\n\n{_INSTRUCTIONS[kind]}"
        context = self._items_after(kind, question, serial)
        body = _fill(context, chars - len(head) - len(tail))
        return Prompt(text=head + body + tail, kind=kind)

    def _workload_decode(self, kind: str, chars: int, serial: int) -> Prompt:
        """One of the workload's tasks as the user sends it, behind solved tasks of its kind up to `chars`.

        The nonce opens the system prompt: a system prompt shared by every task would otherwise be a
        prefix the server caches, and bench would judge every run a cache hit.
        """
        spec = self._workload.kind(kind)
        question = spec.items[(serial * _STRIDE) % len(spec.items)]
        system = f"{self._nonce(serial)} {spec.system}" if spec.system else None
        lead = "" if system else f"{self._nonce(serial)} "
        head, tail = "Solved tasks of this kind first, then yours.\n\n", "\n\nYour task.\n\n" + question.text
        budget = chars - len(system or "") - len(lead) - len(head) - len(tail)
        if budget < _MIN_CONTEXT_CHARS:  # the task alone is about as long as asked: send it as a user would
            text = lead + question.text
        else:
            others = (item for item in _cycle(spec.items, serial * _STRIDE + 1) if item is not question)
            text = lead + head + _fill(others, budget, solved=_solved_task) + tail
        return Prompt(text=text, kind=kind, system=system, fields=dict(self._workload.request_fields))

    def _mixed_items(self, serial: int) -> Iterator[CorpusItem]:
        streams = [_cycle(self._corpus[k], serial * _STRIDE) for k in KINDS]
        while True:
            for stream in streams:
                yield next(stream)

    def _items_after(self, kind: PromptKind, question: CorpusItem, serial: int) -> Iterator[CorpusItem]:
        # the asked kind first, then the others, so a long context repeats no item before it must
        for k in (kind, *(k for k in KINDS if k != kind)):
            for item in _cycle(self._corpus[k], serial * _STRIDE + 1, once=True):
                if item is not question:
                    yield item
        while True:
            yield from _cycle(self._corpus[kind], 0, once=True)


def _cycle(items: tuple[CorpusItem, ...], start: int, *, once: bool = False) -> Iterator[CorpusItem]:
    n = len(items)
    i = 0
    while not once or i < n:
        yield items[(start + i) % n]
        i += 1


def _solved(item: CorpusItem) -> str:
    if item.kind == "code":
        return f"{_LABELS[item.kind]}:\n{item.text}{item.answer}"
    return f"{_LABELS[item.kind]}: {item.text}\nAnswer: {item.answer}"


def _open(item: CorpusItem) -> str:
    return (
        f"{_LABELS[item.kind]}:\n{item.text}" if item.kind == "code" else f"{_LABELS[item.kind]}: {item.text}"
    )


def _solved_task(item: CorpusItem) -> str:
    return f"{item.text}\nAnswer: {item.answer}"


def _fill(items: Iterator[CorpusItem], budget: int, solved: Callable[[CorpusItem], str] | None = None) -> str:
    """Join solved items until `budget` characters, cutting the last one at a word boundary."""
    if budget <= 0:
        return ""
    parts: list[str] = []
    used = 0
    for item in items:
        block = (solved or _solved)(item) + "\n\n"
        if used + len(block) <= budget:
            parts.append(block)
            used += len(block)
            continue
        cut = block[: budget - used]
        space = cut.rfind(" ")
        parts.append(cut[:space] if space > 0 else cut)
        break
    return "".join(parts).rstrip()
