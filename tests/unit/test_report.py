"""chaos.report: the files a run writes and what it prints, from plain journal dicts."""

from __future__ import annotations

import copy
import io
import json
import math
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pandas as pd
import pytest
from rich.console import Console

from chaos.report import (
    ProgressDisplay,
    aggregate,
    print_verdict_table,
    timeline,
    verdict_table,
    write_junit,
    write_run_reports,
    write_suite_report,
    write_timeline,
)
from chaos.runfiles.record import RunRecord, RunRecordError, load_run_record, write_run_record


def _records(journals: list[dict]) -> list[RunRecord]:
    return [RunRecord.from_dict(j) for j in journals]


DETECTION_REASON = "detection_s 2.41 s > max 2 s"
LOST_REASON = "lost_steps 40 > max 20"


def _journal(repeat: int = 0, *, detection_s: float | None = 0.31, recovery_s: float = 7.5,
             lost_steps: int = 12, goodput: float = 0.85, wall_s: float = 40.0) -> dict:
    run_dir = f"/tmp/reports/smoke/rank-kill-mid-step/{repeat}"
    return {
        "schema_version": 2,
        "format": 1,
        "scenario": {
            "name": "rank-kill-mid-step",
            "path": "scenarios/smoke/rank_kill.yaml",
            "description": "One rank dies (think Xid 79); the job must restart from the last checkpoint.",
            "seed": 7,
            "topology": {"nodes": 2, "ranks_per_node": 2},
            "workload": {"harness": {"model": "tiny-gpt", "steps": 300}},
            "targets": {"detection_s": {"max": 2}, "lost_steps": {"max": 20}},
            "faults": [{"type": "kill_rank", "target": {"rank": 3}, "trigger": {"at_step": 120}}],
        },
        "repeat_index": repeat,
        "run_dir": run_dir,
        "status": "completed",
        "error": None,
        "started_at": "2026-05-09T10:00:00+00:00",
        "ended_at": "2026-05-09T10:00:40+00:00",
        "wall_s": wall_s,
        "versions": {"trainchaos": "0.1.0", "torch": "2.13.0", "python": "3.11.7",
                     "platform": "Linux-x86_64"},
        "seed": 7,
        "plan": [{"fault_id": "f0-kill_rank", "type": "kill_rank",
                  "target": {"ranks": [3], "nodes": [1]}, "trigger": {"at_step": 120},
                  "params": {"signal": "SIGKILL"}}],
        "faults": [{"fault_id": "f0-kill_rank", "type": "kill_rank", "failure_class": "crash",
                    "target_srcs": ["rank-3"], "planned_step": 120, "step_at_inject": 121,
                    "t_inject": 1000.0, "t_revert": 1001.0, "mechanism": "SIGKILL",
                    "precision": "next_step", "details": {"pid": 4242}}],
        "metrics": {
            "detection_s": detection_s, "recovery_s": recovery_s, "catchup_s": 11.0,
            "lost_steps": lost_steps, "goodput": goodput, "lost_work_rank_s": 50.2,
            "wall_s": wall_s, "completed": True, "final_step": 300, "final_digest": "abc123",
            "restart_count": 1, "digest_match": True, "max_rel_loss_dev": 0.0,
            "faults": [{"fault_id": "f0-kill_rank", "detection_s": detection_s,
                        "detected_by": "rank-0" if detection_s is not None else None,
                        "detection_reason": "NCCL watchdog: rank 3 unreachable",
                        "attribution": "correct", "attribution_detail": None,
                        "recovery_s": recovery_s, "catchup_s": 11.0, "lost_steps": lost_steps,
                        "restarted": True}],
        },
        "verdict": {"passed": True, "checks": [
            {"name": "detection_s", "ok": True, "value": detection_s, "bound": {"max": 2},
             "reason": None},
            {"name": "lost_steps", "ok": True, "value": lost_steps, "bound": {"max": 20},
             "reason": None},
        ]},
        "baseline": {"digest": "abc123", "wall_s": 30.0, "run_dir": "/tmp/reports/smoke/baseline"},
    }


@pytest.fixture
def passed() -> dict:
    return _journal(0)


@pytest.fixture
def failed() -> dict:
    journal = _journal(1, detection_s=2.41, lost_steps=40, goodput=0.6)
    journal["verdict"] = {"passed": False, "checks": [
        {"name": "detection_s", "ok": False, "value": 2.41, "bound": {"max": 2},
         "reason": DETECTION_REASON},
        {"name": "lost_steps", "ok": False, "value": 40, "bound": {"max": 20},
         "reason": LOST_REASON},
        {"name": "completes", "ok": True, "value": True, "bound": True, "reason": None},
    ]}
    return journal


@pytest.fixture
def interrupted() -> dict:
    journal = _journal(2)
    journal.update(status="interrupted", metrics=None, verdict=None, faults=[], wall_s=5.5)
    return journal


def _events() -> list[dict]:
    # Deliberately out of order, from several files, with nested and mixed-type fields.
    return [
        {"t": 1000.5, "src": "rank-0", "incarnation": 0, "kind": "detected", "by": "rank-0",
         "reason": "watchdog", "suspect": "rank-3", "failure_class": "crash"},
        {"t": 990.0, "src": "controller", "incarnation": 0, "kind": "job_start", "nodes": 2,
         "ranks_per_node": 2},
        {"t": 1000.0, "src": "injector", "incarnation": 0, "kind": "fault_injected",
         "fault": "f0-kill_rank", "target": {"ranks": [3]}, "step": 121},
        {"t": 995.0, "src": "rank-3", "incarnation": 0, "kind": "step_end", "step": 120,
         "loss": 2.5},
        {"t": 1001.0, "src": "rank-3", "incarnation": 0, "kind": "rank_exit", "code": -9},
        {"t": 1002.0, "src": "node-1", "incarnation": 0, "kind": "rank_exit", "code": "signal"},
        {"t": 1008.0, "src": "rank-3", "incarnation": 1, "kind": "step_end", "step": 109,
         "loss": 2.6},
    ]


# ------------------------------------------------------------------------------ per run


def test_run_reports_written_for_a_passed_run(tmp_path, passed):
    run_dir = str(tmp_path / "run")
    paths = write_run_reports(run_dir, RunRecord.from_dict(passed), _events())
    names = sorted(os.path.basename(p) for p in paths)
    assert names == ["journal.json", "report.html", "summary.md", "timeline.csv", "timeline.parquet"]
    assert all(os.path.isfile(p) for p in paths)
    assert load_run_record(run_dir).to_dict() == passed
    # No temp files left behind by the atomic writes.
    assert sorted(os.listdir(run_dir)) == names

    summary = (tmp_path / "run" / "summary.md").read_text()
    assert summary.startswith("# rank-kill-mid-step — repeat 0: PASS")
    assert "think Xid 79" in summary
    assert "Every target was met." in summary
    fault_row = next(line for line in summary.splitlines() if line.startswith("| f0-kill_rank | kill_rank"))
    for cell in ("rank 3 / node 1", "121 (planned 120)", "next_step", "0.31 s", "rank-0",
                 "correct", "7.50 s", "| 12 |"):
        assert cell in fault_row
    assert "| Goodput | 85.0% |" in summary
    assert "## Versions" in summary and "2.13.0" in summary


def test_summary_of_failed_run_names_every_missed_target(tmp_path, failed):
    write_run_reports(str(tmp_path), RunRecord.from_dict(failed), _events())
    summary = (tmp_path / "summary.md").read_text()
    assert "# rank-kill-mid-step — repeat 1: FAIL" in summary
    assert f"- {DETECTION_REASON}" in summary
    assert f"- {LOST_REASON}" in summary
    assert "**missed**" in summary


def test_interrupted_run_still_gets_journal_and_summary(tmp_path, interrupted):
    paths = write_run_reports(str(tmp_path), RunRecord.from_dict(interrupted), [])
    assert {os.path.basename(p) for p in paths} >= {"journal.json", "summary.md", "timeline.csv"}
    summary = (tmp_path / "summary.md").read_text()
    assert "ERROR" in summary and "interrupted" in summary
    assert "No metrics" in summary
    assert "not injected" in summary  # the planned fault never fired
    assert load_run_record(str(tmp_path / "journal.json")).to_dict()["metrics"] is None


def test_undetected_fault_reads_as_undetected(tmp_path):
    journal = _journal(0, detection_s=None)
    write_run_reports(str(tmp_path), RunRecord.from_dict(journal), [])
    summary = (tmp_path / "summary.md").read_text()
    assert "| Detection time | undetected |" in summary


def test_journal_is_strict_json_and_odd_values_do_not_break_it(tmp_path, passed):
    passed["metrics"]["max_rel_loss_dev"] = math.nan
    passed["extra"] = {"path": tmp_path, "ranks": {3, 1}}
    path = write_run_record(str(tmp_path), RunRecord.from_dict(passed))
    text = open(path).read()
    assert "NaN" not in text
    data = json.loads(text)
    assert data["metrics"]["max_rel_loss_dev"] is None
    assert data["extra"] == {"path": str(tmp_path), "ranks": [1, 3]}


def test_read_journal_errors_name_the_file(tmp_path):
    with pytest.raises(RunRecordError, match="no journal here"):
        load_run_record(str(tmp_path))
    (tmp_path / "journal.json").write_text("{not json")
    with pytest.raises(RunRecordError, match="unreadable journal"):
        load_run_record(str(tmp_path))
    (tmp_path / "journal.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(RunRecordError, match="journal.json: schema_version: missing"):
        load_run_record(str(tmp_path / "journal.json"))


# ------------------------------------------------------------------------------ timeline


def test_timeline_is_time_ordered_with_relative_time(tmp_path):
    paths = write_timeline(str(tmp_path), _events())
    assert [os.path.basename(p) for p in paths] == ["timeline.csv", "timeline.parquet"]
    csv = pd.read_csv(tmp_path / "timeline.csv")
    assert list(csv.columns[:5]) == ["t", "t_rel", "src", "incarnation", "kind"]
    assert list(csv["t"]) == sorted(csv["t"])
    assert csv["t_rel"].iloc[0] == 0.0
    assert csv["t_rel"].iloc[-1] == pytest.approx(18.0)
    assert csv["kind"].iloc[0] == "job_start"
    injected = csv[csv["kind"] == "fault_injected"].iloc[0]
    assert json.loads(injected["target"]) == {"ranks": [3]}

    parquet = pd.read_parquet(tmp_path / "timeline.parquet")
    assert len(parquet) == len(_events())
    assert list(parquet["kind"]) == list(csv["kind"])
    assert parquet["step"].dropna().tolist() == [120, 121, 109]
    # A column mixing ints and strings is written as strings rather than failing.
    assert sorted(parquet["code"].dropna()) == ["-9", "signal"]


def test_timeline_csv_survives_a_parquet_failure(tmp_path, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise ImportError("no parquet engine")

    monkeypatch.setattr(timeline, "_write_parquet", broken)
    paths = write_timeline(str(tmp_path), _events())
    assert [os.path.basename(p) for p in paths] == ["timeline.csv"]
    assert not (tmp_path / "timeline.parquet").exists()
    assert len(pd.read_csv(tmp_path / "timeline.csv")) == len(_events())
    assert "timeline.parquet not written" in caplog.text


def test_empty_timeline_has_the_header(tmp_path):
    write_timeline(str(tmp_path), [])
    assert (tmp_path / "timeline.csv").read_text().startswith("t,t_rel,src,incarnation,kind")


# ----------------------------------------------------------------------------- aggregate


def test_aggregate_over_repeats_ignores_but_counts_missing_values():
    journals = [_journal(0, detection_s=0.5, lost_steps=10, wall_s=40.0),
                _journal(1, detection_s=None, lost_steps=30, wall_s=50.0),
                _journal(2, detection_s=0.1, lost_steps=20, wall_s=45.0)]
    journals[1]["verdict"] = {"passed": False, "checks": [
        {"name": "detection_s", "ok": False, "value": None, "bound": {"max": 2},
         "reason": "undetected"}]}
    (row,) = [r.model_dump() for r in aggregate(_records(journals))]
    assert row["scenario"] == "rank-kill-mid-step"
    assert (row["repeats"], row["passed"], row["failed"], row["errors"]) == (3, 2, 1, 0)
    detection = row["metrics"]["detection_s"]
    assert (detection["median"], detection["min"], detection["max"]) == (0.3, 0.1, 0.5)
    assert detection["n"] == 2 and detection["missing"] == 1
    assert detection["note"] == "undetected in 1/3"
    lost = row["metrics"]["lost_steps"]
    assert (lost["median"], lost["min"], lost["max"], lost["note"]) == (20, 10, 30, "")
    assert row["metrics"]["wall_s"]["median"] == 45.0
    assert row["reasons"] == ["undetected"]


def test_aggregate_counts_runs_without_metrics(passed, interrupted):
    (row,) = [r.model_dump() for r in aggregate(_records([passed, interrupted]))]
    assert row["metrics"]["recovery_s"]["note"] == "no metrics in 1/2"
    assert row["metrics"]["wall_s"]["n"] == 2  # wall time is known even for an interrupt
    assert row["errors"] == 1


def test_suite_report(tmp_path, passed, failed, interrupted):
    paths = write_suite_report(str(tmp_path), _records([passed, failed, interrupted]))
    assert [os.path.basename(p) for p in paths] == ["suite.json", "suite.md"]
    suite = json.loads((tmp_path / "suite.json").read_text())
    assert suite["suite"] == "smoke"
    assert suite["passed"] is False
    assert suite["counts"] == {"runs": 3, "passed": 1, "failed": 1, "errors": 1, "xfailed": 0, "xpassed": 0}
    md = (tmp_path / "suite.md").read_text()
    assert md.startswith("# Suite smoke: FAIL")
    assert "1/3 runs met every target" in md
    assert DETECTION_REASON in md and LOST_REASON in md
    assert "| rank-kill-mid-step | 1/3 | detection_s | 1.36 s | 0.31 s | 2.41 s |" in md


# ------------------------------------------------------------------------------ JUnit


def test_junit_counts_and_reasons(tmp_path, passed, failed, interrupted):
    errored = copy.deepcopy(interrupted)
    errored.update(status="tool_error", error="harness crashed: ImportError\x1b[0m", repeat_index=3)
    path = write_junit(str(tmp_path / "junit.xml"), _records([passed, failed, interrupted, errored]), "smoke")
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    assert suite.get("tests") == "4"
    assert suite.get("failures") == "1"
    assert suite.get("errors") == "2"
    assert float(suite.get("time")) == pytest.approx(40 + 40 + 5.5 + 5.5)

    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [f"rank-kill-mid-step[{i}]" for i in range(4)]
    assert {c.get("classname") for c in cases} == {"trainchaos.smoke"}
    assert cases[0].find("failure") is None and cases[0].find("error") is None
    failure = cases[1].find("failure")
    assert failure.get("message") == DETECTION_REASON
    assert failure.text.splitlines() == [DETECTION_REASON, LOST_REASON]
    assert cases[2].find("error").get("message") == "run interrupted: no verdict"
    assert cases[3].find("error").get("message").startswith("harness crashed")
    out = cases[1].find("system-out").text
    assert failed["run_dir"] in out and "detection: 2.41 s" in out


# ----------------------------------------------------------------------------- console


def _console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=200, color_system=None), buffer


def test_verdict_table_renders_pass_and_fail(passed, failed, interrupted):
    console, buffer = _console()
    console.print(verdict_table(_records([passed, failed, interrupted])))
    text = buffer.getvalue()
    assert "PASS" in text and "FAIL" in text and "ERROR" in text
    assert DETECTION_REASON in text
    assert "0.31 s" in text and "85.0%" in text and "correct" in text


def test_print_verdict_table_totals(passed, failed):
    console, buffer = _console()
    print_verdict_table(_records([passed, failed]), console=console)
    assert "1/2 runs passed, 1 missed a target" in buffer.getvalue()


def test_progress_without_a_terminal_prints_plain_lines():
    console, buffer = _console()
    with ProgressDisplay(console, plain_every_s=3600) as progress:
        assert not progress.live
        progress.start_scenario("rank-kill-mid-step", 0, 3)
        for step in range(1, 120):
            progress.update(step, 300)
        progress.event("fault f0-kill_rank injected at step 121")
        progress.update(125, 300, note="restarting")
        progress.update(300, 300)
        progress.end_scenario(False, "lost_steps 40 > max 20")
    lines = buffer.getvalue().splitlines()
    assert "\x1b" not in buffer.getvalue()
    assert lines[0] == "▶ rank-kill-mid-step  repeat 1/3"
    step_lines = [line for line in lines if "[0] step " in line]
    # First update, the note change and the last step; not one line per step.
    assert len(step_lines) == 3
    assert any("fault f0-kill_rank injected at step 121" in line for line in lines)
    assert lines[-1].startswith("FAIL rank-kill-mid-step[0] in ")
    assert lines[-1].endswith("lost_steps 40 > max 20")


def test_progress_on_a_terminal_does_not_crash():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    with ProgressDisplay(console) as progress:
        assert progress.live
        progress.start_scenario("net-partition", 1, 2)
        progress.update(10, 100, note="training")
        progress.event("detected by rank-0 in 0.31 s")
        progress.end_scenario(True)
    assert "PASS" in buffer.getvalue() and "detected by rank-0" in buffer.getvalue()


def test_the_timeline_files_are_written_without_importing_pandas(tmp_path):
    """Every run writes them: pandas would cost each controller process its import."""
    code = ("import sys; from chaos.report import write_timeline; "
            "write_timeline(sys.argv[1], [{'t': 1.0, 'kind': 'job_start', 'step': 3}, {'t': 2.0, 'kind': 'x', 'ok': True}]); "
            "assert 'pandas' not in sys.modules, 'pandas imported'")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    parquet = pd.read_parquet(tmp_path / "timeline.parquet")
    assert [str(t) for t in parquet.dtypes[["step", "ok"]]] == ["Int64", "boolean"]  # as pandas writes them
