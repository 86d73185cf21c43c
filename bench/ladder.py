"""Orchestration: probe the server, warm it up, then run the prefill and decode ladders.

Measurement hygiene lives here: warm-up requests are discarded; each point repeats until the
median's interval is tight and its runs have stopped trending, or until its share of the bench's time
is spent (plan.bench_time_s; without it, the count cap): a run early in a trend is a warm-up after all,
set aside as one. Each run is checked (prefix-cache hit, short completion, failure, a stall on a
one-time cost while the GPU sat idle) and an invalid run is kept as data but never averaged in. A
decode point whose model answers are too short to time (under plan.decode_min_tokens) is timed on
runs continued past the answer to that many tokens, said once; request time still weighs the kind by
its own answers. The validity rules themselves live in bench.validity, the session's
set-up (the server's model, capabilities and token scale, the global warm-up) in bench.setup.

Usage:
    result = run_bench(BenchPlan(prefill_tokens=(1024, 8192)), Endpoint(url="http://127.0.0.1:18020"))
"""

from __future__ import annotations

import dataclasses
import logging
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from bench.corpus import PromptKind
from bench.energy import request_energy
from bench.errors import BenchConfigError
from bench.plan import BenchPlan
from bench.prompts import Prompt, PromptSource, TokenScale
from bench.records import BenchResult, DecodePoint, PrefillPoint, ServerProfile
from bench.runs import Purpose, RequestResult, RequestSpec
from bench.setup import OPTIONAL_FIELDS, SessionSetUp
from bench.stats import is_settled, summarize
from bench.telemetry import GpuMonitor
from bench.timing import timed_stream
from bench.validity import DECODE_RATE as _DECODE_RATE
from bench.validity import mark_run_stalls as _mark_stalls
from bench.validity import mark_stalls, prefill_rate, size_error, validate_run
from bench.workload import Workload
from openai_client import Client, Endpoint, ServerRejected, ServerUnreachable, build_body

__all__ = ["mark_stalls", "run_bench", "trending", "validate_run", "wait_until_loaded"]  # mark_stalls, validate_run live in bench.validity

log = logging.getLogger(__name__)
LOAD_WAIT_S = 900.0  # a 27B loads in minutes; the launcher's own start-up limit is the same
SAFETY_REPEATS = 200  # with a time share, the most runs a point makes whatever its time (a runaway guard)
TREND_WINDOW = 3  # runs: a point trends while its last runs' median differs from the ones before them
MIN_TREND_REL = 0.02  # by more than its target interval, or this


def trending(values: list[float], target_rel: float) -> float | None:
    """The relative change from the median of the runs before the last `TREND_WINDOW` to theirs (three runs:
    from the first to the last, where they move one way), where it is beyond max(target_rel, MIN_TREND_REL): the
    runs still trend and the early ones are warm-up. None: steady, or under three runs (too few to tell)."""
    tolerance = max(target_rel, MIN_TREND_REL)
    if len(values) == 3:
        a, b, c = values
        monotone = a < b < c or a > b > c
        return c / a - 1 if monotone and a and abs(c / a - 1) > tolerance else None
    if len(values) < 4:
        return None
    k = min(TREND_WINDOW, len(values) // 2)
    before, last = statistics.median(values[-2 * k:-k]), statistics.median(values[-k:])
    change = last / before - 1 if before else 0.0
    return change if abs(change) > tolerance else None



def run_bench(plan: BenchPlan, endpoint: Endpoint, *, workload: Workload | None = None) -> BenchResult:
    """Measure `endpoint` as `plan` says; `workload` is the one the plan's summary names, if any.

    Raises:
        BenchConfigError: the plan does not fit the server (e.g. a length over its context window).
        ServerUnreachable: the server stopped answering.
        ServerRejected, ProtocolError: the server refused the set-up or does not speak OpenAI.
    """
    _check_workload(plan, workload)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    monitor = GpuMonitor.open(plan.gpu_index)
    try:
        with Client(endpoint, timeout_s=plan.request_timeout_s) as client:
            wait_until_loaded(client)
            session = _Session(plan, client, PromptSource(plan.salt, workload=workload), monitor)
            session.set_up()
            prefill = tuple(session.measure_prefill(t) for t in plan.prefill_tokens)
            decode = tuple(
                session.measure_decode(c, k) for c in plan.decode_context_tokens for k in plan.decode_kinds
            )
    finally:
        if monitor is not None:
            monitor.close()
    return BenchResult(
        plan=plan.to_dict(),
        server=session.profile,
        gpu=monitor.identity if monitor is not None else None,
        host=_host_info(),
        started_at=started,
        finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        probes=tuple(session.probes),
        prefill=prefill,
        decode=decode,
    )


def wait_until_loaded(client: Client, *, timeout_s: float = LOAD_WAIT_S, poll_s: float = 0.5) -> None:
    """Wait while /health answers 503 "loading" (a server started moments ago), instead of failing the first
    request with 503. A server without /health counts as loaded; one whose /health says it failed raises.

    Raises:
        ServerRejected: /health refused for another reason, or still loading after `timeout_s`.
        ServerUnreachable.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.get_json("/health", missing_ok=True)
            return
        except ServerRejected as exc:
            if exc.status != 503 or "loading" not in exc.detail or time.monotonic() >= deadline:
                raise
        log.info("the server is still loading its model; bench waits for /health")
        time.sleep(poll_s)


def _mostly_too_short(runs: list[RequestResult], least: int) -> bool:
    """At least `least` of the point's runs ended before they could time decode, more than were valid."""
    short = sum(bool(r.invalid_reason and "too short to time decode" in r.invalid_reason) for r in runs)
    return short >= least and short > sum(r.is_valid for r in runs)


def _answers_too_short(warmups: list[RequestResult], min_tokens: int) -> bool:
    """The model's own answers at this point (its warm-ups, sent without ignore_eos) end before `min_tokens`."""
    answers = sorted(r.completion_tokens for r in warmups if r.ok and r.completion_tokens is not None)
    return bool(answers) and answers[len(answers) // 2] < min_tokens


def _check_workload(plan: BenchPlan, workload: Workload | None) -> None:
    named = plan.workload["sha256"] if plan.workload else None
    given = workload.sha256 if workload is not None else None
    if named != given:
        raise BenchConfigError(
            f"the plan names workload {named or 'none'} but was given {given or 'none'}: "
            "pass the workload file the plan was made from"
        )


def _host_info() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "httpx": httpx.__version__,
    }


class _Session(SessionSetUp):
    """State of one run: the server profile, the token scale, the request serial."""

    def __init__(self, plan: BenchPlan, client: Client, source: PromptSource, monitor: GpuMonitor | None):
        self.plan = plan
        self.client = client
        self.source = source
        self.monitor = monitor
        self.probes: list[RequestResult] = []
        self.profile: ServerProfile
        self._model = ""
        self._fields: dict[str, bool] = dict.fromkeys(OPTIONAL_FIELDS, True)
        self._serial = 0
        self._scale = TokenScale(overhead_tokens=0, chars_per_token=3.5)

    # ---- the ladders ----

    def measure_prefill(self, target: int) -> PrefillPoint:
        """Cold TTFT at `target` prompt tokens, one token out; unique prompts, so nothing cached."""
        warmups, runs, settled = self._measure_point(
            key=f"prefill@{target}",
            target=target,
            make_prompt=lambda chars, serial: self.source.prefill(chars, serial),
            max_tokens=1,
            expected_completion_tokens=None,
            rate=prefill_rate(self.profile),
            target_rel_ci=self.plan.prefill_target_rel_ci,
        )
        return PrefillPoint(target_tokens=target, warmups=warmups, runs=runs, settled=settled)

    def measure_decode(self, context: int, kind: PromptKind | str) -> DecodePoint:
        """Greedy decode after a natural `kind` prompt of `context` tokens: exactly plan.decode_tokens,
        or, with decode_until "eos", the model's answer up to that many."""
        n = self.plan.decode_tokens
        until_eos = self.plan.decode_until == "eos"
        warmups, runs, settled = self._measure_point(
            key=f"decode@{context}/{kind}",
            target=context,
            make_prompt=lambda chars, serial: self.source.decode(kind, chars, serial),
            max_tokens=n,
            expected_completion_tokens=(self.plan.decode_min_tokens, n) if until_eos else n,
            rate=_DECODE_RATE,
            target_rel_ci=self.plan.decode_target_rel_ci,
        )
        return DecodePoint(
            context_tokens=context, kind=kind, output_tokens=n, warmups=warmups, runs=runs, settled=settled
        )

    def _measure_point(
        self,
        *,
        key: str,
        target: int,
        make_prompt: Callable[[int, int], Prompt],
        max_tokens: int,
        expected_completion_tokens: int | tuple[int, int] | None,
        rate: str,
        target_rel_ci: float,
    ) -> tuple[tuple[RequestResult, ...], tuple[RequestResult, ...], bool]:
        plan = self.plan
        scale = self._scale  # the run-wide fit; refined below from this point's own prompts
        seen: list[tuple[int, int]] = []  # (chars, prompt_tokens) at this point
        warmups: list[RequestResult] = []
        ignore_eos = not isinstance(expected_completion_tokens, tuple)  # a range: the model's own answers
        # a decode point's warm-ups run to the model's own end of sequence: discarded either way, they
        # record how long its answers are (DecodePoint.answer_tokens), which fixed-length runs hide
        warmup_ignore_eos = ignore_eos and max_tokens == 1
        # discard: one warm-up per point at least (a new length allocates and tunes); they also fit the size
        while True:
            prompt = make_prompt(scale.chars_for(target), self._next_serial())
            result = self._send("warmup", key, prompt, target, max_tokens, ignore_eos=warmup_ignore_eos)
            self._raise_if_down(result, key)
            warmups.append(result)
            scale = self._refit(scale, seen, prompt, result)
            off = size_error(result, target)
            sized = off is not None and off <= plan.size_tolerance_rel
            attempts_left = len(warmups) < max(plan.warmups_per_point, plan.max_size_attempts)
            if len(warmups) >= plan.warmups_per_point and (sized or not attempts_left):
                break
        if isinstance(expected_completion_tokens, tuple) and _answers_too_short(warmups, plan.decode_min_tokens):
            answers = sorted(r.completion_tokens or 0 for r in warmups if r.ok)
            log.info("%s: the model's answers here (%d tokens, median) are too short to time decode; its runs go on "
                     "past the answer to %d tokens (text past an answer flatters drafting; request time weighs this "
                     "kind by its own answers)", key, answers[len(answers) // 2], plan.decode_min_tokens)
            max_tokens, ignore_eos = plan.decode_min_tokens, True
            expected_completion_tokens = plan.decode_min_tokens
        runs: list[RequestResult] = []
        settled = False
        budget_s = plan.point_time_s
        started = time.monotonic()
        late_warmups = 0  # runs a trend showed to be warm-ups: moved to `warmups`, so they count neither way
        while (len(runs) + late_warmups < SAFETY_REPEATS) if budget_s is not None else len(runs) < plan.max_repeats:
            valid = sum(r.is_valid for r in runs)
            if budget_s is not None and time.monotonic() - started >= budget_s and (
                    valid >= plan.min_repeats or len(runs) + late_warmups >= plan.max_repeats):
                break  # its share of the bench's time is spent (a point whose runs all fail stops at the count)
            prompt = make_prompt(scale.chars_for(target), self._next_serial())
            result = self._send("measure", key, prompt, target, max_tokens, ignore_eos=ignore_eos)
            self._raise_if_down(result, key)
            reason = validate_run(
                result,
                expected_completion_tokens=expected_completion_tokens,
                max_cached_tokens=self.profile.max_cached_tokens or 0,
            )
            if reason:
                log.warning("%s run %d invalid: %s", key, len(runs) + 1, reason)
            runs.append(dataclasses.replace(result, invalid_reason=reason))
            if not ignore_eos and _mostly_too_short(runs, plan.min_repeats):  # one warm-up's answer misled
                log.info("%s: most of the model's answers here are too short to time decode; its runs go on past "
                         "the answer to %d tokens from now on", key, plan.decode_min_tokens)
                max_tokens, ignore_eos = plan.decode_min_tokens, True
                expected_completion_tokens = plan.decode_min_tokens
            _mark_stalls(key, runs, rate)
            scale = self._refit(scale, seen, prompt, result)
            values = [v for r in runs if r.is_valid and (v := getattr(r, rate)) is not None]
            trend = trending(values, target_rel_ci)
            if trend is not None and (budget_s is not None or late_warmups < plan.max_repeats):
                # the earliest valid run was a warm-up after all: it joins them, and a run takes its place
                first = next(i for i, r in enumerate(runs) if r.is_valid and getattr(r, rate) is not None)
                warmups.append(dataclasses.replace(runs.pop(first), invalid_reason=(
                    f"warm-up: the point's runs still trended ({trend:+.1%} from the runs before the last "
                    f"{TREND_WINDOW}), so this early run was set aside")))
                late_warmups += 1
                continue
            if trend is not None:  # no run left to replace it: the point ends at its count, not steady
                continue
            summary = summarize(values) if values else None
            if is_settled(summary, min_n=plan.min_repeats, target_rel_ci=target_rel_ci):
                settled = True
                break
        self._log_point(key, runs, rate, settled)
        return tuple(warmups), tuple(runs), settled

    # ---- one request ----

    def _send(
        self, purpose: Purpose, point: str, prompt: Prompt, target: int | None, max_tokens: int,
        *, ignore_eos: bool = True,
    ) -> RequestResult:
        ignore_eos = ignore_eos and self._fields["ignore_eos"]
        body = build_body(
            api=self.plan.api,
            model=self._model,
            text=prompt.text,
            max_tokens=max_tokens,
            ignore_eos=ignore_eos,
            stream_options=self._fields["stream_options"],
            extra={**prompt.fields, **self.plan.extra_body},
            system=prompt.system,
        )
        spec = RequestSpec(
            purpose=purpose,
            point=point,
            prompt_kind=prompt.kind,
            target_prompt_tokens=target,
            prompt_chars=prompt.chars,
            prompt_sha256=prompt.sha256,
            max_tokens=max_tokens,
            ignore_eos=ignore_eos,
        )
        path = "/v1/chat/completions" if self.plan.api == "chat" else "/v1/completions"
        if self.monitor is None:
            return timed_stream(self.client, spec, body, path)
        with self.monitor.window() as window:
            result = timed_stream(self.client, spec, body, path)
        return dataclasses.replace(result, gpu=window.result, energy=request_energy(window.readings, result))

    def _next_serial(self) -> int:
        self._serial += 1
        return self._serial

    def _refit(
        self, scale: TokenScale, seen: list[tuple[int, int]], prompt: Prompt, result: RequestResult
    ) -> TokenScale:
        if result.ok and result.prompt_tokens:
            seen.append((prompt.chars, result.prompt_tokens))
            scale = scale.refined(seen)
            self._scale = scale
        return scale

    def _raise_if_down(self, result: RequestResult, where: str) -> None:
        """A transport failure may mean the server died: if it no longer answers, stop the run."""
        if result.ok or result.http_status is not None:
            return
        try:
            self.client.get_json("/v1/models")
        except ServerUnreachable as exc:
            raise ServerUnreachable(f"the server stopped answering during {where}: {result.error}") from exc

    def _log_point(self, key: str, runs: list[RequestResult], rate: str, settled: bool) -> None:
        values = [v for r in runs if r.is_valid and (v := getattr(r, rate)) is not None]
        if not values:
            log.warning("%s: no valid run out of %d", key, len(runs))
            return
        s = summarize(values)
        log.info(
            "%s: %s median %.1f [%.1f, %.1f] from %d valid of %d runs%s",
            key,
            rate,
            s.median,
            s.ci_low,
            s.ci_high,
            s.n,
            len(runs),
            "" if settled else " (its time or the cap ran out before the spread target, or its runs still trend)",
        )
