"""The live metrics a game day watches (``chaos.gameday.plan.METRICS``), from the run's
events as they arrive.

``goodput`` here is the job's pace relative to its own pace before the first inject (steps
per second over the last ``window_s`` against the same measure taken just before the first
disruptive step): an operator's question is "how much slower is training now", not the
run-level productive-time fraction ``chaos.metrics`` reports after the run.

Detections have one source, ``Observer.detections``: every ``detected`` event of the run,
kept with the time it was written (the event's own ``t``, not when it was read). The
``detections`` metric counts those since the plan started, a check's ``since: STEP`` those
since that inject began (before the engine was called: a job that notices within
milliseconds, while the fault is still being applied, is counted), and the report's Faults
table gives each one to the newest fault injected before it (``attribute``): the metric at
the end is always the table's total.

Pace (``steps_per_s``, ``goodput``) in a wait, check or observe after an inject counts only
steps written since that inject was in effect (``progress_since``: the end of the named
``since:`` inject's engine call, else of the newest inject): the window's steps from before a
power cut are not the job's progress after it (issue 45: ``steps_per_s > 0`` "held" 4 ms after
an outage, on the dead job's history). The pace is then taken over the time since, up to
``window_s``, and at least ``MIN_PACE_SPAN_S``, so one step a moment after the inject is not
an enormous pace.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from chaos.metrics.timeline import rank_of

__all__ = ["MIN_PACE_SPAN_S", "Observer", "attribute"]

MIN_PACE_SPAN_S = 1.0
"""The shortest span a pace since an inject is taken over (``window_s`` when that is shorter)."""


class Observer:
    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._lock = threading.Lock()
        self._steps: list[tuple[float, int]] = []
        """(time, step) of each new highest step reported by any rank."""
        self.max_step = 0
        self.t_last_step: float | None = None
        self.detections: list[dict[str, Any]] = []
        """Every detection event read, in the order written (backlog included)."""
        self.reference_pace: float | None = None
        self.t_plan = time.time()
        """Since when ``detections`` counts: the start of the exercise."""
        self.nodes_running = 0
        """The run's nodes in a state a fault applies to (``running``), at the last refresh."""
        self.probe_reports = False
        """Some rank wrote an event itself (not a log line read for it): the job reports
        through the probe (``chaos.metrics.timeline.Timeline.probe_reports``)."""
        self.t_start = time.time()

    def take(self, events: list[dict[str, Any]]) -> None:
        now = time.time()
        with self._lock:
            for ev in events:
                kind = ev.get("kind")
                if not self.probe_reports and ev.get("via") != "log" and rank_of(ev.get("src")) is not None:
                    self.probe_reports = True
                if kind == "step_end":
                    # The event's own time (the node's clock; see the docker backend's
                    # clock offsets), so a backlog read at attach is not "progress now".
                    t = float(ev.get("t", now))
                    step = int(ev.get("step", 0))
                    if step > self.max_step:
                        self.max_step = step
                        self._steps.append((t, step))
                    self.t_last_step = max(t, self.t_last_step or t)
                elif kind == "detected":
                    self.detections.append({"t": float(ev.get("t") or 0.0), "by": ev.get("by"),
                                            "src": ev.get("src"), "suspect": ev.get("suspect"),
                                            "failure_class": ev.get("failure_class"),
                                            "reason": ev.get("reason")})
            self.detections.sort(key=lambda d: d["t"])
            if self._steps:
                cut = self._steps[-1][0] - 10 * self.window_s
                self._steps = [s for s in self._steps if s[0] >= cut]

    def start_plan(self) -> None:
        """The exercise starts now: detections before it are the job's history, not its."""
        with self._lock:
            self.t_plan = time.time()

    def detections_since(self, t: float | None = None) -> list[dict[str, Any]]:
        """Detection events written at or after ``t`` (default: the plan's start)."""
        since = self.t_plan if t is None else t
        with self._lock:
            return [d for d in self.detections if d["t"] >= since]

    def pace(self, now: float | None = None, progress_since: float | None = None) -> float:
        """Steps per second over the last window (new highest steps only: a replay of steps
        after a restart from a checkpoint is not progress); with ``progress_since``, only the
        steps written after it, over the time since (at most the window)."""
        now = now or time.time()
        span = self.window_s
        if progress_since is not None:
            span = min(self.window_s, max(now - progress_since, MIN_PACE_SPAN_S))
        with self._lock:
            recent = [s for s in self._steps if s[0] >= now - span
                      and (progress_since is None or s[0] > progress_since)]
        return len(recent) / span

    def freeze_reference(self) -> float:
        """The pace before the first disruptive step: goodput's 1.0."""
        if self.reference_pace is None:
            self.reference_pace = self.pace()
        return self.reference_pace

    def snapshot(self, detections_since: float | None = None,
                 progress_since: float | None = None) -> dict[str, float]:
        now = time.time()
        pace = self.pace(now, progress_since)
        ref = self.reference_pace
        detections = len(self.detections_since(detections_since))
        with self._lock:
            dead = now - self.t_last_step if self.t_last_step is not None else now - self.t_start
            return {
                "step": float(self.max_step),
                "steps_per_s": round(pace, 3),
                "goodput": round(min(pace / ref, 10.0), 3) if ref else 1.0,
                "dead_s": round(dead, 2),
                "detections": float(detections),
                "nodes_running": float(self.nodes_running),
                # Its name on docker, where each node is a container (plans written for it).
                "containers_running": float(self.nodes_running),
            }


def attribute(detections: list[dict[str, Any]], injected: list[tuple[str, float]]) -> dict[str | None, list[dict[str, Any]]]:
    """Each detection to the newest fault injected at or before it (``injected``: fault
    key, time its inject began); those before every inject to ``None``. Every detection
    lands in exactly one list."""
    order = sorted(injected, key=lambda kv: kv[1])
    out: dict[str | None, list[dict[str, Any]]] = {None: [], **{k: [] for k, _ in order}}
    for det in detections:
        owner = None
        for key, t in order:
            if t <= det["t"]:
                owner = key
        out[owner].append(det)
    return out
