"""Stop strings over a text stream: emit what is safe, hold back what might start a stop string."""

from __future__ import annotations

__all__ = ["StopMatcher"]


class StopMatcher:
    """Feed text deltas; get back the text that may be shown and whether a stop string was hit.

    The stop string itself is never emitted (OpenAI semantics), and text after it is dropped.
    """

    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.stopped = False

    def push(self, delta: str) -> str:
        if self.stopped:
            return ""
        if not self.stops:
            return delta
        text = self._held + delta
        hits = [(text.find(s), s) for s in self.stops if s in text]
        if hits:
            self.stopped = True
            self._held = ""
            return text[: min(hits)[0]]
        keep = self._partial_suffix(text)
        self._held = text[len(text) - keep:] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        """At the end of generation the held text is real output."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best
