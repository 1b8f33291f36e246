"""What a fault sees while it is injected: the cluster, the injector's event stream, timers."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chaos.probe import Probe

if TYPE_CHECKING:
    from chaos.faults.base import FaultType

__all__ = ["InjectionContext"]


@dataclass
class InjectionContext:
    run_dir: str
    cluster: Any
    injector: Probe
    scheduled_reverts: list[tuple[float, FaultType]] = field(default_factory=list)

    def emit(self, kind: str, **fields: Any) -> None:
        self.injector.emit(kind, **fields)

    def schedule_revert(self, fault: FaultType, after_s: float) -> None:
        """Revert ``fault`` after ``after_s`` seconds (the run loop does it on time)."""
        self.scheduled_reverts.append((time.monotonic() + after_s, fault))

    def due_reverts(self) -> list[FaultType]:
        now = time.monotonic()
        due = [f for t, f in self.scheduled_reverts if t <= now]
        self.scheduled_reverts = [(t, f) for t, f in self.scheduled_reverts if t > now]
        return due
