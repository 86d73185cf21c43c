"""The fixed fidelity probe set: prompts of the suites' kinds plus long-context ones.

Probes are plain text rendered in the Qwen chat format with thinking open (the project's model), so
the continuation is the reasoning text where most decode tokens are spent. Long-context probes are a
deterministic haystack of records with one needle, sized by a target token count: configurable, so
CPU tests use a few hundred tokens and the GPU record tens of thousands. The digest covers every
byte that reaches the server, so a reference is only ever compared with the same probes.

Usage:
    probes = build_probe_set(ProbeSetConfig(long_context_tokens=(8192, 32768)))
    probes.digest
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Literal

from eval.errors import EvalConfigError

__all__ = ["KINDS", "Probe", "ProbeSet", "ProbeSetConfig", "build_probe_set"]

PROBE_SET_VERSION = 1
KINDS = ("math", "choice", "logic", "code", "long_context")
_CHARS_PER_TOKEN = 3.6  # English prose in a Qwen BPE vocabulary; only sizes the haystack

_MATH = (
    "Let $N$ be the number of ordered pairs of positive integers $(a, b)$ with $a \\le b$ such that "
    "$\\operatorname{lcm}(a, b) = 720$. Find the remainder when $N$ is divided by $1000$.",
    "A bag holds 5 red, 4 blue and 3 green marbles. Three marbles are drawn without replacement. "
    "The probability that all three have different colours is $\\tfrac{m}{n}$ in lowest terms. "
    "Find $m + n$.",
)
_CHOICE = (
    "Which of the following best explains why the boiling point of water decreases at high altitude?\n"
    "A. Water molecules are lighter at altitude\nB. Atmospheric pressure is lower\n"
    "C. The air contains less oxygen\nD. Gravity is weaker\nE. Solar radiation is stronger\n"
    "F. Humidity is lower\nG. Hydrogen bonds are weaker in cold air\nH. Dissolved gases escape\n"
    "I. The latent heat of vaporization rises\nJ. Water density increases\n"
    "Please reason step by step, then ONLY give the letter of the correct answer within \\boxed{}.",
    "A firm's marginal cost curve intersects its average total cost curve at which point?\n"
    "A. The maximum of average total cost\nB. The minimum of average variable cost only\n"
    "C. The minimum of average total cost\nD. Where marginal revenue is zero\n"
    "E. Where total cost is zero\nF. The maximum of marginal cost\nG. Where price equals zero\n"
    "H. The shutdown point only\nI. Where fixed cost is minimized\nJ. Nowhere; they never intersect\n"
    "Please reason step by step, then ONLY give the letter of the correct answer within \\boxed{}.",
)
_LOGIC = (
    "On an island every inhabitant is either a knight, who always tells the truth, or a knave, who "
    'always lies. Ada says: "Ben is a knave." Ben says: "Ada and Cy are the same kind." Cy says: '
    '"I am a knight." Determine who is a knight and who is a knave, and give the answer in '
    "<answer></answer> tags.",
    "Five houses stand in a row. The painter lives directly left of the baker. The doctor lives in the "
    "middle house. The teacher does not live at either end. The pilot lives in house 1. The baker's "
    "house is not next to the doctor's. Who lives in house 5? Give only the profession in "
    "<answer></answer> tags.",
)
_CODE = (
    "You are given an integer n (1 <= n <= 2*10^5) and an array of n integers. Print the length of "
    "the longest contiguous subarray whose sum is divisible by 7, or 0 if there is none.\n"
    "Input: the first line holds n, the second the array.\nOutput: one integer.\n"
    "Write a complete Python program that reads standard input and writes standard output.",
    "Given a string s of lowercase letters (1 <= |s| <= 10^5), print the minimum number of characters "
    "to delete so that no two adjacent characters are equal, followed by the resulting string.\n"
    "Write a complete Python program that reads standard input and writes standard output.",
)
_SUITE_PROMPTS = {"math": _MATH, "choice": _CHOICE, "logic": _LOGIC, "code": _CODE}

_CITIES = ("Lisbon", "Oslo", "Quito", "Hanoi", "Dakar", "Perth", "Tbilisi", "Lima", "Accra", "Riga")
_GOODS = (
    "copper wire",
    "olive oil",
    "ceramic tiles",
    "wool bales",
    "rice sacks",
    "glass panes",
    "cedar planks",
    "salt blocks",
    "tin cans",
    "cotton rolls",
)
_VERBS = ("delivered", "collected", "inspected", "returned", "insured", "weighed")


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeSetConfig:
    """What the probe set contains. Every field reaches the digest through the probes it builds."""

    continuation_tokens: int = 128  # greedy tokens per suite-kind probe
    long_context_tokens: tuple[int, ...] = (8192, 32768)  # target prompt sizes of the long probes
    long_continuation_tokens: int = 32
    top_k: int = 20  # the server's maximum for completions logprobs
    template: Literal["chatml", "raw"] = "chatml"
    kinds: tuple[str, ...] = KINDS

    def __post_init__(self) -> None:
        if self.continuation_tokens < 1 or self.long_continuation_tokens < 1:
            raise EvalConfigError("continuation_tokens and long_continuation_tokens must be >= 1")
        if not 1 <= self.top_k <= 20:
            raise EvalConfigError(f"top_k must be 1..20 (the completions logprobs limit), got {self.top_k}")
        if any(n < 64 for n in self.long_context_tokens):
            raise EvalConfigError(f"long_context_tokens must each be >= 64, got {self.long_context_tokens}")
        unknown = set(self.kinds) - set(KINDS)
        if unknown or not self.kinds:
            raise EvalConfigError(f"kinds must be a non-empty subset of {KINDS}, got {self.kinds}")
        if self.template not in ("chatml", "raw"):
            raise EvalConfigError(f"template must be 'chatml' or 'raw', got {self.template!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Probe:
    probe_id: str
    kind: str
    prompt: str  # exactly the text sent as the completions prompt
    continuation_tokens: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeSet:
    config: ProbeSetConfig
    probes: tuple[Probe, ...]

    @property
    def digest(self) -> str:
        """sha256 of the canonical JSON of everything that reaches the server."""
        payload = {
            "version": PROBE_SET_VERSION,
            "top_k": self.config.top_k,
            "probes": [asdict(p) for p in self.probes],
        }
        canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()


def _render(text: str, template: str) -> str:
    if template == "raw":
        return text
    # Qwen chat format with thinking enabled: the continuation is reasoning text.
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n<think>\n"


def _stream(seed: str):
    """Deterministic bytes from sha256 in counter mode: stable across Python versions and platforms."""
    counter = 0
    while True:
        yield from hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1


def haystack_prompt(target_tokens: int) -> str:
    """A ledger of shipping records with one needle, about `target_tokens` long, and a question."""
    rng = _stream(f"haystack-{target_tokens}")
    target_chars = int(target_tokens * _CHARS_PER_TOKEN)
    lines: list[str] = []
    size = 0
    entry = 0
    while size < target_chars:
        entry += 1
        city = _CITIES[next(rng) % len(_CITIES)]
        goods = _GOODS[next(rng) % len(_GOODS)]
        verb = _VERBS[next(rng) % len(_VERBS)]
        count = next(rng) * 4 + next(rng) % 4
        dock = f"{chr(65 + next(rng) % 26)}-{next(rng) % 90 + 10}"
        line = f"Entry {entry:05d}: the courier from {city} {verb} {count} units of {goods} at dock {dock}."
        lines.append(line)
        size += len(line) + 1
    code = 10000 + (next(rng) << 8 | next(rng)) % 90000
    needle_at = len(lines) // 3
    lines.insert(needle_at, f"Entry {needle_at:05d}b: the access code for vault seven is {code}.")
    question = (
        "What is the access code for vault seven, according to the ledger above? "
        "Think it through, then answer with the number only."
    )
    return "Here is a shipping ledger.\n\n" + "\n".join(lines) + "\n\n" + question


def build_probe_set(config: ProbeSetConfig | None = None) -> ProbeSet:
    """The probes for `config`, in a fixed order: suite kinds first, then long contexts by size."""
    config = config or ProbeSetConfig()
    probes: list[Probe] = []
    for kind, prompts in _SUITE_PROMPTS.items():
        if kind not in config.kinds:
            continue
        for i, text in enumerate(prompts):
            probes.append(
                Probe(
                    probe_id=f"{kind}-{i}",
                    kind=kind,
                    prompt=_render(text, config.template),
                    continuation_tokens=config.continuation_tokens,
                )
            )
    if "long_context" in config.kinds:
        for target in config.long_context_tokens:
            probes.append(
                Probe(
                    probe_id=f"long_context-{target}",
                    kind="long_context",
                    prompt=_render(haystack_prompt(target), config.template),
                    continuation_tokens=config.long_continuation_tokens,
                )
            )
    return ProbeSet(config=config, probes=tuple(probes))
