"""bench.plan: invalid plans are refused with the value named; the digest ignores the salt."""

from __future__ import annotations

import pytest

from bench.errors import BenchConfigError
from bench.plan import BenchPlan


def test_each_run_gets_a_fresh_salt_but_the_same_digest():
    a, b = BenchPlan(), BenchPlan()
    assert a.salt != b.salt
    assert a.digest == b.digest
    assert BenchPlan(decode_tokens=128).digest != a.digest


def test_plan_round_trips_through_its_dict():
    plan = BenchPlan(prefill_tokens=(1024,), decode_kinds=("code",), salt="abc")
    assert BenchPlan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"prefill_tokens": (8,)}, "prefill_tokens"),
        ({"prefill_tokens": [1024]}, "prefill_tokens"),
        ({"prefill_tokens": (), "decode_context_tokens": ()}, "nothing to measure"),
        ({"decode_kinds": ("poetry",)}, "decode_kinds"),
        ({"decode_tokens": 2}, "decode_tokens"),
        ({"min_repeats": 5, "max_repeats": 3}, "min_repeats"),
        ({"warmups_per_point": 0}, "warmups_per_point"),
        ({"decode_target_rel_ci": 0.0}, "decode_target_rel_ci"),
        ({"api": "responses"}, "api"),
        ({"decode_until": "stop"}, "decode_until"),
        ({"decode_until": "eos", "decode_tokens": 32, "decode_min_tokens": 64}, "decode_min_tokens"),
    ],
)
def test_invalid_plans_name_the_value(kwargs, named):
    with pytest.raises(BenchConfigError, match=named):
        BenchPlan(**kwargs)


def test_decoding_until_eos_is_a_different_plan_and_the_fixed_length_plan_keeps_its_digest():
    """Plans stored before decode_until existed (studies to resume, results to compare) digest the same."""
    fixed = BenchPlan(salt="abc")
    assert "decode_until" not in fixed.to_dict() and "decode_min_tokens" not in fixed.to_dict()
    eos = BenchPlan(decode_until="eos", decode_min_tokens=32, salt="abc")
    assert eos.digest != fixed.digest
    assert BenchPlan.from_dict(eos.to_dict()) == eos
    assert BenchPlan.from_dict(fixed.to_dict()) == fixed


def test_unknown_keys_in_a_stored_plan_are_refused():
    with pytest.raises(BenchConfigError, match="unknown BenchPlan key"):
        BenchPlan.from_dict({"prefill": [1024]})


def test_extra_body_may_not_override_what_bench_controls():
    with pytest.raises(BenchConfigError, match="temperature"):
        BenchPlan(extra_body={"temperature": 0.7})
    assert BenchPlan(extra_body={"ban_eos_token": True}).extra_body == {"ban_eos_token": True}
