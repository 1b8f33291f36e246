"""One fault, from due to gone: resolve -> journal -> inject -> record -> revert.

The runner (``chaos.runner.run``) and the game day (``chaos.gameday.session``) both drive faults
through ``FaultLifecycle``; what differs between them is around it, not in it: how a target
is found (the runner asks the backend for the live processes, ``resolve``; a game day asks
the attached run, whose blast-radius guard and preconditions come first) and what a failure
means (a tool error of the run; the end of the exercise).

The rules, the same for both:

- the fault journal's ``apply`` is on disk (fsynced) before the fault is touched, and the
  fault counts as active from then on: an ``inject`` that raises half-way is still reverted.
  A caller that knows when a fault is due ``arm``s it ahead: its ``apply`` is synced while
  nothing is due, and ``inject`` only checks it is on disk (waits if not), so a time-triggered
  fault does not pay a disk sync (4 ms, 100+ ms on a busy disk) on its way in. What follows
  the inject (``applied``, ``reverted``) is synced behind the caller's back when the journal
  has a writer thread (``chaos.runfiles.journal_writer``): nothing waits for it;
- an ``inject`` or a ``revert`` is never cut in half: SIGINT/SIGTERM (and a game day's tripped
  stop condition, which raises SIGINT in the main thread) wait for its end, then interrupt
  (``Interrupted``) unless teardown is under way (``chaos.util.interrupts.held``), where they are
  only recorded;
- the clock is read before ``inject`` is called (a signal acts at once and peers notice
  within a millisecond); a fault that takes effect later reports ``t_effective``;
- ``applied`` (with what the fault did, possibly nothing) and a ``fault_injected`` event are
  written whether ``inject`` returned or raised: the journal then says the fault may be in
  effect, and cleanup reverts it;
- what is still in effect at the end is reverted newest first (as resources are torn down):
  a later fault may act on what an earlier one left.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chaos.util import interrupts

if TYPE_CHECKING:
    from chaos.cluster.base import ClusterBackend, InjectionContext
    from chaos.faults.base import FaultType
    from chaos.model.targets import ResolvedTarget
    from chaos.runfiles.rollback import FaultJournal

__all__ = ["FaultLifecycle", "Injection"]


@dataclass
class Injection:
    """One fault handed to the engine: what it hit, what it did, when, and how it ended."""

    fault: FaultType
    target: ResolvedTarget
    """The target as resolved against live processes right before ``inject``."""
    name: str = ""
    """What the caller calls it (a game day's step name; the runner's fault id)."""
    describe: str = ""
    """The target in words, for the ``fault_injected``/``fault_reverted`` events (default:
    the resolved target's own words)."""
    deferred_since: float | None = None
    """When the fault first waited for its target (a repeated fault due while the job
    restarted): its record then says how long (``deferred_s``)."""
    record: dict[str, Any] = field(default_factory=dict)
    """What ``inject`` returned (pids, rules, containers): what ``revert`` undoes."""
    t_begun: float | None = None
    """When ``inject`` was called (the clock read before the call)."""
    t_inject: float | None = None
    """When the fault took effect: ``t_effective`` if the fault reported it, else ``t_begun``."""
    t_revert: float | None = None
    active: bool = False
    inject_error: str | None = None
    """``Type: message`` of an ``inject`` that raised."""
    exception: BaseException | None = None
    """That exception itself (a game day ends with it)."""
    revert_error: str | None = None

    def __post_init__(self) -> None:
        self.name = self.name or self.fault.fault_id
        self.describe = self.describe or self.target.describe()


class FaultLifecycle:
    """The faults of one run or one game day, through one fault journal and one context."""

    def __init__(self, ctx: InjectionContext, journal: FaultJournal,
                 lock: threading.RLock | None = None) -> None:
        self.ctx = ctx
        self.journal = journal
        self.lock = lock or threading.RLock()
        """Held around each inject and revert (a game day's monitor thread takes it too)."""
        self.active: list[Injection] = []
        """In effect now, oldest first."""
        self.history: list[Injection] = []
        """Every fault handed to the engine, in the order it was."""
        self.armed: dict[str, int] = {}
        """Fault id -> journal sequence number of its ``apply``, written ahead (``arm``)."""

    # -- resolve ------------------------------------------------------------------------------
    def resolve(self, fault: FaultType, cluster: ClusterBackend | None = None) -> ResolvedTarget:
        """The processes the planned target means now on ``cluster`` (the context's backend
        by default): ranks move when a spare joins or the group shrinks. Raises
        ``TargetUnavailable`` when none of it lives."""
        return (cluster or self.ctx.cluster).resolve(fault.target_spec)

    def never_applied(self, fault: FaultType, problem: str) -> None:
        """A fault whose target could not be resolved: journaled as such, nothing touched."""
        if self.armed.pop(fault.fault_id, None) is None:
            self.journal.apply(fault.fault_id, fault.type_name, {**fault.target_spec, "unresolved": problem})
        self.journal.reverted(fault.fault_id, "never applied: no live target")

    # -- arm ahead ----------------------------------------------------------------------------
    def arm(self, fault: FaultType, planned: float | None = None) -> None:
        """Journal ``fault``'s ``apply`` now, before it is due (at ``planned``, unix seconds,
        when known): the journal says it may be in effect from here on, so cleanup after a
        killed controller reverts it (a no-op while nothing was done). Not waited for: the
        ``inject`` that comes later checks it reached the disk. Once per fault."""
        if fault.fault_id not in self.armed:
            self.armed[fault.fault_id] = self.journal.apply(
                fault.fault_id, fault.type_name, dict(fault.target_spec), armed=planned, wait=False)

    # -- journal, inject, record ------------------------------------------------------------
    def inject(self, injection: Injection, **event_fields: Any) -> Injection:
        """Put ``injection.fault`` in effect on ``injection.target``. An ``inject`` that
        raises is recorded on the ``Injection`` (``inject_error``), never raised: the caller
        decides what it means. The caller holds the ``Injection`` before this is called, so
        a signal that waited for the inject (raised at its end) finds it on record.
        ``event_fields`` go into the ``fault_injected`` event."""
        fault = injection.fault
        fault.target = injection.target
        with self._critical():
            armed = self.armed.pop(fault.fault_id, None)
            if armed is None:
                self.journal.apply(fault.fault_id, fault.type_name, {**fault.target_spec, **injection.target.to_dict()})
            else:
                self.journal.wait(armed)  # on disk long ago, unless the disk is very slow
            injection.active = True
            self.active.append(injection)
            self.history.append(injection)
            injection.t_begun = time.time()
            try:
                injection.record = fault.inject(self.ctx)
            except Exception as exc:  # trainchaos failed, not the training stack
                injection.inject_error = f"{type(exc).__name__}: {exc}"
                injection.exception = exc
                injection.record = {}
            injection.t_inject = float(injection.record.get("t_effective", injection.t_begun))
            if injection.deferred_since is not None:
                injection.record["deferred_s"] = round(injection.t_begun - injection.deferred_since, 3)
            if armed is None:
                self.journal.applied(fault.fault_id, injection.record)
            else:
                self.journal.applied(fault.fault_id, injection.record, target=injection.target.to_dict(),
                                     t_inject=injection.t_inject)
            self.ctx.emit("fault_injected", fault=fault.fault_id, type=fault.type_name,
                          target=injection.describe, **event_fields, details=injection.record)
        self._interrupt_if_signalled()
        return injection

    # -- revert -------------------------------------------------------------------------------
    def revert(self, injection: Injection) -> str | None:
        """Undo one fault (nothing when it is no longer active); returns the revert's error."""
        with self._critical():
            if not injection.active:
                return None
            fault = injection.fault
            try:
                fault.revert(self.ctx, injection.record)
            except Exception as exc:
                injection.revert_error = f"{type(exc).__name__}: {exc}"
            injection.active = False
            self.active.remove(injection)
            injection.t_revert = time.time()
            self.journal.reverted(fault.fault_id, injection.revert_error)
            self.ctx.emit("fault_reverted", fault=fault.fault_id, target=injection.describe)
        self._interrupt_if_signalled()
        return injection.revert_error

    def due_reverts(self) -> list[Injection]:
        """Revert the faults whose ``duration_s`` ended (``ctx.schedule_revert``); returns them."""
        done = []
        for fault in self.ctx.due_reverts():
            for injection in [i for i in self.active if i.fault is fault]:
                self.revert(injection)
                done.append(injection)
        return done

    def revert_all(self) -> list[Injection]:
        """Revert everything still in effect, newest first; returns what was reverted. The
        faults armed and never injected are closed in the journal (nothing to undo)."""
        done = []
        for injection in reversed(list(self.active)):
            self.revert(injection)
            done.append(injection)
        for fault_id in list(self.armed):
            del self.armed[fault_id]
            self.journal.reverted(fault_id, None, note="armed, never injected")
        return done

    # -- signals ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _critical(self) -> Iterator[None]:
        """An inject or revert is never cut in half: a signal meanwhile is recorded."""
        with self.lock:
            interrupts.hold()
            try:
                yield
            finally:
                interrupts.release()

    @staticmethod
    def _interrupt_if_signalled() -> None:
        """A signal that waited for the inject or revert interrupts now, unless teardown is
        under way (then its holder takes it: the run stops once its record is written)."""
        if not interrupts.held() and interrupts.take_pending() is not None:
            raise interrupts.Interrupted("deferred")
