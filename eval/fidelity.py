"""Fidelity against the baseline: capture a reference, then score a candidate against it.

The reference is captured once per (model manifest, probe set) on the baseline configuration:
greedy continuations, then the baseline's own teacher-forced top-k over them, so a candidate is
compared through exactly the same request path. The noise floor is the baseline measured against
its reference again in a fresh launch (role "noise_floor"); candidates are role "candidate".

Usage:
    reference = capture_reference(url, build_probe_set(config), store=store,
                                  model_manifest_hash=manifest, label="baseline")
    floor = measure_fidelity(url2, reference, store=store, role="noise_floor", label="baseline#2")
    cand = measure_fidelity(url3, reference, store=store, role="candidate", label=config.digest)
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

from eval.client import CompletionsClient
from eval.divergence import argmax_token, compare_probe, summarize
from eval.probes import ProbeSet
from eval.records import FidelityMetrics, ProbeReference, Reference
from eval.store import EvalStore

__all__ = ["FidelityMeasurement", "capture_reference", "load_fidelity_measurement", "measure_fidelity"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class FidelityMeasurement:
    measurement_id: int
    role: str
    label: str
    metrics: FidelityMetrics
    per_probe: tuple[dict[str, Any], ...]
    elapsed_s: float


def load_fidelity_measurement(store: EvalStore, measurement_id: int) -> FidelityMeasurement:
    """A stored measurement as it was measured (its probes and its time), e.g. a study's noise floor."""
    return FidelityMeasurement(measurement_id=measurement_id, **store.load_measurement_record(measurement_id))


def _server_record(client: CompletionsClient) -> dict[str, Any]:
    return {"url": client.base_url, "model": client.model, "info": client.server_info()}


def capture_reference(
    base_url: str,
    probe_set: ProbeSet,
    *,
    store: EvalStore,
    model_manifest_hash: str,
    label: str,
    api_key: str | None = None,
    replace: bool = False,
) -> Reference:
    """Capture and store the baseline's reference for `probe_set`.

    Raises:
        EndpointError: the server does not honour the completions extensions fidelity needs.
        EvalConfigError: a reference for this key exists and `replace` is false.
    """
    started = time.monotonic()
    probes: list[ProbeReference] = []
    with CompletionsClient(base_url, api_key=api_key) as client:
        for probe in probe_set.probes:
            prompt_ids, continuation = client.greedy(probe.prompt, max_tokens=probe.continuation_tokens)
            scores = client.teacher_force(
                probe.probe_id, prompt_ids, continuation, top_k=probe_set.config.top_k
            )
            probes.append(
                ProbeReference(
                    probe_id=probe.probe_id,
                    kind=probe.kind,
                    prompt_ids=prompt_ids,
                    continuation_ids=continuation,
                    scores=scores,
                )
            )
            log.info(
                "reference %s: %d prompt + %d tokens", probe.probe_id, len(prompt_ids), len(continuation)
            )
        server = _server_record(client)
    reference = Reference(
        model_manifest_hash=model_manifest_hash,
        probe_set_digest=probe_set.digest,
        top_k=probe_set.config.top_k,
        probes=tuple(probes),
    )
    agree = sum(
        argmax_token(top) == token
        for p in probes
        for top, token in zip(p.scores.top, p.continuation_ids, strict=True)
    )
    self_agreement = agree / reference.n_positions
    if self_agreement < 1.0:
        log.warning(
            "baseline's teacher-forced argmax differs from its own greedy tokens at %.2f%% of positions: "
            "generation and scoring are not bit-identical on this server",
            100 * (1 - self_agreement),
        )
    server["capture_s"] = time.monotonic() - started
    reference_id = store.save_reference(
        reference,
        probe_config=dataclasses.asdict(probe_set.config),
        server=server,
        label=label,
        self_agreement=self_agreement,
        replace=replace,
    )
    return dataclasses.replace(reference, reference_id=reference_id)


def measure_fidelity(
    base_url: str,
    reference: Reference,
    *,
    store: EvalStore,
    role: str,
    label: str,
    api_key: str | None = None,
) -> FidelityMeasurement:
    """Teacher-force the reference continuations on `base_url`, compare, and store the measurement.

    Raises:
        EndpointError, ProbeMismatch: the server could not score the probes as the reference was.
    """
    if reference.reference_id is None:
        raise ValueError(
            "measure_fidelity needs a stored reference (from capture_reference or load_reference)"
        )
    started = time.monotonic()
    comparisons = []
    with CompletionsClient(base_url, api_key=api_key) as client:
        for probe in reference.probes:
            scores = client.teacher_force(
                probe.probe_id, probe.prompt_ids, probe.continuation_ids, top_k=reference.top_k
            )
            comparisons.append(compare_probe(probe, scores))
        server = _server_record(client)
    elapsed = time.monotonic() - started
    metrics = summarize(comparisons)
    per_probe = tuple(
        {
            "probe_id": c.probe_id,
            "kind": c.kind,
            "positions": c.length,
            "kl_mean": float(c.kl.mean()),
            "kl_max": float(c.kl.max()),
            "top1_agreement": float(c.top1_agree.mean()),
            "decisive_flips": int(c.decisive_flip.sum()),
            "greedy_match": c.greedy_match,
        }
        for c in comparisons
    )
    measurement_id = store.save_measurement(
        reference_id=reference.reference_id,
        role=role,
        label=label,
        metrics=metrics,
        per_probe=list(per_probe),
        elapsed_s=elapsed,
        server=server,
    )
    log.info(
        "fidelity %s %s: kl_mean %.3g, kl_p99 %.3g, top1 %.4f (%.4f without near-ties), greedy match %.3f",
        role,
        label,
        metrics.kl_mean,
        metrics.kl_p99,
        metrics.top1_agreement,
        metrics.top1_gated_agreement,
        metrics.greedy_match_fraction,
    )
    return FidelityMeasurement(
        measurement_id=measurement_id,
        role=role,
        label=label,
        metrics=metrics,
        per_probe=per_probe,
        elapsed_s=elapsed,
    )
