"""Run handlers: what watches a run without being the run (modelled on chaostoolkit-lib's
``RunEventHandler`` and ``EventHandlerRegistry``).

Whoever builds a run (``chaos.runner.run.run_scenario_once``) registers its handlers; the
runner calls the registry at each point of the run, never a handler by name, so a new
checker plugs in without editing the runner. A handler's failure is logged and the run goes
on: a watcher must not break what it watches (CONVENTIONS: event handlers).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext
    from chaos.runfiles.events import Event
    from chaos.runfiles.record import RunStart
    from chaos.runner.lifecycle import Injection

__all__ = ["HandlerRegistry", "RunHandler"]

log = logging.getLogger(__name__)


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

    def _notify(self, hook: str, *args: Any) -> None:
        for handler in self.handlers:
            try:
                getattr(handler, hook)(*args)
            except Exception:  # noqa: BLE001 - a handler's bug must not break the run
                log.exception("run handler %s failed in %s", type(handler).__name__, hook)
