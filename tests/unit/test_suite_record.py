"""chaos.runfiles.suite_record: suite.json as one versioned model, one writer and one loader, which the
regression gate reads stored baselines through."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chaos.gate import ComparisonInputError, compare_suites, load_tolerances
from chaos.report import write_suite_report
from chaos.runfiles.record import RunRecord
from chaos.runfiles.suite_record import (
    SUITE_SCHEMA_VERSION,
    SuiteRecord,
    SuiteRecordError,
    load_suite_record,
)

V1_SUITE = Path(__file__).parent / "data" / "suite_v1"
"""A stored baseline as trainchaos wrote suite.json before SuiteRecord (``"format": 1``, no
``schema_version``): the smoke suite's kill-rank and hang-rank."""


def _record(scenario: str, repeat: int, recovery: float) -> RunRecord:
    return RunRecord.from_dict({
        "schema_version": 2, "scenario": {"name": scenario}, "repeat_index": repeat, "status": "completed",
        "run_dir": f"reports/smoke/{scenario}/{repeat}", "wall_s": 30.0, "faults": [{"fault_id": "f0", "type": "t"}],
        "metrics": {"detection_s": 0.02, "recovery_s": recovery, "lost_steps": 12, "goodput": 0.5,
                    "false_detections": 0, "wall_s": 30.0},
        "verdict": {"passed": True, "checks": []},
    })


def test_a_stored_baseline_of_version_1_loads_upgraded(tmp_path: Path) -> None:
    stored = json.loads((V1_SUITE / "suite.json").read_text())
    assert "schema_version" not in stored and stored["format"] == 1
    record = load_suite_record(str(V1_SUITE))
    assert record.schema_version == SUITE_SCHEMA_VERSION and record.format == 1
    assert record.scenario_names() == ["hang-rank", "kill-rank"]
    kill = record.by_scenario()["kill-rank"]
    assert kill.pass_rate == 1.0 and kill.stats("recovery_s").median == stored["scenarios"][1]["metrics"]["recovery_s"]["median"]
    # Nothing invented, nothing lost: the file plus its version.
    assert record.to_dict() == {"schema_version": SUITE_SCHEMA_VERSION, **stored}

    # The gate compares today's suite against it.
    current = tmp_path / "current"
    write_suite_report(str(current), [_record("hang-rank", 0, 20.0), _record("kill-rank", 0, 90.0)], "smoke")
    comparison = compare_suites(record, load_suite_record(str(current)), load_tolerances(None))
    assert "kill-rank recovery_s" in [f"{r.scenario} {r.metric}" for r in comparison.regressions]


def test_the_suite_record_written_is_the_one_loaded(tmp_path: Path) -> None:
    runs = [_record("kill-rank", i, 6.0 + i) for i in range(3)]
    write_suite_report(str(tmp_path), runs, "smoke")
    on_disk = json.loads((tmp_path / "suite.json").read_text())
    assert list(on_disk)[:3] == ["schema_version", "format", "suite"]
    assert on_disk["schema_version"] == SUITE_SCHEMA_VERSION and on_disk["format"] == 1
    record = load_suite_record(str(tmp_path / "suite.json"))
    assert record.to_dict() == on_disk
    (row,) = record.scenarios
    assert (row.repeats, row.passed, row.stats("recovery_s").median) == (3, 3, 7.0)
    assert row.stats("lost_steps").median == 12 and isinstance(row.stats("lost_steps").median, int)


@pytest.mark.parametrize(("change", "match"), [
    ({"schema_version": SUITE_SCHEMA_VERSION + 1},
     rf"suite.json: schema_version: {SUITE_SCHEMA_VERSION + 1} is newer than this trainchaos reads"),
    ({"schema_version": "2"}, r"suite.json: schema_version: '2' is not a suite record version"),
    ({"format": 2}, r"suite.json: schema_version: missing, and format is 2, not 1"),
    ({"scenarios": None}, r"suite.json: not a trainchaos suite output: scenarios: Input should be a valid list"),
    ({"scenarios": [{"scenario": "kill-rank", "repeats": "three"}]},
     r"suite.json: not a trainchaos suite output: scenarios\[0\]\.repeats: Input should be a valid integer"),
])
def test_a_suite_record_this_version_cannot_read_is_a_located_error(tmp_path: Path, change: dict,
                                                                     match: str) -> None:
    stored = json.loads((V1_SUITE / "suite.json").read_text())
    (tmp_path / "suite.json").write_text(json.dumps({**stored, **change}))
    with pytest.raises(SuiteRecordError, match=match) as err:
        load_suite_record(str(tmp_path))
    assert str(err.value).startswith(str(tmp_path / "suite.json"))
    assert err.value.exit_code == 2
    # The gate's input error is the loader's: `trainchaos compare` exits 2 on it.
    assert isinstance(err.value, ComparisonInputError)


def test_a_missing_or_unreadable_suite_json_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SuiteRecordError, match="no suite.json here"):
        load_suite_record(str(tmp_path))
    (tmp_path / "suite.json").write_text("{not json")
    with pytest.raises(SuiteRecordError, match="unreadable suite output"):
        load_suite_record(str(tmp_path))
    shutil.copy(V1_SUITE / "suite.json", tmp_path / "suite.json")
    assert isinstance(load_suite_record(str(tmp_path)), SuiteRecord)
