"""The regression gate on suite outputs written by the real report code: tolerances, what
counts as a regression, the Markdown, exit codes, and storing a baseline. The same gate on
two real suite runs (one with a slower restart) is in tests/integration/test_report_gate.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.errors import ScenarioError
from chaos.gate import (
    DEFAULT_TOLERANCES,
    BaselineGate,
    ComparisonInputError,
    compare_suites,
    load_suite_record,
    load_tolerances,
    render_markdown,
    update_baseline,
)
from chaos.report import write_suite_report
from chaos.runfiles.record import RunRecord


def _journal(scenario: str, repeat: int, *, recovery: float | None = 6.0, detection: float | None = 0.05,
             passed: bool = True, lost: int = 10, goodput: float = 0.5, false: int = 0) -> RunRecord:
    return RunRecord.from_dict({
        "schema_version": 2, "scenario": {"name": scenario, "targets": {}}, "repeat_index": repeat,
        "run_dir": f"/r/suite/{scenario}/{repeat}", "status": "completed", "wall_s": 40.0,
        "faults": [{"fault_id": "f0", "type": "kill_rank"}],
        "metrics": {"detection_s": detection, "recovery_s": recovery, "catchup_s": None if recovery is None
                    else recovery + 0.5, "lost_steps": lost, "goodput": goodput, "false_detections": false,
                    "wall_s": 40.0},
        "verdict": {"passed": passed, "checks": [] if passed else [
            {"name": "recovery_s", "ok": False, "value": recovery, "bound": {"max": 20}, "reason": "too slow"}]},
    })


def _suite(path: Path, journals: list[RunRecord]) -> Path:
    write_suite_report(str(path), journals, "suite")
    return path


def _three(scenario: str = "kill-rank", **kwargs) -> list[RunRecord]:
    return [_journal(scenario, i, **kwargs) for i in range(3)]


def _compare(base: Path, cur: Path, tolerances: str | None = None):
    return compare_suites(load_suite_record(str(base)), load_suite_record(str(cur)),
                          load_tolerances(tolerances), str(base), str(cur))


def _run_main(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.argv", ["trainchaos", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_identical_suites_pass(tmp_path):
    base = _suite(tmp_path / "a", _three())
    comparison = _compare(base, base)
    assert comparison.passed
    assert {r.result for r in comparison.rows} <= {"ok", "n/a"}


def test_recovery_from_6_to_15_s_is_a_regression_under_a_loose_target(tmp_path):
    base = _suite(tmp_path / "a", _three(recovery=6.0))
    cur = _suite(tmp_path / "b", _three(recovery=15.0))
    comparison = _compare(base, cur)
    assert [(r.scenario, r.metric) for r in comparison.regressions] == [
        ("kill-rank", "recovery_s"), ("kill-rank", "catchup_s")]
    row = comparison.regressions[0]
    assert row.baseline == 6.0 and row.current == 15.0 and row.allowance == pytest.approx(3.0)
    md = render_markdown(comparison)
    assert md.startswith("### trainchaos resilience gate: FAIL, 2 regression(s): kill-rank recovery_s")
    assert "| kill-rank | `recovery_s` | 6.00 s | 15.0 s | +9.00 s, +150% | +3.00 s | **REGRESSION** |" in md


def test_within_tolerance_is_not_a_regression_and_a_big_gain_is_an_improvement(tmp_path):
    base = _suite(tmp_path / "a", _three(recovery=6.0))
    assert _compare(base, _suite(tmp_path / "b", _three(recovery=8.9))).passed  # +2.9 s < max(3, 3)
    faster = _compare(base, _suite(tmp_path / "c", _three(recovery=2.0)))
    assert faster.passed and next(r for r in faster.rows if r.metric == "recovery_s").result == "improved"


def test_goodput_regresses_downwards(tmp_path):
    base = _suite(tmp_path / "a", _three(goodput=0.8))
    cur = _suite(tmp_path / "b", _three(goodput=0.55))
    assert [r.metric for r in _compare(base, cur).regressions] == ["goodput"]


def test_one_new_false_alarm_is_a_regression(tmp_path):
    base = _suite(tmp_path / "a", _three())
    cur = _suite(tmp_path / "b", [_journal("kill-rank", 0, false=1), *_three()[1:]])
    # median is still 0 over 3 repeats; a median of 1 needs two
    assert _compare(base, cur).passed
    cur2 = _suite(tmp_path / "c", [_journal("kill-rank", i, false=1) for i in range(2)] + _three()[2:])
    assert [r.metric for r in _compare(base, cur2).regressions] == ["false_detections"]


def test_undetected_in_one_repeat_is_a_regression_whatever_the_median(tmp_path):
    base = _suite(tmp_path / "a", _three())
    cur = _suite(tmp_path / "b", [_journal("kill-rank", 0, detection=None), *_three()[1:]])
    [row] = _compare(base, cur).regressions
    assert row.metric == "detection_s" and "undetected in 1/3" in row.note


BLIND = ("no detection source sees a process fault in this workload; add the adapter line "
         "'trainer = lightning.Trainer(callbacks=[ChaosCallback()])'")


def _blind(scenario: str, repeat: int) -> RunRecord:
    """A repeat whose detection trainchaos could not observe (a stack without its adapter)."""
    record = _journal(scenario, repeat, detection=None)
    assert record.metrics is not None
    return RunRecord.from_dict({**record.to_dict(), "metrics": {
        **record.metrics.model_dump(), "faults": [{"fault_id": "f0", "type": "kill_rank", "fired": True,
                                                   "detection_s": None, "unknown": {"detection_s": BLIND}}]}})


def test_a_detection_the_tool_could_not_observe_is_unknown_with_its_fix_never_a_regression(tmp_path):
    """Was "undetected in 1/3" and a regression: a repeat where the tool was blind read as
    the stack's miss."""
    base = _suite(tmp_path / "a", _three())
    cur = _suite(tmp_path / "b", [_blind("kill-rank", 0), *_three()[1:]])
    comparison = _compare(base, cur)
    assert not comparison.regressions, comparison.regressions
    [row] = [r for r in comparison.rows if r.metric == "detection_s"]
    assert "undetected" not in row.note and f"unknown in 1/3 ({BLIND})" in row.note, row.note
    every = _compare(base, _suite(tmp_path / "c", [_blind("kill-rank", i) for i in range(3)]))
    [row] = [r for r in every.rows if r.metric == "detection_s"]
    assert row.result == "n/a" and row.note.startswith("unknown now: unknown in 3/3"), row.note
    # one fault the job missed beside a blind one: the run's None is a miss
    missed = _journal("kill-rank", 0, detection=None)
    assert missed.metrics is not None and missed.metrics.unknown_reason("detection_s") is None


def test_fewer_passes_is_a_regression(tmp_path):
    base = _suite(tmp_path / "a", _three())
    cur = _suite(tmp_path / "b", [_journal("kill-rank", 0, passed=False), *_three()[1:]])
    [row] = _compare(base, cur).regressions
    assert row.metric == "passed" and "2/3 passed, baseline 3/3" in row.note


def test_missing_or_new_scenario_is_an_input_error(tmp_path):
    base = _suite(tmp_path / "a", _three("kill-rank") + _three("hang-rank"))
    cur = _suite(tmp_path / "b", _three("kill-rank") + _three("kill-node"))
    with pytest.raises(ComparisonInputError) as exc:
        _compare(base, cur)
    assert "missing from" in str(exc.value) and "hang-rank" in str(exc.value)
    assert "not in the baseline" in str(exc.value) and "kill-node" in str(exc.value)
    assert exc.value.exit_code == 2


def test_tolerance_file_overrides_per_metric_and_per_scenario(tmp_path):
    file = tmp_path / "tol.yaml"
    file.write_text("metrics:\n  recovery_s: {rel: 0.1}\n  wall_s: {abs: 5}\n"
                    "scenarios:\n  kill-rank:\n    catchup_s: off\n")
    table = load_tolerances(str(file))
    assert table[None]["recovery_s"].rel == 0.1 and table[None]["recovery_s"].abs == DEFAULT_TOLERANCES["recovery_s"].abs
    assert table[None]["wall_s"].gate, "a metric named in the file is gated"
    assert not table["kill-rank"]["catchup_s"].gate and table["kill-rank"]["recovery_s"].rel == 0.1
    base = _suite(tmp_path / "a", _three(recovery=6.0))
    cur = _suite(tmp_path / "b", _three(recovery=15.0))
    assert [r.metric for r in _compare(base, cur, str(file)).regressions] == ["recovery_s"]


def test_bad_tolerance_file_lists_every_problem_with_its_location(tmp_path):
    file = tmp_path / "tol.yaml"
    file.write_text("metrics:\n  recovery: {rel: 0.1}\n  detection_s: {rel: -1, slack: 2}\nextra: 1\n")
    with pytest.raises(ScenarioError) as exc:
        load_tolerances(str(file))
    text = str(exc.value)
    assert f"{file}: metrics.recovery: unknown metric; allowed: detection_s" in text
    assert "metrics.detection_s.rel: must be a number >= 0, got -1" in text
    assert "metrics.detection_s.slack: unknown key" in text and "extra: unknown key" in text


def test_compare_cli_exit_codes_and_markdown(tmp_path, monkeypatch, capsys):
    base = _suite(tmp_path / "a", _three(recovery=6.0))
    slow = _suite(tmp_path / "b", _three(recovery=15.0))
    other = _suite(tmp_path / "c", _three("hang-rank"))
    code, out, _ = _run_main(monkeypatch, capsys, "compare", str(base), str(base))
    assert code == 0 and "resilience gate: PASS" in out
    code, out, _ = _run_main(monkeypatch, capsys, "compare", str(base), str(slow), "--out", str(tmp_path / "c.md"))
    assert code == 1 and "recovery_s" in out and "**REGRESSION**" in out
    assert (tmp_path / "c.md").read_text() == out
    code, _, err = _run_main(monkeypatch, capsys, "compare", str(base), str(other))
    assert code == 2 and "kill-rank" in err and "missing from" in err
    code, _, err = _run_main(monkeypatch, capsys, "compare", str(base), str(tmp_path / "nothing"))
    assert code == 2 and "no suite.json" in err


def test_tolerances_stored_with_the_baseline_are_used(tmp_path, monkeypatch, capsys):
    base = _suite(tmp_path / "a", _three(recovery=6.0))
    slow = _suite(tmp_path / "b", _three(recovery=15.0))
    (base / "tolerances.yaml").write_text("metrics: {recovery_s: {abs: 20}, catchup_s: {abs: 20}}\n")
    code, out, _ = _run_main(monkeypatch, capsys, "compare", str(base), str(slow))
    assert code == 0, out


def test_update_baseline_stores_the_suite_and_keeps_tolerances(tmp_path):
    run = _suite(tmp_path / "run", _three())
    store = tmp_path / "baselines" / "smoke"
    store.mkdir(parents=True)
    (store / "tolerances.yaml").write_text("metrics: {}\n")
    written = update_baseline(str(run), str(store))
    assert sorted(Path(p).name for p in written) == ["suite.json", "suite.md"]
    assert json.loads((store / "suite.json").read_text()) == json.loads((run / "suite.json").read_text())
    assert (store / "tolerances.yaml").exists()
    with pytest.raises(ComparisonInputError):
        update_baseline(str(tmp_path / "empty"), str(store))


def test_gate_is_checked_before_anything_starts(tmp_path):
    with pytest.raises(ComparisonInputError, match="record a baseline with --update-baseline"):
        BaselineGate.prepare(str(tmp_path / "none"), ["kill-rank"])
    store = _suite(tmp_path / "store", _three("kill-rank"))
    with pytest.raises(ComparisonInputError, match="not in the baseline .*: hang-rank"):
        BaselineGate.prepare(str(store), ["kill-rank", "hang-rank"])
    BaselineGate.prepare(str(tmp_path / "none"), ["kill-rank"], update=True)  # first recording


def test_run_with_a_missing_baseline_starts_nothing(tmp_path, monkeypatch, capsys):
    import chaos.runner.suite

    def must_not_run(*_a, **_k):
        raise AssertionError("a run started")

    monkeypatch.setattr(chaos.runner.suite, "run_suite", must_not_run)
    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "report" / "tiny-kill.yaml"
    code, _, err = _run_main(monkeypatch, capsys, "run", str(scenario), "--out", str(tmp_path / "out"),
                             "--baseline-from", str(tmp_path / "none"))
    assert code == 2 and "no suite.json" in err
    code, _, err = _run_main(monkeypatch, capsys, "run", str(scenario), "--update-baseline")
    assert code == 2 and "--update-baseline and --tolerances need --baseline-from" in err


def test_run_gates_and_updates_in_one_step(tmp_path, monkeypatch, capsys):
    """The run itself is faked (its suite output is written as a run would); the CLI's gate,
    its exit code, and the report path as the last line are real."""
    import chaos.runner.suite

    speed = {"recovery": 6.0}

    def fake_run_suite(scenarios, out_dir, suite_name, **_kwargs):
        journals = [_journal(sc.name, 0, recovery=speed["recovery"]) for sc in scenarios]
        write_suite_report(out_dir, journals, suite_name)
        (Path(out_dir) / "index.html").write_text("<html></html>")
        return chaos.runner.suite.SuiteOutcome(records=journals, out_dir=out_dir)

    monkeypatch.setattr(chaos.runner.suite, "run_suite", fake_run_suite)
    scenario = str(Path(__file__).resolve().parents[1] / "scenarios" / "report" / "tiny-kill.yaml")
    store, out = tmp_path / "store", tmp_path / "out"
    code, text, _ = _run_main(monkeypatch, capsys, "run", scenario, "--out", str(out), "--baseline-from",
                              str(store), "--update-baseline")
    assert code == 0 and "baseline updated" in text and (store / "suite.json").exists()
    assert text.strip().splitlines()[-1] == f"HTML report: {out / 'index.html'}"
    speed["recovery"] = 16.0
    code, text, _ = _run_main(monkeypatch, capsys, "run", scenario, "--out", str(out), "--baseline-from", str(store))
    assert code == 1 and "tiny-kill recovery_s" in text
    assert text.strip().splitlines()[-1] == f"HTML report: {out / 'index.html'}"
    assert "recovery_s" in (out / "compare.md").read_text()
    assert json.loads((out / "compare.json").read_text())["passed"] is False


def test_ci_recipe_uses_commands_and_options_that_exist():
    """docs/ci must not drift from the CLI: every trainchaos option it uses is real."""
    import re
    import shlex

    import yaml

    from chaos.cli import cli

    root = Path(__file__).resolve().parents[2]
    workflow = yaml.safe_load((root / "docs" / "ci" / "github-actions.yml").read_text())
    steps = workflow["jobs"]["chaos"]["steps"]
    assert any("upload-artifact" in str(s.get("uses")) for s in steps)
    commands = [s["run"] for s in steps if "run" in s]
    commands += re.findall(r"^(?:\.venv/bin/)?trainchaos .*$", (root / "docs" / "ci" / "README.md").read_text(), re.M)
    seen = set()
    for text in commands:
        for line in text.replace("\\\n", " ").replace("\n", " ").split("|"):
            words = shlex.split(line.split("#")[0].split(">>")[0])
            for i, word in enumerate(words):
                if not word.endswith("trainchaos") or i + 1 >= len(words):
                    continue
                command = cli.commands[words[i + 1]]
                known = {opt for p in command.params for opt in p.opts}
                for option in (w.split("=")[0] for w in words[i + 2:] if w.startswith("--")):
                    assert option in known, f"{words[i + 1]} {option}"
                seen.add(words[i + 1])
    assert {"run", "compare"} <= seen
