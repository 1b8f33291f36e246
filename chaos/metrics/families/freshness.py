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
    storage fault in the way), no twin digest at their step, or holding a state trained at
    another world size than the twin's (an elastic resize changes the arithmetic: the states
    are no longer bitwise comparable).

Which states are comparable is judged by the saver (the reader records who saved each
checkpoint, and when): a rank that, since its last start, ran at the twin's world size and
trained from scratch, or from a checkpoint saved so, holds a state the twin had; one that
ran at another world size (an in-process restart's survivor training alone), or resumed from
a checkpoint one of those saved, does not. A checkpoint saved before
a world change but read after it is judged (the reader lags the job: the checker once left
all four checkpoints of the NVRx in-process restart unchecked so). An image that names no
saver falls back to the time of the first world change.
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


class _Lineage:
    """Whether the state a save holds can be the twin's (module docstring)."""

    def __init__(self, events: list[Event], world_size: int, resized: float | None) -> None:
        self.world_size = world_size
        self.resized = resized
        self.starts: dict[str, list[tuple[float, int | None]]] = {}
        """Each source's rank_starts (time, world size), in time order: a restart in place
        starts again whether or not its incarnation changes."""
        self.loads: dict[str, list[tuple[float, int | None]]] = {}
        self.saves: list[tuple[float, int | None, str]] = []
        for e in events:
            kind, src, t = e.get("kind"), str(e.get("src")), float(e["t"])
            if kind == "rank_start":
                self.starts.setdefault(src, []).append((t, int_or_none(e.get("world_size"))))
            elif kind == "ckpt_load":
                self.loads.setdefault(src, []).append((t, int_or_none(e.get("step"))))
            elif kind == "ckpt_save_end":
                self.saves.append((t, int_or_none(e.get("step")), src))

    def comparable(self, src: str, t_save: float) -> bool:
        """Whether what ``src`` saved at ``t_save`` was trained at the twin's world size all
        along: since its last start, from scratch or from such a save."""
        started = [(t, world) for t, world in self.starts.get(src, []) if t <= t_save]
        if not started:
            return self.resized is None or t_save < self.resized  # no start seen: by time
        t_start, world = started[-1]
        if world is not None and world != self.world_size:
            return False
        loaded = [(t, step) for t, step in self.loads.get(src, []) if t_start <= t <= t_save]
        if not loaded:
            return True  # from scratch at the twin's world size: the twin's own path
        t_load, step = loaded[0]
        saved = [(t, saver) for t, s, saver in self.saves if s == step and t <= t_load]
        if saved:
            return self.comparable(saved[-1][1], saved[-1][0])  # strictly earlier: it ends
        return self.resized is None or t_load < self.resized  # a load of no save seen: by time

    def image(self, e: Event) -> bool:
        """Whether checkpoint image ``e`` holds a state the twin can have had."""
        if e.get("saved_by") is None or e.get("saved_t") is None:
            return self.resized is None or float(e["t"]) < self.resized
        return self.comparable(str(e["saved_by"]), float(e["saved_t"]))


def freshness_metrics(events: list[Event], baseline: BaselineInfo | None) -> dict[str, Any]:
    """The fields above, from the run's merged events and the twin."""
    digests = {int(k): v for k, v in (baseline.digests if baseline is not None else {}).items()}
    if not digests:
        return {"stale_checkpoints": None, "stale_checkpoint_list": [], "checked_checkpoints": 0,
                "unchecked_checkpoints": 0}
    step_of: dict[Any, int] = {}  # a digest -> the first step saved with it
    for saved, digest in sorted(digests.items()):
        step_of.setdefault(digest, saved)
    assert baseline is not None  # it has digests
    lineage = _Lineage(events, baseline.world_size, _resized_since(events, baseline.world_size))
    stale: list[dict[str, Any]] = []
    checked = unchecked = 0
    for e in events:
        if e.get("kind") != "ckpt_image":
            continue
        step = int_or_none(e.get("step"))
        if e.get("error") or step is None or step not in digests or not lineage.image(e):
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
