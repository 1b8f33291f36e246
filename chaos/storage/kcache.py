"""The kernel's cache of a fault-layer mount: entries and attributes kept while no rule is
armed, dropped before the first rule takes effect.

With caching off, every path lookup and every stat is a request to the daemon: about 100 of
the ~200 requests of one checkpoint save, each a round trip through Python. They must reach
the daemon whenever a rule could act on them (a rule on ``getattr``, a stall of every op, a
frozen crash point), but while no rule is armed the layer only passes them through, so the
kernel may keep what it looked up for ``CACHE_S``.

Arming goes the other way, in this order: the timeouts drop to 0 (new replies are not
cached), then the kernel forgets what it holds -- every entry below the mount's root (a
forgotten directory takes the entries under it along) and every inode's attributes and
pages -- and only then does the rule take effect. A rule thus sees every lookup and stat as
it did without caching. One window stays: a lookup whose reply was being sent in the very
instant of the switch can keep its entry for up to ``CACHE_S``; the operations on that file
(open, read, write, fsync, ...) still reach the rule, only its stats are answered from the
kernel for that long.

The kernel is told to forget only while nothing waits inside the layer (caching is on only
while no rule is armed): a notification takes the kernel's locks of the inode, which a
stalled operation would hold.

File pages too (``keep_pages``): until the first rule or crash point arms, an open keeps
what the kernel has cached of the file (libfuse's ``keep_cache``) and the kernel does not
drop a file's pages because its mtime moved (``auto_inval_data`` off: every write through
the layer moves it, so the read-back of a checkpoint just written came through the daemon
again, ~5 requests of 1 MiB per save). That is exact while every change to the backing files
goes through the layer: the mount is in place over them, and the layer's own changes behind
the kernel -- a drop of unfsynced data -- make the kernel forget. From the first arming on,
opens drop the pages again for the rest of the mount, as without caching: a page cached
while a rule acted (a write corrupted, or cut short, on its way to the backing file) would
otherwise outlive the rule, and forgetting at disarm could wait on an operation still held
by a frozen crash point.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["CACHE_S", "KernelCache", "cached_names"]

log = logging.getLogger(__name__)

CACHE_S = 1.0
"""How long the kernel may keep an entry or attributes while no rule is armed: longer than
one checkpoint save (whose lookups repeat within milliseconds), short enough that a file
changed below the mount (by its owner, not through it) shows within a second."""
_ROOT_ID = 1
"""FUSE_ROOT_ID: the node id of the mount's root in every FUSE file system."""
FUSE_CAP_AUTO_INVAL_DATA = 1 << 12
"""libfuse3's capability bit (fuse_common.h): drop a file's pages when its mtime changed."""


def cached_names(backing_fd: int) -> tuple[list[str], list[str]]:
    """What the kernel may hold of the tree below ``backing_fd``: the root's entry names, and
    the path (``/a/b``) of every file and directory, the root included."""
    roots = os.listdir(backing_fd)
    paths = ["/"]
    for top in roots:
        paths.extend(_walk(backing_fd, top))
    return roots, paths


def _walk(backing_fd: int, rel: str) -> Iterator[str]:
    yield "/" + rel
    try:
        fd = os.open(rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=backing_fd)
    except OSError:
        return  # a file (or gone meanwhile): nothing below it
    try:
        names = os.listdir(fd)
    finally:
        os.close(fd)
    for name in names:
        yield from _walk(backing_fd, f"{rel}/{name}")


class KernelCache:
    """The caching of one mount: timeouts in libfuse's config, forgetting via notifications.

    Unattached (no mount: FaultFS called directly, as the unit tests do) every method is a
    no-op that still keeps ``on`` true to the state it would have."""

    def __init__(self, timeout_s: float = CACHE_S) -> None:
        self.timeout_s = timeout_s
        self.on = False
        self.forgets = 0
        """How often the kernel was told to forget (the layer's state reports it)."""
        self.keep_pages = True
        """Whether an open may keep the file's cached pages: until the first arming."""
        self._lock = threading.Lock()
        self._config: Any = None
        self._lib: Any = None
        self._fuse: int | None = None
        self._session: int | None = None

    def attach(self, lib: Any, fuse: int, config: Any, conn: Any = None) -> None:
        """Called from the mount's ``init`` (libfuse's ``struct fuse``, its live config and the
        connection's capabilities, negotiated when ``init`` returns)."""
        if conn is not None:
            conn.want &= ~FUSE_CAP_AUTO_INVAL_DATA
        lib.fuse_invalidate_path.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.fuse_invalidate_path.restype = ctypes.c_int
        lib.fuse_get_session.argtypes = [ctypes.c_void_p]
        lib.fuse_get_session.restype = ctypes.c_void_p
        lib.fuse_lowlevel_notify_inval_entry.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p,
                                                         ctypes.c_size_t]
        lib.fuse_lowlevel_notify_inval_entry.restype = ctypes.c_int
        with self._lock:
            self._lib, self._fuse, self._config = lib, fuse, config
            self._session = lib.fuse_get_session(fuse)
            self._apply()

    def detach(self) -> None:
        """The mount is going away: no notification may touch libfuse after this."""
        with self._lock:
            self._lib = self._fuse = self._session = self._config = None

    def enable(self) -> None:
        with self._lock:
            self.on = True
            self._apply()

    def disable(self, backing_fd: int) -> None:
        """Stop caching and make the kernel forget what it cached meanwhile."""
        with self._lock:
            was_on, self.on = self.on, False
            self.keep_pages = False
            self._apply()
            if was_on:
                self._forget(backing_fd)

    def forget(self, backing_fd: int) -> None:
        """The files changed behind the kernel (unfsynced data dropped): forget them, if cached."""
        with self._lock:
            if self.on:
                self._forget(backing_fd)

    def _apply(self) -> None:
        if self._config is not None:
            timeout = self.timeout_s if self.on else 0.0
            self._config.entry_timeout = timeout
            self._config.attr_timeout = timeout

    def _forget(self, backing_fd: int) -> None:
        self.forgets += 1
        if self._lib is None:
            return
        roots, paths = cached_names(backing_fd)
        # Inodes first (attributes, pages), then the root's entries, whose removal takes the
        # entries below them along; ENOENT: the kernel did not hold it.
        for path in paths:
            self._lib.fuse_invalidate_path(self._fuse, path.encode("utf-8", "surrogateescape"))
        for name in roots:
            raw = name.encode("utf-8", "surrogateescape")
            self._lib.fuse_lowlevel_notify_inval_entry(self._session, _ROOT_ID, raw, len(raw))
