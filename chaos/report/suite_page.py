"""``index.html``: every scenario and repeat of a suite with its verdict, the regression
gate's table when there is one, and the metrics across repeats."""

from __future__ import annotations

import os
from html import escape
from typing import Any

from chaos.metrics.catalogue import fmt_compared
from chaos.report._format import (
    DASH,
    atomic_write_text,
    attribution_text,
    fidelity_of,
    final_state_text,
    finite_number,
    fmt_metric,
    outcome_counts,
)
from chaos.report._page import RUN_HTML, SUITE_HTML, esc, html_link, html_page, html_table
from chaos.runfiles.record import FaultOutcome, PlannedFaultInfo, RunRecord, blocks

__all__ = ["render_suite_html", "write_suite_html"]


def _comparison(comparison: dict[str, Any]) -> list[str]:
    """The regression gate's table (``trainchaos compare``), regressions first."""
    rows = [r for r in comparison.get("rows") or [] if isinstance(r, dict) and (r.get("result") != "n/a" or r.get("note"))]
    rows.sort(key=lambda r: r.get("result") != "regression")
    regressions = comparison.get("regressions") or []
    head = (f"{len(regressions)} regression(s): " + "; ".join(regressions)) if regressions else "no regression"
    cells = [[escape(str(r.get("scenario"))), f"<code>{escape(str(r.get('metric')))}</code>",
              escape(fmt_compared(str(r.get("metric")), finite_number(r.get("baseline")))),
              escape(fmt_compared(str(r.get("metric")), finite_number(r.get("current")))),
              escape(str(r.get("note") or "")),
              escape(fmt_compared(str(r.get("metric")), finite_number(r.get("allowance")))),
              '<span class="missed">REGRESSION</span>' if r.get("result") == "regression" else escape(str(r.get("result")))]
             for r in rows]
    classes = ["fail" if r.get("result") == "regression" else "" for r in rows]
    return ['<h2 id="regressions">Against the stored baseline</h2>',
            f"<p>Baseline <code>{esc(comparison.get('baseline'))}</code>: <strong>{escape(head)}</strong>. "
            "Medians across repeats; a metric regresses when it got worse by more than max(abs, rel × baseline).</p>",
            html_table(["scenario", "metric", "baseline", "current", "change", "allowed worsening", "result"], cells, classes,
                   attrs=' id="comparison-table"')]


def write_suite_html(out_dir: str, records: list[RunRecord], suite_name: str,
                     run_dirs: list[str] | None = None, comparison: dict[str, Any] | None = None) -> str:
    """Write ``<out_dir>/index.html``; ``run_dirs`` (parallel to ``records``) where each run's
    files are now, when not where their records say; ``comparison`` the regression gate's
    result (``Comparison.to_dict()``, as in ``compare.json``)."""
    html = render_suite_html(records, suite_name, out_dir, run_dirs, comparison)
    return atomic_write_text(os.path.join(out_dir, SUITE_HTML), html)


def render_suite_html(records: list[RunRecord], suite_name: str, out_dir: str | None = None,
                      run_dirs: list[str] | None = None, comparison: dict[str, Any] | None = None) -> str:
    from chaos.report import figures
    from chaos.report.aggregate import aggregate, aggregate_metrics, formatter

    outcomes = [r.outcome for r in records]
    passed = sum(r.met_targets for r in records)
    green = bool(records) and not any(blocks(k) for k in outcomes)
    kind = "pass" if green else ("error" if "fail" not in outcomes else "fail")
    label = {"pass": "PASS", "fail": "FAIL", "error": "NO VERDICT"}[kind]
    summary = f"{passed}/{len(records)} runs met every target" + outcome_counts(outcomes)
    gate = ""
    if isinstance(comparison, dict) and comparison.get("passed") is False:
        gate = '<span class="badge fail" data-gate="regression">REGRESSION</span>'
    body = [f'<h1>Suite {escape(suite_name)}<span class="badge {kind}" data-outcome="{kind}">{label}</span>'
            f"{gate}</h1>", f"<p>{escape(summary)}.</p>"]
    if isinstance(comparison, dict):
        body += _comparison(comparison)

    dirs = run_dirs or [str(r.run_dir or "") for r in records]
    order = sorted(range(len(records)), key=lambda i: (records[i].scenario.name, records[i].repeat_index))
    rows: list[list[str]] = []
    classes: list[str] = []
    for i in order:
        run = records[i]
        page = os.path.join(dirs[i], RUN_HTML) if dirs[i] else ""
        href = os.path.relpath(page, out_dir) if page and out_dir else page
        exists = bool(page) and os.path.exists(page)
        rows.append([
            escape(run.scenario.name), str(run.repeat_index), esc(run.status),
            escape(final_state_text(run)), escape(fmt_metric(run, "detection_s")),
            escape(fmt_metric(run, "recovery_s")), escape(fmt_metric(run, "lost_steps")),
            escape(fmt_metric(run, "goodput")), escape(attribution_text(run)),
            escape(fmt_metric(run, "false_detections")),
            f'<span class="badge {run.outcome}">{escape(run.outcome_label)}</span>',
            "<br>".join(escape(r) for r in run.reasons()),
            html_link(href, "report") if exists else DASH,
        ])
        classes.append("" if run.met_targets else run.outcome)
    body += ['<h2 id="verdicts">Verdicts</h2>',
             html_table(["scenario", "repeat", "status", "final state", "detection", "recovery", "lost steps",
                     "goodput", "attribution", "false alarms", "verdict", "reasons", "run"], rows, classes,
                    attrs=' id="verdicts-table"')]

    agg = aggregate(records)
    figure_rows = []
    for row in agg:
        runs = [r for r in records if r.scenario.name == row.scenario]
        values: dict[str, list[tuple[int, float, str]]] = {}
        for r in runs:
            for key, *_ in figures.suite_panels():
                value = r.metric(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
                    values.setdefault(key, []).append((r.repeat_index, float(value), r.outcome))
        targets = runs[0].scenario.targets if runs else {}
        figure_rows.append({"scenario": row.scenario, "values": values, "targets": targets})
    body.append('<h2 id="across-repeats">Metrics across repeats</h2>')
    svg = figures.suite_metrics_svg(figure_rows)
    if svg:
        body += [svg, '<p class="muted">Dots: repeats (green pass, red missed a target, grey no verdict); '
                      "black bar: median; red dashes: the scenario's target.</p>"]
    metric_rows = []
    for row in agg:
        first = True
        for key in aggregate_metrics():
            stats = row.stats(key)
            fmt = formatter(key)
            metric_rows.append([
                escape(row.scenario) if first else "", f"{row.passed}/{row.repeats}" if first else "",
                f"<code>{key}</code>", escape(fmt(stats.median)), escape(fmt(stats.min)),
                escape(fmt(stats.max)), escape(stats.note or ""),
            ])
            first = False
    body.append(html_table(["scenario", "passed", "metric", "median", "min", "max", "missing"], metric_rows,
                       attrs=' id="aggregate-table"'))
    fidelity: dict[str, str] = {}
    for r in records:
        entries: list[FaultOutcome | PlannedFaultInfo] = [*r.faults, *r.plan]
        for f in entries:
            if f.type and f.type not in fidelity:
                text = fidelity_of(f)
                if text:
                    fidelity[f.type] = text
    if fidelity:
        body.append('<h2 id="fidelity">What the faults stand for</h2>')
        for name, text in sorted(fidelity.items()):
            body.append(f"<p><code>{escape(name)}</code></p><blockquote>{escape(' '.join(text.split()))}</blockquote>")
    files = [name for name in ("suite.md", "suite.json", "junit.xml", "compare.md", "policies.md",
                                                "stacks.md", "stacks.html") if out_dir and
             os.path.exists(os.path.join(out_dir, name))]
    if files:
        body += ['<h2 id="files">Files</h2><ul>', *[f"<li>{html_link(n, n)}</li>" for n in files], "</ul>"]
    return html_page(f"trainchaos suite {suite_name}: {label}", body)
