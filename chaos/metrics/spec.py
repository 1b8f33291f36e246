"""``MetricSpec``: everything the tool says about one metric besides how it is measured
(label, unit, direction, regression tolerance, wording when missing, formatting, target form).
The catalogue of every spec is ``chaos.metrics.catalogue``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Direction", "MetricSpec", "Tolerance", "fmt_count", "fmt_ratio", "fmt_short_seconds"]

Direction = Literal["lower", "higher"]
Kind = Literal["seconds", "count", "fraction", "value"]
Scope = Literal["run", "fault"]
TargetForm = Literal["bound", "fraction_bound"]


@dataclass(frozen=True)
class Tolerance:
    """How much worse a metric's median may get before the regression gate fails."""

    rel: float
    """Allowed worsening as a fraction of the baseline median (0.5 = 50 %)."""
    abs: float
    """Allowed worsening in the metric's unit (seconds, steps, a goodput fraction)."""
    gate: bool = True
    """False: compared and shown, never a regression."""

    def allowance(self, baseline: float) -> float:
        return max(self.abs, self.rel * abs(baseline))


def fmt_short_seconds(x: float) -> str:
    """Seconds with 1-2 decimals, as a verdict's reason writes them: 0.8, 0.35, 14.2."""
    if abs(x) >= 10:
        return f"{x:.1f}"
    s = f"{x:.2f}"
    return s[:-1] if s.endswith("0") else s


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}" if x >= 0.01 else f"{x:.2g}"


def fmt_count(x: Any) -> str:
    return str(x)


@dataclass(frozen=True)
class MetricSpec:
    """One metric: what it is called, how it is shown, judged and gated."""

    key: str
    """The metric's key in the journal's metrics (run scope) or in each fault's (fault scope),
    and the target's key when it can be a target."""
    label: str
    """Short lower-case name for sentences and tables: ``recovery``, ``lost steps``."""
    kind: Kind = "value"
    """How the value is formatted: seconds, a count, a fraction (shown in %), or as is."""
    unit: str = ""
    """Unit written after the value in a verdict's reason (``s``, ``steps``; empty: none)."""
    scope: Scope = "run"
    """``fault``: measured, and targeted, per fired fault; ``run``: once per run."""
    direction: Direction = "lower"
    """Which way is better (the regression gate's sense of "worse")."""
    tolerance: Tolerance | None = None
    """Default tolerance of the regression gate; None: the gate does not compare it. A gated
    metric is also aggregated across repeats and shown in the suite tables, JUnit and the
    pytest plugin's properties."""
    missing: str = ""
    """Why the value is None, in words (``undetected``); empty: a missing value is no worse
    (the gate then says n/a) and the tables show a dash."""
    title: str = ""
    """Row title in the run's metrics table (``Recovery time``); empty: not a row."""
    meaning: str = ""
    """What the row means, one line, for the run's metrics table."""
    target: TargetForm | None = None
    """Whether the metric can be a target, and its form: a ``{max, min}`` bound, or a bound on
    a 0..1 fraction. None: not a target."""
    target_doc: str = ""
    """The target's description in the scenario schema (``trainchaos schema``)."""
    applies: Callable[[Any], bool] | None = None
    """Fault scope: which faults the target is checked for (given the ``FaultMetrics``); None:
    every fired fault."""
    missing_reason: Callable[[Any], str] | None = None
    """Fault scope: the verdict's sentence when the value is missing (given the
    ``FaultMetrics``); None: ``<label> unknown``."""
    detail: Callable[[Any, Any], str] | None = None
    """A suffix the verdict adds to the check's reason (given the metrics and the value's
    owner: the ``FaultMetrics`` or the ``RunMetrics``)."""
    correctness: bool = False
    """A correctness target (run scope): also judged on the fault-free twin's own figures, so
    that a job wrong before any fault is the first finding (``chaos.runner.verdict.judge_twin``)."""
    figure_scale: float | None = None
    """Shown as a panel in the suite's figure of metrics across repeats, values times this
    (goodput: 100, as %); None: no panel."""

    @property
    def gated(self) -> bool:
        return self.tolerance is not None

    def fmt_verdict(self, value: Any) -> str:
        """The value as a verdict's reason writes it, unit included: ``14.2 s``, ``3``."""
        text = {"seconds": fmt_short_seconds, "fraction": fmt_ratio}.get(self.kind, fmt_count)(value)
        return f"{text} {self.unit}" if self.unit else text

    def unit_suffix(self) -> str:
        return f" {self.unit}" if self.unit else ""

    def fmt_compared(self, value: float | None) -> str:
        """A median as the regression gate's tables show it: ``6.10 s``, ``92.5%``, ``3``."""
        if value is None:
            return "—"
        if self.kind == "fraction":
            return f"{value * 100:.1f}%"
        if self.kind == "count":
            return f"{value:g}"
        text = f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
        return f"{text} {self.unit}".rstrip()

    def fmt_change(self, value: float, signed: bool = True) -> str:
        """A difference of medians in the metric's unit: ``+8.80 s``, ``-2.5 pt``, ``+1``."""
        if self.kind == "fraction":
            text = f"{value * 100:+.1f} pt" if signed else f"{value * 100:.1f} pt"
        elif self.kind == "count":
            text = f"{value:+g}" if signed else f"{value:g}"
        else:
            text = (f"{value:+.2f}" if signed else f"{value:.2f}") + f" {self.unit}"
        return text.rstrip()
