"""Across repeats: one row per scenario with median/min/max of each headline metric, the
pass count, and how often a metric was missing (``undetected in 1/3``); and the suite
report (``suite.json``, ``suite.md``) built from it.

A None value is left out of median/min/max but counted: a fault detected in 2 repeats out
of 3 must not read as "median 0.3 s" and nothing else.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from chaos.metrics.catalogue import gated, missing_label
from chaos.report._format import (
    atomic_write_text,
    attribution_text,
    blocks,
    final_state_text,
    fmt_metric,
    fmt_metric_value,
    had_faults,
    jsonable,
    md_table,
    met_targets,
    metric,
    metrics_of,
    outcome,
    outcome_counts,
    outcome_label,
    reasons,
    repeat_of,
    scenario_name,
    wall_s_of,
)

__all__ = ["aggregate", "aggregate_metrics", "formatter", "render_suite_md", "suite_name_of", "write_suite_report"]


def aggregate_metrics() -> tuple[str, ...]:
    """The metrics aggregated across repeats: the regression gate's (``MetricSpec.tolerance``
    in the catalogue), so the suite tables show what the gate compares."""
    return tuple(s.key for s in gated())


SUITE_JSON = "suite.json"
SUITE_MD = "suite.md"


def aggregate(journals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per scenario, in order of first appearance::

        {"scenario": "rank-kill", "repeats": 3, "passed": 2, "failed": 1, "errors": 0,
         "xfailed": 0, "xpassed": 0, "statuses": {"completed": 3}, "reasons": ["detection_s 2.4 s > 2 s"],
         "metrics": {"detection_s": {"median": .., "min": .., "max": .., "n": 2,
                                     "missing": 1, "note": "undetected in 1/3"}, ...}}

    ``passed`` counts the runs that met every target (an unexpected pass too: the gate's pass
    rate), ``xfailed`` those that missed them as their scenario expects (``expect``),
    ``xpassed`` those of an expected failure that met them anyway. ``n`` counts the values used; ``missing`` the repeats without one; ``note`` says why in
    words (``undetected``, or ``no metrics`` for a run that ended before metrics existed).
    """
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for journal in journals:
        by_scenario.setdefault(scenario_name(journal), []).append(journal)
    rows = []
    for name, runs in by_scenario.items():
        runs = sorted(runs, key=repeat_of)
        outcomes = [outcome(j) for j in runs]
        statuses: dict[str, int] = {}
        for j in runs:
            status = str(j.get("status") or "unknown")
            statuses[status] = statuses.get(status, 0) + 1
        seen_reasons: dict[str, None] = {}
        for j in runs:
            for reason in reasons(j):
                seen_reasons.setdefault(reason, None)
        rows.append({
            "scenario": name,
            "repeats": len(runs),
            "passed": sum(met_targets(kind) for kind in outcomes),
            "failed": outcomes.count("fail"),
            "errors": outcomes.count("error"),
            "xfailed": outcomes.count("xfail"),
            "xpassed": outcomes.count("xpass"),
            "statuses": statuses,
            "reasons": list(seen_reasons),
            "metrics": {key: _stats(runs, key) for key in aggregate_metrics()},
        })
    return rows


def _stats(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    values: list[float] = []
    none_with_metrics = 0
    no_metrics = 0
    for journal in runs:
        value = wall_s_of(journal) if key == "wall_s" else metric(journal, key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            values.append(value)  # value == value: NaN is a missing value, not a number
            continue
        if metrics_of(journal) is None and key != "wall_s":
            no_metrics += 1
        else:
            none_with_metrics += 1
    total = len(runs)
    notes = []
    if none_with_metrics:
        # "undetected" only means something when a fault was injected.
        label = missing_label(key) if any(had_faults(j) for j in runs) else "missing"
        notes.append(f"{label} in {none_with_metrics}/{total}")
    if no_metrics:
        notes.append(f"no metrics in {no_metrics}/{total}")
    return {
        "median": statistics.median(values) if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
        "n": len(values),
        "missing": none_with_metrics + no_metrics,
        "note": "; ".join(notes),
    }


def suite_name_of(journals: list[dict[str, Any]]) -> str:
    """The suite from ``reports/<suite>/<scenario>/<repeat>``; ``suite`` when not derivable."""
    for journal in journals:
        run_dir = str(journal.get("run_dir") or "").rstrip("/\\")
        parts = run_dir.replace("\\", "/").split("/")
        if len(parts) >= 3 and parts[-3]:
            return parts[-3]
    return "suite"


def write_suite_report(
    out_dir: str, journals: list[dict[str, Any]], suite_name: str | None = None
) -> list[str]:
    """Write ``suite.json`` and ``suite.md`` into ``out_dir``; returns both paths."""
    suite = suite_name or suite_name_of(journals)
    rows = aggregate(journals)
    runs = [
        {
            "scenario": scenario_name(j),
            "repeat": repeat_of(j),
            "status": j.get("status"),
            "outcome": outcome(j),
            "passed": met_targets(outcome(j)),
            "reasons": reasons(j),
            "run_dir": j.get("run_dir"),
            "wall_s": wall_s_of(j),
            "metrics": {key: metric(j, key) for key in aggregate_metrics() if key != "wall_s"},
        }
        for j in journals
    ]
    document = {
        "format": 1,
        "suite": suite,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        # The suite is green: no missed target, no run without a verdict (an expected failure
        # is fine; whether an unexpected pass is, is the command's --strict).
        "passed": bool(runs) and not any(blocks(r["outcome"]) for r in runs),
        "counts": {
            "runs": len(runs),
            "passed": sum(r["outcome"] == "pass" for r in runs),
            "failed": sum(r["outcome"] == "fail" for r in runs),
            "errors": sum(r["outcome"] == "error" for r in runs),
            "xfailed": sum(r["outcome"] == "xfail" for r in runs),
            "xpassed": sum(r["outcome"] == "xpass" for r in runs),
        },
        "runs": runs,
        "scenarios": rows,
    }
    json_path = atomic_write_text(
        os.path.join(out_dir, SUITE_JSON),
        json.dumps(jsonable(document), indent=2, default=str, allow_nan=False) + "\n",
    )
    md_path = atomic_write_text(os.path.join(out_dir, SUITE_MD), render_suite_md(journals, suite))
    return [json_path, md_path]


def render_suite_md(journals: list[dict[str, Any]], suite_name: str | None = None) -> str:
    suite = suite_name or suite_name_of(journals)
    outcomes = [outcome(j) for j in journals]
    passed = sum(met_targets(kind) for kind in outcomes)
    overall = "PASS" if journals and not any(blocks(kind) for kind in outcomes) else "FAIL"
    lines = [f"# Suite {suite}: {overall}", "",
             f"{passed}/{len(journals)} runs met every target" + outcome_counts(outcomes) + ".", ""]

    lines += ["## Verdicts", ""]
    ordered = sorted(journals, key=lambda j: (scenario_name(j), repeat_of(j)))
    verdict_rows = [
        [scenario_name(j), repeat_of(j), j.get("status") or "unknown",
         fmt_metric(j, "detection_s"), fmt_metric(j, "recovery_s"), fmt_metric(j, "lost_steps"),
         fmt_metric(j, "goodput"), attribution_text(j), final_state_text(j), fmt_metric(j, "false_detections"),
         f"**{outcome_label(j)}**", "\n".join(reasons(j)) or ""]
        for j in ordered
    ]
    lines += md_table(["scenario", "repeat", "status", "detection", "recovery", "lost steps",
                       "goodput", "attribution", "final state", "false alarms", "verdict", "reasons"],
                      verdict_rows)
    lines.append("")

    lines += ["## Metrics across repeats", ""]
    metric_rows = []
    for row in aggregate(journals):
        first = True
        for key in aggregate_metrics():
            stats = row["metrics"][key]
            fmt = formatter(key)
            metric_rows.append([
                row["scenario"] if first else "",
                f"{row['passed']}/{row['repeats']}" if first else "",
                key, fmt(stats["median"]), fmt(stats["min"]), fmt(stats["max"]),
                stats["note"] or "",
            ])
            first = False
    lines += md_table(["scenario", "passed", "metric", "median", "min", "max", "missing"],
                      metric_rows)
    lines.append("")
    return "\n".join(lines)


def formatter(key: str) -> Callable[[Any], str]:
    """How the suite tables show a value of metric ``key`` (a dash when None)."""
    return lambda value: fmt_metric_value(key, value)
