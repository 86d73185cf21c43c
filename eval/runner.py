"""Run a suite through verifiers, one taskset at a time, and collect per-taskset results.

Each taskset runs in its own worker process (eval.worker); a candidate's run can be stopped as soon
as the sequential test against the baseline has decided (`paired_stop_rule`). Before anything runs,
`preflight` (eval.preflight, also importable from here with `dry_run` and `is_installed`) checks
that everything the suite needs is here. The Prime/Docker supply chain (eval.prime) is reached from
here at one seam, `_supply_chain`: every run records the pins of locks/ it ran under, a Docker run its
runtime image and the image's id.

Usage:
    result = run_suite(get_suite("offline"), Endpoint(url=url), store=store,   # model: the served one
                       label=config_digest)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.decision import TaskPolicy, compare_taskset
from eval.errors import EvalConfigError, TasksetRunError
from eval.paths import EvalPaths
from eval.preflight import DryRunEntry, dry_run, is_installed, preflight
from eval.records import EpisodeOutcome, SuiteResult, TasksetResult
from eval.run_config import TasksetLaunch, build_launch
from eval.store import EvalStore
from eval.suites import SuiteOverrides, SuiteSpec, TasksetSpec
from eval.traces import TraceTail, summarize_episodes, summarize_traces
from openai_client import Endpoint
from results import to_jsonable

if TYPE_CHECKING:  # the Prime suites' pins; the offline suites need none
    from eval.prime import Locks

__all__ = [
    "DryRunEntry",
    "answer_taskset",
    "dry_run",
    "is_installed",
    "new_run_dir",
    "paired_stop_rule",
    "preflight",
    "run_suite",
    "run_taskset",
]

log = logging.getLogger(__name__)
_LOG_TAIL_CHARS = 4000


def new_run_dir(paths: EvalPaths, suite: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = paths.cache_dir / "runs"
    base.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        candidate = base / f"{suite}-{stamp}-{n}"
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise EvalConfigError(f"could not create a fresh run directory under {base}")


StopRule = Callable[[list[EpisodeOutcome]], str | None]


def run_taskset(launch: TasksetLaunch, run_dir: Path, *, stop_when: StopRule | None = None,
                poll_s: float = 1.0) -> TasksetResult:
    """Run one taskset in its own worker process and summarize its traces.

    `stop_when` sees the episodes finished so far (every `poll_s`); when it returns a reason, the worker
    sends no further task and answers those in flight (eval.dispatch), within `launch.drain_s`; past it,
    the worker is stopped and those left are answered first by the next run of the same answers. The
    result holds what finished: the sequential test (`paired_stop_rule`) ends a candidate's run as soon
    as its answer is clear.

    Raises:
        TasksetRunError: the worker crashed or wrote no traces (ok=false episodes are results).
    """
    work = run_dir / launch.spec.name
    work.mkdir(parents=True, exist_ok=True)
    for link, target in launch.symlinks:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target, target_is_directory=True)
    launch.cwd.mkdir(parents=True, exist_ok=True)
    config_path = work / "eval-config.json"
    config_path.write_text(json.dumps(launch.config, indent=2))
    answered_path, stop_path = work / "answered.json", work / "stop"
    answered_path.write_text(json.dumps(sorted(launch.answered)))
    stop_path.unlink(missing_ok=True)
    launch.report_path.unlink(missing_ok=True)
    log_path = work / "worker.log"
    env = {**os.environ, **launch.env}
    started = time.monotonic()
    stopped: str | None = None
    drain_until = float("inf")
    killed = False  # by us, when the answers in flight outlasted the drain
    tail = TraceTail(launch.traces_path, taskset=launch.spec.name)
    with log_path.open("w") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "eval.worker", str(config_path), "--answered", str(answered_path),
             "--stop", str(stop_path), "--report", str(launch.report_path)],
            cwd=launch.cwd,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # stopping it early stops its children too
        )
        seen = 0
        try:
            while process.poll() is None:
                try:
                    process.wait(timeout=poll_s)
                except subprocess.TimeoutExpired:
                    pass
                if process.poll() is not None:
                    continue
                if stopped:
                    if time.monotonic() > drain_until:
                        log.warning("%s: the answers in flight did not finish within %.0f s of the stop; they are "
                                    "left to the next run", launch.spec.name, launch.drain_s)
                        _stop(process)
                        killed = True
                    continue
                if stop_when is None:
                    continue
                episodes = tail.read()
                if len(episodes) > seen:  # the rule only changes its mind on new episodes
                    seen = len(episodes)
                    if stopped := stop_when(episodes):
                        stop_path.touch()  # no further task; those in flight are answered
                        drain_until = time.monotonic() + launch.drain_s
        finally:
            if process.poll() is None:  # interrupted: never leave a worker behind
                _stop(process)
    log_tail = log_path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    if process.returncode != 0 and not killed:
        raise TasksetRunError(
            f"taskset {launch.spec.name}: the verifiers worker exited {process.returncode} after "
            f"{time.monotonic() - started:.0f} s; log: {log_path}",
            log_tail=log_tail,
        )
    if not launch.traces_path.is_file():
        raise TasksetRunError(f"taskset {launch.spec.name}: no traces at {launch.traces_path}", log_tail=log_tail)
    result = summarize_traces(
        launch.traces_path,
        name=launch.spec.name,
        taskset_id=launch.spec.taskset_id,
        max_tokens=launch.spec.max_tokens,
    )
    log.info(
        "%s: %d tasks, %d rollouts, reward %s, %d failures, %d truncations, %.1f s%s",
        result.name,
        result.tasks,
        result.rollouts,
        result.reward_mean,
        result.failures,
        result.truncations,
        time.monotonic() - started,
        f"; stopped early: {stopped}" if stopped else "",
    )
    return result


def _ran_all(launch: TasksetLaunch) -> bool:
    """The worker sent every task of its selection it had left (a stop, if any, came after the last)."""
    try:
        report = json.loads(launch.report_path.read_text())
    except FileNotFoundError:
        return False  # stopped before it could say
    return report["dispatched"] == report["tasks"]


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the worker's process group, then SIGKILL what is left after 30 s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        process.wait()


def paired_stop_rule(baseline: TasksetResult, policy: TaskPolicy, *, tasksets: int) -> StopRule:
    """Stop a candidate's run when the sequential test against `baseline` has decided (eval.decision)."""

    def rule(episodes: list[EpisodeOutcome]) -> str | None:
        if not episodes:
            return None
        partial = summarize_episodes(episodes, name=baseline.name, taskset_id=baseline.taskset_id,
                                     max_tokens=baseline.max_tokens, run_dir="")
        verdict = compare_taskset(baseline, partial, policy, tasksets=tasksets, observed_power=False)
        if verdict.decision in ("rejected", "accepted"):
            return f"{verdict.decision} after {verdict.tasks_used} paired tasks (lost {verdict.lost}, gained {verdict.gained})"
        return None

    return rule


def answer_taskset(suite: SuiteSpec, spec: TasksetSpec, endpoint: Endpoint, *, run_dir: Path,
                   answered: frozenset[str] = frozenset(), stop_when: StopRule | None = None,
                   locks: Locks | None = None, paths: EvalPaths | None = None) -> tuple[TasksetResult, bool]:
    """One chunk of a taskset: the tasks of its selection whose keys are not in `answered`, in run order
    (an earlier chunk's holes first), until `stop_when` says stop; the tasks in flight then are answered
    too. Returns what this chunk answered and whether it ran to the taskset's end (sent its last task).
    The lazy answers are given this way (autoresearch.checks.task_tier).

    Raises:
        as run_suite (preflight, a dead endpoint, a crashed worker).
    """
    paths = paths or EvalPaths.default()
    preflight(dataclasses.replace(suite, tasksets=(spec,)), locks=locks, paths=paths)
    endpoint, _ = _server_facts(endpoint)
    launch = build_launch(suite, spec, endpoint, locks=locks, paths=paths, run_dir=run_dir, answered=answered)
    result = run_taskset(launch, run_dir, stop_when=stop_when)
    return result, _ran_all(launch)


def _server_facts(endpoint: Endpoint) -> tuple[Endpoint, dict[str, Any] | None]:
    """The endpoint with its model named (the one /v1/models lists first, where not given), and its
    /v1/server_info (None for a peer without it); this is also the check that the server is up.

    Raises:
        EndpointError: no answer, an error status, or no model listed.
    """
    from eval.client import CompletionsClient

    with CompletionsClient(endpoint.url, api_key=endpoint.api_key) as client:
        model = endpoint.model or client.model
        return dataclasses.replace(endpoint, model=model), client.server_info()


def _supply_chain(suite: SuiteSpec, locks: Locks | None) -> tuple[Locks, dict[str, Any]]:
    """The seam to the Prime/Docker supply chain (eval.prime): the pins of locks/ (`locks`, None: this
    checkout's), which every run records and a Prime suite is checked against, and what a Docker run
    records of its runtime (the image and its id in the local engine)."""
    from eval.prime import image_id, load_locks

    locks = locks or load_locks()
    if suite.runtime.type != "docker":
        return locks, {}
    image = suite.runtime.resolved_image
    return locks, {"image": image, "image_id": image_id(image)}


def _provenance(suite: SuiteSpec, locks: Locks, docker: dict[str, Any], server: dict[str, Any] | None,
                overrides: SuiteOverrides) -> dict[str, Any]:
    versions = {}
    for dist in (
        "verifiers",
        "datasets",
        "math-verify",
        "reasoning-gym",
        "nvidia-mmath",
        "torch",
        "exllamav3",
    ):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "versions": versions,
        "python": platform.python_version(),
        "locks": {"commit": locks.commit, "digests": locks.digests},
        "server_info": server,
        "overrides": overrides.as_dict(),
        "runtime": {"type": suite.runtime.type, "max_concurrent": suite.max_concurrent} | docker,
    }


def run_suite(
    suite: SuiteSpec,
    endpoint: Endpoint,
    *,
    store: EvalStore | None = None,
    label: str = "",
    model_manifest_hash: str | None = None,
    overrides: SuiteOverrides | None = None,
    locks: Locks | None = None,
    paths: EvalPaths | None = None,
    run_dir: Path | None = None,
    paired_with: SuiteResult | None = None,
    policy: TaskPolicy | None = None,
) -> SuiteResult:
    """Run every taskset of `suite` (already overridden) and store the per-taskset results.

    An `endpoint` without a model runs against the one its /v1/models lists first.

    With `paired_with` (the baseline's run of the same suite) and a judging `policy`, each taskset
    stops as soon as the sequential test has decided, and once one taskset is rejected the rest are
    not run: the candidate has failed the tier either way.

    Raises:
        MissingEnvironment, MissingDataset, DataIntegrityError, RuntimeUnavailable: from preflight.
        TasksetRunError: a worker crashed (ok=false episodes are results, not errors).
    """
    paths = paths or EvalPaths.default()
    locks, docker = _supply_chain(suite, locks)
    preflight(suite, locks=locks, paths=paths)
    endpoint, server_info = _server_facts(endpoint)  # also: is the server up?
    provenance = _provenance(suite, locks, docker, server_info, overrides or SuiteOverrides())
    run_dir = run_dir or new_run_dir(paths, suite.name)
    judging = paired_with is not None and policy is not None and policy.judge
    results = []
    for spec in suite.tasksets:
        launch = build_launch(suite, spec, endpoint, locks=locks, paths=paths, run_dir=run_dir)
        if not judging:
            results.append(run_taskset(launch, run_dir))
            continue
        baseline, tasksets = paired_with.taskset(spec.name), len(paired_with.tasksets)
        results.append(run_taskset(launch, run_dir, stop_when=paired_stop_rule(baseline, policy, tasksets=tasksets)))
        verdict = compare_taskset(baseline, results[-1], policy, tasksets=tasksets)
        if verdict.decision == "rejected":
            provenance["not_run"] = {"tasksets": [t.name for t in suite.tasksets[len(results):]],
                                     "why": f"{spec.name} was rejected after {verdict.tasks_used} paired tasks"}
            break
    result = SuiteResult(suite=suite.name, run_dir=str(run_dir), tasksets=tuple(results))
    (run_dir / "summary.json").write_text(
        json.dumps({"provenance": provenance, "result": to_jsonable(result)}, indent=2)
    )
    if store is not None:
        suite_run_id = store.save_suite_result(
            result,
            label=label,
            base_url=endpoint.url,
            plan=dataclasses.asdict(suite),
            provenance=provenance,
            model_manifest_hash=model_manifest_hash,
        )
        result = dataclasses.replace(result, suite_run_id=suite_run_id)
    return result

