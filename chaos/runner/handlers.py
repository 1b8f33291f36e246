"""Run handlers: what watches a run without being the run (modelled on chaostoolkit-lib's
``RunEventHandler`` and ``EventHandlerRegistry``).

Whoever builds a run (``chaos.runner.run.run_scenario_once``) registers its handlers; the
runner calls the registry at each point of the run, never a handler by name, so a new
checker plugs in without editing the runner. A handler's failure is logged and the run goes
on: a watcher must not break what it watches (CONVENTIONS: event handlers). A handler may
also end the run before the job does (``end``): one that has seen all it watches for (the
crash-point sweep's crash run, once its restart is judged: ``chaos.runner.crashend``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext
    from chaos.runfiles.events import Event
    from chaos.runfiles.record import RunStart
    from chaos.runner.lifecycle import Injection

__all__ = ["HandlerRegistry", "RunEnd", "RunHandler"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunEnd:
    """A handler's word that the run has shown what it watches for: the job is stopped now,
    as at a timeout, and the run ends with this status (``failed``: ``reason`` is its error)."""

    status: Literal["completed", "failed"]
    reason: str


class RunHandler:
    """The hooks of a run, in the order they come; each does nothing unless overridden."""

    def run_started(self, start: RunStart, ctx: InjectionContext) -> None:
        """The run's start is on disk and its processes are about to start; ``ctx.emit``
        records an event from the controller (thread-safe)."""

    def event(self, ev: Event) -> None:
        """Each new event of the merged stream (the events and the node logs), as the run
        loop reads it."""

    def fault_injected(self, injection: Injection) -> None:
        """A fault went through ``inject`` (``injection.inject_error`` says if it failed)."""

    def fault_reverted(self, injection: Injection) -> None:
        """A fault went through ``revert`` (``injection.revert_error`` says if it failed)."""

    def run_stopped(self) -> None:
        """The job is torn down; what a handler still records goes in before ``job_end``."""

    def end(self) -> RunEnd | None:
        """Asked after each look at the run: end it now, before the job ends by itself
        (None: run on, the default)."""
        return None


class HandlerRegistry:
    """Calls every registered handler in the order they were registered."""

    def __init__(self, handlers: list[RunHandler] | None = None) -> None:
        self.handlers: list[RunHandler] = list(handlers or [])

    def register(self, handler: RunHandler) -> None:
        self.handlers.append(handler)

    def run_started(self, start: RunStart, ctx: InjectionContext) -> None:
        self._notify("run_started", start, ctx)

    def event(self, ev: Event) -> None:
        self._notify("event", ev)

    def fault_injected(self, injection: Injection) -> None:
        self._notify("fault_injected", injection)

    def fault_reverted(self, injection: Injection) -> None:
        self._notify("fault_reverted", injection)

    def run_stopped(self) -> None:
        self._notify("run_stopped")

    def end(self) -> RunEnd | None:
        """The first handler's word to end the run now; None: every handler runs on."""
        for handler in self.handlers:
            try:
                end = handler.end()
            except Exception:  # noqa: BLE001 - a handler's bug must not end the run either
                log.exception("run handler %s failed in end", type(handler).__name__)
                continue
            if end is not None:
                return end
        return None

    def _notify(self, hook: str, *args: Any) -> None:
        for handler in self.handlers:
            try:
                getattr(handler, hook)(*args)
            except Exception:  # noqa: BLE001 - a handler's bug must not break the run
                log.exception("run handler %s failed in %s", type(handler).__name__, hook)
