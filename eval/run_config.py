"""Translate a suite's taskset spec into one verifiers 0.4.0 EvalConfig plus its process setting.

One taskset runs as one `python -m eval.worker` process (verifiers caches interpreters in class
variables and the Hub libraries read their offline switches at import), with:
- the EvalConfig data (endpoint, model, greedy sampling, select, rollouts, harness, runtime, budget);
- the offline environment: HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1, our private HF cache, and a
  fresh derived Arrow cache per run (only verified raw files are reused);
- for a Prime taskset's pinned Hub data, its binding from locks/datasets.toml (eval.prime.bind_dataset:
  a knob pointing at the verified snapshot, or a working directory where the Hub name is a symlink to
  it, or our cache's refs/main).

Usage:
    launch = build_launch(suite, taskset, endpoint, locks=locks, paths=paths, run_dir=run_dir)
"""

from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.errors import EvalConfigError
from eval.paths import EvalPaths
from eval.suites import SuiteSpec, TasksetSpec
from openai_client import Endpoint  # the project's one Endpoint: its repr never shows the key

if TYPE_CHECKING:  # the Prime suites' pins; the offline suites need none
    from eval.prime import Locks

__all__ = ["API_KEY_VAR", "TasksetLaunch", "build_launch", "harness_path", "nest_knobs"]

API_KEY_VAR = "EVAL_API_KEY"  # the worker's variable for the server key; never written to a config


@dataclass(frozen=True, kw_only=True, slots=True)
class TasksetLaunch:
    spec: TasksetSpec
    config: dict[str, Any]  # EvalConfig.model_validate input
    cwd: Path
    env: dict[str, str]  # variables added to the worker's environment
    output_dir: Path  # traces land in output_dir / spec.name / traces.jsonl
    symlinks: tuple[tuple[Path, Path], ...] = ()  # (link, target) to create before starting
    answered: frozenset[str] = frozenset()  # task keys answered in earlier runs: the worker leaves them out
    drain_s: float = 3600.0  # after a stop, how long the tasks in flight may take to finish (every stage's deadline)

    @property
    def traces_path(self) -> Path:
        return self.output_dir / self.spec.name / "traces.jsonl"

    @property
    def report_path(self) -> Path:
        """Where the worker says how many of its tasks it sent (eval.worker --report)."""
        return self.output_dir / self.spec.name / "dispatched.json"


def nest_knobs(knobs: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """("dataset.name", x) -> {"dataset": {"name": x}}: verifiers' typed env.taskset fields."""
    nested: dict[str, Any] = {}
    for dotted, value in knobs:
        node = nested
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = copy.deepcopy(value)
    return nested


def _eval_config(
    suite: SuiteSpec, spec: TasksetSpec, endpoint: Endpoint, knobs: dict[str, Any], output_dir: Path
) -> dict[str, Any]:
    s = suite.sampling
    runtime: dict[str, Any] = {"type": suite.runtime.type}
    if suite.runtime.type == "docker":
        runtime.update(
            image=suite.runtime.resolved_image,
            cpu=suite.runtime.cpu,
            memory=suite.runtime.memory_gb,
            allow=list(suite.runtime.allow),
        )
    return {
        "model": endpoint.model,
        "client": {"type": "eval", "base_url": endpoint.v1_url, "api_key_var": API_KEY_VAR},
        "sampling": {
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": spec.max_tokens,
            "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty,
            "extra_body": {
                "min_p": s.min_p,
                "repetition_penalty": s.repetition_penalty,
                "chat_template_kwargs": {"enable_thinking": s.enable_thinking},
            },
        },
        # the same selection for every run of a taskset; the worker leaves out the keys answered already
        "select": {"shuffle": spec.shuffle, "seed": spec.seed, "limit": spec.limit},
        "num_rollouts": spec.rollouts,
        "max_concurrent": suite.max_concurrent,
        "push": False,
        "rich": None,
        "output_dir": str(output_dir),
        "run": {"name": spec.name},
        "env": {
            "taskset": {"id": spec.taskset_id, **knobs},
            "agent": {
                "harness": {"id": suite.harness},
                "runtime": runtime,
                "max_turns": 1,
                "max_output_tokens": spec.max_tokens,
                "timeout": {
                    "setup": suite.timeout_setup_s,
                    "rollout": suite.timeout_rollout_s,
                    "scoring": suite.timeout_scoring_s,
                },
            },
        },
    }


def harness_path() -> str:
    """The PATH a taskset's worker runs with: this interpreter's folder first, then the caller's PATH.

    Why: the stock `null` harness needs uv, which the eval extra installs beside this interpreter
    (`.venv/bin`), where a shell that never activated the venv does not look."""
    return os.pathsep.join(p for p in (str(Path(sys.executable).parent), os.environ.get("PATH")) if p)


def build_launch(
    suite: SuiteSpec,
    spec: TasksetSpec,
    endpoint: Endpoint,
    *,
    locks: Locks | None = None,
    paths: EvalPaths,
    run_dir: Path,
    answered: frozenset[str] = frozenset(),
) -> TasksetLaunch:
    """Everything one worker needs to run `spec` offline against `endpoint`; with `answered` (task keys),
    only the tasks of its selection not among them, in the selection's order (so earlier holes first).

    The key stays in memory and the worker's environment only, never in the written config. `locks`
    (None: locks/ of this checkout) is read only for a taskset with a pinned Hub dataset.

    Raises:
        EvalConfigError: `endpoint` names no model (run_suite resolves it from /v1/models first).
    """
    if endpoint.model is None:
        raise EvalConfigError(f"the endpoint {endpoint.url} names no model; a taskset runs against one model")
    knobs = dict(spec.knobs)
    work = run_dir / spec.name
    cwd: Path = work
    symlinks: tuple[tuple[Path, Path], ...] = ()
    if spec.dataset is not None:  # a Prime taskset's pinned Hub data, bound the way it reads it
        from eval.prime import bind_dataset, load_locks

        bound = bind_dataset(paths, (locks or load_locks()).datasets[spec.dataset], work=work)
        knobs.update(bound.knobs)
        cwd, symlinks = bound.cwd or work, bound.symlinks
    env = {
        "HF_HOME": str(paths.hf_home),
        "HF_HUB_CACHE": str(paths.hub_dir),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_DATASETS_CACHE": str(work / ".dataset-cache"),  # fresh derived Arrow cache per run
        API_KEY_VAR: endpoint.api_key or "EMPTY",
        "PATH": harness_path(),
        # The worker may run from a data directory: keep this checkout importable.
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p
        ),
    }
    config = _eval_config(suite, spec, endpoint, nest_knobs(tuple(knobs.items())), run_dir / "traces")
    drain_s = suite.timeout_setup_s + suite.timeout_rollout_s + suite.timeout_scoring_s + 60.0
    return TasksetLaunch(spec=spec, config=config, cwd=cwd, env=env, output_dir=run_dir / "traces", symlinks=symlinks,
                         answered=frozenset(answered), drain_s=drain_s)
