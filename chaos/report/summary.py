"""``summary.md``: one run explained for a human, in the order they ask:
did it pass, and if not why; how fast was the fault detected and recovered; what exactly was
injected; which versions ran."""

from __future__ import annotations

import os

from chaos.metrics.catalogue import specs
from chaos.report._format import (
    DASH,
    atomic_write_text,
    fidelity_of,
    final_state_text,
    fmt_metric,
    fmt_seconds,
    fmt_steps,
    fmt_value,
    md_cell,
    md_table,
    planned_target_text,
)
from chaos.runfiles.record import FaultOutcome, PlannedFaultInfo, RunRecord
from chaos.runfiles.rundir import SUMMARY_FILE

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


def metric_rows(record: RunRecord) -> list[tuple[str, str, str]]:
    """(label, value as text, meaning) of each run-level metric the record has; the summary
    and the HTML page show the same rows."""
    metrics = record.metrics
    rows = []
    for key, label, meaning in _row_specs():
        if (metrics is None or not metrics.has(key)) and key not in ("wall_s", "final_state"):
            continue
        text = final_state_text(record) if key == "final_state" else fmt_metric(record, key)
        rows.append((label, text, meaning))
    return rows


def write_summary(run_dir: str, record: RunRecord) -> str:
    """Write ``<run_dir>/summary.md``; returns its path."""
    return atomic_write_text(os.path.join(run_dir, SUMMARY_NAME), render_summary(record))


def render_summary(record: RunRecord) -> str:
    lines: list[str] = []
    lines += _header(record)
    lines += _verdict(record)
    lines += _metrics(record)
    lines += _faults(record)
    lines += _plan(record)
    lines += _baseline(record)
    lines += _versions(record)
    return "\n".join(lines).rstrip() + "\n"


_RANK_LAUNCH = {
    "cold": "cold: each rank a new interpreter that imports torch, as most stacks start them",
    "warm": ("warm: forked by a per-node zygote that had imported torch (harness.warm_start; on the "
             "local backend the node's agent too, by the controller's agent zygote); launch and restart "
             "times leave out the imports a cold-starting stack pays"),
}


def _header(record: RunRecord) -> list[str]:
    scenario = record.scenario
    lines = [f"# {scenario.name} — repeat {record.repeat_index}: {record.outcome_label}", ""]
    description = str(scenario.description or "").strip()
    if description:
        lines += ["> " + line if line else ">" for line in description.splitlines()]
        lines.append("")
    rows = [
        ["Status", record.status],
        ["Verdict", f"**{record.outcome_label}**"],
        ["Scenario file", scenario.path or DASH],
        ["Seed", fmt_value(record.seed if "seed" in record.model_fields_set else scenario.seed)],
        ["Started", record.started_at or DASH],
        ["Ended", record.ended_at or DASH],
        ["Wall time", fmt_seconds(record.measured_wall_s)],
        ["Rank start", _RANK_LAUNCH.get(record.rank_launch, DASH)],
        ["Run directory", record.run_dir or DASH],
    ]
    lines += md_table(["", ""], rows)
    lines.append("")
    if record.error:
        lines += ["**Error:**", "", "```", record.error.rstrip(), "```", ""]
    return lines


def _verdict(record: RunRecord) -> list[str]:
    lines = [f"## Verdict: {record.outcome_label}", ""]
    if record.twin_finding:
        lines += [f"**{record.twin_finding}**", ""]
    kind = record.outcome
    if kind == "pass":
        lines.append("Every target was met.")
    elif kind in ("fail", "xfail"):
        if kind == "xfail":
            lines += [f"Expected failure (XFAIL): {record.expectation_text}. It does not fail the suite.", ""]
        lines.append("Targets missed:")
        lines.append("")
        lines += [f"- {' '.join(reason.split())}" for reason in record.reasons()
                  if not reason.startswith("expected failure: ")]
    elif kind == "xpass":
        lines.append(f"Unexpected pass (XPASS): every target was met, but the scenario expects a failure: "
                     f"{record.expectation_text}. If the finding is fixed, remove its `expect`; "
                     "`--strict` fails the suite on this.")
    else:
        lines.append(f"No verdict: the run ended `{record.status}` before its targets could be judged"
                     + (" (error above)." if record.error else "."))
    lines.append("")
    checks = record.checks
    if checks:
        rows = [
            [c.name or DASH, "ok" if c.ok else "**missed**", fmt_value(c.value), fmt_value(c.bound),
             "" if c.ok and not c.reason else c.text]
            for c in checks
        ]
        lines += md_table(["check", "result", "value", "bound", "reason"], rows)
        lines.append("")
    return lines


def _metrics(record: RunRecord) -> list[str]:
    lines = ["## Metrics", ""]
    if record.metrics is None:
        lines += [f"No metrics: the run ended `{record.status}` "
                  "before they could be computed.", ""]
        return lines
    lines += md_table(["metric", "value", "meaning"], [list(row) for row in metric_rows(record)])
    lines.append("")
    return lines


def _faults(run: RunRecord) -> list[str]:
    lines = ["## Faults", ""]
    records = {f.fault_id: f for f in run.faults}
    plan = {p.fault_id: p for p in run.plan}
    per_fault = run.metrics.by_fault() if run.metrics is not None else {}
    # Planned faults first (in plan order), then anything injected that the plan did not list.
    fault_ids = list(plan) + [fid for fid in records if fid not in plan]
    if not fault_ids:
        return lines + ["No faults (a fault-free run).", ""]
    rows = []
    for fid in fault_ids:
        record, planned, fm = records.get(fid), plan.get(fid), per_fault.get(fid)
        ftype = (record.type if record is not None else planned.type if planned is not None else None) or DASH
        target = planned_target_text(planned) if planned is not None else DASH
        if target == DASH:
            target = ", ".join(record.target_srcs if record is not None else []) or DASH
        if record is None:
            rows.append([fid, ftype, target, "not injected", DASH, DASH, DASH, DASH, DASH, DASH])
            continue
        step = fmt_steps(record.step_at_inject)
        planned_step = record.planned_step
        if planned_step is not None and planned_step != record.step_at_inject:
            step += f" (planned {fmt_steps(planned_step)})"
        if fm is None:
            rows.append([fid, ftype, target, step, record.precision or DASH, DASH, DASH, DASH, DASH, DASH])
            continue
        attribution = fm.attribution
        if attribution is not None and fm.attribution_detail:
            attribution = f"{attribution} ({fm.attribution_detail})"
        rows.append([
            fid, ftype, target, step, record.precision or DASH, fmt_seconds(fm.detection_s, fm.missing("detection_s", "undetected")),
            fm.detected_by or DASH, attribution or DASH, fmt_seconds(fm.recovery_s, fm.missing("recovery_s", "not recovered")),
            fmt_steps(fm.lost_steps),
        ])
    lines += md_table(
        ["fault", "type", "target", "injected at step", "precision", "detection", "detected by",
         "attribution", "recovery", "lost steps"], rows)
    lines.append("")
    reasons_rows = [
        [fid, per_fault[fid].detection_reason] for fid in fault_ids
        if fid in per_fault and per_fault[fid].detection_reason
    ]
    if reasons_rows:
        lines += ["Detection reasons:", ""]
        lines += [f"- `{fid}`: {md_cell(reason)}" for fid, reason in reasons_rows]
        lines.append("")
    if run.had_faults:
        mech = [[fid, records[fid].mechanism or DASH, records[fid].failure_class or DASH]
                for fid in fault_ids if fid in records]
        lines += md_table(["fault", "mechanism", "failure class"], mech)
        lines.append("")
    lines += _fidelity(fault_ids, records, plan)
    return lines


def _fidelity(fault_ids: list[str], injected: dict[str, FaultOutcome],
              plan: dict[str, PlannedFaultInfo]) -> list[str]:
    """What each fault stands for and what it does not prove (the fault type's statement)."""
    lines: list[str] = []
    for fid in fault_ids:
        entry = injected.get(fid) or plan.get(fid)
        text = fidelity_of(entry) if entry is not None else None
        if entry is not None and text:
            lines += [f"**Fidelity of `{fid}` ({entry.type or DASH}):** {' '.join(text.split())}", ""]
    return lines


def _plan(record: RunRecord) -> list[str]:
    plan = record.plan
    if not plan:
        return []
    rows = [[p.fault_id or DASH, p.type or DASH, planned_target_text(p),
             fmt_value(p.trigger), fmt_value(p.params)] for p in plan]
    return ["## Plan", "", *md_table(["fault", "type", "target", "trigger", "params"], rows), ""]


def _baseline(record: RunRecord) -> list[str]:
    baseline = record.baseline
    if baseline is None:
        return []
    rows = [["Digest", baseline.digest or DASH],
            ["Wall time", fmt_seconds(baseline.wall_s)],
            ["Run directory", baseline.run_dir or DASH]]
    match = record.metrics.digest_match if record.metrics is not None else None
    if match is not None:
        rows.append(["Final state matches", fmt_value(match)])
    return ["## Baseline", "", *md_table(["", ""], rows), ""]


def _versions(record: RunRecord) -> list[str]:
    versions = record.versions.model_dump(exclude_unset=True) if record.versions is not None else {}
    if not versions:
        return []
    rows = [[name, fmt_value(value)] for name, value in versions.items()]
    return ["## Versions", "", *md_table(["component", "version"], rows), ""]

