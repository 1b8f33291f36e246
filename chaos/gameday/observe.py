"""The live metrics a game day watches (``chaos.gameday.plan.METRICS``), from the run's
events as they arrive.

``goodput`` here is the job's pace relative to its own pace before the first inject (steps
per second over the last ``window_s`` against the same measure taken just before the first
disruptive step): an operator's question is "how much slower is training now", not the
run-level productive-time fraction ``chaos.metrics`` reports after the run.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["Observer"]


class Observer:
    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._lock = threading.Lock()
        self._steps: list[tuple[float, int]] = []
        """(time, step) of each new highest step reported by any rank."""
        self.max_step = 0
        self.t_last_step: float | None = None
        self.detections: list[dict[str, Any]] = []
        self.reference_pace: float | None = None
        self.t_since = time.time()
        self.containers_running = 0
        self.t_start = time.time()

    def take(self, events: list[dict[str, Any]]) -> None:
        now = time.time()
        with self._lock:
            for ev in events:
                kind = ev.get("kind")
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
                    self.detections.append({"t": ev.get("t"), "by": ev.get("by"), "src": ev.get("src"),
                                            "suspect": ev.get("suspect"),
                                            "failure_class": ev.get("failure_class")})
            if self._steps:
                cut = self._steps[-1][0] - 10 * self.window_s
                self._steps = [s for s in self._steps if s[0] >= cut]

    def pace(self, now: float | None = None) -> float:
        """Steps per second over the last window (new highest steps only: a replay of steps
        after a restart from a checkpoint is not progress)."""
        now = now or time.time()
        with self._lock:
            recent = [s for s in self._steps if s[0] >= now - self.window_s]
        return len(recent) / self.window_s

    def freeze_reference(self) -> float:
        """The pace before the first disruptive step: goodput's 1.0."""
        if self.reference_pace is None:
            self.reference_pace = self.pace()
        return self.reference_pace

    def mark_inject(self) -> None:
        with self._lock:
            self.t_since = time.time()

    def snapshot(self) -> dict[str, float]:
        now = time.time()
        pace = self.pace(now)
        ref = self.reference_pace
        with self._lock:
            dead = now - self.t_last_step if self.t_last_step is not None else now - self.t_start
            detections = sum(1 for d in self.detections if (d.get("t") or 0) >= self.t_since)
            return {
                "step": float(self.max_step),
                "steps_per_s": round(pace, 3),
                "goodput": round(min(pace / ref, 10.0), 3) if ref else 1.0,
                "dead_s": round(dead, 2),
                "detections": float(detections),
                "containers_running": float(self.containers_running),
            }
