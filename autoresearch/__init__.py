"""The tuning loop: propose a serving configuration, launch it, measure speed, gate intelligence, record.

The subpackages follow the night, and each imports only those above it in this list (never one below;
tests/test_import_rule.py reads every import, those inside functions too, and refuses a circle):

    ground     the run's plan, the Optuna study and what ranks it, the results store, errors, outcomes,
               stage names, servers, where report and export read and write
    night      the night's schedule: the plan's arithmetic (forecast), the clock, the progress display
    measures   what a trial's numbers mean: objectives, request time, energy, the rule "faster",
               the ranking, the baseline's stored evidence
    checks     what a trial and the finalists both ask: drift, the task tier, its judging and verdicts
    trial      one trial in stages, cheapest first; the baseline's protocol; the standalone sweep
    crown      the finalists re-measured in fresh launches, and the champion
    champion   the champion made servable: minimization, its gate, exports to our server and TabbyAPI
    report     RESULTS.md from one snapshot of the store, and its plot
    (top)      the run (loop), the night plan where loop and CLI meet it (night_plan), the CLI (__main__)

Usage:
    python -m autoresearch                      # the embedded default: tiny model, CPU engine, offline suite
    python -m autoresearch --suite broad --model DIR [--trials N | --hours H] [--vram 24GiB]
    python -m autoresearch export               # the champion as a serving config
"""
