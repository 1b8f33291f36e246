"""Process-family metrics: how soon a throttled rank is named slow, in steps of its ramp.

throttle_detection_steps
    For a ``thermal_throttle`` whose factor reaches ``THROTTLE_FACTOR`` (1.5): the steps the
    throttled rank completed between the moment its factor passed 1.5 and the first ``slow``
    detection that names it; negative when it was named before (the count of its steps from
    the detection to that moment, with a minus sign). The moment is the ramp's own
    (``chaos.probe.RampProfile`` from the probe's ``fault_injected`` on the rank, on the
    rank's clock, and the fault's parameters), so it does not depend on how fast the host
    runs the steps. None when the rank was never named, or when the factor never reached
    1.5. A target (``{max: 10}``: named within 10 steps of the factor passing 1.5).

The ``process`` family's metrics (its ``FamilySpec``): they measure the faults whose type's
family is ``process``; only a ramping slowdown has this one.
"""

from __future__ import annotations

from typing import Any

from chaos.metrics.family import FaultContext, MetricFamily
from chaos.metrics.spec import MetricSpec
from chaos.probe import RampProfile

__all__ = ["METRICS", "THROTTLE_FACTOR"]

THROTTLE_FACTOR = 1.5
"""The factor from which a throttled rank counts as slow (the issue's "within N steps of the
factor passing 1.5")."""


def _ramp(params: dict[str, Any], t0: float) -> RampProfile | None:
    if params.get("ramp_s") is None or params.get("factor") is None:
        return None
    return RampProfile(t0, float(params["factor"]), float(params["ramp_s"]), params.get("hold_s"),
                       float(params.get("recover_s") or 0.0))


def _fault_metrics(ctx: FaultContext) -> dict[str, Any] | None:
    targets = set(ctx.record.target_srcs)
    started = next((e for e in ctx.timeline.events if e.get("kind") == "fault_injected"
                    and e.get("fault") == ctx.record.fault_id and e.get("src") in targets), None)
    ramp = _ramp(ctx.record.params, float(started["t"])) if started is not None else None
    if started is None or ramp is None:
        return None  # not a ramping slowdown (or it never started on its rank)
    passes = ramp.passes(THROTTLE_FACTOR)
    named = next((e for e in ctx.timeline.detections if e["t"] >= ramp.t0 and e.get("failure_class") == "slow"
                  and e.get("suspect") in targets), None)
    if passes is None or named is None:
        return {"throttle_detection_steps": None}
    t_pass, t_named = ramp.t0 + passes, float(named["t"])
    lo, hi = sorted((t_pass, t_named))
    between = sum(1 for e in ctx.timeline.step_ends if e["src"] == started["src"] and lo < e["t"] <= hi)
    return {"throttle_detection_steps": between if t_named >= t_pass else -between}


def _ramps(fm: Any) -> bool:
    return "throttle_detection_steps" in fm.family_values


def _never_named(fm: Any) -> str:
    return (f"fault {fm.fault_id}: the throttled rank was never named slow after its factor passed "
            f"{THROTTLE_FACTOR} (or the factor never reached it)")


METRICS = MetricFamily("process", specs=(
    MetricSpec("throttle_detection_steps", f"named slow after factor {THROTTLE_FACTOR}", "count", "steps", "fault",
               title=f"Named slow after factor {THROTTLE_FACTOR}", applies=_ramps, missing="never named",
               meaning=f"steps of the throttled rank from its factor passing {THROTTLE_FACTOR} to the first slow "
                       "detection naming it (negative: named before)",
               target="bound", missing_reason=_never_named,
               target_doc=f"thermal_throttle: steps the throttled rank completed from its factor passing "
                          f"{THROTTLE_FACTOR}\nto the first `slow` detection that names it (negative: named "
                          "before); never named fails it.\n{max: 10}: named within 10 steps."),
), fault_metrics=_fault_metrics)
