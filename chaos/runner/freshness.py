"""Checkpoint freshness, the controller's half: read every checkpoint the job reports saved.

A checkpoint is fresh when it holds the state of the step it claims. The job cannot be asked
(a stale save believes it is fresh: NeMo-RL #3312's async save snapshotted the weights after
the optimizer step of a later step and wrote them under the earlier step), so trainchaos reads
the bytes: on each ``ckpt_save_end`` that names a ``path``, a reader thread asks the workload
(``Workload.read_checkpoint``, by format for most kinds: ``chaos.ckptformat``) for the step the
checkpoint claims and the digest of the model state it holds, and records a ``ckpt_image``
event. ``chaos.metrics.families.freshness`` then compares each image with the fault-free
twin's ``state_digest`` at that step.

Read at once, because a keep-last-K job prunes its checkpoints; off the controller's loop,
because a storage fault may stall the very file system the reader goes through (the reader
then gives up at the end of the run, and that checkpoint stays unchecked, never "stale").

``FreshnessHandler`` plugs the reader into a run (``chaos.runner.handlers``): it starts with
the run, is offered each event, and is closed once the job is torn down.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING, Any

from chaos.runner.handlers import RunHandler

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext
    from chaos.runfiles.events import Event
    from chaos.runfiles.record import RunStart
    from chaos.runner.state import RunProgress
    from chaos.workload.base import Workload

__all__ = ["CheckpointReader", "FreshnessHandler"]

log = logging.getLogger(__name__)

_CLOSE = None


class CheckpointReader:
    """Reads each saved checkpoint of one run in a thread; ``emit(kind, **fields)`` records
    the ``ckpt_image`` events (the injector's probe: thread-safe)."""

    def __init__(self, workload: Workload, emit: Any) -> None:
        self.workload = workload
        self.emit = emit
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._seen: set[str] = set()
        self._thread = threading.Thread(target=self._work, name="ckpt-reader", daemon=True)
        self._thread.start()

    def offer(self, event: Event) -> None:
        """Queue the checkpoint a ``ckpt_save_end`` event names (each path once)."""
        path = event.get("path")
        if event.get("kind") != "ckpt_save_end" or not isinstance(path, str) or path in self._seen:
            return
        self._seen.add(path)
        self._queue.put(event)

    def close(self, timeout_s: float = 30.0) -> bool:
        """Read what is queued (at most ``timeout_s``); False when the reader was still stuck."""
        self._queue.put(_CLOSE)
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _work(self) -> None:
        while (event := self._queue.get()) is not _CLOSE:
            self._read(event)

    def _read(self, event: Event) -> None:
        path = str(event["path"])
        fields: dict[str, Any] = {"path": path, "tier": event.get("tier"), "saved_by": event.get("src"),
                                  "saved_incarnation": event.get("incarnation"), "saved_t": event.get("t"),
                                  "step": event.get("step")}
        try:
            image = self.workload.read_checkpoint(path)
        except (OSError, ValueError) as exc:
            fields["error"] = f"{type(exc).__name__}: {exc}"[:300]
        except Exception as exc:  # noqa: BLE001 - a reader's bug must not break the run
            log.exception("reading checkpoint %s failed", path)
            fields["error"] = f"reader failed: {type(exc).__name__}: {exc}"[:300]
        else:
            if image is None:
                return  # no format the workload knows reads it: nothing to record
            # A checkpoint that records no step (a bare state dict) is taken at the saver's word.
            fields.update(step=image.step if image.step is not None else event.get("step"), digest=image.digest)
        self.emit("ckpt_image", **fields)


class FreshnessHandler(RunHandler):
    """Reads each checkpoint a run saves (runs with a twin whose digests say what is fresh)."""

    def __init__(self, workload: Workload, progress: RunProgress) -> None:
        self.workload = workload
        self.progress = progress
        self.reader: CheckpointReader | None = None

    def run_started(self, start: RunStart, ctx: InjectionContext) -> None:
        self.reader = CheckpointReader(self.workload, ctx.emit)

    def event(self, ev: Event) -> None:
        if ev.get("kind") == "ckpt_save_end" and self.reader is not None:
            self.reader.offer(ev)

    def run_stopped(self) -> None:
        if self.reader is not None and not self.reader.close():
            self.progress.note("checkpoint reader still busy at the end: later checkpoints unchecked")
