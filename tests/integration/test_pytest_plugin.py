"""The pytest plugin on real runs, in a pytest session of its own (pytester): a user's test
asserts on a scenario's typed result through the ``trainchaos`` fixture, and ``--trainchaos
PATH`` turns each scenario into a test item, a missed target into a failed test whose message
is the verdict's reason."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
pytest_plugins = ["pytester"]

TINY = """\
name: {name}
seed: 3
workload:
  harness: {{steps: 20, model: {{name: mlp}}, checkpoint: {{every_steps: 10}}}}
topology: {{nodes: 2, ranks_per_node: 1}}
targets:
  false_detections: {{max: 0}}
{extra}timeout_s: 120
"""

USER_TEST = """\
def test_steady_run_has_no_false_alarm(trainchaos):
    result = trainchaos("scenarios/steady.yaml")
    assert result.passed, result.reasons
    assert result.outcome == "pass" and result.runs[0].status == "completed"
    assert result.metrics.false_detections == 0
    assert result.metrics.final_step == 20
    assert result.verdict.passed and [c.name for c in result.verdict.checks][0] == "false_detections"
    assert result.journal_path.is_file()
    assert result.report_path.name == "report.html" and result.report_path.is_file()
"""


def test_scenarios_as_tests_and_the_fixture(pytester: pytest.Pytester, state_dir: Path) -> None:
    scenarios = pytester.mkdir("scenarios")
    (scenarios / "steady.yaml").write_text(TINY.format(name="steady", extra=""))
    # Goodput of a 20-step run that spends most of its time starting up: far below 99 %.
    (scenarios / "greedy.yaml").write_text(TINY.format(name="greedy", extra="  goodput: {min: 0.99}\n"))
    pytester.makepyfile(test_user=USER_TEST)

    result = pytester.runpytest_subprocess("--trainchaos", "scenarios", "-p", "no:cacheprovider",
                                           "--junitxml=junit.xml", "-rf", timeout=280)
    output = result.stdout.str()
    result.assert_outcomes(passed=2, failed=1)
    # The failing scenario is a failed test, and its message is the verdict's reason.
    result.stdout.fnmatch_lines([
        "*greedy*",
        "greedy[[]0[]] missed a target: goodput 0.* < target 0.99",
        "  report: *reports/pytest/greedy/0/report.html",
    ])
    result.stdout.fnmatch_lines(["FAILED scenarios::greedy - greedy[[]0[]] missed a target: goodput 0.* < target 0.99"])
    assert "trainchaos HTML report: " in output and (pytester.path / "reports/pytest/index.html").is_file()

    cases = {case.get("name"): case for case in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")}
    assert cases["greedy"].find("failure") is not None and cases["steady"].find("failure") is None
    props = {p.get("name"): p.get("value") for p in cases["steady"].iter("property")}
    assert props["false_detections"] == "0" and props["report"].endswith("report.html")
