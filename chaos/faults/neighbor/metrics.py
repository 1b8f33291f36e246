"""Noisy-neighbour metrics: how much a co-tenant slows its victim, against the victim's own
steps before it came.

The victim is the lowest rank that ran on a target node (``rank_start.node``). Its step
durations: per incarnation, a ``step_end``'s ``t`` minus the previous one's (the first step
of an incarnation has none: it includes start-up).

victim_step_s_before
    Median step duration of the victim over the steps that ended before ``t_inject``. None
    with fewer than ``MIN_STEPS`` of them.
victim_step_s_during
    Median step duration of the victim over the steps that began and ended while the
    neighbour ran (``t_inject`` to ``t_revert``, or to the end of the run). None with fewer
    than ``MIN_STEPS``.
victim_slowdown
    ``victim_step_s_during / victim_step_s_before``: 1.0 means the isolation held (or the
    neighbour took nothing the victim needed), 2.0 that its steps took twice as long. A
    target (``{min: 1.3}``: the neighbour really competed; ``{max: 1.1}``: the isolation
    must hold).

A slow node is not a failure: a neighbour's fault explains only ``slow`` detections that
blame its targets; a victim called hung, crashed or cut off under it is a false alarm
(``false_detections``), as for a slow network (chaos/faults/network/metrics.py).

The ``neighbor`` family's metrics (its ``FamilySpec``): they measure the faults whose type's
family is ``neighbor`` (noisy_neighbor).
"""

from __future__ import annotations

import statistics
from typing import Any

from chaos.faults.network.metrics import MIN_STEPS, explains_detection, step_durations
from chaos.metrics.family import FaultContext, MetricFamily
from chaos.metrics.spec import MetricSpec
from chaos.metrics.timeline import rank_of

__all__ = ["METRICS", "victim_src"]


def victim_src(target_srcs: list[str], events: list[dict[str, Any]]) -> str | None:
    """The lowest rank that ran on a target node (or the lowest target rank)."""
    nodes = {src.removeprefix("node-") for src in target_srcs if src.startswith("node-")}
    ranks = {str(e["src"]) for e in events if e.get("kind") == "rank_start"
             and str(e.get("node")) in nodes and e.get("src")}
    ranks |= {src for src in target_srcs if src.startswith("rank-")}
    known = [src for src in ranks if rank_of(src) is not None]
    return min(known, key=lambda src: rank_of(src) or 0) if known else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if len(values) >= MIN_STEPS else None


def _fault_metrics(ctx: FaultContext) -> dict[str, Any]:
    fm = ctx.metrics
    src = victim_src(list(ctx.record.target_srcs), ctx.timeline.events)
    spans = step_durations(ctx.timeline.step_ends, src) if src else []
    until = fm.t_revert if fm.t_revert is not None else ctx.run.t_end
    before = _median([b - a for a, b in spans if b < ctx.t_inject])
    during = _median([b - a for a, b in spans if a >= ctx.t_inject and b <= until])
    return {"victim_step_s_before": before, "victim_step_s_during": during,
            "victim_slowdown": round(during / before, 3) if before and during is not None else None}


def _missing(fm: Any) -> str:
    return (f"fault {fm.fault_id}: victim slowdown unknown (fewer than {MIN_STEPS} steps of the victim "
            "before the neighbour or while it ran)")


SPECS = (
    MetricSpec("victim_slowdown", "victim slowdown", "value", "x", "fault", missing="unknown",
               title="Victim slowdown", applies=lambda fm: "victim_slowdown" in fm.family_values,
               meaning="median step time of the victim under the neighbour / before it", target="bound",
               target_doc="The victim's median step time while the neighbour ran over its median before it\n"
                          "(noisy_neighbor). {min: 1.3}: the neighbour really competed; {max: 1.1}: the\n"
                          "isolation held.",
               missing_reason=_missing),
    MetricSpec("victim_step_s_before", "victim step time before", "seconds", "s", "fault"),
    MetricSpec("victim_step_s_during", "victim step time under the neighbour", "seconds", "s", "fault"),
)

METRICS = MetricFamily("neighbor", specs=SPECS, fault_metrics=_fault_metrics, explains_detection=explains_detection)
