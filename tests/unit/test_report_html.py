"""The HTML report from plain journals and events: lanes, segments and marks of the timeline,
the page's sections (targets, fidelity, files), the suite page, ``trainchaos report``, and the
final-state column of the verdict tables. A real run rendered in Chromium is in
tests/integration/test_report_gate.py."""

from __future__ import annotations

import io
import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from chaos.cli import cli
from chaos.report import (
    rebuild_reports,
    render_suite_md,
    verdict_table,
    write_run_reports,
    write_suite_reports,
)
from chaos.report._format import final_state_text
from chaos.report.html import render_run_html, render_suite_html
from chaos.report.runview import build_run_view
from chaos.report.summary import render_summary
from chaos.runfiles.record import RunRecord, RunRecordError, load_run_record

T0 = 1000.0
KILL_AT = T0 + 12.0  # rank-1 is killed after step 25


def _events(false_alarm: bool = False) -> list[dict]:
    """Two nodes x one rank: steps 1..25, rank-1 killed, rank-0 notices and exits, both restart
    from the step-20 checkpoint and finish 40 steps, rank-0 saving every 10."""
    ev = [{"t": T0, "src": "injector", "incarnation": 0, "kind": "job_start", "nodes": 2, "ranks_per_node": 1}]
    for rank in (0, 1):
        ev.append({"t": T0 + 2 + rank * 0.1, "src": f"rank-{rank}", "incarnation": 0, "kind": "rank_start",
                   "rank": rank, "node": rank, "world_size": 2, "resumed_from": None})
    for step in range(1, 26):
        t = T0 + 5 + step * 0.25
        for rank in (0, 1):
            ev.append({"t": t + rank * 0.001, "src": f"rank-{rank}", "incarnation": 0, "kind": "step_end",
                       "step": step, "loss": 4.0 - step * 0.05})
        if step % 10 == 0:
            ev.append({"t": t + 0.01, "src": "rank-0", "incarnation": 0, "kind": "ckpt_save_end", "step": step,
                       "tier": "disk", "bytes": 2_000_000, "seconds": 0.02})
    if false_alarm:
        ev.append({"t": T0 + 8.0, "src": "rank-1", "incarnation": 0, "kind": "detected", "by": "rank-1",
                   "suspect": "rank-0", "failure_class": "hang", "reason": "watchdog: no heartbeat"})
    ev += [
        {"t": KILL_AT, "src": "injector", "incarnation": 0, "kind": "fault_injected", "fault": "f0-kill_rank"},
        {"t": KILL_AT + 0.03, "src": "rank-0", "incarnation": 0, "kind": "detected", "by": "rank-0",
         "suspect": "rank-1", "failure_class": "crash", "reason": "peer monitor: rank 1 closed its connection"},
        {"t": KILL_AT + 0.04, "src": "rank-0", "incarnation": 0, "kind": "rank_exit", "code": 75,
         "reason": "peer monitor"},
        {"t": KILL_AT + 0.2, "src": "node-1", "incarnation": 0, "kind": "detected", "by": "node-1",
         "suspect": "rank-1", "failure_class": "crash", "reason": "torchrun agent: killed by signal 9", "via": "log"},
    ]
    for rank in (0, 1):
        ev.append({"t": KILL_AT + 3 + rank * 0.1, "src": f"rank-{rank}", "incarnation": 1, "kind": "rank_start",
                   "rank": rank, "node": rank, "world_size": 2, "resumed_from": 20})
        ev.append({"t": KILL_AT + 4, "src": f"rank-{rank}", "incarnation": 1, "kind": "ckpt_load", "step": 20,
                   "verified": True, "skipped": []})
    for step in range(21, 41):
        t = KILL_AT + 4.5 + (step - 21) * 0.25
        for rank in (0, 1):
            ev.append({"t": t + rank * 0.001, "src": f"rank-{rank}", "incarnation": 1, "kind": "step_end",
                       "step": step, "loss": 4.0 - step * 0.05})
    end = KILL_AT + 4.5 + 20 * 0.25
    ev += [{"t": end, "src": f"rank-{r}", "incarnation": 1, "kind": "rank_exit", "code": 0, "reason": "completed"}
           for r in (0, 1)]
    ev += [{"t": end + 0.5, "src": "injector", "incarnation": 0, "kind": "job_stop", "status": "completed"}]
    return ev


def _rec(journal: dict) -> RunRecord:
    return RunRecord.from_dict(journal)


def _journal(run_dir: str, *, passed: bool = True, false_alarm: bool = False) -> dict:
    recovery = 4.5
    catchup = 4.5 + 4 * 0.25
    checks = [
        {"name": "recovery_s", "ok": passed, "value": recovery, "bound": {"min": None, "max": 10.0 if passed else 2.0},
         "reason": f"f0-kill_rank: recovery 4.5 s {'<=' if passed else '>'} {'10' if passed else '2'} s",
         "fault": "f0-kill_rank"},
        {"name": "final_state", "ok": True, "value": "d" * 64, "bound": "matches_baseline",
         "reason": "final digest dddd matches baseline", "fault": None},
    ]
    return {
        "schema_version": 2,
        "format": 1,
        "scenario": {"name": "tiny-kill", "path": "tests/scenarios/report/tiny-kill.yaml",
                     "description": "rank 1 dies at step 25", "seed": 3,
                     "topology": {"nodes": 2, "ranks_per_node": 1, "spares": 0},
                     "targets": {"recovery_s": {"max": 10.0, "min": None}}, "faults": []},
        "repeat_index": 0, "run_dir": run_dir, "status": "completed", "error": None, "tool_errors": [],
        "started_at": "2026-11-30T10:00:00+00:00", "ended_at": "2026-11-30T10:00:25+00:00", "wall_s": 23.0,
        "versions": {"trainchaos": "0.1.0"}, "seed": 3,
        "plan": [{"fault_id": "f0-kill_rank", "type": "kill_rank", "target": {"rank": 1},
                  "planned_target": {"ranks": [1], "nodes": []}, "trigger": {"kind": "at_step", "at_step": 25},
                  "fires": True, "params": {"signal": "SIGKILL"}}],
        "faults": [{"fault_id": "f0-kill_rank", "type": "kill_rank", "failure_class": "crash",
                    "target_srcs": ["rank-1"], "t_inject": KILL_AT, "t_revert": KILL_AT + 20,
                    "planned_step": 25, "step_at_inject": 25, "precision": "exact", "mechanism": "injector",
                    "fidelity": "Stands for a rank dying abruptly. Does not prove GPU physics."}],
        "metrics": {
            "t_start": T0, "t_end": KILL_AT + 10.5, "wall_s": 23.0, "steps_target": 40, "completed": True,
            "detection_s": 0.03, "recovery_s": recovery, "catchup_s": catchup, "lost_steps": 5, "goodput": 0.4,
            "lost_work_rank_s": 20.0, "final_step": 40, "final_digest": "d" * 64, "restart_count": 1,
            "has_baseline": True, "digest_match": True, "max_rel_loss_dev": 0.0, "healthy": True,
            "health_problem": None, "false_detections": 1 if false_alarm else 0,
            "false_detection_events": [{"t": T0 + 8.0, "by": "rank-1", "suspect": "rank-0", "failure_class": "hang",
                                        "reason": "watchdog: no heartbeat"}] if false_alarm else [],
            "faults": [{"fault_id": "f0-kill_rank", "t_inject": KILL_AT, "detection_s": 0.03, "detected_by": "rank-0",
                        "detection_reason": "peer monitor", "attribution": "correct", "attribution_detail": "",
                        "recovery_s": recovery, "catchup_s": catchup, "restarted": True, "last_step_before": 25,
                        "resumed_from": 20, "lost_steps": 5}],
        },
        "verdict": {"passed": passed, "checks": checks},
        "baseline": {"digest": "d" * 64, "wall_s": 15.0, "run_dir": os.path.join(os.path.dirname(run_dir), "baseline"),
                     "status": "completed"},
    }


def _write_run(root: Path, name: str = "0", **kwargs) -> tuple[Path, dict]:
    run_dir = root / "tiny-kill" / name
    journal = _journal(str(run_dir), **kwargs)
    events = _events(kwargs.get("false_alarm", False))
    (run_dir / "events").mkdir(parents=True)
    with open(run_dir / "events" / "all.jsonl", "w") as fh:
        for e in events:
            fh.write(json.dumps(e) + "\n")
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "node-0.log").write_text("agent log\n")
    write_run_reports(str(run_dir), _rec(journal), events)
    return run_dir, journal


def _write_baseline(root: Path) -> None:
    base = root / "tiny-kill" / "baseline"
    (base / "events").mkdir(parents=True)
    with open(base / "events" / "rank-0.jsonl", "w") as fh:
        for step in range(1, 41):
            fh.write(json.dumps({"t": T0 + step, "src": "rank-0", "incarnation": 0, "kind": "step_end",
                                 "step": step, "loss": 4.0 - step * 0.05}) + "\n")


def _ids(html: str, prefix: str) -> set[str]:
    return set(re.findall(rf'<g id="({prefix}[^"]*)"', html))


# ------------------------------------------------------------------------------- run view


def test_run_view_has_a_lane_per_node_and_rank_and_every_mark():
    view = build_run_view(_rec(_journal("/x/tiny-kill/0")), _events())
    assert view.lane_names() == ["node-0", "rank-0", "node-1", "rank-1"]
    kinds = {m.kind for m in view.marks}
    assert kinds >= {"fault_injected", "detected", "rank_exit", "restart", "ckpt_save", "ckpt_load",
                     "recovery", "catchup"}
    detection = next(m for m in view.marks if m.kind == "detected" and m.lane == "rank-0")
    assert detection.to_lane == "rank-1" and "rank-0 blamed rank-1 (crash)" in detection.label
    assert detection.t == pytest.approx(12.03)
    # The killed rank left no exit event: its first life ends at the kill.
    first_life = next(s for s in view.segments if s.lane == "rank-1" and s.incarnation == 0)
    assert first_life.t1 == pytest.approx(12.0) and "f0-kill_rank" in first_life.end
    assert (first_life.first_step, first_life.last_step) == (1, 25)
    # node-1 was empty between the kill and the restart.
    node1 = [s for s in view.segments if s.lane == "node-1"]
    assert len(node1) == 2 and node1[0].t1 < node1[1].t0
    recovery = next(m for m in view.marks if m.kind == "recovery")
    assert recovery.t == pytest.approx(12.0 + 4.5) and recovery.lane is None


def test_false_alarm_and_teardown_detections_are_told_apart():
    events = _events(false_alarm=True)
    events.append({"t": KILL_AT + 20, "src": "rank-0", "incarnation": 1, "kind": "detected", "by": "rank-0",
                   "suspect": "rank-1", "failure_class": "crash", "reason": "late"})
    journal = _journal("/x/tiny-kill/0", false_alarm=True)
    journal["status"] = "hung"
    view = build_run_view(_rec(journal), events)
    false = [m for m in view.marks if m.kind == "false_detection"]
    assert len(false) == 1 and false[0].label.startswith("FALSE ALARM: rank-1 blamed rank-0")
    assert [m.kind for m in view.marks if "late" in m.label] == ["teardown_detection"]
    assert view.t_stop is not None


def test_run_view_of_a_run_that_never_started():
    journal = _journal("/x/tiny-kill/0")
    journal.update(metrics=None, faults=[], status="tool_error", verdict=None)
    view = build_run_view(_rec(journal), [])
    assert [lane.name for lane in view.lanes] == ["node-0", "node-1"]
    assert view.marks == [] and view.segments == []


# ------------------------------------------------------------------------------- run page


def test_run_page_is_self_contained_and_shows_timeline_loss_targets_and_fidelity(tmp_path):
    _write_baseline(tmp_path)
    run_dir, _ = _write_run(tmp_path)
    html = (run_dir / "report.html").read_text()
    # Self-contained: no script, no external asset; figures inline.
    for fetch in ("<script", "<link", "src=", 'href="http', "url(http", "@import"):
        assert fetch not in html, fetch
    assert html.count("<svg") == 2
    assert _ids(html, "lane-") == {"lane-node-0", "lane-rank-0", "lane-node-1", "lane-rank-1"}
    marks = _ids(html, "mark-")
    for kind in ("fault-injected", "detected", "rank-exit", "restart", "ckpt-save", "ckpt-load", "recovery",
                 "catchup"):
        assert f"mark-{kind}-1" in marks, kind
    assert "mark-detected-1-blame" in marks  # the arrow to the rank blamed
    # Tooltips on the marks, and the marks table with the same text.
    assert re.search(r'<g id="mark-fault-injected-1"><title>12\.00 s: f0-kill_rank injected', html)
    assert 'data-mark="mark-detected-1"' in html
    # The plotter's own ids are prefixed per figure: no clash between the two figures.
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    for svg in re.findall(r"<svg.*?</svg>", html, flags=re.S):
        ET.fromstring(svg)  # well-formed: a browser shows nothing of a figure that is not
    assert 'id="loss-baseline"' in html, "the fault-free twin's loss is drawn"
    assert "identical to the baseline at every step" in html
    assert "Fidelity of <code>f0-kill_rank</code>" in html and "Does not prove GPU physics." in html
    assert "≤ 10" in html and "4.50 s" in html  # the check against its target, in units
    for link in ('href="journal.json"', 'href="logs/node-0.log"', 'href="events/all.jsonl"',
                 'href="../baseline/report.html"'):
        assert link in html
    assert "bitwise match" in html


def test_failed_run_page_says_why_first(tmp_path):
    run_dir, _ = _write_run(tmp_path, passed=False)
    html = (run_dir / "report.html").read_text()
    assert 'data-outcome="fail"' in html
    reasons = html.index('id="reasons"')
    assert reasons < html.index('id="timeline"')
    assert "f0-kill_rank: recovery 4.5 s &gt; 2 s" in html[reasons:]


def test_tool_error_run_page_renders_without_metrics(tmp_path):
    journal = _journal(str(tmp_path))
    journal.update(status="tool_error", verdict=None, metrics=None, error="inject failed: boom",
                   tool_errors=["inject failed: boom"])
    html = render_run_html(_rec(journal), [], run_dir=str(tmp_path))
    assert "TOOL ERROR" in html and "inject failed: boom" in html
    assert "No metrics" in html and "No checks" in html


def test_a_broken_figure_costs_the_page_not_the_run(tmp_path, monkeypatch, caplog):
    from chaos.report import figures

    def broken(*_args, **_kwargs):
        raise RuntimeError("plotting exploded")

    monkeypatch.setattr(figures, "timeline_svg", broken)
    run_dir = tmp_path / "run"
    paths = write_run_reports(str(run_dir), _rec(_journal(str(run_dir))), _events())
    assert {os.path.basename(p) for p in paths} == {"journal.json", "summary.md", "timeline.csv",
                                                     "timeline.parquet"}
    assert "report.html not written" in caplog.text


def test_summary_carries_the_fidelity_statement_and_final_state(tmp_path):
    text = render_summary(_rec(_journal(str(tmp_path))))
    assert "**Fidelity of `f0-kill_rank` (kill_rank):** Stands for a rank dying abruptly." in text
    assert "| Final state | bitwise match |" in text
    assert "| f0-kill_rank | kill_rank | rank 1 |" in text  # the planned target, resolved


def test_fidelity_falls_back_to_the_fault_type_for_older_journals(tmp_path):
    journal = _journal(str(tmp_path))
    del journal["faults"][0]["fidelity"]
    assert "Stands for a rank dying abruptly (Xid 79" in render_summary(_rec(journal))


# ---------------------------------------------------------------------- correctness column


@pytest.mark.parametrize(("metrics", "expected"), [
    ({"digest_match": True, "max_rel_loss_dev": 0.0}, "bitwise match"),
    ({"digest_match": False, "max_rel_loss_dev": 0.031}, "differs (loss dev 3.1%)"),
    ({"digest_match": None, "max_rel_loss_dev": 0.0012, "has_baseline": True}, "loss dev 0.12%"),
    ({"digest_match": None, "max_rel_loss_dev": None}, "—"),
    ({"healthy": False, "first_nonfinite_step": 12}, "not finite"),
])
def test_final_state_text(metrics, expected):
    record = _rec({"schema_version": 2, "scenario": {"name": "s"}, "status": "completed", "metrics": metrics})
    assert final_state_text(record) == expected


def test_verdict_tables_show_final_state_false_alarms_and_status(tmp_path):
    journal = _journal(str(tmp_path), false_alarm=True)
    console = Console(file=io.StringIO(), width=220)
    console.print(verdict_table([_rec(journal)]))
    out = console.file.getvalue()
    for text in ("final state", "bitwise match", "false alarms", "status", "completed"):
        assert text in out
    md = render_suite_md([_rec(journal)], "s")
    assert "| final state | false alarms |" in md and "| bitwise match | 1 |" in md


# ------------------------------------------------------------------------------ suite page


def test_suite_page_lists_every_run_with_links_and_metrics_across_repeats(tmp_path):
    run_a, ja = _write_run(tmp_path, "0")
    run_b, jb = _write_run(tmp_path, "1", passed=False)
    jb["repeat_index"] = 1
    paths = write_suite_reports(str(tmp_path), [_rec(ja), _rec(jb)], "tiny")
    assert [os.path.basename(p) for p in paths] == ["suite.json", "suite.md", "index.html"]
    html = (tmp_path / "index.html").read_text()
    assert 'data-outcome="fail"' in html and "1/2 runs met every target" in html
    assert 'href="tiny-kill/0/report.html"' in html and 'href="tiny-kill/1/report.html"' in html
    assert "suite-recovery_s-tiny-kill-0" in html and "suite-recovery_s-tiny-kill-1" in html
    assert "What the faults stand for" in html and "<script" not in html


def test_suite_page_with_the_gate_result():
    comparison = {"baseline": "reports/baselines/tiny", "passed": False,
                  "regressions": ["tiny-kill recovery_s: 3.00 s -> 9.00 s"],
                  "rows": [{"scenario": "tiny-kill", "metric": "detection_s", "baseline": 0.05, "current": 0.05,
                            "result": "ok", "note": "+0.00 s"},
                           {"scenario": "tiny-kill", "metric": "recovery_s", "baseline": 3.0, "current": 9.0,
                            "result": "regression", "note": "+6.00 s, +200%", "allowance": 3.0}]}
    html = render_suite_html([_rec(_journal("/x/tiny-kill/0"))], "tiny", comparison=comparison)
    assert 'data-gate="regression"' in html and "Against the stored baseline" in html
    table = html[html.index('id="comparison-table"'):]
    assert table.index("recovery_s") < table.index("detection_s"), "regressions first"
    assert "<td>3.00 s</td><td>9.00 s</td><td>+6.00 s, +200%</td><td>3.00 s</td>" in table


# -------------------------------------------------------------------------- trainchaos report


def test_report_command_rebuilds_run_and_suite_pages_from_journals(tmp_path):
    _write_baseline(tmp_path)
    run_dir, _ = _write_run(tmp_path)
    (run_dir / "report.html").unlink()
    moved = tmp_path.parent / f"{tmp_path.name}-moved"
    os.rename(tmp_path, moved)  # the folder was copied off a CI machine: journals name old paths
    try:
        result = CliRunner().invoke(cli, ["report", str(moved)])
        assert result.exit_code == 0, result.output
        assert result.output.strip().endswith(f"HTML report: {moved / 'index.html'}")
        html = (moved / "tiny-kill" / "0" / "report.html").read_text()
        assert 'id="loss-baseline"' in html, "the baseline is found next to the moved run"
        assert (moved / "suite.json").exists() and (moved / "index.html").exists()
        suite = json.loads((moved / "suite.json").read_text())
        assert [r["scenario"] for r in suite["scenarios"]] == ["tiny-kill"]  # the baseline is no run
        assert load_run_record(str(moved / "tiny-kill" / "0")).run_dir == str(tmp_path / "tiny-kill" / "0")

        one = CliRunner().invoke(cli, ["report", str(moved / "tiny-kill" / "0")])
        assert one.exit_code == 0 and one.output.strip().endswith("report.html")
    finally:
        os.rename(moved, tmp_path)


def test_report_command_on_a_folder_without_journals_is_bad_input(tmp_path):
    result = CliRunner().invoke(cli, ["report", str(tmp_path)], standalone_mode=False)
    assert "no journal.json under it" in str(result.exception)
    with pytest.raises(RunRecordError):
        rebuild_reports(str(tmp_path))
