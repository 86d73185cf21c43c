"""Answer tasks in run order with a bounded number in flight, and stop without losing what is in flight.

Why: a run stopped by its rule (the sequential test decided, the lazy baseline caught up) used to be
killed with requests in flight, and those are the slowest answers: the long or looping ones, most
likely wrong, which on a candidate's side are the losses the task tier exists to catch. Here a stop
only ends the dispatching; every task already sent is answered (drained) before the run returns.
An error or an interrupt still cancels what is in flight: those tasks were never answered, and the
next run answers them first (eval.worker runs the tasks not yet answered, in run order).

The worker (eval.worker) runs verifiers' rollouts through this; its parent asks for the stop with a file.

Usage:
    dispatched = await answer_in_order(slots, rollout, max_concurrent=8, stop_requested=stop_file.exists)
    dispatched.ran_all
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Dispatched", "answer_in_order"]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class Dispatched:
    """What one run sent: `dispatched` of its `tasks`, every one of them answered."""

    tasks: int
    dispatched: int

    @property
    def ran_all(self) -> bool:
        """No stop came before the last task was sent."""
        return self.dispatched == self.tasks


async def answer_in_order(tasks: Sequence[T], rollout: Callable[[T], Awaitable[object]], *,
                          max_concurrent: int | None, stop_requested: Callable[[], bool]) -> Dispatched:
    """Send `tasks` in order, at most `max_concurrent` at a time (None: all); before each send, ask
    `stop_requested()`: once it says stop, send nothing more and wait for those in flight.

    Raises:
        whatever a rollout raises (or an interrupt), after cancelling the rollouts still in flight.
    """
    width = max_concurrent or max(len(tasks), 1)
    in_flight: set[asyncio.Future] = set()
    dispatched = 0

    async def settle(until: int) -> None:
        """Wait until at most `until` rollouts are in flight; a rollout that raised ends the run."""
        nonlocal in_flight
        while len(in_flight) > until:
            done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                future.result()

    try:
        for task in tasks:
            await settle(width - 1)
            if stop_requested():
                break
            in_flight.add(asyncio.ensure_future(rollout(task)))
            dispatched += 1
        await settle(0)  # drain: a stop never discards an answer already asked for
    except BaseException:
        for future in in_flight:
            future.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
        raise
    return Dispatched(tasks=len(tasks), dispatched=dispatched)
