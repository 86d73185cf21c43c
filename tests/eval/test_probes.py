"""The probe set is deterministic, sized by configuration, and its digest covers what reaches the server."""

from __future__ import annotations

import pytest

from eval.errors import EvalConfigError
from eval.probes import KINDS, ProbeSetConfig, build_probe_set, haystack_prompt


def test_the_default_probe_set_covers_every_suite_kind_and_two_long_contexts():
    probes = build_probe_set()
    assert {p.kind for p in probes.probes} == set(KINDS)
    long = [p for p in probes.probes if p.kind == "long_context"]
    assert [p.probe_id for p in long] == ["long_context-8192", "long_context-32768"]
    assert all(p.prompt.endswith("<|im_start|>assistant\n<think>\n") for p in probes.probes)


def test_the_digest_is_stable_and_changes_with_anything_sent():
    config = ProbeSetConfig(long_context_tokens=(256,))
    assert build_probe_set(config).digest == build_probe_set(config).digest
    digests = {
        build_probe_set(c).digest
        for c in (
            config,
            ProbeSetConfig(long_context_tokens=(512,)),
            ProbeSetConfig(long_context_tokens=(256,), continuation_tokens=64),
            ProbeSetConfig(long_context_tokens=(256,), top_k=10),
            ProbeSetConfig(long_context_tokens=(256,), template="raw"),
        )
    }
    assert len(digests) == 5


def test_haystack_length_follows_the_target_and_hides_one_needle():
    short, long = haystack_prompt(1000), haystack_prompt(32768)
    assert 8 < len(long) / len(short) < 40
    assert long.count("vault seven is") == 1
    assert haystack_prompt(1000) == short


@pytest.mark.parametrize(
    "kwargs",
    [
        {"top_k": 0},
        {"top_k": 21},
        {"continuation_tokens": 0},
        {"long_context_tokens": (10,)},
        {"kinds": ("poetry",)},
    ],
)
def test_invalid_probe_configs_are_rejected(kwargs):
    with pytest.raises(EvalConfigError):
        ProbeSetConfig(**kwargs)
