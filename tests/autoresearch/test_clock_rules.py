"""The night clock's rules, decided where they are made (autoresearch.night.clock): what a stage may spend, the
minimization's bound, the judgment that is never cut, the autosave, a night that is over. A scripted clock (a list
of seconds) and Optuna's in-memory storage; the autosave's ticker is the real thread, on real seconds."""

from __future__ import annotations

import threading
import time

import optuna
import pytest

from autoresearch.ground.stages import FINALISTS, MINIMAL_GATE, MINIMIZE, REPORT, SEARCH, TABBYAPI_GATE, TASKS
from autoresearch.night.clock import NIGHT_KEY, NightClock, Ticker

AFTER = {FINALISTS: 300.0, TASKS: 600.0, MINIMIZE: 1500.0, MINIMAL_GATE: 400.0, TABBYAPI_GATE: 400.0, REPORT: 10.0}
SHORT = AFTER | {MINIMIZE: 0.0, MINIMAL_GATE: 0.0, TABBYAPI_GATE: 0.0}  # a night too short to keep the minimization


def _clock(hours: float = 1.0, *, spent: float = 0.0, reserve: dict | None = None) -> tuple[NightClock, list[float]]:
    now = [0.0]
    clock = NightClock(hours, clock=lambda: now[0])
    clock.set_plan(AFTER, reserve=SHORT if reserve is None else reserve, trial_s=30.0)
    now[0] = spent
    return clock, now


def test_a_stage_may_spend_what_is_left_less_the_reserve_of_the_stages_that_must_follow_it():
    clock, _ = _clock(spent=1000.0)  # 2,600 s left
    assert clock.stage_budget_s(SEARCH) == 2600.0 - 300 - 600 - 10  # what a champion needs
    assert clock.stage_budget_s(FINALISTS) == 2600.0 - 600 - 10  # its judgment and the report follow it
    assert clock.stage_budget_s(TASKS) == 2600.0 - 10
    # once it runs, the minimization's gates must follow it, kept or not
    assert clock.stage_budget_s(MINIMIZE) == 2600.0 - 400 - 400 - 10
    kept, now = _clock(spent=0.0, reserve=AFTER)  # a long night's policy keeps the minimization and its gates
    assert kept.stage_budget_s(FINALISTS) == 3600.0 - 600 - 1500 - 400 - 400 - 10
    assert kept.may_start(30.0) is None
    now[0] = 1000.0
    assert kept.may_start(30.0).startswith("the search stops") and clock.may_start(30.0) is None
    overrun, _ = _clock(spent=3590.0)
    assert overrun.stage_budget_s(FINALISTS) == 0.0  # never negative
    assert NightClock(None).stage_budget_s(FINALISTS) is None  # no deadline
    with pytest.raises(ValueError, match="unknown stage"):
        clock.stage_budget_s("lunch")


def test_the_minimizations_bound_keeps_its_gates_time():
    """Its ranking round and one attempt (1 x (2 + 1) + 2 = 5 launches of 60 s) fit in the 900 s left only without
    its gates' 800 s: with them the minimization is cut, and the champion is not minimized."""
    clock, now = _clock(spent=3600.0 - 900.0 - 10.0)
    bound, cut = clock.minimize_bound(per_launch_s=60.0, launches=1, changes=2, extra_launches=0)
    assert bound is None and cut.startswith("not minimized") and cut in clock.cuts
    assert "the minimal champion's gate (7 min) and the TabbyAPI subset's gate (7 min)" in cut
    now[0] -= 800.0  # 800 s more: its gates fit beside it
    bound, cut = clock.minimize_bound(per_launch_s=60.0, launches=1, changes=2, extra_launches=0)
    assert cut is None and bound == 15  # 900 s of launches
    bound, _ = clock.minimize_bound(per_launch_s=60.0, launches=1, changes=2, extra_launches=3)
    assert bound == 12  # the TabbyAPI subsets' launches come out of it
    assert NightClock(None).minimize_bound(per_launch_s=60.0, launches=1, changes=2, extra_launches=0) == (None, None)


def test_the_first_finalists_judgment_is_never_cut_and_a_later_one_only_where_it_does_not_fit():
    clock, _ = _clock(spent=3590.0)  # 10 s left
    assert clock.may_judge(0, judgment_s=600.0, report_s=10.0) is None  # what the night is for
    why = clock.may_judge(1, judgment_s=600.0, report_s=10.0)
    assert why.startswith("finalist not judged") and clock.cuts == [why]
    roomy, _ = _clock(spent=0.0)
    assert roomy.may_judge(1, judgment_s=600.0, report_s=10.0) is None


def test_the_ticker_calls_on_its_own_thread_until_stopped():
    calls: list[str] = []
    ticker = Ticker(0.02, lambda: calls.append(threading.current_thread().name)).start()
    time.sleep(0.2)
    ticker.stop()
    seen = len(calls)
    time.sleep(0.05)
    assert seen >= 3 and len(calls) == seen  # it stopped
    assert set(calls) == {"night-autosave"}


def test_the_ticker_survives_a_failed_save():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database is locked")

    ticker = Ticker(0.02, flaky).start()
    time.sleep(0.15)
    ticker.stop()
    assert len(calls) >= 2


def test_the_spent_time_is_saved_while_a_stage_runs():
    """A kill -9 in the middle of a long stage (a judgment's answers) loses at most one tick from the count."""
    study = optuna.create_study(directions=["maximize", "maximize"])
    clock = NightClock(1.0)
    with clock.autosave(study, every_s=0.02):
        with clock.timed(TASKS):
            assert study.user_attrs[NIGHT_KEY]["spent_s"] < 0.05  # saved as it started
            time.sleep(0.3)  # the stage runs: no event of the loop's
            saved = study.user_attrs[NIGHT_KEY]["spent_s"]
    assert saved >= 0.2
    resumed = NightClock(1.0, stored=study.user_attrs[NIGHT_KEY])
    assert resumed.spent_before >= 0.3 and resumed.rows[TASKS]["runs"] == 1


def test_a_night_that_ended_is_over_for_the_same_hours_only():
    study = optuna.create_study(directions=["maximize", "maximize"])
    night, now = _clock(0.25)
    now[0] = 850.0
    night.ended = True
    night.save(study)
    stored = study.user_attrs[NIGHT_KEY]
    again = NightClock(0.25, stored=stored)
    assert again.over and "ended after 14 min" in again.ended_line() and "kept" in again.ended_line()
    assert not NightClock(8.0, stored=stored).over  # another --hours: a new night
    assert not NightClock(0.25, trials=40, stored=stored).over  # --trials asks for more: a new night
    assert not NightClock(None, stored=stored | {"hours": None}).over  # --trials alone: no night to be over
    unfinished = NightClock(0.25, stored=stored | {"ended": False})
    assert not unfinished.over and unfinished.spent_before == 850.0  # a killed night goes on
