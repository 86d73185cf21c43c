"""Typed records that flow between the eval modules and into results.db.

Fidelity: a `Reference` holds, per probe, the baseline's greedy continuation and its teacher-forced
top-k distributions; `ProbeScores` are a candidate's teacher-forced distributions over the same
tokens; `FidelityMetrics` summarize the comparison. Tasks: `EpisodeOutcome` is one verifiers episode,
`TasksetResult` one taskset of a suite run (never merged with another).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "EpisodeOutcome",
    "FidelityMetrics",
    "KindMetrics",
    "ProbeReference",
    "ProbeScores",
    "Reference",
    "SuiteResult",
    "TasksetResult",
]

TopK = dict[int, float]  # token id -> natural-log probability, as the server reported it


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeScores:
    """Teacher-forced scores of one probe's continuation on one server.

    Position j is the distribution that predicts continuation token j (its context is the prompt
    plus continuation tokens < j). `token_logprobs[j]` is the log-probability of the reference
    token j itself; `top[j]` the server's top-k at that position.
    """

    probe_id: str
    token_logprobs: tuple[float, ...]
    top: tuple[TopK, ...]

    def __post_init__(self) -> None:
        if len(self.token_logprobs) != len(self.top):
            raise ValueError(
                f"probe {self.probe_id}: {len(self.token_logprobs)} token logprobs but {len(self.top)} top-k rows"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeReference:
    """The baseline's answer to one probe: exact token ids and the distributions over them."""

    probe_id: str
    kind: str
    prompt_ids: tuple[int, ...]
    continuation_ids: tuple[int, ...]
    scores: ProbeScores  # the baseline's own teacher-forced pass over prompt + continuation

    def __post_init__(self) -> None:
        if len(self.continuation_ids) != len(self.scores.top):
            raise ValueError(
                f"probe {self.probe_id}: {len(self.continuation_ids)} continuation tokens but "
                f"{len(self.scores.top)} scored positions"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class Reference:
    """A stored fidelity reference: keyed by the model manifest hash and the probe-set digest."""

    model_manifest_hash: str
    probe_set_digest: str
    top_k: int
    probes: tuple[ProbeReference, ...]
    reference_id: int | None = None  # the eval_fidelity_references row, once stored

    @property
    def n_positions(self) -> int:
        return sum(len(p.continuation_ids) for p in self.probes)


@dataclass(frozen=True, kw_only=True, slots=True)
class KindMetrics:
    """Fidelity of one probe kind (math, choice, logic, code, long_context)."""

    kind: str
    n_positions: int
    kl_mean: float
    kl_p99: float
    kl_max: float
    top1_agreement: float


@dataclass(frozen=True, kw_only=True, slots=True)
class FidelityMetrics:
    """Candidate-versus-reference fidelity over every scored position of a probe set.

    KL is KL(reference || candidate) in nats per position, computed on the coarse-graining that the
    two top-k lists allow (see `eval.divergence`): a lower bound of the full-vocabulary KL.
    `greedy_match_fraction` is the mean, over probes, of (tokens the candidate would generate
    greedily before its first divergence from the reference continuation) / continuation length.
    """

    n_probes: int
    n_positions: int
    kl_mean: float
    kl_p99: float
    kl_max: float
    top1_agreement: float
    greedy_match_fraction: float
    greedy_full_matches: int  # probes whose whole continuation the candidate reproduces greedily
    ref_token_logprob_delta_mean: float  # mean (candidate - reference) log p of the reference tokens
    by_kind: tuple[KindMetrics, ...] = ()
    # Agreement counting near-tie flips as agreement (eval.divergence.TIE_MARGIN_NATS). None in rows
    # stored before it existed: then every flip counts, as in top1_agreement.
    top1_decisive_agreement: float | None = None

    @property
    def top1_disagreement(self) -> float:
        return 1.0 - self.top1_agreement

    @property
    def top1_gated_agreement(self) -> float:
        """The agreement the gate uses: without near-tie flips where that was measured, else every flip counts."""
        return self.top1_agreement if self.top1_decisive_agreement is None else self.top1_decisive_agreement

    @property
    def top1_decisive_disagreement(self) -> float:
        """The gated top-1 statistic: flips where at least one side clearly preferred its own token."""
        return 1.0 - self.top1_gated_agreement


@dataclass(frozen=True, kw_only=True, slots=True)
class EpisodeOutcome:
    """One verifiers episode, reduced to what the gate pairs and counts."""

    task_key: str
    task_idx: int | None
    ok: bool
    reward: float | None  # None when the episode failed operationally (ok=false): not a zero score
    truncated: bool
    output_tokens: int
    model_time_s: float
    error: str | None = None
    # When its first trace started (epoch seconds): the run's dispatch order, which the sequential
    # test follows. None in rows stored before it existed.
    started_at: float | None = None

    def correct(self, full_credit: float = 1.0) -> bool:
        """An ok episode whose reward reaches full credit: partial credit is a wrong answer."""
        return self.ok and self.reward is not None and self.reward >= full_credit - 1e-9


@dataclass(frozen=True, kw_only=True, slots=True)
class TasksetResult:
    """One taskset of one suite run. Tasksets are never merged into one number."""

    name: str  # the suite's name for this taskset run, e.g. "aime25" or "mmath-math500"
    taskset_id: str
    max_tokens: int
    tasks: int
    rollouts: int
    failures: int  # episodes with ok=false: operational failures, excluded from the reward
    truncations: int
    reward_mean: float | None  # over ok episodes; None when none was ok
    output_tokens: int
    model_time_s: float
    output_tok_per_s: float | None  # sum of completion tokens / sum of model-call wall time
    run_dir: str
    episodes: tuple[EpisodeOutcome, ...] = field(default=(), repr=False)

    @property
    def accuracy(self) -> float | None:
        """Share of ok episodes at full credit (what the gate counts as correct); None when none was ok."""
        ok = [e for e in self.episodes if e.ok]
        return sum(e.correct() for e in ok) / len(ok) if ok else None


@dataclass(frozen=True, kw_only=True, slots=True)
class SuiteResult:
    """Every taskset of one suite run, in suite order, plus where the raw traces live."""

    suite: str
    run_dir: str
    tasksets: tuple[TasksetResult, ...]
    suite_run_id: int | None = None  # the eval_suite_runs row, once stored

    def taskset(self, name: str) -> TasksetResult:
        for result in self.tasksets:
            if result.name == name:
                return result
        raise KeyError(f"suite run has no taskset {name!r}; it has {[t.name for t in self.tasksets]}")
