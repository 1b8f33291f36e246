"""Power-fault metrics: the blast radius of an outage and how the job got back to full size.

Read from the injector's ``fault_injected`` record of a power fault (``details``: the nodes
and ranks it took, the spread of the kills) and from the job's own events after it:

blast_nodes / blast_ranks
    Nodes powered off, ranks that lived on them at that instant.
kill_spread_ms
    From the first kill of the sweep to the last (a real outage: one instant).
full_size_s
    From the outage to the first step trained again at the job's starting world size (a
    spare that joined, or the domain's nodes back after power returned); None when the job
    never got back to full size.
resumed_tier / resumed_copy
    Which checkpoint tier the first recovering incarnation loaded from (the harness's
    ``ckpt_load.tier``), and whose copy (``ckpt_load.copy``: the node's own or a replica).

Registered as the ``power`` metric family (the faults of ``chaos.faults.power``).
"""

from __future__ import annotations

from typing import Any

from chaos.metrics.family import FaultContext, MetricFamily

__all__ = ["METRICS", "power_metrics"]


def power_metrics(fm: Any, rank_events: list[dict[str, Any]], details: dict[str, Any],
                  t0: float, world_size: int) -> None:
    """Fill the power fields of ``fm`` (a ``FaultMetrics``) from the injector's record of the
    outage (``details``), its time ``t0`` (as for recovery_s) and the timeline's rank events."""
    fm.blast_nodes = len(details.get("nodes") or [])
    fm.blast_ranks = len(details.get("ranks") or [])
    fm.kill_spread_ms = details.get("kill_spread_ms")
    # A rank that starts at full size after the outage, then its first step: full size again.
    full_srcs = {(e["src"], e.get("incarnation")) for e in rank_events
                 if e["t"] >= t0 and e.get("kind") == "rank_start" and e.get("world_size") == world_size}
    fm.full_size_s = next((e["t"] - t0 for e in rank_events
                           if e["t"] >= t0 and e.get("kind") == "step_end"
                           and (e["src"], e.get("incarnation")) in full_srcs), None)
    load = next((e for e in rank_events if e["t"] >= t0 and e.get("kind") == "ckpt_load"), None)
    if load is not None:
        fm.resumed_tier = load.get("tier")
        fm.resumed_copy = load.get("copy")


def _fault_metrics(ctx: FaultContext) -> None:
    details = (ctx.injected or {}).get("details")
    if isinstance(details, dict):  # the injector's record of the outage
        power_metrics(ctx.metrics, ctx.timeline.rank_events, details, ctx.t_inject, ctx.run.world_size)


# Its fields (blast_nodes ... resumed_copy) are FaultMetrics fields, kept there so that
# journals keep their key order; they are not targets.
METRICS = MetricFamily("power", fault_metrics=_fault_metrics)
