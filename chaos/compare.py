"""The regression gate: one suite's metrics against a stored baseline's, with tolerances.

A run that meets a loose target can still be a regression (recovery went from 6 s to 15 s
under a 20 s target). ``compare_suites`` takes two suite outputs (``suite.json``, as
``trainchaos run`` writes it) and compares, per scenario, each metric's **median across
repeats**, how often it was missing (undetected in 1/3 where it never was), and the pass rate.

A metric regresses when it got worse by more than its allowance,
``max(abs, rel × |baseline median|)`` (``abs`` in the metric's unit, ``rel`` a fraction).
Both parts matter: ``rel`` alone would flag 0.05 s → 0.12 s of detection, noise on a loaded
machine; ``abs`` alone would miss 60 s → 90 s of recovery. Defaults (``DEFAULT_TOLERANCES``)
are sized for the noise measured on a 2-core machine; a YAML file overrides them, for every
scenario or for one::

    metrics:                    # every scenario
      recovery_s: {rel: 0.3, abs: 2}
      wall_s: {rel: 0.5, abs: 20}   # wall time is shown but not gated unless given here
    scenarios:
      kill-rank:
        lost_steps: {abs: 0}    # rel keeps the metric's default
        goodput: off            # shown, never gates

Baselines are stored and refreshed the way snapshot-testing tools (jest, syrupy) do it: the
baseline is a small file in the repository (``reports/baselines/<suite>/suite.json``, with its
``suite.md`` for reviewers and optionally ``tolerances.yaml``), ``--update-baseline`` rewrites
it from a run, and a gate against a baseline that does not list exactly the suite's scenarios
is an input error (exit 2), never a silent pass.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import yaml

from chaos.errors import EXIT_BAD_INPUT, ChaosError, ScenarioError, ValidationIssue
from chaos.report._format import atomic_write_text, finite_number, md_table

__all__ = [
    "BASELINE_FILES",
    "DEFAULT_TOLERANCES",
    "GATED_METRICS",
    "Comparison",
    "ComparisonInputError",
    "MetricComparison",
    "Tolerance",
    "compare_suites",
    "format_value",
    "load_suite_summary",
    "load_tolerances",
    "render_markdown",
    "tolerances_for",
    "update_baseline",
    "write_comparison",
]

SUITE_JSON = "suite.json"
TOLERANCES_FILE = "tolerances.yaml"
BASELINE_FILES = (SUITE_JSON, "suite.md")
"""What ``--update-baseline`` stores: the numbers, and the same as a table for reviewers."""

Direction = Literal["lower", "higher"]
Result = Literal["ok", "regression", "improved", "n/a"]


@dataclass(frozen=True)
class Tolerance:
    rel: float
    """Allowed worsening as a fraction of the baseline median (0.5 = 50 %)."""
    abs: float
    """Allowed worsening in the metric's unit (seconds, steps, a goodput fraction)."""
    gate: bool = True
    """False: compared and shown, never a regression."""

    def allowance(self, baseline: float) -> float:
        return max(self.abs, self.rel * abs(baseline))


# metric -> which way is better, and its default tolerance. Recovery on a shared 2-core
# machine varies by about +-2 s between identical runs (process start under load); lost steps
# move by one when a signal lands a step late; detection by tens of milliseconds.
GATED_METRICS: dict[str, Direction] = {
    "detection_s": "lower",
    "recovery_s": "lower",
    "catchup_s": "lower",
    "lost_steps": "lower",
    "goodput": "higher",
    "false_detections": "lower",
    "wall_s": "lower",
}
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "detection_s": Tolerance(rel=1.0, abs=1.0),
    "recovery_s": Tolerance(rel=0.5, abs=3.0),
    "catchup_s": Tolerance(rel=0.5, abs=3.0),
    "lost_steps": Tolerance(rel=0.25, abs=2),
    "goodput": Tolerance(rel=0.25, abs=0.10),
    "false_detections": Tolerance(rel=0.0, abs=0),
    "wall_s": Tolerance(rel=0.5, abs=30.0, gate=False),
}
# A missing value of these means the fault was not handled (undetected, never recovered).
_MISSING_IS_WORSE = {"detection_s": "undetected", "recovery_s": "not recovered",
                     "catchup_s": "not caught up", "lost_steps": "unknown"}
_UNITS = {"detection_s": "s", "recovery_s": "s", "catchup_s": "s", "wall_s": "s"}


class ComparisonInputError(ChaosError):
    """Inputs that cannot be compared: a missing or unreadable suite output, or suites that
    do not hold the same scenarios."""

    exit_code = EXIT_BAD_INPUT


@dataclass
class MetricComparison:
    scenario: str
    metric: str
    """A metric of ``GATED_METRICS``, or ``passed`` (the pass rate)."""
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
        text = f"{self.scenario} {self.metric}: {_fmt(self.metric, self.baseline)} -> {_fmt(self.metric, self.current)}"
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


# ------------------------------------------------------------------------------------ inputs


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


_TOLERANCE_KEYS = ("rel", "abs")


def load_tolerances(path: str | None) -> dict[str | None, dict[str, Tolerance]]:
    """``{None: per-metric defaults, "<scenario>": overrides}`` from the defaults and, when
    given, a YAML file (module docstring). Every problem is reported with its location."""
    table: dict[str | None, dict[str, Tolerance]] = {None: dict(DEFAULT_TOLERANCES)}
    if path is None:
        return table
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ComparisonInputError(f"{path}: cannot read tolerances: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError([ValidationIssue(path, "", f"not valid YAML: {exc}")]) from None
    data = data or {}
    issues: list[ValidationIssue] = []
    if not isinstance(data, dict):
        raise ScenarioError([ValidationIssue(path, "", "expected a mapping with 'metrics' and/or 'scenarios'")])
    for key in data:
        if key not in ("metrics", "scenarios"):
            issues.append(ValidationIssue(path, str(key), "unknown key; allowed: metrics, scenarios"))
    defaults = _parse_metrics(data.get("metrics"), "metrics", table[None], path, issues)
    table[None] = defaults
    scenarios = data.get("scenarios") or {}
    if not isinstance(scenarios, dict):
        issues.append(ValidationIssue(path, "scenarios", "expected a mapping of scenario name -> metrics"))
        scenarios = {}
    for name, metrics in scenarios.items():
        table[str(name)] = _parse_metrics(metrics, f"scenarios.{name}", defaults, path, issues)
    if issues:
        raise ScenarioError(issues)
    return table


def _parse_metrics(data: Any, where: str, base: dict[str, Tolerance], path: str,
                   issues: list[ValidationIssue]) -> dict[str, Tolerance]:
    out = dict(base)
    if data is None:
        return out
    if not isinstance(data, dict):
        issues.append(ValidationIssue(path, where, "expected a mapping of metric -> {rel, abs} or off"))
        return out
    for metric, spec in data.items():
        loc = f"{where}.{metric}"
        if metric not in GATED_METRICS:
            issues.append(ValidationIssue(path, loc, f"unknown metric; allowed: {', '.join(GATED_METRICS)}"))
            continue
        if spec is False or spec == "off":  # YAML 1.1 reads a bare off as False
            out[metric] = replace(out[metric], gate=False)
            continue
        if not isinstance(spec, dict):
            issues.append(ValidationIssue(path, loc, "expected {rel: FRACTION, abs: AMOUNT} or off"))
            continue
        values: dict[str, float] = {}
        for key, value in spec.items():
            if key not in _TOLERANCE_KEYS:
                issues.append(ValidationIssue(path, f"{loc}.{key}", "unknown key; allowed: rel, abs"))
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                issues.append(ValidationIssue(path, f"{loc}.{key}", f"must be a number >= 0, got {value!r}"))
            else:
                values[key] = float(value)
        out[metric] = Tolerance(rel=values.get("rel", out[metric].rel), abs=values.get("abs", out[metric].abs))
    return out


# ------------------------------------------------------------------------------- comparison


def compare_suites(baseline: dict[str, Any], current: dict[str, Any],
                   tolerances: dict[str | None, dict[str, Tolerance]] | None = None,
                   baseline_label: str = "baseline", current_label: str = "current") -> Comparison:
    """Compare every scenario's medians; raises ``ComparisonInputError`` when the two suites
    do not hold the same scenarios."""
    tolerances = tolerances or {None: dict(DEFAULT_TOLERANCES)}
    base_rows, cur_rows = _scenarios(baseline), _scenarios(current)
    check_same_scenarios(list(base_rows), list(cur_rows), baseline_label, current_label)
    comparison = Comparison(baseline_label, current_label)
    for name, base in base_rows.items():
        cur = cur_rows[name]
        table = tolerances.get(name) or tolerances[None]
        comparison.rows.append(_pass_rate(name, base, cur))
        for metric, direction in GATED_METRICS.items():
            comparison.rows.append(_metric(name, metric, direction, table[metric],
                                           (base.get("metrics") or {}).get(metric) or {},
                                           (cur.get("metrics") or {}).get(metric) or {}))
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
    if b is None or c is None:
        return MetricComparison(name, "passed", b, c, "n/a", note=note)
    result: Result = "regression" if c < b - 1e-9 else "improved" if c > b + 1e-9 else "ok"
    return MetricComparison(name, "passed", b, c, result, note=note)


def _metric(name: str, metric: str, direction: Direction, tol: Tolerance, base: dict[str, Any],
            cur: dict[str, Any]) -> MetricComparison:
    b, c = finite_number(base.get("median")), finite_number(cur.get("median"))
    row = MetricComparison(name, metric, b, c, "n/a")
    missing_words = _MISSING_IS_WORSE.get(metric)
    b_missing, c_missing = _missing_rate(base), _missing_rate(cur)
    if b is not None and c is not None:
        allowance = tol.allowance(b)
        worse = (c - b) if direction == "lower" else (b - c)
        row.allowance = allowance
        change = c - b
        pct = f", {change / abs(b):+.0%}" if b else ""
        row.note = f"{_fmt_delta(metric, change)}{pct}"
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
    return _fmt(metric, finite_number(value))


def _fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "—"
    if metric == "passed":
        return f"{value:.0%}"
    if metric == "goodput":
        return f"{value * 100:.1f}%"
    if metric in ("lost_steps", "false_detections"):
        return f"{value:g}"
    unit = _UNITS.get(metric, "")
    text = f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
    return f"{text} {unit}".rstrip()


def _fmt_delta(metric: str, value: float, signed: bool = True) -> str:
    if metric == "goodput":
        text = f"{value * 100:+.1f} pt" if signed else f"{value * 100:.1f} pt"
    elif metric in ("lost_steps", "false_detections"):
        text = f"{value:+g}" if signed else f"{value:g}"
    else:
        text = (f"{value:+.2f}" if signed else f"{value:.2f}") + f" {_UNITS.get(metric, '')}"
    return text.rstrip()


# ------------------------------------------------------------------------------------ output


def render_markdown(comparison: Comparison) -> str:
    """A Markdown report fit for a pull-request comment or ``$GITHUB_STEP_SUMMARY``: the
    verdict, the regressions, then every comparison in a collapsed table."""
    regressions = comparison.regressions
    scenarios = list(dict.fromkeys(r.scenario for r in comparison.rows))
    if regressions:
        names = ", ".join(f"{r.scenario} {r.metric}" for r in regressions)
        head = f"### trainchaos resilience gate: FAIL, {len(regressions)} regression(s): {names}"
    else:
        head = "### trainchaos resilience gate: PASS, no regression"
    lines = [head, "",
             f"`{comparison.current_label}` against the baseline `{comparison.baseline_label}`: "
             f"{len(scenarios)} scenario(s), medians across repeats; allowed worsening = "
             "max(abs, rel × baseline).", ""]
    headers = ["scenario", "metric", "baseline", "current", "change", "allowed", "result"]

    def row(r: MetricComparison) -> list[str]:
        result = {"regression": "**REGRESSION**", "improved": "improved", "ok": "ok", "n/a": "—"}[r.result]
        allowed = "—" if r.allowance is None else "+" + _fmt_delta(r.metric, r.allowance, signed=False)
        if r.metric in ("passed", "goodput") and r.allowance is not None:
            allowed = "−" + allowed[1:]  # for these, lower is worse
        return [r.scenario, f"`{r.metric}`", _fmt(r.metric, r.baseline), _fmt(r.metric, r.current), r.note,
                allowed, result]

    if regressions:
        lines += md_table(headers, [row(r) for r in regressions]) + [""]
    lines += [f"<details><summary>All {len(comparison.rows)} comparisons</summary>", ""]
    lines += md_table(headers, [row(r) for r in comparison.rows if r.result != "n/a" or r.note])
    lines += ["", "</details>", ""]
    if comparison.notes:
        lines += [f"- {note}" for note in comparison.notes] + [""]
    return "\n".join(lines)


def update_baseline(suite_dir: str, baseline_dir: str) -> list[str]:
    """Store a suite output as the baseline (``suite.json`` and ``suite.md``); a
    ``tolerances.yaml`` already there is kept. Returns the paths written."""
    load_suite_summary(suite_dir)  # refuse to store something that is not a suite output
    os.makedirs(baseline_dir, exist_ok=True)
    written = []
    for name in BASELINE_FILES:
        source = os.path.join(suite_dir, name)
        if os.path.exists(source):
            target = os.path.join(baseline_dir, name)
            if os.path.abspath(source) != os.path.abspath(target):
                tmp = f"{target}.tmp-{os.getpid()}"
                shutil.copyfile(source, tmp)
                os.replace(tmp, target)
            written.append(target)
    return written


def tolerances_for(baseline_path: str, explicit: str | None) -> str | None:
    """The tolerance file to use: the one given, else ``tolerances.yaml`` stored with the baseline."""
    if explicit:
        return explicit
    stored = os.path.join(baseline_path, TOLERANCES_FILE) if os.path.isdir(baseline_path) else None
    return stored if stored and os.path.exists(stored) else None


def write_comparison(out_dir: str, comparison: Comparison, markdown: str) -> list[str]:
    """``compare.md`` and ``compare.json`` next to the suite's other reports."""
    return [atomic_write_text(os.path.join(out_dir, "compare.md"), markdown),
            atomic_write_text(os.path.join(out_dir, "compare.json"),
                              json.dumps(comparison.to_dict(), indent=2, allow_nan=False, default=str) + "\n")]


# ------------------------------------------------------------------- `run --baseline-from`


@dataclass
class BaselineGate:
    """``trainchaos run --baseline-from DIR [--update-baseline]``: checked before anything
    starts (a baseline that is missing or lists other scenarios is bad input), then applied
    to the suite's output once the runs are over."""

    baseline_dir: str
    update: bool = False
    tolerances_path: str | None = None
    tolerances: dict[str | None, dict[str, Tolerance]] = field(default_factory=dict)

    @classmethod
    def prepare(cls, baseline_dir: str, names: list[str], update: bool = False,
                tolerances_path: str | None = None) -> BaselineGate:
        path = tolerances_for(baseline_dir, tolerances_path)
        gate = cls(baseline_dir, update, path, load_tolerances(path))
        if not update:
            stored = load_suite_summary(baseline_dir)
            check_same_scenarios(scenario_names(stored), list(dict.fromkeys(names)),
                                 baseline_dir, "this run")
        return gate

    def finish(self, out_dir: str, journals: list[dict[str, Any]], suite_name: str,
               echo: Any = print) -> int:
        """Store or compare; returns the exit code the gate asks for (0, 1 or 2)."""
        if self.update:
            for path in update_baseline(out_dir, self.baseline_dir):
                echo(f"baseline updated: {path}")
            return 0
        try:
            comparison = compare_suites(load_suite_summary(self.baseline_dir), load_suite_summary(out_dir),
                                        self.tolerances, self.baseline_dir, out_dir)
        except ComparisonInputError as exc:
            echo(f"trainchaos: cannot compare with the baseline: {exc}")
            return EXIT_BAD_INPUT
        markdown = render_markdown(comparison)
        echo(markdown.rstrip())
        write_comparison(out_dir, comparison, markdown)
        try:
            from chaos.report.html import write_suite_html

            write_suite_html(out_dir, journals, suite_name, comparison=comparison.to_dict())
        except Exception:  # noqa: BLE001 - the page is derived; the gate's verdict stands
            import logging

            logging.getLogger(__name__).exception("index.html not rewritten with the comparison")
        return 0 if comparison.passed else 1
