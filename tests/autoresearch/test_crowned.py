"""Export and RESULTS.md read only the crowned champion's own minimization (autoresearch.champion.crowned).

The committed drafting study (examples/real-0.5b-own-answers, champion trial 18 crowned in round 2) with a
minimization of that champion stored as the loop stores one (tests.autoresearch.test_tabbyapi_export's
scripted launches); then a later round moves the crown, as the same command with more --trials or a resumed
night does.
"""

from __future__ import annotations

import optuna
import pytest

from autoresearch.__main__ import main
from autoresearch.champion.change_costs import MINIMIZATION_ATTR
from autoresearch.champion.crowned import champion_minimization, drop_dethroned, unfinished_launches
from autoresearch.ground.db import ResultsDB
from serving.config import ServingConfig

from .test_tabbyapi_export import _with_minimization

GATED = {"passed": True, "reason": "judged as a candidate (fidelity)"}


def _crown(url: str, *, trial: int, round_: int) -> ServingConfig:
    """A later round's verdict, stored as the finalists' stage stores it: `trial` crowned (the baseline's number:
    the crown left to the baseline)."""
    study = optuna.load_study(study_name="drafting-eos", storage=url)
    t = study.trials[trial]
    baseline = t.user_attrs.get("role") == "baseline"
    study.set_user_attr("champion", {**study.user_attrs["champion"], "trial": trial, "config": t.user_attrs["config"],
                                     "is_baseline": baseline, "round": round_, "speedup": 1.0 if baseline else 1.1})
    return ServingConfig.from_dict(t.user_attrs["config"])


def _export(url: str, out) -> ServingConfig:
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--out", str(out)]) == 0
    return ServingConfig.from_json(out.read_text())


def test_the_crowned_champions_own_minimization_is_exported(tmp_path, capsys):
    url, minimization = _with_minimization(tmp_path, gate=GATED)
    assert _export(url, tmp_path / "c.json") == ServingConfig.from_dict(minimization["minimal"])
    out = capsys.readouterr().out
    assert "the minimal champion (2 of trial 18's 10 changes), 1.299x [" in out  # its own speed-up (1.25 x 1.04), not the champion's
    assert "the baseline on request time (faster; " in out and "as confirmed" not in out


@pytest.mark.parametrize("crowned", ["baseline", "another trial"])
def test_a_dethroned_champions_minimization_is_neither_exported_nor_reported(tmp_path, capsys, crowned):
    """Before: export wrote the old champion's minimal config ("passed"), and RESULTS.md showed its change costs."""
    url, minimization = _with_minimization(tmp_path, gate=GATED)
    now = _crown(url, trial=0 if crowned == "baseline" else 5, round_=3)
    capsys.readouterr()

    assert _export(url, tmp_path / "c.json") == now
    who = "the baseline" if crowned == "baseline" else "trial 5"
    assert capsys.readouterr().err.splitlines() == [
        f"the stored minimization is of trial 18, crowned in round 2, not of the champion ({who}, crowned in round 3): "
        "not used"]
    assert main(["report", "--study", "drafting-eos", "--storage", url, "--results-md", str(tmp_path / "R.md")]) == 0
    assert "## What each change bought" not in (tmp_path / "R.md").read_text()
    assert main(["export", "--study", "drafting-eos", "--storage", url, "--format", "tabbyapi",
                 "--out", str(tmp_path / "tabby")]) == 0
    assert "minimal champion" not in (tmp_path / "tabby" / "config.yml").read_text()


def test_the_loop_drops_a_dethroned_minimization_and_keeps_its_own(tmp_path):
    url, _ = _with_minimization(tmp_path, gate=GATED)
    study = optuna.load_study(study_name="drafting-eos", storage=url)
    assert drop_dethroned(study) is None and champion_minimization(study)[0] is not None  # the champion's own
    _crown(url, trial=0, round_=3)
    study = optuna.load_study(study_name="drafting-eos", storage=url)
    assert drop_dethroned(study) == ("the stored minimization is of trial 18, crowned in round 2, not of the champion "
                                     "(the baseline, crowned in round 3): dropped")
    assert study.user_attrs[MINIMIZATION_ATTR] is None and champion_minimization(study) == (None, None)


def test_launches_of_another_champions_minimization_are_not_an_unfinished_one(tmp_path):
    """RESULTS.md's "Not finished: N launches" counts the champion's own minimization's launches only."""
    url, _ = _with_minimization(tmp_path, gate=GATED)
    study = optuna.load_study(study_name="drafting-eos", storage=url)
    db = ResultsDB(url)
    key = ServingConfig.from_dict(study.user_attrs["champion"]["config"]).digest
    for launch, of in enumerate((key, key, "f" * 64)):
        db.add_measurement(study="drafting-eos", trial=None, kind="minimize_bench", config_digest=of, launch=launch,
                           payload={"minimization": of, "label": f"rank/champion/{launch}", "bench": None})
    assert unfinished_launches(study, db, "drafting-eos") == 0  # its minimization ended
    study.set_user_attr(MINIMIZATION_ATTR, None)
    assert unfinished_launches(study, db, "drafting-eos") == 2
    _crown(url, trial=5, round_=3)
    assert unfinished_launches(optuna.load_study(study_name="drafting-eos", storage=url), db, "drafting-eos") == 0
