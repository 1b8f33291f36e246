"""Two suite outputs (``suite.json``) compared scenario by scenario: each gated metric's
median across repeats within its tolerance, how often it was missing, and the pass rate."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from chaos.gate.errors import ComparisonInputError
from chaos.gate.tolerances import default_tolerances
from chaos.metrics.catalogue import fmt_compared, gated, spec
from chaos.metrics.spec import MetricSpec, Tolerance
from chaos.report._format import finite_number

__all__ = ["SUITE_JSON", "Comparison", "ComparisonInputError", "MetricComparison", "check_same_scenarios",
           "compare_suites", "format_value", "load_suite_summary", "scenario_names"]

SUITE_JSON = "suite.json"

Result = Literal["ok", "regression", "improved", "n/a"]


@dataclass
class MetricComparison:
    scenario: str
    metric: str
    """A gated metric of the catalogue, or ``passed`` (the pass rate)."""
    baseline: float | None
    current: float | None
    result: Result
    allowance: float | None = None
    note: str = ""

    @property
    def regression(self) -> bool:
        return self.result == "regression"

    def describe(self) -> str:
        """One line: ``kill-rank recovery_s: 6.10 s -> 14.9 s (+8.8 s, allowed +3.05 s)``."""
        text = f"{self.scenario} {self.metric}: {format_value(self.metric, self.baseline)} -> {format_value(self.metric, self.current)}"
        if self.note:
            text += f" ({self.note})"
        return text


@dataclass
class Comparison:
    baseline_label: str
    current_label: str
    rows: list[MetricComparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[MetricComparison]:
        return [r for r in self.rows if r.regression]

    @property
    def passed(self) -> bool:
        return not self.regressions

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline_label, "current": self.current_label, "passed": self.passed,
            "regressions": [r.describe() for r in self.regressions], "notes": self.notes,
            "rows": [{"scenario": r.scenario, "metric": r.metric, "baseline": r.baseline, "current": r.current,
                      "result": r.result, "allowance": r.allowance, "note": r.note} for r in self.rows],
        }


def load_suite_summary(path: str) -> dict[str, Any]:
    """``suite.json`` from a suite output directory (or the file itself)."""
    file = os.path.join(path, SUITE_JSON) if os.path.isdir(path) else path
    if not os.path.exists(file):
        hint = (" (run the suite first, or record a baseline with --update-baseline)"
                if os.path.isdir(path) or not file.endswith(".json") else "")
        raise ComparisonInputError(f"{path}: no {SUITE_JSON} here{hint}")
    try:
        with open(file, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ComparisonInputError(f"{file}: unreadable suite output: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("scenarios"), list):
        raise ComparisonInputError(f"{file}: not a trainchaos suite output (no 'scenarios' list)")
    return data


def _scenarios(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(row.get("scenario")): row for row in summary.get("scenarios") or [] if isinstance(row, dict)}


def scenario_names(summary: dict[str, Any]) -> list[str]:
    return list(_scenarios(summary))


def check_same_scenarios(baseline: list[str], current: list[str], baseline_label: str,
                         current_label: str) -> None:
    """Exit-2 error naming what one side has and the other lacks."""
    missing = [s for s in baseline if s not in current]
    new = [s for s in current if s not in baseline]
    problems = []
    if missing:
        problems.append(f"missing from {current_label}: {', '.join(missing)}")
    if new:
        problems.append(f"not in the baseline {baseline_label}: {', '.join(new)} "
                        "(record it with --update-baseline)")
    if problems:
        raise ComparisonInputError("the suites do not hold the same scenarios; " + "; ".join(problems))


def compare_suites(baseline: dict[str, Any], current: dict[str, Any],
                   tolerances: dict[str | None, dict[str, Tolerance]] | None = None,
                   baseline_label: str = "baseline", current_label: str = "current") -> Comparison:
    """Compare every scenario's medians; raises ``ComparisonInputError`` when the two suites
    do not hold the same scenarios."""
    tolerances = tolerances or {None: default_tolerances()}
    base_rows, cur_rows = _scenarios(baseline), _scenarios(current)
    check_same_scenarios(list(base_rows), list(cur_rows), baseline_label, current_label)
    comparison = Comparison(baseline_label, current_label)
    for name, base in base_rows.items():
        cur = cur_rows[name]
        table = tolerances.get(name) or tolerances[None]
        comparison.rows.append(_pass_rate(name, base, cur))
        for metric in gated():
            if metric.key not in table:  # a family registered after the tolerances were read
                continue
            comparison.rows.append(_metric(name, metric, table[metric.key],
                                           (base.get("metrics") or {}).get(metric.key) or {},
                                           (cur.get("metrics") or {}).get(metric.key) or {}))
        if base.get("repeats") != cur.get("repeats"):
            comparison.notes.append(f"{name}: {base.get('repeats')} repeat(s) in the baseline, "
                                    f"{cur.get('repeats')} now (a median of fewer repeats is noisier)")
    return comparison


def _pass_rate(name: str, base: dict[str, Any], cur: dict[str, Any]) -> MetricComparison:
    def rate(row: dict[str, Any]) -> float | None:
        repeats = finite_number(row.get("repeats"))
        return None if not repeats else (finite_number(row.get("passed")) or 0.0) / repeats

    b, c = rate(base), rate(cur)
    note = f"{cur.get('passed')}/{cur.get('repeats')} passed, baseline {base.get('passed')}/{base.get('repeats')}"
    if cur.get("errors"):
        note += f"; {cur['errors']} without a verdict"
    # A shipped finding (expect) fails in both: its pass rate stays 0 and is no regression;
    # one that starts passing is an improvement, a pass that turns into an XFAIL a regression.
    if cur.get("xfailed"):
        note += f"; {cur['xfailed']} expected failure(s) (XFAIL)"
    if cur.get("xpassed"):
        note += f"; {cur['xpassed']} unexpected pass(es) (XPASS)"
    if b is None or c is None:
        return MetricComparison(name, "passed", b, c, "n/a", note=note)
    result: Result = "regression" if c < b - 1e-9 else "improved" if c > b + 1e-9 else "ok"
    return MetricComparison(name, "passed", b, c, result, note=note)


def _metric(name: str, metric: MetricSpec, tol: Tolerance, base: dict[str, Any],
            cur: dict[str, Any]) -> MetricComparison:
    b, c = finite_number(base.get("median")), finite_number(cur.get("median"))
    row = MetricComparison(name, metric.key, b, c, "n/a")
    # A missing value that means the fault was not handled (undetected, never recovered) is
    # worse; for a fault-scope metric only (a run-level "unknown" is no news).
    missing_words = metric.missing if metric.scope == "fault" else ""
    direction = metric.direction
    b_missing, c_missing = _missing_rate(base), _missing_rate(cur)
    if b is not None and c is not None:
        allowance = tol.allowance(b)
        worse = (c - b) if direction == "lower" else (b - c)
        row.allowance = allowance
        change = c - b
        pct = f", {change / abs(b):+.0%}" if b else ""
        row.note = f"{metric.fmt_change(change)}{pct}"
        if worse > allowance + 1e-12:
            row.result = "regression"
        elif -worse > allowance + 1e-12:
            row.result = "improved"
        else:
            row.result = "ok"
    elif b is not None and c is None:
        row.result = "regression" if missing_words else "n/a"
        row.note = f"{missing_words or 'missing'} in every repeat now"
    elif b is None and c is not None:
        row.result = "improved" if missing_words else "n/a"
        row.note = f"baseline {missing_words or 'missing'} in every repeat"
    # A fault that is now sometimes undetected is a regression whatever the median of the rest.
    if missing_words and b is not None and c is not None and c_missing > b_missing + 1e-9:
        row.result = "regression"
        row.note += f"; {cur.get('note') or missing_words} (baseline {base.get('note') or 'never'})"
    if not tol.gate:
        row.result = "ok" if row.result == "regression" else row.result
        row.note = (row.note + "; " if row.note else "") + "not gated"
    return row


def _missing_rate(stats: dict[str, Any]) -> float:
    n, missing = finite_number(stats.get("n")) or 0.0, finite_number(stats.get("missing")) or 0.0
    return missing / (n + missing) if n + missing else 0.0


def format_value(metric: str, value: Any) -> str:
    """A compared value in its unit (seconds, steps, a percentage): the tables' format."""
    return fmt_compared(metric, finite_number(value))


def fmt_change(metric: str, value: float, signed: bool = True) -> str:
    """A change of a compared value in the metric's unit (``passed``: points of %)."""
    return _spec(metric).fmt_change(value, signed)


def higher_is_better(metric: str) -> bool:
    return _spec(metric).direction == "higher"


def _spec(metric: str) -> MetricSpec:
    if metric == "passed":
        return MetricSpec("passed", "pass rate", "fraction", direction="higher")
    return spec(metric) or MetricSpec(metric, metric)  # unknown to the catalogue (an old suite.json)
