"""Where a fault landed against where its trigger put it: the step, the lag, the hold.

Each fired fault's outcome in the run record carries (``chaos.runfiles.record.FaultOutcome``):

- ``step_at_inject``: the last step its target completed before the fault took effect, and
  for a step trigger the ``precision`` of that (``exact``: the planned step; ``next_step``,
  ``late``, ``early``). An in-process fault fires in the step itself: its probe's step.
- ``lag_ms``: from the moment the trigger named to the fault in effect. For a step trigger
  that moment is the target's ``step_end`` of the planned step (from the probe, or from a
  workload's log lines when its ranks have no probe: then there is no hold, and the lag is
  what the controller took to see the line and act); for a time trigger, the planned time.
- ``hold``: how the targeted ranks' hold at the step ended (``chaos.probe.hold``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos.runfiles.events import Event

__all__ = ["Landing", "landing", "precision_of"]


@dataclass(frozen=True)
class Landing:
    step: int | None = None
    precision: str | None = None
    lag_ms: float | None = None
    hold: str | None = None


def precision_of(planned_step: int | None, step: int | None) -> str | None:
    if planned_step is None or step is None:
        return None
    if step == planned_step:
        return "exact"
    return "next_step" if step == planned_step + 1 else "late" if step > planned_step else "early"


# Which phase a fault's hold is reported as when its ranks differ: a timeout on any rank
# means the fault may have landed late there.
_HOLD_RANK = {"start": 0, "released": 1, "timeout": 2}
_HOLD_NAME = {"start": "held", "released": "released", "timeout": "timeout"}


def landing(planned: Any, events: list[Event], t_inject: float | None,
            t_planned: float | None = None) -> Landing:
    """``planned`` is a ``chaos.runner.plan.PlannedFault`` (its target as resolved at injection);
    ``t_planned`` the time a time trigger named (None for a step trigger: read from events)."""
    n = planned.spec.trigger.at_step
    if t_inject is None:
        return Landing()
    fault_id = planned.fault_id
    if planned.fault.in_process:
        ev = next((e for e in events if e.get("kind") == "fault_injected" and e.get("fault") == fault_id
                   and e.get("src") != "injector"), None)
        step = ev.get("step") if ev else None
        return Landing(step, precision_of(n, step))
    srcs = set(planned.fault.target.srcs())
    if not any(s.startswith("rank-") for s in srcs):
        # A job-wide target (a store, the scheduler): every rank's steps count, and every
        # rank held.
        srcs = {str(e.get("src")) for e in events if str(e.get("src", "")).startswith("rank-")}
    own = [e for e in events if e.get("src") in srcs]
    steps = [e["step"] for e in own if e.get("kind") == "step_end" and e["t"] <= t_inject]
    step = max(steps) if steps else None
    if t_planned is None and n is not None:
        reached = [e["t"] for e in own if e.get("kind") == "step_end" and e.get("step") == n]
        t_planned = min(reached) if reached else None
    lag_ms = round((t_inject - t_planned) * 1000, 3) if t_planned is not None else None
    phases = [e.get("phase") for e in own if e.get("kind") == "fault_hold" and e.get("fault") == fault_id]
    hold = max((p for p in phases if p in _HOLD_RANK), key=_HOLD_RANK.__getitem__, default=None)
    return Landing(step, precision_of(n, step), lag_ms, _HOLD_NAME.get(hold) if hold else None)
