"""Across repeats: one row per scenario with median/min/max of each headline metric, the
pass count, and how often a metric was missing (``undetected in 1/3``); and the suite
report (``suite.json``, ``suite.md``) built from it.

A None value is left out of median/min/max but counted: a fault detected in 2 repeats out
of 3 must not read as "median 0.3 s" and nothing else.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from chaos.metrics.catalogue import gated, missing_label
from chaos.report._format import (
    atomic_write_text,
    attribution_text,
    final_state_text,
    fmt_metric,
    fmt_metric_value,
    md_table,
    outcome_counts,
)
from chaos.runfiles.record import RunRecord, blocks
from chaos.runfiles.suite_record import (
    SUITE_SCHEMA_VERSION,
    MetricStats,
    ScenarioSummary,
    SuiteCounts,
    SuiteRecord,
    SuiteRun,
    write_suite_record,
)

__all__ = ["aggregate", "aggregate_metrics", "formatter", "render_suite_md", "suite_name_of", "suite_record",
           "write_suite_report"]


def aggregate_metrics() -> tuple[str, ...]:
    """The metrics aggregated across repeats: the regression gate's (``MetricSpec.tolerance``
    in the catalogue), so the suite tables show what the gate compares."""
    return tuple(s.key for s in gated())


SUITE_MD = "suite.md"


def aggregate(records: list[RunRecord]) -> list[ScenarioSummary]:
    """One summary per scenario, in order of first appearance (``suite.json``'s
    ``scenarios``)::

        {"scenario": "rank-kill", "repeats": 3, "passed": 2, "failed": 1, "errors": 0,
         "xfailed": 0, "xpassed": 0, "statuses": {"completed": 3}, "reasons": ["detection_s 2.4 s > 2 s"],
         "metrics": {"detection_s": {"median": .., "min": .., "max": .., "n": 2,
                                     "missing": 1, "note": "undetected in 1/3"}, ...}}

    ``passed`` counts the runs that met every target (an unexpected pass too: the gate's pass
    rate), ``xfailed`` those that missed them as their scenario expects (``expect``),
    ``xpassed`` those of an expected failure that met them anyway. ``n`` counts the values used; ``missing`` the repeats without one; ``note`` says why in
    words (``undetected``, or ``no metrics`` for a run that ended before metrics existed).
    """
    by_scenario: dict[str, list[RunRecord]] = {}
    for record in records:
        by_scenario.setdefault(record.scenario.name, []).append(record)
    rows = []
    for name, runs in by_scenario.items():
        runs = sorted(runs, key=lambda r: r.repeat_index)
        outcomes = [r.outcome for r in runs]
        statuses: dict[str, int] = {}
        for r in runs:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        seen_reasons: dict[str, None] = {}
        for r in runs:
            for reason in r.reasons():
                seen_reasons.setdefault(reason, None)
        rows.append(ScenarioSummary(
            scenario=name,
            repeats=len(runs),
            passed=sum(r.met_targets for r in runs),
            failed=outcomes.count("fail"),
            errors=outcomes.count("error"),
            xfailed=outcomes.count("xfail"),
            xpassed=outcomes.count("xpass"),
            statuses=statuses,
            reasons=list(seen_reasons),
            metrics={key: _stats(runs, key) for key in aggregate_metrics()},
        ))
    return rows


def _stats(runs: list[RunRecord], key: str) -> MetricStats:
    values: list[float] = []
    none_with_metrics = 0
    no_metrics = 0
    unknown: dict[str, int] = {}
    """Why -> the repeats trainchaos could not observe ``key`` in (the tool was blind)."""
    for record in runs:
        value = record.measured_wall_s if key == "wall_s" else record.metric(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            values.append(value)  # value == value: NaN is a missing value, not a number
            continue
        if record.metrics is None and key != "wall_s":
            no_metrics += 1
        elif record.metrics is not None and (why := record.metrics.unknown_reason(key)) is not None:
            unknown[why] = unknown.get(why, 0) + 1
        else:
            none_with_metrics += 1
    total = len(runs)
    notes = []
    if none_with_metrics:
        # "undetected" only means something when a fault was injected.
        label = missing_label(key) if any(r.had_faults for r in runs) else "missing"
        notes.append(f"{label} in {none_with_metrics}/{total}")
    # A value the tool could not observe is unknown, with its fix: never the stack's miss.
    notes += [f"unknown in {count}/{total} ({why})" for why, count in unknown.items()]
    if no_metrics:
        notes.append(f"no metrics in {no_metrics}/{total}")
    return MetricStats(
        median=statistics.median(values) if values else None,
        min=min(values) if values else None,
        max=max(values) if values else None,
        n=len(values),
        missing=none_with_metrics + sum(unknown.values()) + no_metrics,
        unknown=sum(unknown.values()),
        note="; ".join(notes),
    )


def suite_name_of(records: list[RunRecord]) -> str:
    """The suite from ``reports/<suite>/<scenario>/<repeat>``; ``suite`` when not derivable."""
    for record in records:
        run_dir = str(record.run_dir or "").rstrip("/\\")
        parts = run_dir.replace("\\", "/").split("/")
        if len(parts) >= 3 and parts[-3]:
            return parts[-3]
    return "suite"


def suite_record(records: list[RunRecord], suite_name: str | None = None) -> SuiteRecord:
    """The suite's record (``suite.json``) from its runs' records."""
    runs = [
        SuiteRun(
            scenario=r.scenario.name,
            repeat=r.repeat_index,
            status=r.status,
            outcome=r.outcome,
            passed=r.met_targets,
            reasons=r.reasons(),
            run_dir=r.run_dir,
            wall_s=r.measured_wall_s,
            metrics={key: r.metric(key) for key in aggregate_metrics() if key != "wall_s"},
        )
        for r in records
    ]
    outcomes = [r.outcome for r in records]
    return SuiteRecord(
        schema_version=SUITE_SCHEMA_VERSION,
        format=1,
        suite=suite_name or suite_name_of(records),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        # The suite is green: no missed target, no run without a verdict (an expected failure
        # is fine; whether an unexpected pass is, is the command's --strict).
        passed=bool(records) and not any(blocks(kind) for kind in outcomes),
        counts=SuiteCounts(runs=len(records), passed=outcomes.count("pass"), failed=outcomes.count("fail"),
                           errors=outcomes.count("error"), xfailed=outcomes.count("xfail"),
                           xpassed=outcomes.count("xpass")),
        runs=runs,
        scenarios=aggregate(records),
    )


def write_suite_report(out_dir: str, records: list[RunRecord], suite_name: str | None = None) -> list[str]:
    """Write ``suite.json`` and ``suite.md`` into ``out_dir``; returns both paths."""
    suite = suite_name or suite_name_of(records)
    json_path = write_suite_record(out_dir, suite_record(records, suite))
    md_path = atomic_write_text(os.path.join(out_dir, SUITE_MD), render_suite_md(records, suite))
    return [json_path, md_path]


def render_suite_md(records: list[RunRecord], suite_name: str | None = None) -> str:
    suite = suite_name or suite_name_of(records)
    outcomes = [r.outcome for r in records]
    passed = sum(r.met_targets for r in records)
    overall = "PASS" if records and not any(blocks(kind) for kind in outcomes) else "FAIL"
    lines = [f"# Suite {suite}: {overall}", "",
             f"{passed}/{len(records)} runs met every target" + outcome_counts(outcomes) + ".", ""]

    lines += ["## Verdicts", ""]
    ordered = sorted(records, key=lambda r: (r.scenario.name, r.repeat_index))
    verdict_rows = [
        [r.scenario.name, r.repeat_index, r.status,
         fmt_metric(r, "detection_s"), fmt_metric(r, "recovery_s"), fmt_metric(r, "lost_steps"),
         fmt_metric(r, "goodput"), attribution_text(r), final_state_text(r), fmt_metric(r, "false_detections"),
         f"**{r.outcome_label}**", "\n".join(r.reasons()) or ""]
        for r in ordered
    ]
    lines += md_table(["scenario", "repeat", "status", "detection", "recovery", "lost steps",
                       "goodput", "attribution", "final state", "false alarms", "verdict", "reasons"],
                      verdict_rows)
    lines.append("")

    lines += ["## Metrics across repeats", ""]
    metric_rows = []
    for row in aggregate(records):
        first = True
        for key in aggregate_metrics():
            stats = row.stats(key)
            fmt = formatter(key)
            metric_rows.append([
                row.scenario if first else "",
                f"{row.passed}/{row.repeats}" if first else "",
                key, fmt(stats.median), fmt(stats.min), fmt(stats.max),
                stats.note or "",
            ])
            first = False
    lines += md_table(["scenario", "passed", "metric", "median", "min", "max", "missing"],
                      metric_rows)
    lines.append("")
    return "\n".join(lines)


def formatter(key: str) -> Callable[[Any], str]:
    """How the suite tables show a value of metric ``key`` (a dash when None)."""
    return lambda value: fmt_metric_value(key, value)
