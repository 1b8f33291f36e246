"""What the runner keeps while a run goes: the callbacks of a live display, and each planned
fault's state from due to reverted (the run as its events show it is ``chaos.runner.intake``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos.model.targets import ResolvedTarget
from chaos.runner.lifecycle import Injection
from chaos.runner.plan import PlannedFault

__all__ = ["FaultState", "RunProgress"]


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
