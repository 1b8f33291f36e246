"""The run as its events show it: the event intake of one run, and the clock the triggers read
(``chaos.model.triggers.RunClock``).

The runner holds one and feeds it each new event of the merged stream (the events and the
node logs); the triggers, the run loop's waits and its end-of-run checks read it. It only
records: what an event makes the runner do (a note, a tool error) stays in the runner.
"""

from __future__ import annotations

import time

from chaos.runfiles.events import Event

__all__ = ["EventIntake"]


class EventIntake:
    """What the events of a run said so far."""

    def __init__(self) -> None:
        self.max_step = 0
        self.step_by_rank: dict[int, int] = {}
        self.t_first_step: float | None = None
        self.t_first_step_wall: float | None = None
        self.t_last_progress = time.monotonic()
        # kind -> times seen: after_event triggers and the end-of-run check read it; the
        # events themselves are read back from disk once the run is over.
        self.event_times_seen: dict[str | None, list[float]] = {}
        self.ever_hosted: set[int] = set()
        """Nodes that ran a rank at some point (a spare that never joined did not)."""
        self.rank_node: dict[int, int] = {}
        """Rank -> the node of its latest ``rank_start``."""
        self.group_size = 0
        """World size of the latest ``rank_start``: the group now (or last) training."""

    def take(self, ev: Event) -> None:
        kind = ev.get("kind")
        self.event_times_seen.setdefault(kind, []).append(ev["t"])
        if kind == "rank_start":
            if isinstance(ev.get("node"), int):
                self.ever_hosted.add(ev["node"])
                if isinstance(ev.get("rank"), int) and isinstance(ev.get("world_size"), int):
                    self.rank_node[ev["rank"]] = ev["node"]
                    self.group_size = ev["world_size"]
        elif kind == "step_end":
            step = int(ev["step"])
            if self.t_first_step is None:
                self.t_first_step, self.t_first_step_wall = time.monotonic(), time.time()
            src = str(ev.get("src", ""))
            if src.startswith("rank-"):
                self.step_by_rank[int(src[5:])] = step
            if step > self.max_step or src.startswith("rank-0"):
                self.t_last_progress = time.monotonic()
            self.max_step = max(self.max_step, step)

    # -- chaos.model.triggers.RunClock ----------------------------------------------------
    def step_seen(self, ranks: tuple[int, ...]) -> int:
        return max((self.step_by_rank.get(r, 0) for r in ranks), default=self.max_step)

    def event_times(self, kind: str) -> list[float]:
        return self.event_times_seen.get(kind, [])

    def since_first_step(self) -> float | None:
        return None if self.t_first_step is None else time.monotonic() - self.t_first_step

    def first_step_time(self) -> float | None:
        return self.t_first_step_wall
