"""Durable JSON-lines appends from a thread of their own, so the run loop never waits on a disk.

The fault journal's records must be on disk (fsynced) in a set order: ``apply`` before the
fault is touched, ``applied`` and ``reverted`` after. Only the first is a precondition of
anything; the others merely must not be lost for long. On a shared disk one fsync takes
4 ms at the median and, when another process flushes, 100-300 ms: the run loop that did
them inline injected a time-triggered fault that late whenever the previous fault's record
was still being synced (``benchmarks/harness_bench.py --only precision``).

``JournalWriter`` takes records in order (``append`` returns the record's sequence number at
once) and writes them from its own thread, each batch of whatever queued meanwhile with one
``fdatasync`` (a group commit: a burst costs one sync, not one per record). ``wait(seq)``
blocks until that record, and so every record before it, is on disk: what a caller whose
next action depends on durability (an inject) calls, ideally long after the ``append``
(``chaos.lifecycle.FaultLifecycle.arm``). A write that fails is raised by every later
``wait`` and by ``close``: nothing that waits for durability proceeds without it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

__all__ = ["JournalWriter", "JournalWriteError"]


class JournalWriteError(OSError):
    """The journal could not be written or synced: nothing may act as if it were."""


def _sync(fd: int) -> None:
    # An append changes only the file's data and size: fdatasync flushes both, and skips
    # the timestamps fsync would also write.
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


class JournalWriter:
    """Appends JSON lines to ``path`` from a background thread, durably and in order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._cond = threading.Condition()
        self._queue: list[str] = []
        self._queued = 0
        """Sequence number of the last record handed to ``append``."""
        self._durable = 0
        """Sequence number of the last record on disk."""
        self._error: BaseException | None = None
        self._closing = False
        self._thread: threading.Thread | None = None

    def append(self, record: dict[str, Any]) -> int:
        """Queue ``record`` (stamped ``t`` now, when what it tells happened); its sequence number."""
        line = json.dumps({"t": time.time(), **record}, default=str) + "\n"
        with self._cond:
            if self._closing:
                raise JournalWriteError(f"{self.path}: journal already closed")
            # After a failed write nothing more is written, but appending does not raise: a
            # revert that went through must not fail for its record (``wait``/``close`` do).
            self._queue.append(line)
            self._queued += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return self._queued

    def durable(self, seq: int) -> bool:
        """Whether record ``seq`` (and every one before it) is on disk."""
        with self._cond:
            self._raise_error()
            return self._durable >= seq

    def wait(self, seq: int | None = None) -> None:
        """Block until record ``seq`` (default: every record queued so far) is on disk."""
        with self._cond:
            target = self._queued if seq is None else seq
            while self._durable < target and self._error is None:
                self._cond.wait()
            self._raise_error()

    def close(self) -> None:
        """Write everything queued, then stop the thread; raises a write that failed."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._cond:
            self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise JournalWriteError(f"{self.path}: {self._error}") from self._error

    def _run(self) -> None:
        fd = -1
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._closing:
                        self._cond.wait()
                    if not self._queue:
                        return
                    batch, self._queue = self._queue, []
                    last = self._queued
                if fd < 0:
                    fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
                data = "".join(batch).encode()
                while data:
                    data = data[os.write(fd, data):]
                _sync(fd)
                with self._cond:
                    self._durable = last
                    self._cond.notify_all()
        except BaseException as exc:  # every waiter must learn it: none may act as if written
            with self._cond:
                self._error = exc
                self._cond.notify_all()
        finally:
            if fd >= 0:
                os.close(fd)
