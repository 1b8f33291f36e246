"""The controller's wait between two looks at the run: woken by a file written, not a timer.

The run loop used to sleep 50 ms between looks, so an event (a rank's ``step_end`` that makes
a fault due, a rank holding at a step for the controller's confirmation) waited 25 ms on
average before anyone read it. ``Wakeup.wait`` returns as soon as a file in a watched
directory is written (the probe flushes each event, so each event is one write), or after
the timeout the loop computes from what is due next (a timed trigger, a revert, the run's
deadline), whichever comes first.

Linux's inotify, through libc with ctypes (the standard library has no binding). Where it
is unavailable (another OS, no libc symbol, the per-user instance or watch limit reached,
a directory on a network file system that another host writes) the wait falls back to a
plain sleep of at most ``fallback_s``: the old behaviour, never worse. ``mode`` says which.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import sys
import time
from collections.abc import Collection

__all__ = ["Wakeup"]

# <sys/inotify.h>
_IN_MODIFY = 0x00000002
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_EVENT_HEADER = struct.calcsize("iIII")


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


class Wakeup:
    """Waits until a watched directory sees a write, or a timeout (``fallback_s`` polling
    without inotify). ``watch`` may be called at any time; a directory is watched once.

    Each directory belongs to a named group, and a wait says which groups may wake it: the
    loop asks for a group only while a write there could make something due (every event
    of a busy job waking the controller would cost CPU the job needs)."""

    def __init__(self, fallback_s: float = 0.05, min_gap_s: float = 0.0) -> None:
        self.fallback_s = fallback_s
        self.min_gap_s = min_gap_s
        """The shortest time between two returns: bounds the loop's rate (and its CPU) when
        files are written faster than anyone needs to look."""
        self._watched: set[str] = set()
        self._groups: dict[int, str] = {}
        self._last = 0.0
        self._fd = -1
        self._libc = _libc()
        if self._libc is not None:
            fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            self._fd = fd if fd >= 0 else -1

    @property
    def mode(self) -> str:
        """``inotify`` or ``poll`` (the fallback)."""
        return "inotify" if self._fd >= 0 else "poll"

    def watch(self, directory: str, group: str = "files") -> None:
        """Wake on writes to files directly in ``directory`` (once it exists; else later)."""
        if directory in self._watched or self._fd < 0 or not os.path.isdir(directory):
            return
        assert self._libc is not None
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), _MASK)
        if wd < 0:
            # Out of watches (fs.inotify.max_user_watches) or a file system without it: the
            # timer keeps the loop going, as it did before inotify.
            self.close()
            return
        self._watched.add(directory)
        self._groups[wd] = group

    def wait(self, timeout_s: float, groups: Collection[str] = ("files",)) -> bool:
        """Block until a directory of one of ``groups`` sees a write (True) or ``timeout_s``
        passes; writes elsewhere are read and ignored."""
        timeout_s = max(timeout_s, 0.0)
        if self.min_gap_s:
            gap = self._last + self.min_gap_s - time.monotonic()
            if gap > 0:
                time.sleep(min(gap, timeout_s))
                timeout_s = max(timeout_s - gap, 0.0)
        woken = False
        if self._fd < 0:
            time.sleep(min(timeout_s, self.fallback_s))
        else:
            deadline = time.monotonic() + timeout_s
            while not woken:
                remaining = deadline - time.monotonic()
                try:
                    ready, _, _ = select.select([self._fd], [], [], max(remaining, 0.0))
                except InterruptedError:
                    ready = []
                if not ready:
                    break
                woken = any(self._groups.get(wd) in groups for wd in self._drain())
                if remaining <= 0 or self._fd < 0:
                    break
        self._last = time.monotonic()
        return woken

    def _drain(self) -> set[int]:
        """Read every pending notification (one wake-up for a burst of writes); the watches
        they came from."""
        wds: set[int] = set()
        while True:
            try:
                data = os.read(self._fd, 64 * (_EVENT_HEADER + 256))
            except BlockingIOError:
                return wds
            except OSError:
                self.close()
                return wds
            if not data:
                return wds
            offset = 0
            while offset + _EVENT_HEADER <= len(data):
                wd, _mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                wds.add(wd)
                offset += _EVENT_HEADER + length

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Wakeup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
