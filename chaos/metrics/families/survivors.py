"""What a fault costs the ranks it did not hit: how long the survivors stopped training.

Recovery designs differ most here. With a torchrun restart every rank is torn down and
restarted, so the survivors stall as long as the job takes to recover; with torchft the
survivors drop the failed replica group and go on after their process-group timeout; with an
in-process restart they re-enter the training function. The same fault, measured the same
way on each stack, is what ``trainchaos bench-stacks`` puts side by side.

survivor_stall_s
    The survivors are the ranks that completed a step before the fault and are not among its
    targets (``target_srcs``). For each, the longest gap between two of its consecutive
    ``step_end`` events (any incarnation: a survivor torn down and restarted is still that
    rank) that ends after the injection and begins before the fault's recovery (its
    ``recovery_s``; the end of the run when it never recovered), minus the rank's median
    step time before the fault: the time it trained nothing beyond a normal step. The
    largest over the survivors. None when the fault left no survivor, or a survivor never
    completed a step after it.

survivor_restarts
    Survivors whose first step after the fault came from a later incarnation than their last
    step before it: ranks the fault did not hit that were restarted anyway. A torchrun
    restart restarts them all; torchft claims 0 (the other replica groups never restart).

Registered as the ``survivors`` metric family; it measures every fired fault.
"""

from __future__ import annotations

import statistics
from typing import Any

from chaos.metrics.family import FaultContext, MetricFamily
from chaos.metrics.spec import MetricSpec
from chaos.metrics.timeline import incarnation

__all__ = ["FAMILY", "hit_srcs", "survivor_restarts", "survivor_stall"]


def survivor_stall(step_ends: list[dict[str, Any]], targets: set[str], t_inject: float,
                   t_recovered: float | None) -> tuple[float | None, str | None]:
    """(the survivors' stall in seconds, why it is None). ``step_ends``: the timeline's
    ``step_end`` events in time order; ``t_recovered``: when the job recovered from the fault
    (None: never, within the run)."""
    times: dict[str, list[float]] = {}
    for e in step_ends:
        times.setdefault(str(e["src"]), []).append(float(e["t"]))
    survivors = {src: ts for src, ts in times.items() if src not in targets and ts[0] <= t_inject}
    if not survivors:
        return None, "no survivor: every rank that trained before the fault was hit by it"
    stalls = []
    for src, ts in sorted(survivors.items()):
        before = [b - a for a, b in zip(ts, ts[1:], strict=False) if b <= t_inject]
        nominal = statistics.median(before) if before else 0.0
        gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)
                if b > t_inject and (t_recovered is None or a <= t_recovered)]
        last = ts[-1]
        if last <= t_inject:
            return None, f"survivor {src} never completed a step after the fault"
        stalls.append(max(max(gaps, default=0.0) - nominal, 0.0))
    return max(stalls), None


def survivor_restarts(step_ends: list[dict[str, Any]], targets: set[str], t_inject: float) -> int | None:
    """How many survivors (as for ``survivor_stall``) restarted across the fault; None: no survivor."""
    before: dict[str, dict[str, Any]] = {}
    after: dict[str, dict[str, Any]] = {}
    for e in step_ends:
        src = str(e["src"])
        if src in targets:
            continue
        if e["t"] <= t_inject:
            before[src] = e
        elif src in before:
            after.setdefault(src, e)
    if not before:
        return None
    return sum(1 for src, e in after.items() if incarnation(e) > incarnation(before[src]))


def hit_srcs(target_srcs: list[str], events: list[dict[str, Any]]) -> set[str]:
    """The fault's targets, plus every rank that ran on a targeted node (``rank_start``'s
    ``node``): a fault resolved while its rank was down (a repeat deferred until its target
    restarted) names the node alone, and its rank is still no survivor."""
    targets = set(target_srcs)
    nodes = {src.removeprefix("node-") for src in targets if src.startswith("node-")}
    targets |= {str(e["src"]) for e in events
                if e.get("kind") == "rank_start" and str(e.get("node")) in nodes and e.get("src")}
    return targets


def _fault_metrics(ctx: FaultContext) -> dict[str, Any]:
    fm = ctx.metrics
    t_recovered = ctx.t_inject + fm.recovery_s if fm.recovery_s is not None else None
    targets = hit_srcs(ctx.record.target_srcs, ctx.timeline.events)
    stall, _ = survivor_stall(ctx.timeline.step_ends, targets, ctx.t_inject, t_recovered)
    return {"survivor_stall_s": stall,
            "survivor_restarts": survivor_restarts(ctx.timeline.step_ends, targets, ctx.t_inject)}


def _missing(fm: Any) -> str:
    return (f"fault {fm.fault_id}: survivor stall unknown (no rank outside its targets trained "
            "before it, or one never trained again)")


# Not gated (no tolerance): the suite tables and JUnit list the gated metrics, and this one is
# read by the stack comparison and by the scenarios that set it as a target.
SPECS = (
    MetricSpec("survivor_stall_s", "survivor stall", "seconds", "s", "fault", missing="unknown",
               title="Survivor stall", meaning="longest pause of the ranks the fault did not hit, beyond a step",
               target="bound",
               target_doc="The longest time a rank the fault did not hit trained nothing beyond a normal step, "
                          "seconds (a restart of every rank: about the recovery; a stack that drops the failed "
                          "group: its timeout).",
               missing_reason=_missing),
    MetricSpec("survivor_restarts", "survivors restarted", "count", scope="fault", target="bound",
               missing="unknown",
               target_doc="Ranks the fault did not hit that were restarted anyway. {max: 0}: the others never\n"
                          "restart (torchft's claim)."),
)

FAMILY = MetricFamily("survivors", specs=SPECS, fault_metrics=_fault_metrics, applies=lambda record: True)
