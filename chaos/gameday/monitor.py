"""A game day's watch: a thread that re-reads the run's events and nodes' states every
``MONITOR_EVERY_S`` and interrupts the exercise (as Ctrl-C does) once a stop condition has
held for its ``for``; and the state the live panel draws. A mixin of
``chaos.gameday.session.GameDay``.
"""

from __future__ import annotations

import _thread
import threading
import time
from collections.abc import Callable
from typing import Any

from chaos.gameday.observe import Observer
from chaos.gameday.plan import Condition, Plan
from chaos.gameday.view import LiveStatus

__all__ = ["MONITOR_EVERY_S", "StopMonitor"]

MONITOR_EVERY_S = 0.5


class StopMonitor:
    """The stop conditions' watch and the live panel's status (``GameDay`` sets the fields)."""

    plan: Plan
    run: Any
    observer: Observer
    stop_conditions: list[Condition]
    tripped: str | None
    t0: float
    _held: dict[str, float]
    _current: tuple[str, float]
    _lock: threading.RLock
    _stop_monitor: threading.Event
    _refresh: Callable[[], None]
    _say: Callable[[str], None]

    def _live_status(self) -> LiveStatus:
        snap = self.observer.snapshot()
        now = time.monotonic()
        held = dict(self._held)
        stops = [(str(c), snap[c.metric], str(c) in held, now - held[str(c)] if str(c) in held else 0.0)
                 for c in self.stop_conditions]
        step, since = self._current
        return LiveStatus(plan=self.plan.name, run_id=self.run.spec.run_id, elapsed_s=time.time() - self.t0,
                          metrics=snap, containers=dict(self.run.states), node_kind=f"{self.run.node_kind}s",
                          stops=stops, step=step,
                          step_s=now - since)

    def _monitor(self) -> None:
        since = self._held
        """Condition -> when it began to hold (a stop with ``for`` trips after that long)."""
        while not self._stop_monitor.wait(MONITOR_EVERY_S):
            try:
                if self._lock.acquire(timeout=0.2):
                    try:
                        self._refresh()
                    finally:
                        self._lock.release()
                snap = self.observer.snapshot()
                now = time.monotonic()
                for c in self.stop_conditions:
                    if c.holds(snap):
                        since.setdefault(str(c), now)
                    else:
                        since.pop(str(c), None)
                held = next((c for c in self.stop_conditions
                             if str(c) in since and now - since[str(c)] >= c.for_s), None)
            except Exception as exc:  # a monitor that cannot see the run must not go quiet
                self.tripped = f"the run cannot be observed: {type(exc).__name__}: {exc}"
                _thread.interrupt_main()
                return
            if held is not None and not self._stop_monitor.is_set():
                self.tripped = f"{held} ({held.metric}={snap[held.metric]:g})"
                self._say(f"\nSTOP: {self.tripped}; reverting everything")
                # As a SIGINT in the main thread: it interrupts a wait or a prompt, and waits
                # for an inject or a revert under way (``chaos.runner.lifecycle``).
                _thread.interrupt_main()
                return
