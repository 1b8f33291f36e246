"""Expected failures (``expect: {fail: REASON, issue: URL}``): a shipped finding is XFAIL, not
a red suite; an unexpected pass is XPASS (a failure only with --strict); a tool error stays an
error. Everywhere a verdict shows: outcome, reasons, console totals, suite.json/suite.md,
JUnit, the suite page, the regression gate, the exit code of ``trainchaos run``."""

from __future__ import annotations

import copy
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from chaos.cli import main
from chaos.gate import SuiteRecord, compare_suites, load_suite_record
from chaos.report import print_verdict_table, render_junit, write_suite_report
from chaos.report.suite_page import render_suite_html
from chaos.runfiles.record import RunRecord
from chaos.runner import suite as suite_module
from chaos.runner.suite import SuiteOutcome
from chaos.scenario.load import parse_scenario
from tests.unit.test_report import DETECTION_REASON, _journal

ISSUE = "https://github.com/pytorch/pytorch/issues/123"
EXPECT = {"fail": "the store is a single point of failure", "issue": ISSUE}


def R(journal: dict) -> RunRecord:  # noqa: N802 - short, as the tests read the records
    return RunRecord.from_dict(journal)


def _expected(journal: dict) -> dict:
    journal = copy.deepcopy(journal)
    journal["scenario"]["expect"] = dict(EXPECT)
    return journal


@pytest.fixture
def xfail() -> dict:
    journal = _expected(_journal(0, detection_s=2.41))
    journal["verdict"] = {"passed": False, "checks": [
        {"name": "detection_s", "ok": False, "value": 2.41, "bound": {"max": 2}, "reason": DETECTION_REASON}]}
    return journal


@pytest.fixture
def xpass() -> dict:
    return _expected(_journal(1))


@pytest.fixture
def tool_error() -> dict:
    journal = _expected(_journal(2))
    journal.update(status="tool_error", verdict=None, error="f0-kill_rank: inject failed: boom")
    return journal


def test_the_scenario_key_is_validated_and_built() -> None:
    scenario = parse_scenario({"name": "known", "expect": dict(EXPECT)}, "known.yaml")
    assert (scenario.expect.fail, scenario.expect.issue) == (EXPECT["fail"], ISSUE)
    assert parse_scenario({"name": "plain"}, "plain.yaml").expect is None
    assert parse_scenario({"name": "no-link", "expect": {"fail": "why"}}, "x.yaml").expect.issue is None


def test_outcomes_and_reasons(xfail, xpass, tool_error) -> None:
    assert [R(j).outcome for j in (xfail, xpass, tool_error)] == ["xfail", "xpass", "error"]
    assert [R(j).outcome_label for j in (xfail, xpass, tool_error)] == ["XFAIL", "XPASS", "TOOL ERROR"]
    # The expectation first, with its issue, then what was really missed.
    assert R(xfail).reasons() == [f"expected failure: {EXPECT['fail']} ({ISSUE})", DETECTION_REASON]
    assert R(xpass).reasons() == [f"unexpectedly met every target; expected to fail: {EXPECT['fail']} ({ISSUE})"]
    # trainchaos failing is never the expected failure.
    assert R(tool_error).reasons() == ["f0-kill_rank: inject failed: boom"]


def test_the_suite_passes_on_xfail_and_on_xpass_unless_strict(xfail, xpass, tool_error) -> None:
    assert SuiteOutcome(records=[R(xfail)]).passed
    assert SuiteOutcome(records=[R(xfail), R(xpass)]).passed
    assert not SuiteOutcome(records=[R(xfail), R(xpass)], strict=True).passed
    assert SuiteOutcome(records=[R(xfail)], strict=True).passed
    assert not SuiteOutcome(records=[R(xfail), R(tool_error)]).passed


def test_console_table_and_totals(xfail, xpass) -> None:
    buffer = io.StringIO()
    print_verdict_table([R(xfail), R(xpass)], Console(file=buffer, width=250, color_system=None))
    text = buffer.getvalue()
    assert "XFAIL" in text and "XPASS" in text and f"expected failure: {EXPECT['fail']}" in text
    assert "1/2 runs passed, 1 expected failure (XFAIL), 1 unexpectedly passed (XPASS)" in text


def test_suite_json_and_md(tmp_path: Path, xfail, xpass, passed_journal) -> None:
    write_suite_report(str(tmp_path), [R(passed_journal), R(xfail), R(xpass)], "findings")
    suite = json.loads((tmp_path / "suite.json").read_text())
    assert suite["passed"] is True
    assert suite["counts"] == {"runs": 3, "passed": 1, "failed": 0, "errors": 0, "xfailed": 1, "xpassed": 1}
    assert [r["outcome"] for r in suite["runs"]] == ["pass", "xfail", "xpass"]
    (row,) = suite["scenarios"]
    assert (row["passed"], row["xfailed"], row["xpassed"], row["failed"]) == (2, 1, 1, 0)
    md = (tmp_path / "suite.md").read_text()
    assert md.startswith("# Suite findings: PASS")
    assert "2/3 runs met every target; 1 expected failure (XFAIL); 1 unexpectedly passed (XPASS)." in md
    assert "**XFAIL**" in md and ISSUE in md


@pytest.fixture
def passed_journal() -> dict:
    return _journal(0)


def test_junit_skips_an_xfail_and_fails_an_xpass_only_when_strict(xfail, xpass) -> None:
    root = ET.fromstring(render_junit([R(xfail), R(xpass)], "findings"))
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("2", "0", "1")
    cases = list(root.iter("testcase"))
    skipped = cases[0].find("skipped")
    assert skipped is not None and skipped.get("type") == "xfail"
    assert skipped.get("message") == f"expected failure: {EXPECT['fail']} ({ISSUE})"
    assert cases[1].find("failure") is None and "XPASS: expected to fail" in cases[1].find("system-out").text
    strict = ET.fromstring(render_junit([R(xfail), R(xpass)], "findings", strict=True))
    assert (strict.get("failures"), strict.get("skipped")) == ("1", "1")
    assert list(strict.iter("testcase"))[1].find("failure").get("type") == "XPASS"


def test_suite_page_badges(xfail, xpass) -> None:
    html = render_suite_html([R(xfail), R(xpass)], "findings")
    assert 'data-outcome="pass">PASS' in html
    assert '<span class="badge xfail">XFAIL</span>' in html and '<span class="badge xpass">XPASS</span>' in html
    assert "1 expected failure (XFAIL)" in html


def test_the_gate_takes_a_kept_finding_as_no_regression_and_a_new_one_as_one(tmp_path: Path, xfail,
                                                                               passed_journal) -> None:
    def suite(journal: dict, name: str) -> SuiteRecord:
        write_suite_report(str(tmp_path / name), [R(journal)], "s")
        return load_suite_record(str(tmp_path / name / "suite.json"))

    finding = suite(xfail, "finding")
    assert compare_suites(finding, finding).passed
    # A scenario that passed, now marked as an expected failure: its pass rate fell.
    hidden = compare_suites(suite(passed_journal, "was-passing"), finding)
    (rate,) = [r for r in hidden.regressions if r.metric == "passed"]
    assert "1 expected failure(s) (XFAIL)" in rate.note


@pytest.mark.parametrize(("kinds", "strict", "code"), [
    (("xfail",), False, 0), (("xfail", "xpass"), False, 0), (("xfail", "xpass"), True, 1),
    (("xfail", "fail"), False, 1), (("xfail", "error"), False, 3),
])
def test_run_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                       xfail, xpass, tool_error, kinds, strict, code) -> None:
    failed = copy.deepcopy(xfail)
    del failed["scenario"]["expect"]
    by_kind = {"xfail": xfail, "xpass": xpass, "fail": failed, "error": tool_error}
    journals = iter([R(by_kind[k]) for k in kinds])
    monkeypatch.setattr(suite_module, "run_scenario_once", lambda *a, **k: next(journals))
    monkeypatch.setattr(suite_module, "preflight", lambda scenarios: None)
    for i in range(len(kinds)):
        (tmp_path / f"s{i}.yaml").write_text(f"name: s{i}\nexpect: {{fail: known}}\n")
    argv = ["trainchaos", "run", str(tmp_path), "--out", str(tmp_path / "out"), *(["--strict"] if strict else [])]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == code, capsys.readouterr()


pytest_plugins = ["pytester"]

_FAKE_RUNS = """
from pathlib import Path

import chaos.pytest_plugin as plugin
from chaos.pytest_plugin import RunResult, ScenarioResult
from chaos.runfiles.record import RunRecord

OUTCOMES = {"finding": "xfail", "fixed": "xpass", "broken": "error"}


def fake_run_scenarios(scenarios, out, **kwargs):
    (scenario,) = scenarios
    kind = OUTCOMES[scenario.name]
    verdict = {"passed": kind == "xpass", "checks": [] if kind == "xpass" else [
        {"name": "recovery_s", "ok": False, "reason": "why"}]}
    record = RunRecord.from_dict({
        "schema_version": 2, "scenario": {"name": scenario.name, "expect": {"fail": "known finding"}},
        "run_dir": out, "status": "tool_error" if kind == "error" else "completed",
        "error": "why" if kind == "error" else None, "verdict": None if kind == "error" else verdict})
    run = RunResult(record=record, journal_path=Path("journal.json"), report_path=None)
    return [ScenarioResult(scenario.name, [run])]


plugin.run_scenarios = fake_run_scenarios
"""


def test_pytest_plugin_reports_xfailed_and_xpassed_and_a_tool_error_as_failed(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(_FAKE_RUNS)
    scenarios = pytester.mkdir("scenarios")
    for name in ("finding", "fixed", "broken"):
        (scenarios / f"{name}.yaml").write_text(f"name: {name}\nexpect: {{fail: known finding, issue: '{ISSUE}'}}\n")
    result = pytester.runpytest_subprocess("--trainchaos", "scenarios", "-p", "no:cacheprovider", "-rxX")
    result.assert_outcomes(xfailed=1, xpassed=1, failed=1)
    result.stdout.fnmatch_lines([f"XFAIL scenarios::finding - known finding ({ISSUE})"])
    strict = pytester.runpytest_subprocess("--trainchaos", "scenarios", "-p", "no:cacheprovider", "-o",
                                           "xfail_strict=true")
    strict.assert_outcomes(xfailed=1, failed=2)
