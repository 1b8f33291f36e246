"""Checkpoint freshness: each checkpoint the run saved holds the fault-free twin's state at
the step it claims (docs/checkers.md). Pure logic over the timeline and the twin's digests;
the controller's reader (``chaos.runner.freshness``) records what each checkpoint holds as a
``ckpt_image`` event.

Definitions (None and zeros when the scenario has no twin, or the twin reported no digests):

``stale_checkpoints``
    Checkpoints whose model state is not the twin's at the step they claim (bitwise, by
    ``chaos.probe.state_dict_digest``). Target ``{max: 0}``.
``stale_checkpoint_list``
    Each of them: ``step`` (claimed), ``holds_step`` (the twin's step whose state it holds,
    None when the twin never had it), ``path``, ``tier``, ``t`` (when it was read).
``checked_checkpoints``
    Checkpoints judged (fresh or stale).
``unchecked_checkpoints``
    Checkpoints that could not be judged: unreadable when read (pruned already, torn, a
    storage fault in the way), no twin digest at their step, or saved once the group ran at
    another world size than the twin (an elastic resize changes the arithmetic: the states
    are no longer bitwise comparable).
"""

from __future__ import annotations

from typing import Any

from chaos.metrics.family import MetricFamily, RunContext
from chaos.metrics.records import BaselineInfo
from chaos.metrics.spec import MetricSpec, Tolerance
from chaos.metrics.timeline import Event, int_or_none

__all__ = ["FAMILY", "freshness_metrics"]



def _resized_since(events: list[Event], world_size: int) -> float | None:
    """When the group first ran at another world size than the twin's (None: never)."""
    for e in events:
        if e.get("kind") == "rank_start" and int_or_none(e.get("world_size")) not in (None, world_size):
            return float(e["t"])
    return None


def freshness_metrics(events: list[Event], baseline: BaselineInfo | None) -> dict[str, Any]:
    """The fields above, from the run's merged events and the twin."""
    digests = {int(k): v for k, v in (baseline.digests if baseline is not None else {}).items()}
    if not digests:
        return {"stale_checkpoints": None, "stale_checkpoint_list": [], "checked_checkpoints": 0,
                "unchecked_checkpoints": 0}
    step_of: dict[Any, int] = {}  # a digest -> the first step saved with it
    for saved, digest in sorted(digests.items()):
        step_of.setdefault(digest, saved)
    resized = _resized_since(events, baseline.world_size) if baseline is not None else None
    stale: list[dict[str, Any]] = []
    checked = unchecked = 0
    for e in events:
        if e.get("kind") != "ckpt_image":
            continue
        step = int_or_none(e.get("step"))
        if (e.get("error") or step is None or step not in digests
                or (resized is not None and e["t"] >= resized)):
            unchecked += 1
            continue
        checked += 1
        if e.get("digest") != digests[step]:
            stale.append({"step": step, "holds_step": step_of.get(e.get("digest")), "path": e.get("path"),
                          "tier": e.get("tier"), "t": e["t"]})
    return {"stale_checkpoints": len(stale), "stale_checkpoint_list": stale, "checked_checkpoints": checked,
            "unchecked_checkpoints": unchecked}


def stale_text(item: dict[str, Any]) -> str:
    """``step 20 holds step 21's state``: one stale checkpoint in words."""
    held = item.get("holds_step")
    what = f"step {held}'s state" if held is not None else "a state the twin never had"
    return f"step {item.get('step')} holds {what}"


def _detail(m: Any, value: Any) -> str:
    items = getattr(m, "stale_checkpoint_list", None) or []
    if not items:
        return ""
    more = f", and {len(items) - 3} more" if len(items) > 3 else ""
    return " (" + "; ".join(stale_text(i) for i in items[:3]) + more + ")"


def _run_metrics(ctx: RunContext) -> dict[str, Any]:
    return freshness_metrics(ctx.timeline.events, ctx.baseline)


FAMILY = MetricFamily(
    "freshness",
    specs=(
        MetricSpec("stale_checkpoints", "stale checkpoints", "count", tolerance=Tolerance(rel=0.0, abs=0),
                   title="Stale checkpoints", correctness=True,
                   meaning="checkpoints not holding the twin's state at the step they claim",
                   target="bound",
                   target_doc="Checkpoints whose model state is not the fault-free twin's at the step they\n"
                              "claim (bitwise; needs baseline: true and a deterministic job). {max: 0}.",
                   missing_reason=lambda m: "stale checkpoints unknown: no fault-free twin digests "
                                            "(baseline: true, and a job that reports probe.state_digest)",
                   detail=_detail),
    ),
    run_metrics=_run_metrics,
)
