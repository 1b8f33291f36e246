"""``report.html``: one run as a page a person looks at (what it answers, top to bottom:
``chaos.report.html``'s docstring)."""

from __future__ import annotations

import os
from html import escape
from typing import Any

from chaos.metrics.catalogue import spec
from chaos.report._format import (
    DASH,
    atomic_write_text,
    blast_radius_text,
    fidelity_of,
    fmt_metric_value,
    fmt_seconds,
    fmt_steps,
    fmt_value,
    planned_target_text,
)
from chaos.report._page import RUN_HTML, badge, esc, html_link, html_page, html_table
from chaos.report.runview import RunView, baseline_events, build_run_view
from chaos.runfiles.events import read_events
from chaos.runfiles.record import RunRecord
from chaos.runfiles.record_metrics import FaultMetricsRecord
from chaos.runfiles.rundir import (
    EVENTS_SUBDIR,
    FAULT_JOURNAL_FILE,
    LOGS_SUBDIR,
    RUN_RECORD_FILE,
    SUMMARY_FILE,
    TIMELINE_CSV,
    TIMELINE_PARQUET,
    RunDir,
)

__all__ = ["render_run_html", "write_run_html"]


def write_run_html(run_dir: str, record: RunRecord, events: list[dict[str, Any]] | None = None) -> str:
    """Write ``<run_dir>/report.html``; events are read from ``<run_dir>/events`` when None."""
    rundir = RunDir(run_dir)
    if events is None:
        events = read_events(rundir.events)
    html = render_run_html(record, events, baseline_events(record, run_dir), run_dir=run_dir)
    return atomic_write_text(rundir.report_html, html)


def render_run_html(record: RunRecord, events: list[dict[str, Any]],
                    base_events: list[dict[str, Any]] | None = None, run_dir: str | None = None) -> str:
    from chaos.report import figures

    view = build_run_view(record, events, base_events)
    name = f"{record.scenario.name} — repeat {record.repeat_index}"
    if not record.faults and not record.plan and record.verdict is None:
        name = f"{record.scenario.name} — fault-free baseline"
    body = [f"<h1>{escape(name)}{badge(record)}</h1>"]
    description = str(record.scenario.description or "").strip()
    if description:
        body.append(f"<blockquote>{escape(description)}</blockquote>")
    body += _run_meta(record)
    body += _run_reasons(record)
    body += _run_targets(record)
    body.append('<h2 id="timeline">Timeline</h2>')
    if view.lanes or view.marks:
        body.append(figures.timeline_svg(view))
        body += _marks_table(view)
    else:
        body.append('<p class="muted">No events were recorded: the run ended before any process started.</p>')
    body.append('<h2 id="loss">Loss against the baseline</h2>')
    fault_steps = [(f.fault_id, f.step_at_inject) for f in record.faults if f.step_at_inject is not None]
    loss = figures.loss_svg(view, fault_steps)
    body.append(loss or '<p class="muted">No loss was reported.</p>')
    if loss and not view.baseline_losses:
        body.append('<p class="muted">No fault-free baseline for this scenario (set <code>baseline: true</code>).</p>')
    coverage = figures.coverage_svg(view, record.metric("data_lost"))
    if coverage:
        body.append('<h2 id="samples">Sample coverage</h2>')
        body.append(coverage)
    body += _run_metrics(record)
    body += _run_faults(record)
    body += _run_files(record, run_dir)
    body += _run_versions(record)
    return html_page(f"trainchaos: {name}: {record.outcome_label}", body)


def _run_meta(record: RunRecord) -> list[str]:
    scenario = record.scenario
    topo = scenario.topology
    shape = f"{topo.get('nodes', '?')} node(s) × {topo.get('ranks_per_node', '?')} rank(s)"
    if topo.get("spares"):
        shape += f" + {topo['spares']} spare(s)"
    rows = [
        ["Status", f"<strong>{esc(record.status)}</strong>"],
        ["Scenario file", f"<code>{esc(scenario.path or DASH)}</code>"],
        ["Topology", escape(shape) + f", backend <code>{esc((record.backend.name if record.backend else None) or 'local')}</code>"],
        ["Seed", esc(record.seed if "seed" in record.model_fields_set else scenario.seed)],
        ["Started / ended", f"{esc(record.started_at or DASH)} / {esc(record.ended_at or DASH)}"],
        ["Wall time", escape(fmt_seconds(record.measured_wall_s))],
        ["Run directory", f"<code>{esc(record.run_dir or DASH)}</code>"],
    ]
    body = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return [f'<table class="meta"><tbody>{body}</tbody></table>']


def _run_reasons(record: RunRecord) -> list[str]:
    kind = record.outcome
    if kind == "pass":
        return []
    reasons = record.reasons()
    items = "".join(f"<li>{escape(r)}</li>" for r in reasons)
    for err in record.tool_errors:
        if str(err) not in reasons:
            items += f"<li>{escape(str(err))}</li>"
    head = {"fail": "Targets missed", "xfail": "Expected failure (XFAIL): targets missed as the scenario expects",
            "xpass": "Unexpected pass (XPASS): every target met, the scenario expects a failure"}.get(
        kind, f"No verdict: the run ended {record.status}")
    twin = f"<p><strong>{escape(record.twin_finding)}</strong></p>" if record.twin_finding else ""
    return [f'<div class="reasons {kind}" id="reasons">{twin}<strong>{escape(head)}:</strong><ul>{items}</ul></div>']


def _bound_bar(value: Any, bound: Any, ok: bool) -> str:
    """A small bar: the measured value against the target's max (or min), when both are numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not isinstance(bound, dict):
        return ""
    limit = bound.get("max") if isinstance(bound.get("max"), (int, float)) else bound.get("min")
    if not isinstance(limit, (int, float)) or limit <= 0:
        return ""
    scale = max(float(value), float(limit)) * 1.15 or 1.0
    width = 100 * max(0.0, float(value)) / scale
    tick = 100 * float(limit) / scale
    color = "var(--pass)" if ok else "var(--fail)"
    return (f'<div class="bar" title="target {fmt_value(limit)}"><span style="width:{width:.1f}%;'
            f'background:{color}"></span><i style="left:{tick:.1f}%"></i></div>')


def _check_value(name: Any, value: Any) -> str:
    """A measured value in the check's unit: seconds, steps, a percentage, a short digest."""
    key = str(name or "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if key == "final_state":
            return f"loss dev {value * 100:.3g}%"
        if spec(key) is not None or key.endswith("_s"):
            return fmt_metric_value(key, value)
    if key == "final_state" and isinstance(value, str) and len(value) > 16:
        return f"digest {value[:12]}…"
    return fmt_value(value)


def _bound_text(bound: Any) -> str:
    if isinstance(bound, dict) and ("max" in bound or "min" in bound):
        low, high = bound.get("min"), bound.get("max")
        if low is not None and high is not None:
            return f"{fmt_value(low)} … {fmt_value(high)}"
        if high is not None:
            return f"≤ {fmt_value(high)}"
        if low is not None:
            return f"≥ {fmt_value(low)}"
    return fmt_value(bound)


def _run_targets(record: RunRecord) -> list[str]:
    verdict = record.verdict
    checks = record.checks
    out = ['<h2 id="targets">Metrics against targets</h2>']
    if not checks:
        why = ("a fault-free baseline is a reference, not an experiment" if not record.plan
               and verdict is None and record.status == "completed" else
               f"the run ended {record.status} without a verdict")
        return out + [f'<p class="muted">No checks: {escape(why)}.</p>']
    rows, classes = [], []
    for c in checks:
        ok = c.ok
        rows.append([
            f"<code>{esc(c.name or DASH)}</code>", esc(c.fault or ""),
            escape(_check_value(c.name, c.value)), escape(_bound_text(c.bound)),
            _bound_bar(c.value, c.bound, ok),
            '<span class="ok">met</span>' if ok else '<span class="missed">missed</span>',
            escape(c.text),
        ])
        classes.append("" if ok else "fail")
    out.append(html_table(["check", "fault", "measured", "target", "", "result", "why"], rows, classes,
                      attrs=' id="checks"'))
    return out


_MARK_WORDS = {
    "fault_injected": "fault injected", "fault_reverted": "fault reverted", "detected": "detection",
    "false_detection": "FALSE ALARM", "teardown_detection": "detection (teardown)",
    "rank_exit": "exit", "restart": "restart", "ckpt_save": "checkpoint saved",
    "ckpt_load": "checkpoint loaded", "recovery": "recovery", "catchup": "catch-up",
    "job_stop": "stopped by trainchaos", "stale_checkpoint": "STALE checkpoint",
    "torn_checkpoint": "TORN checkpoint",
}


def _marks_table(view: RunView) -> list[str]:
    """The figure's text alternative: every mark in time order, its row named like the mark."""
    from chaos.report.figures import mark_ids

    rows = []
    for mark, gid in zip(view.marks, mark_ids(view.marks), strict=True):
        cls = ' class="fail"' if mark.kind in ("false_detection", "stale_checkpoint", "torn_checkpoint") else ""
        rows.append(f'<tr data-mark="{gid}"{cls}><td class="num">{mark.t:.3f}</td><td>{esc(mark.lane or "all")}</td>'
                    f"<td>{escape(_MARK_WORDS.get(mark.kind, mark.kind))}</td><td>{escape(mark.label)}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("t (s)", "lane", "what", "detail"))
    return [f"<details><summary>{len(view.marks)} marks in time order (hover a mark in the figure "
            "for the same text)</summary>",
            f'<table id="marks"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>',
            "</details>"]


def _run_metrics(record: RunRecord) -> list[str]:
    from chaos.report.summary import metric_rows

    out = ['<h2 id="metrics">Metrics</h2>']
    metrics = record.metrics
    if metrics is None:
        return out + [f'<p class="muted">No metrics: the run ended {escape(record.status)} '
                      "before they could be computed.</p>"]
    rows = [[escape(label), f'<span class="num">{escape(text)}</span>', escape(meaning.replace("`", ""))]
            for label, text, meaning in metric_rows(record)]
    out.append(html_table(["metric", "value", "meaning"], rows))
    if metrics.health_problem:
        out.append(f'<p class="missed">Training unhealthy: {escape(str(metrics.health_problem))}</p>')
    false_events = [f for f in metrics.false_detection_events or [] if isinstance(f, dict)]
    if false_events:
        out.append("<p><strong>False alarms</strong> (a healthy process was blamed):</p><ul>")
        out += [f"<li>{escape(str(f.get('by')))} blamed {escape(str(f.get('suspect')))} "
                f"({escape(str(f.get('failure_class')))}): {escape(str(f.get('reason') or ''))}</li>"
                for f in false_events]
        out.append("</ul>")
    return out


def _run_faults(record: RunRecord) -> list[str]:
    out = ['<h2 id="faults">Faults</h2>']
    records = {f.fault_id: f for f in record.faults}
    plan = {p.fault_id: p for p in record.plan}
    ids = list(plan) + [fid for fid in records if fid not in plan]
    if not ids:
        return out + ['<p class="muted">No faults: a fault-free run.</p>']
    per_fault = record.metrics.by_fault() if record.metrics is not None else {}
    rows = []
    for fid in ids:
        rec, planned = records.get(fid), plan.get(fid)
        if rec is None:  # then planned, as every id is a planned or an injected fault's
            if planned is not None:
                reason = "skipped by its probability draw" if planned.fires is False else "not injected"
                rows.append([f"<code>{escape(fid)}</code>", esc(planned.type), escape(planned_target_text(planned)),
                             escape(reason)] + [DASH] * 6)
            continue
        measured = fid in per_fault
        fm = per_fault.get(fid) or FaultMetricsRecord()
        attribution = fm.attribution or DASH
        if fm.attribution_detail:
            attribution = f"{attribution} ({fm.attribution_detail})"
        rows.append([
            f"<code>{escape(fid)}</code>", esc(rec.type),
            escape(planned_target_text(planned) if planned is not None else ", ".join(rec.target_srcs)),
            escape(fmt_steps(rec.step_at_inject)) + (f" ({esc(rec.precision)})" if rec.precision else ""),
            escape(fmt_seconds(fm.detection_s, fm.missing("detection_s", "undetected"))) if measured else DASH,
            esc(fm.detected_by or DASH), escape(str(attribution)),
            escape(fmt_seconds(fm.recovery_s, fm.missing("recovery_s", "not recovered"))) if measured else DASH,
            escape(fmt_seconds(fm.catchup_s, fm.missing("catchup_s", "not caught up"))) if measured else DASH,
            escape(fmt_steps(fm.lost_steps)),
        ])
    out.append(html_table(["fault", "type", "target", "injected at step", "detection", "detected by",
                       "attribution", "recovery", "catch-up", "lost steps"], rows))
    for fid in ids:
        fault_metrics = per_fault.get(fid)
        line = blast_radius_text(fault_metrics) if fault_metrics is not None else ""
        if line:
            out.append(f'<p class="blast" data-fault="{escape(fid)}"><strong>Blast radius of '
                       f"<code>{escape(fid)}</code>:</strong> {escape(line)}</p>")
    for fid in ids:
        entry = records.get(fid) or plan.get(fid)
        text = fidelity_of(entry) if entry is not None else None
        if entry is not None and text:
            out.append(f'<p class="fidelity" data-fault="{escape(fid)}"><strong>Fidelity of <code>{escape(fid)}</code> '
                       f"({esc(entry.type)}):</strong></p><blockquote>{escape(' '.join(text.split()))}</blockquote>")
    return out


def _run_files(record: RunRecord, run_dir: str | None) -> list[str]:
    run_dir = run_dir or str(record.run_dir or "")
    links: list[str] = []
    for name in (RUN_RECORD_FILE, SUMMARY_FILE, TIMELINE_CSV, TIMELINE_PARQUET, FAULT_JOURNAL_FILE):
        if run_dir and os.path.exists(os.path.join(run_dir, name)):
            links.append(html_link(name, name))
    for folder in (LOGS_SUBDIR, EVENTS_SUBDIR):
        path = os.path.join(run_dir, folder) if run_dir else ""
        if path and os.path.isdir(path):
            links += [html_link(f"{folder}/{n}", f"{folder}/{n}") for n in sorted(os.listdir(path))
                      if n.endswith((".log", ".jsonl"))]
    baseline = record.baseline
    if baseline is not None and run_dir:
        # Next to this run (where a suite puts it, also after the folder moved), else where recorded.
        for folder in (os.path.join(os.path.dirname(os.path.abspath(run_dir)), "baseline"),
                       str(baseline.run_dir or "")):
            if folder and os.path.isdir(folder) and os.path.abspath(folder) != os.path.abspath(run_dir):
                target = os.path.join(folder, RUN_HTML)
                links.append(html_link(os.path.relpath(target, run_dir), "the fault-free baseline's report"))
                break
    if not links:
        return []
    return ['<h2 id="files">Logs, events and files</h2>', '<ul class="files">',
            *[f"<li>{link}</li>" for link in links], "</ul>"]


def _run_versions(record: RunRecord) -> list[str]:
    versions = record.versions.model_dump(exclude_unset=True) if record.versions is not None else {}
    if not versions:
        return []
    rows = [[escape(str(k)), esc(v)] for k, v in versions.items()]
    return ['<h2 id="versions">Versions</h2>', html_table(["component", "version"], rows)]
