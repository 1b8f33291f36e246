"""A journal whose lines are written at once and synced to disk by a thread of its own.

The fault journal's records must reach the disk in a set order: ``apply`` before the fault
is touched, ``applied`` and ``reverted`` after. A SIGKILLed controller loses nothing it has
written (the kernel holds it); a host that dies loses what was not synced, which matters
when the faults act on other hosts (docker hosts, Slurm nodes). Only ``apply`` is a
precondition of anything. On a shared disk one fsync takes 4 ms at the median and 100-300 ms
when another process flushes: the run loop that synced each record inline injected a
time-triggered fault that late whenever the previous fault's record was still syncing
(``benchmarks/harness_bench.py --only precision``).

``JournalWriter.append`` writes the line in the caller's thread (a write to the page cache,
microseconds: a reader and a SIGKILL see the records in order, as before) and returns its
sequence number; a thread of its own then ``fdatasync``s, once for whatever was written
meanwhile (a group commit). ``wait(seq)`` blocks until that record, and every one before
it, is synced: what a caller whose next action depends on it (an inject) calls, ideally long
after the ``append`` (``chaos.runner.lifecycle.FaultLifecycle.arm``). A write or sync that fails is
raised by every later ``wait`` and by ``close``: nothing that waits for durability proceeds
without it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

__all__ = ["JournalWriteError", "JournalWriter", "journal_line", "needs_newline"]


class JournalWriteError(OSError):
    """The journal could not be written or synced: nothing may act as if it were."""


def journal_line(record: dict[str, Any]) -> bytes:
    """One journal record as written: stamped ``t`` now (when what it tells happened), a
    JSON line. Both ways of writing a journal (``chaos.runfiles.rollback.append_record``, synced at
    once, and ``JournalWriter``) write this, so a reader sees one format."""
    return (json.dumps({"t": time.time(), **record}, default=str) + "\n").encode()


def needs_newline(fd: int) -> bool:
    """Whether the file open on ``fd`` ends in a line that was cut short (a full disk, a
    failing one): the next record must start on a line of its own, or it is lost with it."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _sync(fd: int) -> None:
    # An append changes only the file's data and size: fdatasync flushes both, and skips
    # the timestamps fsync would also write.
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


class JournalWriter:
    """Appends JSON lines to ``path`` in order; syncs them from a background thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._cond = threading.Condition()
        self._fd = -1
        self._written = 0
        """Sequence number of the last record written (the first is 1)."""
        self._durable = 0
        """Sequence number of the last record synced."""
        self._error: BaseException | None = None
        self._closing = False
        self._thread: threading.Thread | None = None

    def append(self, record: dict[str, Any]) -> int:
        """Write ``record`` (stamped ``t`` now, when what it tells happened); its sequence
        number. After a failed write nothing more is written, but this does not raise: a
        revert that went through must not fail for its record (``wait``/``close`` do)."""
        data = journal_line(record)
        with self._cond:
            if self._closing:
                raise JournalWriteError(f"{self.path}: journal already closed")
            if self._error is None:
                try:
                    if self._fd < 0:
                        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
                        if needs_newline(self._fd):
                            data = b"\n" + data
                    while data:
                        data = data[os.write(self._fd, data):]
                except OSError as exc:
                    self._error = exc
            self._written += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="journal-sync", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return self._written

    @property
    def failure(self) -> OSError | None:
        """The write or sync that failed, if one did (the run loop polls it: a journal that
        cannot be written ends the run as a tool error before a fault depends on it)."""
        with self._cond:
            return self._error if isinstance(self._error, OSError) else None

    def durable(self, seq: int) -> bool:
        """Whether record ``seq`` (and every one before it) is synced."""
        with self._cond:
            self._raise_error()
            return self._durable >= seq

    def wait(self, seq: int | None = None) -> None:
        """Block until record ``seq`` (default: every record written so far) is synced."""
        with self._cond:
            target = self._written if seq is None else seq
            while self._durable < target and self._error is None:
                self._cond.wait()
            self._raise_error()

    def close(self) -> None:
        """Sync everything written, stop the thread; raises a write or sync that failed."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._cond:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise JournalWriteError(f"{self.path}: {self._error}") from self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._durable >= self._written and not self._closing and self._error is None:
                    self._cond.wait()
                if self._error is not None or self._durable >= self._written:
                    return  # failed (every waiter has been told), or closing with all synced
                target, fd = self._written, self._fd
            try:
                _sync(fd)  # covers every write that returned before it began
            except OSError as exc:
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return
            with self._cond:
                self._durable = target
                self._cond.notify_all()
