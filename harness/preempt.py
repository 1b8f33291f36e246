"""SIGTERM -> an emergency checkpoint at a step the whole group agrees on, then a clean exit.

A scheduler that takes a node or the job away with notice (a Slurm drain with a grace
period, a preemption, ``scancel``, a cloud maintenance event) sends SIGTERM first and
SIGKILL once the grace is over. Leaving at once loses every step since the last periodic
checkpoint; checkpointing alone on the rank that got the signal is no use either, since
data-parallel state is only consistent across the group at a step boundary. So:

1. SIGTERM (``EmergencyStop.request``, from the SIGTERM guard thread) only sets this rank's
   stop flag; training goes on.
2. The flag travels as the rank's vote in the per-step evidence all-reduce (``harness.sdc``,
   ``end_step(stop=...)``): no collective of its own. After it every rank holds the same
   votes for the same step, so every rank decides to stop after that same step
   (``tally``), whether it got the signal itself or not.
3. The step is checkpointed (rank 0 writes and waits for the write to finish: synchronous,
   inside the grace), every rank meets at a barrier so nobody leaves before the checkpoint
   is durable, and leaves (``leave``).

Exit codes: ``EXIT_STOPPED`` (143, as a SIGTERM'd process) for a rank that was asked;
``EXIT_PEER_STOPPED`` for a rank that stops because a peer was asked. Both non-zero on
purpose: a torchrun agent that is not itself being stopped restarts its group, which
re-forms without the nodes that left and resumes from the emergency checkpoint. A rank
that leaves this way reports ``rank_exit`` with that reason, never a failure of its own.

Telling a stop request from a teardown: torchrun stops a group with the same SIGTERM when a
rank failed. With a peer dead or frozen the SIGTERM is that teardown (``request`` is refused,
the rank leaves at once as before, harness.train). With every peer alive it is a stop
request. torchrun also restarts a healthy group to admit a node waiting to join, which it
does only while the group is below its ``--nnodes`` maximum: there the stop is still taken
(nothing is lost) but reported as ``stop_requested`` only, not as a detected failure.

If the group cannot agree within ``failure.emergency_checkpoint_s`` (a peer that never
reaches the next collective), the rank leaves without a checkpoint, as before.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from chaos import probe
from harness.admission import group_below_max

__all__ = ["EXIT_PEER_STOPPED", "EXIT_STOPPED", "EmergencyStop", "StopVerdict"]

EXIT_STOPPED = 128 + signal.SIGTERM
EXIT_PEER_STOPPED = 77


@dataclass
class StopVerdict:
    """The group's decision, the same on every rank: stop after ``step``."""

    step: int
    asked: list[int]
    """Ranks that voted (got the stop request themselves)."""
    asked_here: bool

    @property
    def exit_code(self) -> int:
        return EXIT_STOPPED if self.asked_here else EXIT_PEER_STOPPED


@dataclass
class EmergencyStop:
    """One rank's side of the agreed stop (see the module docstring)."""

    rank: int
    timeout_s: float
    emit: Callable[..., None] = probe.emit
    on_expired: Callable[[], None] | None = None
    """Called (on a timer thread) when no stop step was agreed within ``timeout_s``;
    default: report and leave with ``EXIT_STOPPED``."""
    verdict: StopVerdict | None = None
    _requested: threading.Event = field(default_factory=threading.Event)
    _accepting: bool = False
    _timer: threading.Timer | None = None

    # -- the window in which a stop can be agreed: the training loop ---------------------
    def open(self) -> None:
        self._accepting = True

    def close(self) -> None:
        """The loop is over (the run finished): a pending request is moot."""
        self._accepting = False
        if self._timer is not None:
            self._timer.cancel()

    # -- SIGTERM --------------------------------------------------------------------------
    def request(self, signum: int, peers_alive: Callable[[], bool]) -> bool:
        """A SIGTERM arrived. True: the stop will be taken at an agreed step boundary (the
        caller returns and training goes on until then). False: leave at once (outside the
        loop, or a peer is dead or frozen: torchrun tearing down a failed group)."""
        if self._requested.is_set():
            return True
        if not self._accepting or not peers_alive():
            return False
        self._requested.set()
        name = signal.Signals(signum).name
        if group_below_max():
            self.emit("stop_requested", signal=name, notice=False,
                      reason=f"{name} with every peer alive while the elastic group is below its "
                             "maximum size (torchrun admitting a node, or a stop request)")
        else:
            src = probe.src()
            self.emit("detected", by=src, suspect=src, failure_class="crash", cause="stop_request",
                      reason=f"{name} with every peer alive: this rank's node or job is being stopped "
                             "(drain, preemption, scancel); checkpointing at the step the group agrees on")
            self.emit("stop_requested", signal=name, notice=True)
        self._timer = threading.Timer(self.timeout_s, self._expired)
        self._timer.daemon = True
        self._timer.start()
        return True

    def vote(self) -> bool:
        """This rank's vote in the step's collective."""
        return self._requested.is_set()

    # -- the agreed step ----------------------------------------------------------------
    def tally(self, step: int, votes: list[int]) -> StopVerdict | None:
        """The votes of ``step`` (identical on every rank): any vote stops the group there."""
        if votes and self.verdict is None and self._accepting:
            self.verdict = StopVerdict(step, sorted(votes), self.rank in votes)
            if self._timer is not None:
                self._timer.cancel()
        return self.verdict

    def leave(self, checkpoint: Callable[[], None], barrier: Callable[[], None],
              stop_watching: Callable[[], None] | None = None) -> None:
        """Checkpoint the agreed step, wait for every rank, exit. ``checkpoint`` saves the
        step and returns once it is written (a no-op on ranks that do not write); never
        returns."""
        verdict = self.verdict
        assert verdict is not None, "leave() before a stop step was agreed"
        if stop_watching is not None:
            stop_watching()  # the peers are about to leave on purpose, not crash
        t0 = time.perf_counter()
        code = verdict.exit_code
        why = "asked to stop (SIGTERM)" if verdict.asked_here else f"rank {verdict.asked[0]} was asked to stop"
        try:
            checkpoint()
            barrier()  # nobody leaves before the checkpoint is durable
        except Exception as exc:  # the stop still happens; the checkpoint is what failed
            self.emit("emergency_checkpoint", step=verdict.step, ok=False, asked=verdict.asked,
                      error=f"{type(exc).__name__}: {exc}"[:300])
            self._exit(code, f"{why}; the emergency checkpoint of step {verdict.step} failed: {exc}")
        self.emit("emergency_checkpoint", step=verdict.step, ok=True, asked=verdict.asked,
                  seconds=round(time.perf_counter() - t0, 6))
        self._exit(code, f"{why}; stopped after step {verdict.step} with an emergency checkpoint")

    # -- leaving ------------------------------------------------------------------------
    def _expired(self) -> None:
        if self.verdict is not None:
            return
        if self.on_expired is not None:
            self.on_expired()
            return
        self._exit(EXIT_STOPPED, f"no stop step agreed within {self.timeout_s:g} s of SIGTERM; "
                                 "leaving without an emergency checkpoint")

    def _exit(self, code: int, reason: str) -> None:
        self.emit("rank_exit", code=code, reason=reason)
        _close_probe()
        os._exit(code)


def _close_probe() -> None:
    try:
        probe.get().close()
    except Exception:  # noqa: BLE001 (leaving anyway: the events written so far are flushed)
        pass

