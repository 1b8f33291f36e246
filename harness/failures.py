"""How a rank reports a failure it detected and leaves: the ``Trainer``'s failure side.

Every detector of the harness (peer watchdog, progress watchdog, data and save deadlines,
an exception out of the training step, SIGTERM from torchrun) ends in ``fail``: one
``detected`` event (who noticed, what failed, whom it blames), then ``os._exit`` at once,
so that torchrun restarts the group from the last checkpoint (harness.train).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from chaos import probe
from harness import checkpoint as ckpt
from harness.admission import group_may_be_admitting
from harness.config import HarnessConfig
from harness.dist import DistEnv
from harness.health import Diagnosis, LivenessServer, PeerAddress, Watchdog, diagnose_peers
from harness.preempt import EmergencyStop
from harness.progress import StallVerdict

__all__ = ["EXIT_CORRUPTION", "EXIT_FAILURE", "EXIT_WATCHDOG", "FailureHandling"]


EXIT_FAILURE = 1
EXIT_WATCHDOG = 75
EXIT_CORRUPTION = 76
# Where torch would surface a real device fault; the probe's injected one looks the same.
_DEVICE_MARKERS = ("CUDA error", "Xid", "NCCL error", "device-side assert", "ECC error")
# torch.cuda.OutOfMemoryError's message: the device's allocator refused, not a broken device.
_OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError")
_PEER_MARKERS = ("Connection closed by peer", "Connection reset", "Broken pipe", "connectFullMesh",
                 "Socket closed", "Connection refused", "EOF")
_TIMEOUT_MARKERS = ("Timed out", "timed out", "Timeout", "timeout")
ADMISSION_TEARDOWN_WAIT_S = 5.0
"""How long a rank whose peer was torn down to admit a node waits for its own agent's SIGTERM:
each agent stops its group at its own monitor tick (0.1 s here), seconds apart on a loaded
host. Paid for nothing only when a peer is stopped for another reason just as a node waits."""


class FailureHandling:
    """The failure reports of a training rank (mixed into ``harness.train.Trainer``, which
    sets these attributes)."""

    cfg: HarnessConfig
    env: DistEnv
    peers: list[PeerAddress]
    liveness: LivenessServer | None
    watchdog: Watchdog | None
    stop: EmergencyStop | None
    _failing: threading.Lock
    _sigterm_diagnosis: list[Diagnosis] | None

    # -- failure reporting --------------------------------------------------------------
    def fail(self, reason: str, suspect: str | None, failure_class: str, code: int,
             then: Callable[[], None] | None = None, **details: Any) -> None:
        """Report a detected failure once and leave at once (no teardown that could block).

        ``then`` runs after the report and before the exit: whatever it causes (a peer
        killed) must not be observed by others before this rank's diagnosis is on record.
        ``details`` go into the ``detected`` event (which detector, at which step...).
        """
        if not self._failing.acquire(blocking=False):
            return
        probe.emit("detected", by=probe.src(), reason=reason, suspect=suspect, failure_class=failure_class,
                   **details)
        if then is not None:
            then()
        if suspect != probe.src():
            self._farewell()  # another rank's failure: this exit is not one to blame
        probe.emit("rank_exit", code=code, reason=reason)
        probe.get().close()
        sys.stderr.write(f"[harness rank {self.env.rank}] {failure_class}: {reason}\n")
        sys.stderr.flush()
        os._exit(code)

    def _kill_hung_node_mate(self, rank: int) -> Callable[[], None]:
        """What to do once a hang of ``rank`` is on record (``fail(..., then=...)``).

        A frozen process ignores SIGTERM, so torchrun would wait out its whole stop grace
        period (30 s) before SIGKILL. A node's health agent kills its own hung ranks; a rank
        on the same node plays that part. Other nodes' ranks are never touched.
        """
        peer = next(p for p in self.peers if p.rank == rank)

        def kill() -> None:
            if peer.node == self.env.node:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(peer.pid, signal.SIGKILL)

        return kill

    def _on_watchdog(self, diag: Diagnosis) -> None:
        if diag.failure_class == "crash":
            reason = f"peer monitor: {diag.detail}"
        else:
            reason = f"watchdog: no heartbeat from rank {diag.rank} for {self.cfg.failure.watchdog_s:g} s; {diag.detail}"
        then = self._kill_hung_node_mate(diag.rank) if diag.failure_class == "hang" else None
        self.fail(reason, f"rank-{diag.rank}", diag.failure_class, EXIT_WATCHDOG, then=then)

    def _on_stall(self, verdict: StallVerdict) -> None:
        """The progress watchdog (harness.progress) found the loop stuck and named why."""
        then = (self._kill_hung_node_mate(verdict.suspect)
                if verdict.failure_class == "hang" and verdict.suspect not in (None, self.env.rank) else None)
        self.fail(f"progress watchdog: no step completed for {self.cfg.progress.timeout_s:g} s; {verdict.reason}",
                  None if verdict.suspect is None else f"rank-{verdict.suspect}", verdict.failure_class,
                  EXIT_WATCHDOG, then=then, detector="progress", cause=verdict.cause)

    def _on_sigterm(self, signum: int) -> None:
        """torchrun is stopping this group (a failure elsewhere, or the job is ending).

        A node-mate that is frozen would hold the restart for torchrun's whole stop grace
        period (30 s): this rank may be the last one left on the node able to notice, so it
        checks its node-mates once and kills a hung one, reporting it, before leaving.
        """
        if self.stop is not None and self.stop.request(signum, self._every_peer_alive):
            return  # training goes on to the agreed stop step (harness.preempt)
        local = [p for p in self.peers if p.node == self.env.node]
        if self._sigterm_diagnosis is not None:  # every peer was just diagnosed: no second wait
            mates = {p.rank for p in local}
            hung = [d for d in self._sigterm_diagnosis if d.failure_class == "hang" and d.rank in mates]
        else:
            hung = [d for d in diagnose_peers(local, timeout_s=1.0) if d.failure_class == "hang"] if local else []
        if hung:
            diag = hung[0]
            self.fail(f"stopping on SIGTERM: {diag.detail}", f"rank-{diag.rank}", "hang", 128 + signum,
                      then=self._kill_hung_node_mate(diag.rank))
        self._farewell()
        probe.emit("rank_exit", code=128 + signum, reason="terminated by torchrun (SIGTERM)")
        probe.get().close()
        os._exit(128 + signum)

    def _farewell(self) -> None:
        """Tell the peers watching this rank that it leaves on purpose (health.FAREWELL), so
        that none of them, seeing this exit and the failure that caused it at once, blames
        this one."""
        if self.liveness is not None:
            self.liveness.farewell()

    def _every_peer_alive(self) -> bool:
        if self.watchdog is not None and self.watchdog.first_death() is not None:
            return False
        self._sigterm_diagnosis = diagnose_peers(self.peers, timeout_s=1.0)
        return not self._sigterm_diagnosis

    def _on_data_stall(self, path: str, seconds: float) -> None:
        """This rank's input pipeline is stuck on storage: a data-path failure of this rank,
        not a hang for a peer's collective to time out on."""
        self.fail(f"data loader stalled: a read of {path} not done after {seconds:.1f} s "
                  f"(data_deadline_s={self.cfg.data_deadline_s:g})", probe.src(), "storage",
                  EXIT_FAILURE, detector="data_deadline", path="data", file=path)

    def _on_save_deadline(self, step: int, seconds: float, tier: str) -> None:
        """A save this rank owns is stuck (stalled storage): its own storage failure, reported
        before a peer's collective times out on it and calls it a hang."""
        self.fail(f"checkpoint save of step {step} on the {tier} tier not done after {seconds:.1f} s "
                  f"(checkpoint.save_deadline_s={self.cfg.checkpoint.save_deadline_s:g})",
                  probe.src(), "storage", EXIT_FAILURE, detector="save_deadline", step=step, tier=tier)

    def _await_admission_teardown(self, peer: int) -> None:
        """Rank ``peer`` left with a farewell, nobody is down, and a node waits to join: its
        agent stopped it to admit that node (harness.admission), and this rank's agent is about
        to stop this one for the same reason. Its SIGTERM ends this rank as a teardown
        (``_on_sigterm``, from the SIGTERM guard thread), with no failure to report; only if it
        does not come within ``ADMISSION_TEARDOWN_WAIT_S`` is the peer blamed after all."""
        sys.stderr.write(f"[harness rank {self.env.rank}] rank {peer} left while a node waits to join: "
                         f"waiting up to {ADMISSION_TEARDOWN_WAIT_S:g} s for this group's restart\n")
        sys.stderr.flush()
        time.sleep(ADMISSION_TEARDOWN_WAIT_S)

    def classify(self, exc: BaseException) -> tuple[str, str | None, str]:
        """(failure_class, suspect, reason) for an exception raised by the training step."""
        text = f"{type(exc).__name__}: {exc}".strip()
        short = text.splitlines()[0][:300] if text else type(exc).__name__
        if any(m in text for m in _OOM_MARKERS):
            return "oom", probe.src(), f"device out of memory on this rank: {short}"
        if isinstance(exc, probe.DeviceError) or any(m in text for m in _DEVICE_MARKERS):
            return "device", probe.src(), f"device error on this rank: {short}"
        if isinstance(exc, ckpt.CheckpointError | OSError) and not isinstance(exc, ConnectionError):
            return "storage", probe.src(), f"checkpoint storage failed: {short}"
        if any(m in text for m in _PEER_MARKERS + _TIMEOUT_MARKERS):
            return self._classify_peer_failure(text, short)
        return "unknown", probe.src(), f"unexpected error: {short}"

    def _classify_peer_failure(self, text: str, short: str) -> tuple[str, str | None, str]:
        """A collective failed: blame the first peer that died on its own; else the peer a
        fresh diagnosis finds failed (hung, cut off, gone), one that left on purpose last.

        A peer that said farewell (health.FAREWELL) left because it detected a failure or
        was torn down: when it is the only one gone (it saw a peer hang and left first),
        the diagnosis finds the hung peer it left over; when nobody is down and a node waits
        to join, its agent was admitting that node and this rank's own teardown is coming
        (``_await_admission_teardown``)."""
        left: set[int] = set()
        death = None
        if self.watchdog is not None:
            self.watchdog.settle()
            left = self.watchdog.farewells()
            death = self.watchdog.first_death()
        if death is not None and death[0] not in left:
            # Several peers may be gone by now (agents tear down a failed node's other
            # ranks); the first one whose connection dropped is the root cause.
            return "crash", f"rank-{death[0]}", f"collective failed ({short}); rank {death[0]} died first"
        bad = diagnose_peers(self.peers, timeout_s=1.0, left=left) if self.peers else []
        if bad and (bad[0].rank not in left or death is None):
            return bad[0].failure_class, f"rank-{bad[0].rank}", f"collective failed ({short}); {bad[0].detail}"
        if death is not None:
            if group_may_be_admitting():
                self._await_admission_teardown(death[0])
            return ("crash", f"rank-{death[0]}",
                    f"collective failed ({short}); rank {death[0]} left first, no other peer is down")
        kind = "hang" if any(m in text for m in _TIMEOUT_MARKERS) else "crash"
        return kind, None, f"collective failed ({short}); every peer answers"
