"""What the runner keeps while a run goes: the callbacks of a live display, each planned
fault's state from due to reverted, and the run as its events show it (``RunObserver``: the
event intake, and the clock the triggers read, ``chaos.model.triggers.RunClock``).

``RunObserver`` is a mixin of ``chaos.runner.run``'s runner: the attributes it reads and updates are
set in the runner's ``__init__`` (the loop, its waits and the injections stay there).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chaos.model.targets import ResolvedTarget
from chaos.runfiles.events import Event
from chaos.runner.lifecycle import Injection
from chaos.runner.plan import PlannedFault

__all__ = ["FaultState", "RunObserver", "RunProgress"]


@dataclass
class RunProgress:
    """Callbacks for a live display; all optional."""

    on_step: Any = None
    on_note: Any = None

    def step(self, step: int, target: int) -> None:
        if self.on_step:
            self.on_step(step, target)

    def note(self, text: str) -> None:
        if self.on_note:
            self.on_note(text)


@dataclass
class FaultState:
    planned: PlannedFault
    fired: bool = False
    step_seen_at_inject: int | None = None
    injection: Injection | None = None
    """The fault as it went through the lifecycle (None: never handed to the engine)."""
    unresolved: str | None = None
    """Why its target could not be resolved when it was due."""
    deferred_since: float | None = None
    """A repeated fault due while its target had no live process (the job restarting from
    the previous one): when it first waited."""
    t_planned: float | None = None
    """The time a timed or event trigger named (unix seconds): its lag is measured from it."""
    step_reached: float | None = None
    """When the first targeted rank reached a step trigger's step (monotonic)."""

    @property
    def t_inject(self) -> float | None:
        return self.injection.t_inject if self.injection else None

    @property
    def t_revert(self) -> float | None:
        return self.injection.t_revert if self.injection else None

    @property
    def record(self) -> dict[str, Any]:
        return self.injection.record if self.injection else {}

    @property
    def resolved(self) -> ResolvedTarget | None:
        """The target as resolved against live processes when the fault was injected."""
        return self.injection.target if self.injection else None

    @property
    def error(self) -> str | None:
        inj = self.injection
        if inj is not None and inj.revert_error:
            return f"revert failed: {inj.revert_error}"
        if inj is not None and inj.inject_error:
            return f"inject failed: {inj.inject_error}"
        return self.unresolved and f"target unavailable: {self.unresolved}"


class RunObserver:
    """The event intake of a run and what the triggers read of it (``chaos.model.triggers.RunClock``)."""

    cluster: Any
    progress: RunProgress
    reader: Any
    steps_target: int
    max_step: int
    step_by_rank: dict[int, int]
    t_first_step: float | None
    t_first_step_wall: float | None
    t_last_progress: float
    event_times_seen: dict[str | None, list[float]]
    ever_hosted: set[int]
    rank_node: dict[int, int]
    group_size: int
    _tool_error: Callable[[str], None]

    def _take(self, events: list[Event]) -> None:
        for ev in events:
            kind = ev.get("kind")
            self.event_times_seen.setdefault(kind, []).append(ev["t"])
            if kind == "rank_start":
                self.cluster.note_event(ev)
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
                if step > self.max_step:
                    self.max_step = step
                    self.progress.step(step, self.steps_target)
            elif kind == "ckpt_save_end" and self.reader is not None:
                self.reader.offer(ev)
            elif kind == "fault_injected" and ev.get("src") != "injector":
                self.progress.note(f"{ev.get('fault')} injected in-process at step {ev.get('step')} on {ev.get('src')}")
            elif kind == "fault_error":
                # An in-process fault the probe could not apply (a tensor name a command's
                # model does not have): trainchaos failed to inject, the job is not to blame.
                self._tool_error(f"{ev.get('fault')} on {ev.get('src')}: {ev.get('error')}")
            elif kind == "detected":
                self.progress.note(
                    f"detected by {ev.get('by')}: {ev.get('failure_class')} of {ev.get('suspect')}"
                )

    def step_seen(self, ranks: tuple[int, ...]) -> int:
        return max((self.step_by_rank.get(r, 0) for r in ranks), default=self.max_step)

    def event_times(self, kind: str) -> list[float]:
        return self.event_times_seen.get(kind, [])

    def since_first_step(self) -> float | None:
        return None if self.t_first_step is None else time.monotonic() - self.t_first_step

    def first_step_time(self) -> float | None:
        return self.t_first_step_wall
