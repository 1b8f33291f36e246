"""Silent-corruption metrics (faults of failure class ``corruption``: bitflip,
checkpoint_bitrot, io_corrupt), definitions in docs/metrics.md, "Silent
corruption": how many steps until a corruption detector noticed (``sdc_detection_steps``) and
how many checkpoints of corrupted state were written meanwhile (``contaminated_checkpoints``);
per fault, and the worst over the run's corruption faults. With ``detect.on_suspect:
quarantine`` the job takes a suspect's node out (``node_quarantined``): per fault, whether
the node it quarantined after the fault's detection is the one the corrupted rank ran on
(``quarantine``: correct or wrong); per run, how many nodes were quarantined and how many of
them held no corrupted rank (``quarantined_nodes``, ``wrong_quarantines``).

How a corruption is detected and where its recovery is measured from stays in the engine
(``chaos.metrics.per_fault``): it is the failure class ``corruption``, which any family's
fault can have.
"""

from __future__ import annotations

from typing import Any

from chaos.metrics.family import FaultContext, MetricFamily, RunContext
from chaos.metrics.spec import MetricSpec
from chaos.metrics.timeline import int_or_none

__all__ = ["METRICS"]


def _corruption(fault: Any) -> bool:
    return fault.failure_class == "corruption"


def _node_of(timeline: Any, src: str, t: float) -> int | None:
    """The node ``src`` ran on at ``t``: its latest ``rank_start`` up to then."""
    starts = [e for e in timeline.rank_events if e.get("kind") == "rank_start" and e["src"] == src
              and e["t"] <= t and int_or_none(e.get("node")) is not None]
    return int(starts[-1]["node"]) if starts else None


def _quarantines(timeline: Any) -> list[dict[str, Any]]:
    return [e for e in timeline.rank_events if e.get("kind") == "node_quarantined"
            and int_or_none(e.get("node")) is not None]


def _corrupted_nodes(timeline: Any, fm: Any) -> set[int]:
    """The nodes the fault's target ranks ran on when it was injected."""
    nodes = {_node_of(timeline, src, fm.t_inject) for src in fm.target_srcs}
    return {n for n in nodes if n is not None}


def _quarantine(ctx: FaultContext) -> dict[str, Any]:
    """The node the job quarantined on this fault's detection, and whether it was the one."""
    if ctx.detection is None:
        return {}
    node = next((int(e["node"]) for e in _quarantines(ctx.timeline) if e["t"] >= ctx.detection["t"]), None)
    if node is None:
        return {}
    right = node in _corrupted_nodes(ctx.timeline, ctx.metrics)
    return {"quarantined_node": node, "quarantine": "correct" if right else "wrong"}


def _fault_metrics(ctx: FaultContext) -> dict[str, Any]:
    """sdc_detection_steps and contaminated_checkpoints of one corruption fault, and its
    quarantine."""
    fm, tl, run, detection, injected = ctx.metrics, ctx.timeline, ctx.run, ctx.detection, ctx.injected
    t_inject = ctx.t_inject
    last_before = tl.last_step(t_inject)
    corrupted_at = fm.injected_step if fm.injected_step is not None else (last_before or 0) + 1
    t_detect = detection["t"] if detection is not None else run.t_end
    if detection is not None:
        at_detect = int_or_none(detection.get("step"))
        if at_detect is None:
            at_detect = tl.last_step(t_detect, inclusive=True)
        if at_detect is not None:
            fm.sdc_detection_steps = max(at_detect - corrupted_at, 0)
    if injected is not None and injected.get("mechanism") == "probe":
        # (a file rotting at rest: checkpoints written meanwhile are clean)
        fm.contaminated_checkpoints = len({
            int(e["step"]) for e in tl.rank_events
            if e.get("kind") in ("ckpt_save_start", "ckpt_save_end") and t_inject <= e["t"] <= t_detect
            and int_or_none(e.get("step")) is not None and int(e["step"]) >= corrupted_at
        })
    return _quarantine(ctx)


def _run_metrics(ctx: RunContext) -> dict[str, Any]:
    """The worst over the fired corruption faults; nothing when there was none."""
    sdc = [fm for fm in ctx.metrics.faults if fm.fired and _corruption(fm)]
    quarantined = {int(e["node"]) for e in _quarantines(ctx.timeline)}
    out: dict[str, Any] = {}
    if quarantined:
        # a node quarantined that held no corrupted rank: a healthy node taken out of the job
        corrupted = set().union(*(_corrupted_nodes(ctx.timeline, fm) for fm in sdc)) if sdc else set()
        out = {"quarantined_nodes": len(quarantined), "wrong_quarantines": len(quarantined - corrupted)}
    if not sdc:
        return out
    known = [fm.sdc_detection_steps for fm in sdc if fm.sdc_detection_steps is not None]
    return {**out, "sdc_detection_steps": max(known) if known else None,
            "contaminated_checkpoints": max(fm.contaminated_checkpoints for fm in sdc)}


def _undetected(fm: Any) -> str:
    return f"fault {fm.fault_id} undetected: no corruption detector fired"


def _by_detector(fm: Any, _value: Any) -> str:
    return f" (by {fm.detector or fm.detected_by or 'unknown'})"


def _counted_to_end(fm: Any, _value: Any) -> str:
    return " (undetected: counted to the end of the run)" if fm.sdc_detection_steps is None else ""


METRICS = MetricFamily(
    "sdc",
    specs=(
        MetricSpec("sdc_detection_steps", "corruption detected after", "count", "steps", "fault",
                   target="bound", applies=_corruption, missing_reason=_undetected, detail=_by_detector,
                   target_doc="Silent corruption (bitflip, checkpoint_bitrot): steps from the corruption to the\n"
                              "first `corruption` detection; undetected fails it."),
        MetricSpec("contaminated_checkpoints", "contaminated checkpoints", "count", scope="fault",
                   target="bound", applies=_corruption, detail=_counted_to_end,
                   target_doc="Silent corruption: checkpoints written between the corruption and its detection (to\n"
                              "the end of the run when undetected). {max: 0}: no corrupted state was ever checkpointed."),
        MetricSpec("quarantine", "quarantine", scope="fault", title="Quarantine",
                   meaning="whether the node the job quarantined (detect.on_suspect) held the corrupted rank"),
        MetricSpec("quarantined_nodes", "quarantined nodes", "count", title="Quarantined nodes",
                   meaning="nodes the job took out on a corruption verdict (detect.on_suspect: quarantine)",
                   target="bound",
                   target_doc="Nodes the job quarantined on corruption verdicts (detect.on_suspect: quarantine)."),
        MetricSpec("wrong_quarantines", "wrong quarantines", "count", title="Wrong quarantines",
                   meaning="quarantined nodes that held no corrupted rank: healthy nodes taken out",
                   target="bound",
                   target_doc="Quarantined nodes that held no corrupted rank (healthy capacity lost).\n"
                              "{max: 0}: the job never took out a healthy node."),
    ),
    fault_metrics=_fault_metrics,
    run_metrics=_run_metrics,
    applies=_corruption,
)
