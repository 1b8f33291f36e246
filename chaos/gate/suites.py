"""Two suite outputs (``suite.json``) compared scenario by scenario: each gated metric's
median across repeats within its tolerance, how often it was missing, and the pass rate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from chaos.gate.errors import ComparisonInputError
from chaos.gate.tolerances import default_tolerances
from chaos.metrics.catalogue import fmt_compared, gated, spec
from chaos.metrics.spec import MetricSpec, Tolerance
from chaos.report._format import finite_number
from chaos.runfiles.suite_record import MetricStats, ScenarioSummary, SuiteRecord

__all__ = ["Comparison", "ComparisonInputError", "MetricComparison", "check_same_scenarios", "compare_suites",
           "format_value"]

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


def compare_suites(baseline: SuiteRecord, current: SuiteRecord,
                   tolerances: dict[str | None, dict[str, Tolerance]] | None = None,
                   baseline_label: str = "baseline", current_label: str = "current") -> Comparison:
    """Compare every scenario's medians; raises ``ComparisonInputError`` when the two suites
    do not hold the same scenarios."""
    tolerances = tolerances or {None: default_tolerances()}
    base_rows, cur_rows = baseline.by_scenario(), current.by_scenario()
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
                                           base.stats(metric.key), cur.stats(metric.key)))
        if base.repeats != cur.repeats:
            comparison.notes.append(f"{name}: {base.repeats} repeat(s) in the baseline, "
                                    f"{cur.repeats} now (a median of fewer repeats is noisier)")
    return comparison


def _pass_rate(name: str, base: ScenarioSummary, cur: ScenarioSummary) -> MetricComparison:
    b, c = base.pass_rate, cur.pass_rate
    note = f"{cur.passed}/{cur.repeats} passed, baseline {base.passed}/{base.repeats}"
    if cur.errors:
        note += f"; {cur.errors} without a verdict"
    # A shipped finding (expect) fails in both: its pass rate stays 0 and is no regression;
    # one that starts passing is an improvement, a pass that turns into an XFAIL a regression.
    if cur.xfailed:
        note += f"; {cur.xfailed} expected failure(s) (XFAIL)"
    if cur.xpassed:
        note += f"; {cur.xpassed} unexpected pass(es) (XPASS)"
    if b is None or c is None:
        return MetricComparison(name, "passed", b, c, "n/a", note=note)
    result: Result = "regression" if c < b - 1e-9 else "improved" if c > b + 1e-9 else "ok"
    return MetricComparison(name, "passed", b, c, result, note=note)


def _metric(name: str, metric: MetricSpec, tol: Tolerance, base: MetricStats,
            cur: MetricStats) -> MetricComparison:
    b, c = finite_number(base.median), finite_number(cur.median)
    row = MetricComparison(name, metric.key, b, c, "n/a")
    # A missing value that means the fault was not handled (undetected, never recovered) is
    # worse; for a fault-scope metric only (a run-level "unknown" is no news). A value the
    # tool could not observe (detection unknown: no source in that workload) is no miss of
    # the job's: it reads as unknown, with its fix, never as a regression or an improvement.
    missing_words = metric.missing if metric.scope == "fault" else ""
    direction = metric.direction
    b_missing, c_missing = base.missed_rate, cur.missed_rate
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
    elif c is None and cur.unknown and cur.unknown == cur.missing:
        row.note = f"unknown now: {cur.note}"
    elif b is not None and c is None:
        row.result = "regression" if missing_words else "n/a"
        row.note = f"{missing_words or 'missing'} in every repeat now"
    elif b is None and c is not None and base.unknown and base.unknown == base.missing:
        row.note = f"baseline unknown: {base.note}"
    elif b is None and c is not None:
        row.result = "improved" if missing_words else "n/a"
        row.note = f"baseline {missing_words or 'missing'} in every repeat"
    # A fault that is now sometimes undetected is a regression whatever the median of the rest.
    if missing_words and b is not None and c is not None and c_missing > b_missing + 1e-9:
        row.result = "regression"
        row.note += f"; {cur.note or missing_words} (baseline {base.note or 'never'})"
    elif cur.unknown and cur.note not in row.note:
        row.note += f"; {cur.note}"  # said, with its fix, and no verdict on the job
    if not tol.gate:
        row.result = "ok" if row.result == "regression" else row.result
        row.note = (row.note + "; " if row.note else "") + "not gated"
    return row


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
