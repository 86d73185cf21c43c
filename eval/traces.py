"""Reduce one taskset's verifiers traces.jsonl to a TasksetResult. Pure: reads JSON, imports no verifiers.

Counting rules: an operational failure (the endpoint died, the harness crashed, a deadline expired)
is counted in `failures` and excluded from the reward mean, never scored as zero. verifiers 0.4.0
marks an episode ok=false for most of them, but a stage deadline (setup, agent, finalize, scoring)
leaves the trace ok=true with `is_timeout` and a `<stage>_timeout` stop condition, and a reward of 0:
those are failures here too, as is any `*_error` stop condition, and an ok trace whose scorer never ran
(no reward recorded, or one verifiers left None): nothing was scored, so it is not a wrong answer.
Reward per episode is verifiers' own `Trace.reward` (sum of score * weight). Truncation is
verifiers' `Trace.is_truncated` (a framework limit, or a last call that finished on length).
Tasks pair by their key (`task.key`, else verifiers' content hash): an episode with neither is refused
with its taskset's name, never pooled with the others under one made-up key.
Output tok/s is the sum of completion tokens over the sum of model-call wall time.

Usage:
    result = summarize_traces(run_dir / "traces.jsonl", name="aime25", taskset_id="aime25", max_tokens=32768)
    episodes = TraceTail(path, taskset="aime25").read()     # what a running worker has written so far
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eval.errors import TasksetRunError
from eval.records import EpisodeOutcome, TasksetResult

__all__ = ["TraceTail", "episode_outcome", "summarize_episodes", "summarize_traces"]

_LIMIT_STOPS = {"max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed"}


def _trace_truncated(trace: dict[str, Any]) -> bool:
    if trace.get("stop_condition") in _LIMIT_STOPS:
        return True
    ok_calls = [c for c in trace.get("calls") or [] if c.get("error") is None]
    return bool(ok_calls) and ok_calls[-1].get("finish_reason") == "length"


def _trace_failure(trace: dict[str, Any]) -> str | None:
    """Why a trace is an operational failure although verifiers may have left ok=true, or None."""
    stop = trace.get("stop_condition") or ""
    if trace.get("is_timeout") or stop.endswith("_timeout"):
        return f"timeout: the trace stopped on {stop or 'a stage deadline'}"
    if stop == "error" or stop.endswith("_error"):
        return f"error: the trace stopped on {stop}"
    rewards = trace.get("rewards") or {}
    if trace.get("ok") and (not rewards or any(r is None for r in rewards.values())):
        unscored = sorted(name for name, r in rewards.items() if r is None)
        return ("no reward: the scorer never ran" + (f" ({', '.join(unscored)} left unscored)" if unscored else ""))
    return None


def _first_error(episode: dict[str, Any]) -> str | None:
    errors = list(episode.get("errors") or [])
    for trace in episode.get("traces") or []:
        errors.extend(trace.get("errors") or [])
    if not errors:
        return None
    error = errors[-1]
    return f"{error.get('type', 'Error')}: {error.get('message', '')}"[:500]


def episode_outcome(episode: dict[str, Any], *, taskset: str) -> EpisodeOutcome:
    """One traces.jsonl line (an Episode) of `taskset` reduced to what the gate needs.

    Raises:
        TasksetRunError: the episode's task has no key (nor content hash) to pair it by.
    """
    task = episode.get("task") or {}
    data = task.get("data") or {}
    key = task.get("key") or task.get("hash")
    if not key:
        raise TasksetRunError(f"taskset {taskset}: an episode's task has no key (task.key and task.hash are empty; "
                              f"idx {data.get('idx')!r}, id {data.get('id')!r}): its answers cannot be paired")
    traces = episode.get("traces") or []
    failures = [f for f in (_trace_failure(t) for t in traces) if f]
    if not traces:
        failures.append("no trace: the episode recorded no agent run, so nothing was scored")
    if episode.get("is_timeout"):
        failures.insert(0, "timeout: the episode's own deadline expired")
    ok = bool(episode.get("ok")) and all(t.get("ok", False) for t in traces) and not failures
    reward = None
    if ok:
        reward = sum(
            r["score"] * r.get("weight", 1.0)
            for t in traces
            for r in (t.get("rewards") or {}).values()
            if r is not None
        )
    output_tokens = 0
    model_time_s = 0.0
    for trace in traces:
        for call in trace.get("calls") or []:
            if call.get("error") is not None:
                continue
            usage = call.get("usage") or {}
            output_tokens += int(usage.get("completion_tokens") or 0)
            span = call.get("time") or {}
            model_time_s += max(float(span.get("end", 0.0)) - float(span.get("start", 0.0)), 0.0)
    starts = [float(t["timing"]["start"]) for t in traces if (t.get("timing") or {}).get("start")]
    error = None
    if not ok:
        error = "; ".join(filter(None, [*failures, _first_error(episode)])) or "ok=false without an error record"
    return EpisodeOutcome(
        task_key=str(key),
        task_idx=data.get("idx"),
        ok=ok,
        reward=reward,
        truncated=any(_trace_truncated(t) for t in traces),
        output_tokens=output_tokens,
        model_time_s=model_time_s,
        error=error[:500] if error else None,
        started_at=min(starts) if starts else None,
    )


def summarize_episodes(
    episodes: list[EpisodeOutcome], *, name: str, taskset_id: str, max_tokens: int, run_dir: str
) -> TasksetResult:
    ok = [e for e in episodes if e.ok]
    output_tokens = sum(e.output_tokens for e in episodes)
    model_time_s = sum(e.model_time_s for e in episodes)
    return TasksetResult(
        name=name,
        taskset_id=taskset_id,
        max_tokens=max_tokens,
        tasks=len({e.task_key for e in episodes}),
        rollouts=len(episodes),
        failures=len(episodes) - len(ok),
        truncations=sum(e.truncated for e in episodes),
        reward_mean=sum(e.reward or 0.0 for e in ok) / len(ok) if ok else None,
        output_tokens=output_tokens,
        model_time_s=model_time_s,
        output_tok_per_s=output_tokens / model_time_s if model_time_s > 0 else None,
        run_dir=run_dir,
        episodes=tuple(
            sorted(episodes, key=lambda e: (e.task_idx if e.task_idx is not None else -1, e.task_key))
        ),
    )


class TraceTail:
    """Reads the episodes a running worker has appended to its traces.jsonl so far (whole lines only)."""

    def __init__(self, path: Path, *, taskset: str):
        self.path = path
        self.taskset = taskset
        self._offset = 0
        self.episodes: list[EpisodeOutcome] = []

    def read(self) -> list[EpisodeOutcome]:
        """Every complete episode so far; a line still being written is left for the next read."""
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return self.episodes
        end = chunk.rfind(b"\n") + 1
        for line in chunk[:end].decode("utf-8").splitlines():
            if line.strip():
                self.episodes.append(episode_outcome(json.loads(line), taskset=self.taskset))
        self._offset += end
        return self.episodes


def summarize_traces(path: Path, *, name: str, taskset_id: str, max_tokens: int) -> TasksetResult:
    """Read a traces.jsonl (verifiers writes episodes in completion order) and summarize it.

    A last line without its newline (a worker stopped mid-write) is not an episode and is skipped.
    """
    episodes = TraceTail(path, taskset=name).read()
    return summarize_episodes(
        episodes, name=name, taskset_id=taskset_id, max_tokens=max_tokens, run_dir=str(path.parent)
    )
