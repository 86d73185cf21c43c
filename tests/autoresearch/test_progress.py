"""The progress display: ETAs from this run's stage timings, a forecast hook that wins, elapsed that ticks."""

from __future__ import annotations

import io

from rich.console import Console

from autoresearch.night.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _trial(progress: Progress, clock: Clock, number: int, stages: dict[str, float], done: int) -> None:
    progress.trial_started(number, "candidate", "abcdef123456")
    for name, seconds in stages.items():
        progress.stage(name)
        clock.now += seconds
    progress.trial_finished(done, "baseline")


def test_etas_come_from_this_runs_stage_and_trial_times():
    clock = Clock()
    progress = Progress(study="s", trials=4, hours=None, live=False, clock=clock)
    assert progress.study_eta_s() is None and progress.study_fraction() == 0.0
    _trial(progress, clock, 0, {"launch": 10.0, "bench": 30.0}, done=1)
    _trial(progress, clock, 1, {"launch": 20.0, "bench": 50.0}, done=2)
    assert progress.expected_s("launch") == 15.0 and progress.expected_s("trial") == 55.0
    assert progress.study_eta_s() == 2 * 55.0 and progress.study_fraction() == 0.5
    progress.trial_started(2, "candidate", "abcdef123456")
    progress.stage("bench")
    clock.now += 25.0
    assert progress.stage_eta_s() == 15.0  # 40 s expected, 25 s in
    assert progress.study_eta_s() == 2 * 55.0 - 25.0


def test_a_forecast_is_asked_first_and_the_deadline_caps_the_eta():
    clock = Clock()
    forecast = {"launch": 100.0, "trial": 600.0}.get
    progress = Progress(study="s", trials=10, hours=0.5, live=False, clock=clock, forecast=forecast)
    progress.trial_started(0, "baseline", "abcdef123456")
    progress.stage("launch")
    assert progress.stage_eta_s() == 100.0
    assert progress.study_eta_s() == 1800.0  # 10 x 600 s predicted, but --hours 0.5 stops it sooner
    assert progress.expected_s("bench") is None  # no forecast, nothing measured yet


def test_the_panel_redraws_elapsed_without_an_event():
    clock = Clock()
    progress = Progress(study="s", trials=4, hours=None, live=False, clock=clock)
    _trial(progress, clock, 0, {"launch": 10.0}, done=1)
    progress.trial_started(1, "candidate", "abcdef123456")
    progress.stage("launch")

    def drawn() -> str:
        out = io.StringIO()
        Console(file=out, width=100).print(progress._render())
        return out.getvalue()

    first = drawn()
    clock.now += 120.0
    second = drawn()
    assert "elapsed" in first and "10 s" in first and "2 min" in second  # elapsed ticks between events
    # the study's share is elapsed over elapsed + ETA: 130 s in, 3 x 10 s less the 10 s the trial in flight has used
    assert progress.study_eta_s() == 20.0 and "87%" in second and "1 of 4" in second


def test_the_baselines_first_answers_are_their_own_stage_and_a_stage_of_no_trial_names_none(caplog):
    """Before: the baseline's first answers took a candidate's judgment as their estimate (the real 0.5B's showed
    "about 2.7 h" for answers that took 100 s), and the finalists' stage logged "trial None: confirming finalists"."""
    import logging

    clock = Clock()
    forecast = {"tasks": 9000.0, "the baseline's first answers": 100.0}.get
    told: list[str] = []
    progress = Progress(study="s", trials=4, hours=None, live=False, clock=clock, forecast=forecast,
                        on_stage=told.append)
    caplog.set_level(logging.INFO, logger="autoresearch")
    progress.trial_started(0, "baseline", "abcdef123456")
    progress.stage("tasks")
    assert progress.stage_eta_s() == 100.0 and told == ["the baseline's first answers"]
    progress.trial_finished(1, "baseline")
    progress.trial_started(1, "candidate", "abcdef123456")
    progress.stage("tasks")  # a candidate's judgment, in its trial
    assert progress.stage_eta_s() == 9000.0
    progress.trial_finished(2, "baseline")
    progress.stage("confirming finalists")
    assert "trial None" not in caplog.text and "confirming finalists" in caplog.text
