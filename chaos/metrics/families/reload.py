"""Reload sanity and progress: after each restart the job resumed from a sound state, and
from the newest one it could have (definitions: docs/checkers.md).

``reload_nonfinite``
    Restarts whose reloaded weights were not all finite (the job's ``reload`` event:
    ``weights_finite: false``; the harness checks right after restoring, before a step could
    hide or spread it). A checkpoint of NaN weights is loaded as readily as a good one.
``reload_loss_dev``
    The largest relative deviation, over the restarts, of the loss of the first step
    trained after the restart (step resumed_from + 1, the reference rank) from the fault-free
    twin's loss at the same step. Needs ``baseline: true``; None without a twin or a
    restart. A resumed run that reloaded the weights but lost the optimizer or the LR
    schedule lands off the twin's curve here, long before the end.
``silent_rollback_steps``
    Steps a restart went back further than it had to, without saying why: per restart, the
    newest checkpoint that was durable before it (``ckpt_save_end`` before the restart, not
    ``durable: false``) minus the step it resumed from; checkpoints a load reported as
    unusable (``ckpt_load.skipped``) or that a corruption rollback quarantined are not
    owed. Summed over restarts; {max: 0}: no restart ignores a good checkpoint.

Registered as the ``reload`` metric family (run-wide), each a ``{max, min}`` target.
"""

from __future__ import annotations

import math
import re
from typing import Any

from chaos.metrics.family import MetricFamily, RunContext
from chaos.metrics.spec import MetricSpec, Tolerance
from chaos.metrics.timeline import Event, float_or_none, incarnation, int_or_none, rank_of

__all__ = ["FAMILY", "reload_metrics"]

_STEP = re.compile(r"step-(\d+)")


def _not_owed(events: list[Event]) -> set[int]:
    """Checkpoint steps a restart may pass over: reported unusable, or quarantined."""
    steps: set[int] = set()
    for e in events:
        if e.get("kind") == "ckpt_load":
            for item in e.get("skipped") or []:
                if isinstance(item, list | tuple) and item and (m := _STEP.search(str(item[0]))):
                    steps.add(int(m.group(1)))
        elif e.get("kind") == "sdc_rollback":
            clean_before = int_or_none(e.get("clean_before"))
            for q in e.get("quarantined") or []:
                if int_or_none(q) is not None:
                    steps.add(int(q))
            if clean_before is not None:
                steps.update(s for s in _saved_steps(events) if s >= clean_before)
    return steps


def _saved_steps(events: list[Event]) -> set[int]:
    return {s for e in events if e.get("kind") == "ckpt_save_end" and (s := int_or_none(e.get("step"))) is not None}


def reload_metrics(events: list[Event], restarts: list[dict[str, Any]],
                   baseline_losses: dict[Any, Any] | None) -> dict[str, Any]:
    """The fields above from the run's events and its restarts (``RunMetrics.restarts``)."""
    rank_events = [e for e in events if rank_of(e.get("src")) is not None]
    reloads = [e for e in rank_events if e.get("kind") == "reload"]
    nonfinite = len({incarnation(e) for e in reloads if e.get("weights_finite") is False})

    not_owed = _not_owed(rank_events)
    saves = sorted((e["t"], s) for e in rank_events if e.get("kind") == "ckpt_save_end"
                   and e.get("durable") is not False and (s := int_or_none(e.get("step"))) is not None)
    rollback_total = 0
    rollbacks = []
    for r in restarts:
        resumed = int_or_none(r.get("resumed_from"))
        if resumed is None:
            continue
        durable = [s for t, s in saves if t < r["t"] and s not in not_owed]
        newest = max(durable, default=None)
        if newest is not None and newest > resumed:
            rollback_total += newest - resumed
            rollbacks.append({"incarnation": r.get("incarnation"), "resumed_from": resumed, "newest_durable": newest})

    base = {int(k): float(v) for k, v in (baseline_losses or {}).items()
            if int_or_none(k) is not None and float_or_none(v) is not None and math.isfinite(float(v))}
    devs: list[float] = []
    steps: list[int] = []
    if base:
        ref = _reference(rank_events)
        for r in restarts:
            resumed = int_or_none(r.get("resumed_from"))
            if resumed is None or resumed + 1 not in base:
                continue
            first = next((e for e in rank_events if e.get("kind") == "step_end" and e.get("src") == ref
                          and incarnation(e) == r.get("incarnation") and int_or_none(e.get("step")) == resumed + 1),
                         None)
            loss = float_or_none(first.get("loss")) if first is not None else None
            if loss is None:
                continue
            steps.append(resumed + 1)
            ref_loss = base[resumed + 1]
            devs.append(math.inf if not math.isfinite(loss) else abs(loss - ref_loss) / max(abs(ref_loss), 1e-12))
    return {
        "reload_nonfinite": nonfinite,
        "reload_loss_dev": max(devs) if devs else None,
        "reload_loss_steps": steps,
        "silent_rollback_steps": rollback_total,
        "silent_rollbacks": rollbacks,
    }


def _reference(rank_events: list[Event]) -> str | None:
    srcs = {e["src"] for e in rank_events if e.get("kind") == "step_end"}
    return "rank-0" if "rank-0" in srcs else min(srcs, key=lambda s: rank_of(s) or 0, default=None)


def _run_metrics(ctx: RunContext) -> dict[str, Any]:
    losses = ctx.baseline.losses if ctx.baseline is not None else None
    return reload_metrics(ctx.timeline.events, ctx.metrics.restarts, losses)


def _loss_dev_missing(m: Any) -> str:
    if not getattr(m, "has_baseline", False) and not m.restarts:
        return "reload loss deviation unknown: no restart, and no baseline (set baseline: true)"
    if not m.restarts:
        return "reload loss deviation unknown: the run never restarted"
    return "reload loss deviation unknown: needs the fault-free twin (baseline: true) and a step after a restart"


def _loss_dev_detail(m: Any, _value: Any) -> str:
    steps = getattr(m, "reload_loss_steps", None) or []
    return f" (first step after each restart: {', '.join(map(str, steps))})" if steps else ""


def _rollback_detail(m: Any, value: Any) -> str:
    found = getattr(m, "silent_rollbacks", None) or []
    if not value or not found:
        return ""
    first = found[0]
    return (f" (incarnation {first['incarnation']} resumed from step {first['resumed_from']} although "
            f"step {first['newest_durable']} was durable)")


FAMILY = MetricFamily(
    "reload",
    specs=(
        MetricSpec("reload_nonfinite", "restarts that reloaded non-finite weights", "count",
                   tolerance=Tolerance(rel=0.0, abs=0), title="Reloads with non-finite weights",
                   meaning="restarts whose reloaded weights hold NaN or Inf", target="bound", correctness=True,
                   target_doc="Restarts whose reloaded weights hold NaN or Inf (the job's `reload` event). {max: 0}:\n"
                              "every restart resumed from finite weights."),
        MetricSpec("reload_loss_dev", "reload loss deviation", "fraction", title="Reload loss deviation",
                   meaning="first step after each restart vs the twin's loss there, relative",
                   target="bound", missing="unknown", missing_reason=_loss_dev_missing, detail=_loss_dev_detail,
                   target_doc="Largest relative deviation of the loss at the first step after each restart from\n"
                              "the fault-free twin's at that step (needs baseline: true), e.g. {max: 0.05}."),
        MetricSpec("silent_rollback_steps", "silent rollback", "count", "steps",
                   tolerance=Tolerance(rel=0.0, abs=0), title="Silent rollback",
                   meaning="steps a restart resumed before the newest durable checkpoint, unexplained",
                   target="bound", detail=_rollback_detail, correctness=True,
                   target_doc="Steps a restart went back beyond the newest checkpoint durable before it, without\n"
                              "the load reporting it unusable. {max: 0}: no restart ignores a good checkpoint."),
    ),
    run_metrics=_run_metrics,
)
