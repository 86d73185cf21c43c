"""Qwen-style thinking: split `<think>...</think>` out of the answer as `reasoning_content`.

Works on the text stream, so it serves both engines and streaming and whole responses alike. A
rendered prompt that ends inside `<think>` (Qwen3.x templates with thinking on) starts the answer
in reasoning; a model that writes `<think>` itself as its first output enters it too.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["ReasoningSplitter", "prompt_opens_reasoning"]

OPEN, CLOSE = "<think>", "</think>"
Part = tuple[Literal["reasoning", "content"], str]


def prompt_opens_reasoning(prompt: str) -> bool:
    """True when the last assistant turn of a rendered prompt has an unclosed <think>."""
    tail = prompt.rsplit("<|im_start|>assistant", 1)[-1]
    return tail.rfind(OPEN) > tail.rfind(CLOSE)


class ReasoningSplitter:
    def __init__(self, *, start_in_reasoning: bool):
        self.in_reasoning = start_in_reasoning
        self._held = ""
        self._content_started = False  # any non-space content yet (then <think> is just text)
        self._strip_newlines = False  # drop the blank lines right after </think>

    def push(self, delta: str) -> list[Part]:
        text = self._held + delta
        self._held = ""
        parts: list[Part] = []
        while text:
            tag = CLOSE if self.in_reasoning else OPEN
            at = text.find(tag)
            if self.in_reasoning:
                if at >= 0:
                    self._add(parts, "reasoning", text[:at])
                    self.in_reasoning = False
                    self._strip_newlines = True
                    text = text[at + len(tag):]
                    continue
            elif not self._content_started and at >= 0 and not text[:at].strip():
                self.in_reasoning = True
                text = text[at + len(tag):]
                continue
            keep = _partial_tag(text, tag) if (self.in_reasoning or not self._content_started) else 0
            self._add(parts, "reasoning" if self.in_reasoning else "content", text[: len(text) - keep])
            self._held = text[len(text) - keep:] if keep else ""
            break
        return parts

    def flush(self) -> list[Part]:
        held, self._held = self._held, ""
        parts: list[Part] = []
        self._add(parts, "reasoning" if self.in_reasoning else "content", held)
        return parts

    def _add(self, parts: list[Part], kind: str, text: str) -> None:
        if kind == "content" and self._strip_newlines:
            text = text.lstrip("\n")
            if text:
                self._strip_newlines = False
        if not text:
            return
        if kind == "content" and text.strip():
            self._content_started = True
        if parts and parts[-1][0] == kind:
            parts[-1] = (kind, parts[-1][1] + text)
        else:
            parts.append((kind, text))


def _partial_tag(text: str, tag: str) -> int:
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
