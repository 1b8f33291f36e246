"""Checkpoint and storage metrics of one run, from the harness's checkpoint events; pure
logic over the merged timeline, as ``chaos.metrics`` (which calls ``storage_metrics``).

Definitions (every journal has them; a run without checkpoints has zeros and None):

``ckpt_save_p50_s`` / ``ckpt_save_p95_s`` / ``ckpt_save_max_s``
    Nearest-rank percentiles of ``ckpt_save_end.seconds`` (the write, not the snapshot) over
    every completed save of the run, all tiers and incarnations. A save that never
    completed has no latency: it is counted below.
``ckpt_blocked_s``
    Sum of ``ckpt_save_end.blocked_seconds``: the time training waited inside ``save``
    (the whole write in sync mode; the host snapshot and any wait for the previous write
    in async mode).
``failed_saves``
    ``ckpt_save_failed`` events: failed write attempts (a retried save counts once per try).
``abandoned_saves``
    Those with ``abandoned: true``: saves given up after their retries; never reported as
    saved.
``skipped_saves``
    ``ckpt_save_skipped``: saves not started because the previous write was still running.
``rejected_checkpoints``
    Distinct checkpoint paths some ``ckpt_load`` skipped as unusable (torn, truncated,
    checksum mismatch, unreadable).
``ckpt_lost_steps``
    Steps lost *because* checkpoints were unusable: per incarnation that loaded, from its
    lowest rank's ``ckpt_load`` events (a rank may load twice when the group agrees on an
    older step), the newest checkpoint any of them rejected minus the step of the last one,
    summed over incarnations. 0 when every load took the newest checkpoint.

Registered as the ``storage`` metric family: run-wide (every run that checkpoints has them),
with the targets ``ckpt_blocked_s``, ``failed_saves`` and ``rejected_checkpoints``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from chaos.metrics.family import MetricFamily, RunContext
from chaos.metrics.spec import MetricSpec

__all__ = ["METRICS", "storage_metrics"]

_STEP = re.compile(r"step-(\d+)")


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _rank(src: Any) -> int:
    text = str(src or "")
    return int(text[5:]) if text.startswith("rank-") and text[5:].isdigit() else 1 << 30


def storage_metrics(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The fields above, from the run's merged events."""
    latencies = [v for e in events if e.get("kind") == "ckpt_save_end" and (v := _num(e.get("seconds"))) is not None]
    blocked = [v for e in events if e.get("kind") == "ckpt_save_end"
               and (v := _num(e.get("blocked_seconds"))) is not None]
    failed = [e for e in events if e.get("kind") == "ckpt_save_failed"]
    loads = [e for e in events if e.get("kind") == "ckpt_load"]
    rejected: set[str] = set()
    lost = 0
    per_incarnation: dict[int, list[dict[str, Any]]] = {}
    for e in sorted(loads, key=lambda e: (_rank(e.get("src")), e.get("t", 0))):
        for item in e.get("skipped") or []:
            if isinstance(item, list | tuple) and item:
                rejected.add(str(item[0]))
        group = per_incarnation.setdefault(int(e.get("incarnation") or 0), [])
        if not group or group[0].get("src") == e.get("src"):
            group.append(e)  # the lowest rank's loads only
    for group in per_incarnation.values():
        steps = [int(m.group(1)) for e in group for item in e.get("skipped") or []
                 if isinstance(item, list | tuple) and item and (m := _STEP.search(str(item[0])))]
        loaded = group[-1].get("step")
        if steps and isinstance(loaded, int):
            lost += max(0, max(steps) - loaded)
    return {
        "ckpt_save_p50_s": _percentile(latencies, 0.5),
        "ckpt_save_p95_s": _percentile(latencies, 0.95),
        "ckpt_save_max_s": max(latencies) if latencies else None,
        "ckpt_blocked_s": round(sum(blocked), 6),
        "failed_saves": len(failed),
        "abandoned_saves": sum(1 for e in failed if e.get("abandoned")),
        "skipped_saves": sum(1 for e in events if e.get("kind") == "ckpt_save_skipped"),
        "rejected_checkpoints": len(rejected),
        "ckpt_lost_steps": lost,
    }


def _run_metrics(ctx: RunContext) -> dict[str, Any]:
    return storage_metrics(ctx.timeline.events)


METRICS = MetricFamily(
    "storage",
    specs=(
        MetricSpec("ckpt_blocked_s", "blocked by checkpoint saves", "seconds", "s", target="bound",
                   target_doc="Training time blocked inside checkpoint saves over the run, seconds (the write in\n"
                              "sync mode; the snapshot and any wait for the previous write in async mode)."),
        MetricSpec("failed_saves", "failed checkpoint writes", "count", target="bound",
                   target_doc="Failed checkpoint write attempts (`ckpt_save_failed`); {min: 1}: a storage fault\n"
                              "during a save must be surfaced, not swallowed."),
        MetricSpec("rejected_checkpoints", "checkpoints rejected on load", "count", target="bound",
                   target_doc="Distinct checkpoints skipped on load as unusable (torn, truncated, checksum mismatch)."),
    ),
    run_metrics=_run_metrics,
)
