"""What the operator sees while a game day runs.

``PlainView``: one line per event (the observe snapshots, injects, reverts, checks), as a
log; what a pipe, a CI job or a file gets. ``LiveView`` (on a terminal): the same lines,
scrolling above a panel that rich redraws twice a second: the job's pace, goodput and
detections, the run's nodes (containers, Slurm tasks) and their states, every stop condition with its current value against its
threshold, and the step in progress. The panel steps aside while the operator answers a
prompt (a prompt under a redrawn region would be overwritten).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LiveStatus", "LiveView", "PlainView", "render_status"]


@dataclass
class LiveStatus:
    """Everything the panel shows, at one moment (built by the session)."""

    plan: str
    run_id: str
    elapsed_s: float
    metrics: dict[str, float]
    containers: dict[int, str]
    """Node -> its state (its container's, its Slurm task's)."""
    stops: list[tuple[str, float, bool, float]] = field(default_factory=list)
    """Per stop condition: (condition, current value, holds now, seconds it has held)."""
    step: str = ""
    """The step in progress (``2/7 check detections >= 1 ...``), or what happens between."""
    step_s: float = 0.0
    node_kind: str = "containers"
    """What the run's nodes are (``containers``, ``Slurm tasks``): the label of their row."""


def render_status(s: LiveStatus) -> Any:
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row("game day", Text(f"{s.plan} on {s.run_id}  ({s.elapsed_s:.0f} s)"))
    grid.add_row("step", Text(f"{s.step}  ({s.step_s:.0f} s)" if s.step else "-"))
    m = s.metrics
    grid.add_row("job", Text(f"steps/s {m.get('steps_per_s', 0):g}   goodput {m.get('goodput', 0):g}   "
                             f"detections {m.get('detections', 0):g}   dead {m.get('dead_s', 0):g} s   "
                             f"step {m.get('step', 0):g}"))
    grid.add_row(s.node_kind, Text("  ".join(f"n{n} {state}" for n, state in sorted(s.containers.items()))
                                    or "none"))
    stops = Table.grid(padding=(0, 2))
    for cond, value, holds, held_s in s.stops:
        state = Text("HOLDS" + (f" {held_s:.0f} s" if held_s else ""), style="bold red") if holds else Text("ok", style="green")
        stops.add_row(Text(cond), Text(f"now {value:g}"), state)
    grid.add_row("stop when", stops if s.stops else Text("none"))
    return grid


class PlainView:
    """Lines through ``echo``, answers through ``ask``."""

    def __init__(self, echo: Callable[[str], None], ask: Callable[[str], str]) -> None:
        self._echo = echo
        self._ask = ask

    def start(self, status: Callable[[], LiveStatus]) -> None:
        pass

    def stop(self) -> None:
        pass

    def echo(self, line: str) -> None:
        self._echo(line)

    def ask(self, prompt: str) -> str:
        return self._ask(prompt)


class LiveView(PlainView):
    """The panel on a terminal; lines are printed above it."""

    def __init__(self, echo: Callable[[str], None], ask: Callable[[str], str]) -> None:
        from rich.console import Console

        super().__init__(echo, ask)
        self.console = Console(file=sys.stdout, highlight=False, markup=False, emoji=False)
        self._live: Any = None
        self._status: Callable[[], LiveStatus] | None = None
        self._lock = threading.RLock()

    def start(self, status: Callable[[], LiveStatus]) -> None:
        from rich.live import Live

        self._status = status
        with self._lock:
            if self._live is None:
                self._live = Live(get_renderable=self._render, console=self.console, refresh_per_second=2,
                                  transient=True, redirect_stdout=False, redirect_stderr=False)
            self._live.start()

    def _render(self) -> Any:
        from rich.text import Text

        try:
            return render_status(self._status()) if self._status else Text("")
        except Exception as exc:  # the panel must never take the exercise down
            return Text(f"(live view: {type(exc).__name__}: {exc})")

    def stop(self) -> None:
        with self._lock:
            if self._live is not None:
                self._live.stop()

    def echo(self, line: str) -> None:
        with self._lock:
            if self._live is not None and self._live.is_started:
                self.console.print(line, soft_wrap=True)
            else:
                self._echo(line)

    def ask(self, prompt: str) -> str:
        with self._lock:
            running = self._live is not None and self._live.is_started
            if running:
                self._live.stop()
        try:
            return self._ask(prompt)
        finally:
            if running:
                with self._lock:
                    self._live.start()
