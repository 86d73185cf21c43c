"""bench.reference on the H200 record: the device README's table, reproduced up to one machine factor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.errors import BenchConfigError
from bench.ladder import mark_stalls
from bench.records import BenchResult
from bench.reference import ReferenceTable, check_reference

RECORDS = Path(__file__).parents[2] / "examples" / "bench-table-h200"
ROWS = (
    "defaults",
    "chunk4096-fp16",
    "chunk8192",
    "chunk4096-cache8",
    "chunk4096-cache4",
    "chunk4096-int8gemv0",
)


@pytest.fixture(scope="module")
def results() -> dict[str, BenchResult]:
    return {
        row: mark_stalls(BenchResult.from_dict(json.loads((RECORDS / f"bench-{row}.json").read_text())))
        for row in ROWS
    }


def _table(tmp_path: Path, edit=None) -> Path:
    d = json.loads((RECORDS / "reference.json").read_text())
    if edit:
        edit(d)
    path = tmp_path / "table.json"
    path.write_text(json.dumps(d))
    return path


def test_the_h200_record_reproduces_the_table_with_one_factor_per_family(results):
    check = check_reference(ReferenceTable.from_json(RECORDS / "reference.json"), results)
    assert check.ok, check.to_dict()
    assert len(check.rows) == 18 and not check.missing and not check.unmeasured
    # this H200 decodes 4.6% and prefills 8.1% under the table's machine, every row alike
    assert check.factors["decode_tok_per_s_server"] == pytest.approx(0.954, abs=0.002)
    assert check.factors["prefill_tok_per_s_server"] == pytest.approx(0.919, abs=0.002)
    assert max(abs(r.deviation) for r in check.rows if r.metric.startswith("decode")) < 0.015


def test_a_row_that_differs_from_the_others_is_off(results, tmp_path):
    def faster_int8gemv0(d):  # as if exact GEMV cost nothing: 70 tok/s instead of 60.5
        d["rows"]["chunk4096-int8gemv0"]["decode_tok_per_s_server@1024/math"] = 70

    check = check_reference(ReferenceTable.from_json(_table(tmp_path, faster_int8gemv0)), results)
    off = [(r.row, r.metric) for r in check.rows if not r.ok]
    assert off == [("chunk4096-int8gemv0", "decode_tok_per_s_server@1024/math")] and not check.ok


def test_a_machine_outside_the_factor_bounds_is_not_a_reproduction(results, tmp_path):
    def slow_bounds(d):
        d["factor_bounds"] = [0.97, 1.03]

    check = check_reference(ReferenceTable.from_json(_table(tmp_path, slow_bounds)), results)
    assert all(r.ok for r in check.rows) and not check.factors_ok and not check.ok


def test_partial_and_unknown_rows(results, tmp_path):
    table = ReferenceTable.from_json(RECORDS / "reference.json")
    partial = check_reference(table, {k: results[k] for k in ROWS[:3]})
    assert partial.unmeasured == ROWS[3:] and not partial.ok
    with pytest.raises(BenchConfigError, match="not in the table"):
        check_reference(table, {"chunk16384": results["defaults"]})


def test_a_bad_table_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": {}}')
    with pytest.raises(BenchConfigError, match="not a reference table"):
        ReferenceTable.from_json(bad)

    def no_floor(d):
        del d["floors"]["prefill_tok_per_s_server"]

    with pytest.raises(BenchConfigError, match="no noise floor"):
        ReferenceTable.from_json(_table(tmp_path, no_floor))


def test_cli_exit_status_follows_the_verdict(tmp_path, capsys):
    args = [f"{row}={RECORDS / f'bench-{row}.json'}" for row in ROWS]
    assert (
        main(["reference", str(RECORDS / "reference.json"), *args, "--json", str(tmp_path / "c.json")]) == 0
    )
    assert "reproduced" in capsys.readouterr().out
    assert json.loads((tmp_path / "c.json").read_text())["ok"] is True
    assert main(["reference", str(RECORDS / "reference.json"), *args[:2]]) == 1  # rows missing
    assert main(["reference", str(RECORDS / "reference.json"), "defaults"]) == 2
    assert "expected ROW=RESULT.json" in capsys.readouterr().out
