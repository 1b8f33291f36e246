"""``summary.md``: one run explained for a human, in the order they ask:
did it pass, and if not why; how fast was the fault detected and recovered; what exactly was
injected; which versions ran."""

from __future__ import annotations

import os
from typing import Any

from chaos.metrics.catalogue import specs
from chaos.report._format import (
    DASH,
    atomic_write_text,
    check_reason,
    expectation_text,
    fault_metrics,
    fidelity_of,
    final_state_text,
    fmt_metric,
    fmt_seconds,
    fmt_steps,
    fmt_value,
    had_faults,
    md_cell,
    md_table,
    metrics_of,
    outcome,
    outcome_label,
    planned_target_text,
    reasons,
    repeat_of,
    scenario_name,
    wall_s_of,
)
from chaos.rundir import SUMMARY_FILE

__all__ = ["SUMMARY_NAME", "render_summary", "write_summary"]

SUMMARY_NAME = SUMMARY_FILE

# The run-level metrics table: the catalogue's metrics that have a row title, in catalogue
# order, and final_state (a verdict on correctness, not a metric) after false detections.
_FINAL_STATE_ROW = ("final_state", "Final state", "correctness against the fault-free baseline")


def _row_specs() -> list[tuple[str, str, str]]:
    """(key, title, meaning) of each row, in order."""
    rows: list[tuple[str, str, str]] = []
    for spec in specs():
        if spec.title:
            rows.append((spec.key, spec.title, spec.meaning))
        if spec.key == "false_detections":
            rows.append(_FINAL_STATE_ROW)
    return rows


def metric_rows(journal: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value as text, meaning) of each run-level metric the journal has; the summary
    and the HTML page show the same rows."""
    metrics = metrics_of(journal) or {}
    rows = []
    for key, label, meaning in _row_specs():
        if key not in metrics and key not in ("wall_s", "final_state"):
            continue
        text = final_state_text(journal) if key == "final_state" else fmt_metric(journal, key)
        rows.append((label, text, meaning))
    return rows


def write_summary(run_dir: str, journal: dict[str, Any]) -> str:
    """Write ``<run_dir>/summary.md``; returns its path."""
    return atomic_write_text(os.path.join(run_dir, SUMMARY_NAME), render_summary(journal))


def render_summary(journal: dict[str, Any]) -> str:
    lines: list[str] = []
    lines += _header(journal)
    lines += _verdict(journal)
    lines += _metrics(journal)
    lines += _faults(journal)
    lines += _plan(journal)
    lines += _baseline(journal)
    lines += _versions(journal)
    return "\n".join(lines).rstrip() + "\n"


_RANK_LAUNCH = {
    "cold": "cold: each rank a new interpreter that imports torch, as most stacks start them",
    "warm": ("warm: forked by a per-node zygote that had imported torch (harness.warm_start; on the "
             "local backend the node's agent too, by the controller's agent zygote); launch and restart "
             "times leave out the imports a cold-starting stack pays"),
}


def _header(journal: dict[str, Any]) -> list[str]:
    scenario = journal.get("scenario") or {}
    lines = [f"# {scenario_name(journal)} — repeat {repeat_of(journal)}: {outcome_label(journal)}", ""]
    description = str(scenario.get("description") or "").strip()
    if description:
        lines += ["> " + line if line else ">" for line in description.splitlines()]
        lines.append("")
    rows = [
        ["Status", journal.get("status") or "unknown"],
        ["Verdict", f"**{outcome_label(journal)}**"],
        ["Scenario file", scenario.get("path") or DASH],
        ["Seed", fmt_value(journal.get("seed", scenario.get("seed")))],
        ["Started", journal.get("started_at") or DASH],
        ["Ended", journal.get("ended_at") or DASH],
        ["Wall time", fmt_seconds(wall_s_of(journal))],
        ["Rank start", _RANK_LAUNCH.get(journal.get("rank_launch") or "cold", DASH)],
        ["Run directory", journal.get("run_dir") or DASH],
    ]
    lines += md_table(["", ""], rows)
    lines.append("")
    if journal.get("error"):
        lines += ["**Error:**", "", "```", str(journal["error"]).rstrip(), "```", ""]
    return lines


def _verdict(journal: dict[str, Any]) -> list[str]:
    lines = [f"## Verdict: {outcome_label(journal)}", ""]
    kind = outcome(journal)
    if kind == "pass":
        lines.append("Every target was met.")
    elif kind in ("fail", "xfail"):
        if kind == "xfail":
            lines += [f"Expected failure (XFAIL): {expectation_text(journal)}. It does not fail the suite.", ""]
        lines.append("Targets missed:")
        lines.append("")
        lines += [f"- {' '.join(reason.split())}" for reason in reasons(journal)
                  if not reason.startswith("expected failure: ")]
    elif kind == "xpass":
        lines.append(f"Unexpected pass (XPASS): every target was met, but the scenario expects a failure: "
                     f"{expectation_text(journal)}. If the finding is fixed, remove its `expect`; "
                     "`--strict` fails the suite on this.")
    else:
        status = journal.get("status") or "unknown"
        lines.append(f"No verdict: the run ended `{status}` before its targets could be judged"
                     + (" (error above)." if journal.get("error") else "."))
    lines.append("")
    verdict = journal.get("verdict")
    checks = [c for c in (verdict or {}).get("checks") or [] if isinstance(c, dict)]
    if checks:
        rows = [
            [c.get("name") or DASH, "ok" if c.get("ok") else "**missed**",
             fmt_value(c.get("value")), fmt_value(c.get("bound")),
             "" if c.get("ok") and not c.get("reason") else check_reason(c)]
            for c in checks
        ]
        lines += md_table(["check", "result", "value", "bound", "reason"], rows)
        lines.append("")
    return lines


def _metrics(journal: dict[str, Any]) -> list[str]:
    lines = ["## Metrics", ""]
    metrics = metrics_of(journal)
    if metrics is None:
        lines += [f"No metrics: the run ended `{journal.get('status') or 'unknown'}` "
                  "before they could be computed.", ""]
        return lines
    lines += md_table(["metric", "value", "meaning"], [list(row) for row in metric_rows(journal)])
    lines.append("")
    return lines


def _faults(journal: dict[str, Any]) -> list[str]:
    lines = ["## Faults", ""]
    records = {str(f.get("fault_id")): f for f in journal.get("faults") or [] if isinstance(f, dict)}
    plan = {str(p.get("fault_id")): p for p in journal.get("plan") or [] if isinstance(p, dict)}
    per_fault = fault_metrics(journal)
    # Planned faults first (in plan order), then anything injected that the plan did not list.
    fault_ids = list(plan) + [fid for fid in records if fid not in plan]
    if not fault_ids:
        return lines + ["No faults (a fault-free run).", ""]
    rows = []
    for fid in fault_ids:
        record, planned, fm = records.get(fid), plan.get(fid, {}), per_fault.get(fid, {})
        ftype = (record or planned).get("type") or DASH
        target = planned_target_text(planned) if planned else DASH
        if target == DASH:
            target = ", ".join((record or {}).get("target_srcs") or []) or DASH
        if record is None:
            rows.append([fid, ftype, target, "not injected", DASH, DASH, DASH, DASH, DASH, DASH])
            continue
        step = fmt_steps(record.get("step_at_inject"))
        planned_step = record.get("planned_step")
        if planned_step is not None and planned_step != record.get("step_at_inject"):
            step += f" (planned {fmt_steps(planned_step)})"
        attribution = fm.get("attribution")
        if attribution is not None and fm.get("attribution_detail"):
            attribution = f"{attribution} ({fm['attribution_detail']})"
        detection = fmt_seconds(fm.get("detection_s"), "undetected") if fm else DASH
        recovery = fmt_seconds(fm.get("recovery_s"), "not recovered") if fm else DASH
        rows.append([
            fid, ftype, target, step, record.get("precision") or DASH, detection,
            fm.get("detected_by") or DASH, attribution or DASH, recovery,
            fmt_steps(fm.get("lost_steps")),
        ])
    lines += md_table(
        ["fault", "type", "target", "injected at step", "precision", "detection", "detected by",
         "attribution", "recovery", "lost steps"], rows)
    lines.append("")
    reasons_rows = [
        [fid, per_fault[fid].get("detection_reason")] for fid in fault_ids
        if fid in per_fault and per_fault[fid].get("detection_reason")
    ]
    if reasons_rows:
        lines += ["Detection reasons:", ""]
        lines += [f"- `{fid}`: {md_cell(reason)}" for fid, reason in reasons_rows]
        lines.append("")
    if had_faults(journal):
        mech = [[fid, records[fid].get("mechanism") or DASH, records[fid].get("failure_class") or DASH]
                for fid in fault_ids if fid in records]
        lines += md_table(["fault", "mechanism", "failure class"], mech)
        lines.append("")
    lines += _fidelity(journal, fault_ids, records, plan)
    return lines


def _fidelity(journal: dict[str, Any], fault_ids: list[str], records: dict[str, dict[str, Any]],
              plan: dict[str, dict[str, Any]]) -> list[str]:
    """What each fault stands for and what it does not prove (the fault type's statement)."""
    lines: list[str] = []
    for fid in fault_ids:
        entry = records.get(fid) or plan.get(fid) or {}
        text = fidelity_of(entry)
        if text:
            lines += [f"**Fidelity of `{fid}` ({entry.get('type') or DASH}):** {' '.join(text.split())}", ""]
    return lines


def _plan(journal: dict[str, Any]) -> list[str]:
    plan = [p for p in journal.get("plan") or [] if isinstance(p, dict)]
    if not plan:
        return []
    rows = [[p.get("fault_id") or DASH, p.get("type") or DASH, planned_target_text(p),
             fmt_value(p.get("trigger")), fmt_value(p.get("params"))] for p in plan]
    return ["## Plan", "", *md_table(["fault", "type", "target", "trigger", "params"], rows), ""]


def _baseline(journal: dict[str, Any]) -> list[str]:
    baseline = journal.get("baseline")
    if not isinstance(baseline, dict):
        return []
    rows = [["Digest", baseline.get("digest") or DASH],
            ["Wall time", fmt_seconds(baseline.get("wall_s"))],
            ["Run directory", baseline.get("run_dir") or DASH]]
    match = (metrics_of(journal) or {}).get("digest_match")
    if match is not None:
        rows.append(["Final state matches", fmt_value(match)])
    return ["## Baseline", "", *md_table(["", ""], rows), ""]


def _versions(journal: dict[str, Any]) -> list[str]:
    versions = journal.get("versions")
    if not isinstance(versions, dict) or not versions:
        return []
    rows = [[name, fmt_value(value)] for name, value in versions.items()]
    return ["## Versions", "", *md_table(["component", "version"], rows), ""]

