"""The pytest plugin without running training: collection of ``--trainchaos PATH`` in a pytest
session of its own (pytester), and the typed results built from a journal. Real runs through
the plugin are in tests/integration/test_pytest_plugin.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.pytest_plugin import RunResult, ScenarioResult
from chaos.runfiles.record import FaultMetricsRecord, MetricsRecord, RunRecord
from chaos.runner.verdict import Check, Verdict

pytest_plugins = ["pytester"]

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def test_trainchaos_path_collects_each_scenario_as_an_item(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest("--trainchaos", str(SCENARIOS / "report"), "--collect-only", "-q")
    # The user's own tests and the scenarios, in one session.
    result.stdout.fnmatch_lines(["test_plain.py::test_plain", "*report::tiny-kill", "*report::tiny-steady",
                                 "*3 tests collected*"])
    assert result.ret == 0
    # Selected like any test: by marker and by name.
    marked = pytester.runpytest("--trainchaos", str(SCENARIOS / "report"), "--collect-only", "-q",
                                "-m", "trainchaos", "-k", "steady")
    marked.stdout.fnmatch_lines(["*report::tiny-steady", "*1/3 tests collected (2 deselected)*"])


def test_a_single_scenario_file_is_one_item(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--trainchaos", str(SCENARIOS / "report" / "tiny-kill.yaml"), "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*tiny-kill.yaml::tiny-kill", "*1 test collected*"])


def test_a_bad_scenario_is_a_collection_error_naming_the_location(pytester: pytest.Pytester) -> None:
    bad = SCENARIOS / "bad" / "param_out_of_range.yaml"
    result = pytester.runpytest("--trainchaos", str(bad), "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error stops the session
    result.stdout.fnmatch_lines(["*param_out_of_range.yaml: faults*"])


def test_plugin_is_inert_without_the_option(pytester: pytest.Pytester) -> None:
    (pytester.path / "x.yaml").write_text("name: not-a-test\n")
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_a.py::test_a", "*1 test collected*"])


def _journal(tmp_path: Path) -> dict:
    return {
        "schema_version": 2, "scenario": {"name": "kill-rank"}, "repeat_index": 0, "run_dir": str(tmp_path), "status": "completed",
        "metrics": {"status": "completed", "t_start": 0.0, "t_end": 10.0, "wall_s": 10.0, "steps_target": 40,
                    "world_size": 2, "final_world_size": 2, "recovery_s": 4.5, "digest_match": True,
                    "a_field_from_a_newer_version": 1,
                    "faults": [{"fault_id": "f0", "type": "kill_rank", "failure_class": "crash",
                                "target_srcs": ["rank-1"], "fired": True, "recovery_s": 4.5}]},
        "verdict": {"passed": False, "checks": [
            {"name": "recovery_s", "ok": False, "value": 4.5, "bound": {"max": 2}, "reason": "too slow",
             "fault": "f0"}]},
    }


def test_typed_result_from_a_journal(tmp_path: Path) -> None:
    run = RunResult.of(RunRecord.from_dict(_journal(tmp_path)))
    assert isinstance(run.metrics, MetricsRecord) and run.metrics.recovery_s == 4.5
    assert isinstance(run.metrics.faults[0], FaultMetricsRecord) and run.metrics.faults[0].fault_id == "f0"
    assert isinstance(run.verdict, Verdict) and isinstance(run.verdict.checks[0], Check)
    assert run.verdict.reasons() == ["too slow"] and run.reasons == ["too slow"]
    assert run.outcome == "fail" and not run.passed
    assert run.journal_path == tmp_path / "journal.json" and run.report_path is None
    result = ScenarioResult("kill-rank", [run])
    assert result.metrics is run.metrics and result.reasons == ["kill-rank[0]: too slow"]
    twice = ScenarioResult("kill-rank", [run, run])
    with pytest.raises(ValueError, match="ran 2 times"):
        _ = twice.metrics
