"""The metric catalogue: one ``MetricSpec`` per metric, the single place where a metric's
label, unit, direction, regression tolerance, wording when missing, formatting and target
form are written.

The verdict (``chaos.runner.verdict``), the regression gate (``chaos.gate``), the reports (summary,
HTML, JUnit, suite tables, figures), the pytest plugin and the ``targets`` schema iterate
``specs()``. The engine's own metrics are ``CORE`` below; a metric family
(``chaos.metrics.family``) adds its specs when it registers, so a new metric with a target is
one entry in its family's list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaos.metrics.registry import families
from chaos.metrics.spec import MetricSpec, Tolerance

__all__ = ["CORE", "fmt_compared", "gated", "missing_label", "spec", "specs", "target_specs"]


def _fault_missing(words: str) -> Callable[[Any], str]:
    return lambda fm: f"fault {fm.fault_id} {words}"


def _never_recovered(fm: Any) -> str:
    how = "restarted but never completed a step" if fm.restarted else "no productive step after the fault"
    return f"fault {fm.fault_id} never recovered: {how}"


def _lost_steps_detail(fm: Any, _value: Any) -> str:
    return (f" (last step {fm.last_step_before}, resumed from {fm.resumed_from})"
            if fm.restarted else " (no restart)")


def _false_detections_detail(m: Any, _value: Any) -> str:
    if not m.false_detection_events:
        return ""
    first = m.false_detection_events[0]
    return (f" (first: {first.get('by')} blamed {first.get('suspect')} as "
            f"{first.get('failure_class')}: {first.get('reason')})")


# The engine's metrics, in the order the gate, the suite tables and JUnit list them. Recovery on
# a shared 2-core machine varies by about +-2 s between identical runs (process start under
# load); lost steps move by one when a signal lands a step late; detection by tens of ms.
CORE: tuple[MetricSpec, ...] = (
    MetricSpec("detection_s", "detection", "seconds", "s", "fault", tolerance=Tolerance(rel=1.0, abs=1.0),
               missing="undetected", title="Detection time",
               meaning="first `detected` event after injection − injection", target="bound",
               target_doc="Fault injected -> first `detected` event, seconds.",
               missing_reason=_fault_missing("undetected"), figure_scale=1.0),
    MetricSpec("recovery_s", "recovery", "seconds", "s", "fault", tolerance=Tolerance(rel=0.5, abs=3.0),
               missing="not recovered", title="Recovery time",
               meaning="first productive step of the new incarnation − injection", target="bound",
               target_doc="Fault injected -> first productive step after it, seconds.",
               missing_reason=_never_recovered, figure_scale=1.0),
    MetricSpec("catchup_s", "catch-up", "seconds", "s", "fault", tolerance=Tolerance(rel=0.5, abs=3.0),
               missing="not caught up", title="Catch-up time",
               meaning="until the pre-fault step is reached again", target="bound",
               target_doc="Fault injected -> the step reached before the fault is reached again, seconds.",
               missing_reason=lambda fm: f"fault {fm.fault_id} never caught up to step {fm.last_step_before}",
               figure_scale=1.0),
    MetricSpec("lost_steps", "lost steps", "count", "", "fault", tolerance=Tolerance(rel=0.25, abs=2),
               missing="unknown", title="Lost steps", meaning="last step before the fault − step resumed from",
               target="bound", target_doc="Last step completed before the fault - step training resumed from.",
               missing_reason=lambda fm: f"fault {fm.fault_id}: lost steps unknown, training never resumed",
               detail=_lost_steps_detail, figure_scale=1.0),
    MetricSpec("goodput", "goodput", "fraction", direction="higher", tolerance=Tolerance(rel=0.25, abs=0.10),
               missing="unknown", title="Goodput", meaning="productive step time / wall time",
               target="fraction_bound", target_doc="Productive step time / wall time of the run, 0..1.",
               missing_reason=lambda m: "goodput unknown: no step completed", figure_scale=100.0),
    MetricSpec("false_detections", "false detections", "count", tolerance=Tolerance(rel=0.0, abs=0),
               title="False detections", meaning="detections that blamed a process no fault hit",
               target="bound",
               target_doc="`detected` events that name as the failing process one that no fault hit (false\n"
                          "alarms); processes stopped as a consequence of a fault (torn down by their agent for a\n"
                          "restart, or by trainchaos's teardown) do not count. {max: 0}: no false alarms.",
               detail=_false_detections_detail),
    MetricSpec("wall_s", "wall time", "seconds", "s", tolerance=Tolerance(rel=0.5, abs=30.0, gate=False),
               missing="unknown", title="Wall time", meaning="whole run"),
    MetricSpec("lost_work_rank_s", "lost work", "value", "rank·s", title="Lost work",
               meaning="rank-seconds not spent on productive steps"),
    MetricSpec("twin_step_s", "twin step", "seconds", "s", title="Fault-free step time",
               meaning="mean duration of the steps the run kept, less those a fault struck: a fault-free "
                       "twin's step"),
    MetricSpec("ettr", "ETTR", "fraction", direction="higher", title="Effective training time ratio",
               meaning="steps kept from the first step to the end x the twin's step time / that time"),
    MetricSpec("completed", "completed", title="Completed", meaning="reached the last step within the timeout"),
    MetricSpec("final_step", "final step", "count", title="Final step"),
    MetricSpec("restart_count", "restarts", "count", title="Restarts", meaning="group restarts of the job",
               target="bound", target_doc="Group restarts of the job over the run. {max: 0}: a fault that only slows\nthe job (a noisy neighbour, a slow link) must not make it restart."),
    MetricSpec("digest_match", "final state matches baseline", title="Final state matches baseline",
               meaning="bitwise digest of the final weights"),
    MetricSpec("max_rel_loss_dev", "max relative loss deviation", title="Max relative loss deviation",
               meaning="vs the baseline over the last steps"),
    MetricSpec("final_digest", "final digest", title="Final digest"),
)


def specs() -> tuple[MetricSpec, ...]:
    """Every metric: the engine's, then each registered family's, in registration order."""
    return CORE + tuple(s for family in families() for s in family.specs)


def spec(key: str) -> MetricSpec | None:
    return next((s for s in specs() if s.key == key), None)


def gated() -> tuple[MetricSpec, ...]:
    """The metrics the regression gate compares (and the suite tables aggregate), in order."""
    return tuple(s for s in specs() if s.gated)


def target_specs() -> tuple[MetricSpec, ...]:
    """The metrics that can be a scenario's target, in schema order."""
    return tuple(s for s in specs() if s.target is not None)


def missing_label(key: str, default: str = "missing") -> str:
    """What a None value of metric ``key`` means in words (``undetected``), else ``default``."""
    found = spec(key)
    return found.missing if found is not None and found.missing else default


def fmt_compared(key: str, value: float | None) -> str:
    """A median or an allowance of metric ``key`` as the gate's tables show it (``passed``, the
    pass rate, in %; a metric the catalogue does not know: a plain number)."""
    if key == "passed":
        return "—" if value is None else f"{value:.0%}"
    return (spec(key) or MetricSpec(key, key)).fmt_compared(value)
