"""eval.dispatch: tasks sent in run order, a bounded number in flight; a stop drains, an interrupt cancels.

The rollouts here are a test double of verifiers' rollouts against a model server (the outside boundary):
each takes its own number of event-loop turns, so they finish out of order, the slow ones last.
"""

from __future__ import annotations

import asyncio

import pytest

from eval.dispatch import answer_in_order

SLOW = {2, 3, 9}  # long or looping answers: 40 turns against 1-3


class Rollouts:
    """The double: records what was sent and what finished, in order; `stop_after` answers, a stop is asked."""

    def __init__(self, stop_after: int | None = None, fail_at: int | None = None):
        self.sent: list[int] = []
        self.finished: list[int] = []
        self.in_flight_max = 0
        self.stop_after = stop_after
        self.fail_at = fail_at
        self.in_flight_at_stop: set[int] | None = None

    async def __call__(self, task: int) -> None:
        self.sent.append(task)
        self.in_flight_max = max(self.in_flight_max, len(self.sent) - len(self.finished))
        for _ in range(40 if task in SLOW else 1 + task % 3):
            await asyncio.sleep(0)
        if task == self.fail_at:
            raise RuntimeError("the harness crashed")
        self.finished.append(task)

    def stop_requested(self) -> bool:
        stop = self.stop_after is not None and len(self.finished) >= self.stop_after
        if stop and self.in_flight_at_stop is None:
            self.in_flight_at_stop = set(self.sent) - set(self.finished)
        return stop


def test_tasks_are_sent_in_order_at_most_max_concurrent_at_a_time_and_finish_out_of_order():
    rollouts = Rollouts()
    dispatched = asyncio.run(answer_in_order(range(12), rollouts, max_concurrent=4,
                                             stop_requested=rollouts.stop_requested))
    assert rollouts.sent == list(range(12)) and sorted(rollouts.finished) == list(range(12))
    assert rollouts.finished != rollouts.sent and rollouts.finished[-1] in SLOW
    assert rollouts.in_flight_max == 4
    assert (dispatched.tasks, dispatched.dispatched, dispatched.ran_all) == (12, 12, True)


def test_a_stop_sends_nothing_more_and_answers_every_task_in_flight():
    rollouts = Rollouts(stop_after=3)
    dispatched = asyncio.run(answer_in_order(range(12), rollouts, max_concurrent=4,
                                             stop_requested=rollouts.stop_requested))
    assert rollouts.in_flight_at_stop & SLOW  # the slow answers were in flight when the rule fired
    assert rollouts.in_flight_at_stop <= set(rollouts.finished)  # none of them dropped
    assert sorted(rollouts.finished) == rollouts.sent == list(range(dispatched.dispatched))
    assert 3 < dispatched.dispatched < 12 and not dispatched.ran_all


def test_a_stop_after_the_last_task_was_sent_still_ran_all():
    rollouts = Rollouts(stop_after=11)
    dispatched = asyncio.run(answer_in_order(range(12), rollouts, max_concurrent=4,
                                             stop_requested=rollouts.stop_requested))
    assert dispatched.ran_all and sorted(rollouts.finished) == list(range(12))


def test_a_failing_rollout_cancels_those_in_flight_and_is_raised():
    rollouts = Rollouts(fail_at=4)
    with pytest.raises(RuntimeError, match="harness crashed"):
        asyncio.run(answer_in_order(range(12), rollouts, max_concurrent=4, stop_requested=rollouts.stop_requested))
    assert {2, 3} <= set(rollouts.sent) - set(rollouts.finished)  # the slow ones, cancelled unanswered
    assert len(rollouts.sent) < 12
