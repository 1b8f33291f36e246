"""Network-fault metrics: how much a fault slows the job down, and how fast it heals.

Step durations come from the job's own ``step_end`` events: for each rank src and
incarnation, a step's duration is its ``t`` minus the previous ``step_end`` of the same src
and incarnation (the first step of an incarnation has none: it includes start-up). The
reference rank is ``rank-0`` when it steps, else the lowest stepping rank.

baseline_step_s
    Median step duration of the reference rank over the fault-free stretch of the run: the
    steps that ended before ``t_inject`` (the first step of each incarnation excluded). None
    with fewer than ``MIN_STEPS`` such steps.
fault_step_s
    Median step duration of the reference rank over the steps that began and ended while
    the fault was in effect (``t_inject`` to ``t_revert``, or to the end of the run). None
    with fewer than ``MIN_STEPS``.
slowdown
    ``fault_step_s / baseline_step_s``: 1.0 means the fault cost nothing, 3.0 that steps took
    three times as long under it. Measured for faults of the ``network`` family only; None
    when either median is missing.
heal_s
    For a network fault that was removed during the run (``t_revert``, e.g. a partition with
    ``duration_s``): from the removal to the first ``step_end`` after it, before trainchaos
    began stopping the job (``t_stop``), by a rank of an incarnation at the job's starting
    world size (its ``rank_start.world_size``; a rank that reported none counts). The time it
    takes the job to be whole and productive again once the fabric is: a job that shrank
    around a cut-off node heals when that node is back in. None when the fault lasted until
    the end, or the job never stepped at full size after it.

A slow network is not a failure
    A detection that blames a target of a network fault of class ``slow`` (latency,
    bandwidth, a slowed service) is not explained by that fault unless it says ``slow``
    itself: such a fault takes nothing down, so a rank called hung, crashed or cut off under
    it is a false alarm (``explains_detection``; used by ``chaos.metrics`` for
    ``false_detections``), even when every node is a target.

Registered as the ``network`` metric family: it measures the faults whose type's family is
``network`` (the types of ``chaos.faults.network``: partition, link_flap, latency, packet_loss, bandwidth,
toxic).
"""

from __future__ import annotations

import statistics
from typing import Any

from chaos.metrics.family import FaultContext, MetricFamily
from chaos.metrics.records import FaultRecord

__all__ = ["METRICS", "MIN_STEPS", "explains_detection", "network_metrics", "step_durations"]

MIN_STEPS = 3


def explains_detection(record: FaultRecord, detection_class: Any) -> bool:
    """Whether a network fault can explain a detection that blames one of its targets."""
    return record.failure_class != "slow" or detection_class == "slow"


def _rank(src: Any) -> int | None:
    if isinstance(src, str) and src.startswith("rank-") and src[5:].isdigit():
        return int(src[5:])
    return None


def step_durations(step_ends: list[dict[str, Any]], ref: str | None = None) -> list[tuple[float, float]]:
    """(start, end) of each step of ``ref`` (default: the reference rank), in time order
    (see module docstring)."""
    if ref is None:
        srcs = {e["src"] for e in step_ends if _rank(e.get("src")) is not None}
        if not srcs:
            return []
        ref = "rank-0" if "rank-0" in srcs else min(srcs, key=lambda s: _rank(s) or 0)
    last: dict[int, float] = {}
    spans = []
    for e in sorted((e for e in step_ends if e["src"] == ref), key=lambda e: e["t"]):
        inc = int(e.get("incarnation") or 0)
        if inc in last:
            spans.append((last[inc], float(e["t"])))
        last[inc] = float(e["t"])
    return spans


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if len(values) >= MIN_STEPS else None


def network_metrics(fm: Any, rank_events: list[dict[str, Any]], world_size: int, t_end: float,
                    t_stop: float | None) -> None:
    """Fill the network fields of ``fm`` (a fired ``FaultMetrics``) from the ranks' events."""
    step_ends = [e for e in rank_events if e.get("kind") == "step_end" and e.get("step") is not None]
    sizes = {(e["src"], int(e.get("incarnation") or 0)): e.get("world_size")
             for e in rank_events if e.get("kind") == "rank_start"}
    t_inject = fm.t_inject
    until = fm.t_revert if fm.t_revert is not None else t_end
    spans = step_durations(step_ends)
    fm.baseline_step_s = _median([b - a for a, b in spans if b < t_inject])
    fm.fault_step_s = _median([b - a for a, b in spans if a >= t_inject and b <= until])
    if fm.baseline_step_s and fm.fault_step_s is not None:
        fm.slowdown = fm.fault_step_s / fm.baseline_step_s
    if fm.t_revert is not None:
        after = [float(e["t"]) for e in step_ends
                 if e["t"] >= fm.t_revert and (t_stop is None or e["t"] < t_stop)
                 and sizes.get((e["src"], int(e.get("incarnation") or 0))) in (None, world_size)]
        fm.heal_s = min(after) - fm.t_revert if after else None


def _fault_metrics(ctx: FaultContext) -> None:
    network_metrics(ctx.metrics, ctx.timeline.rank_events, ctx.run.world_size, ctx.run.t_end, ctx.run.t_stop)


# Its fields (baseline_step_s, fault_step_s, slowdown, heal_s) are FaultMetrics fields, kept
# there so that journals keep their key order; they are not targets.
METRICS = MetricFamily("network", fault_metrics=_fault_metrics, explains_detection=explains_detection)
