"""The pass-through file system: every operation goes to the directory it is mounted over,
after the active rules (``chaos.storage.rules``) had their say.

It is mounted *in place*: the daemon opens the directory first and then mounts over it, so
the workload keeps its paths and the bytes stay in the real directory (readable after
unmount, by the next incarnation, by ``trainchaos report``). Every backing call is relative
to that directory's file descriptor (``dir_fd=``), which the mount cannot shadow.

Unfsynced data (``track_unfsynced``): like LazyFS, the layer remembers, per file, what was
written since that file's last fsync -- the old bytes of every overwritten range and the old
size, with a duplicate descriptor so a rename or unlink cannot lose the file -- and
``drop_unfsynced`` (a crash or power loss of the node) writes the old bytes back. Only file
data is at risk; creations, renames and unlinks are durable at once (what ext4 in
``data=ordered`` mode gives after its journal commit, not a stricter file system's worst case).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import threading
from collections.abc import Callable
from typing import Any

from chaos.storage.crashpoints import CrashPoint
from chaos.storage.kcache import KernelCache
from chaos.storage.rules import Caller, Decision, Rule, RuleSet, flip

__all__ = ["FaultFS", "UnfsyncedTracker"]

log = logging.getLogger(__name__)


class _Undo:
    """What a file held before its unfsynced writes: old size and overwritten ranges."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.ranges: list[tuple[int, bytes]] = []
        self.lo: int | None = None
        self.hi = 0
        """The extent the unfsynced writes covered (for a torn write's cut)."""


class UnfsyncedTracker:
    """Per backing inode, the undo log of writes not yet fsynced."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[tuple[int, int], _Undo] = {}

    def before_write(self, fd: int, offset: int, length: int) -> None:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with self._lock:
            undo = self._files.get(key)
            if undo is None:
                # A descriptor of our own on the same inode, readable and writable whatever
                # the caller opened it for, that survives the caller's close, rename, unlink.
                own = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
                undo = self._files[key] = _Undo(own, st.st_size)
            undo.lo = offset if undo.lo is None else min(undo.lo, offset)
            undo.hi = max(undo.hi, offset + length)
            # Bytes past the old size need no saving: truncating to the old size undoes them.
            end = min(offset + length, undo.size)
            if end > offset:
                undo.ranges.append((offset, os.pread(undo.fd, end - offset, offset)))

    def synced(self, fd: int) -> None:
        st = os.fstat(fd)
        with self._lock:
            undo = self._files.pop((st.st_dev, st.st_ino), None)
        if undo is not None:
            os.close(undo.fd)

    def drop(self, torn: dict[str, Any] | None = None) -> int:
        """Undo every unfsynced write (newest first); returns the files rolled back.

        ``torn`` ({fraction, seed}): a torn write instead -- of each file's unfsynced extent
        only the first ``fraction`` persists (seeded per file when fraction is None), the
        rest reverts, as when a crash cuts a write-back short."""
        with self._lock:
            files, self._files = self._files, {}
        rng = random.Random(torn.get("seed", 0)) if torn is not None else None
        for undo in files.values():  # in the order of first write: the seeded draws repeat
            try:
                cut = 0
                if rng is not None and torn is not None and undo.lo is not None:  # rng: torn's
                    fraction = torn.get("fraction")
                    fraction = rng.random() if fraction is None else float(fraction)
                    cut = undo.lo + int((undo.hi - undo.lo) * fraction)
                for offset, old in reversed(undo.ranges):
                    if offset + len(old) > cut:
                        start = max(offset, cut)
                        os.pwrite(undo.fd, old[start - offset:], start)
                size = os.fstat(undo.fd).st_size
                os.ftruncate(undo.fd, min(size, max(undo.size, cut)))
                os.fsync(undo.fd)
            finally:
                os.close(undo.fd)
        return len(files)

    def pending(self) -> int:
        with self._lock:
            return len(self._files)


_PASS = Decision()
"""The decision of every operation while no rule is armed (shared: nothing changes it)."""


def _rel(path: str | None) -> str:
    rel = (path or "/").lstrip("/")
    return rel or "."


class FaultFS:
    """mfusepy ``Operations`` over the directory ``backing_fd`` refers to."""

    use_ns = True

    def __init__(self, backing_fd: int, caller_of: Callable[[], Caller],
                 track_unfsynced: bool = False) -> None:
        self.fd = backing_fd
        self.caller_of = caller_of
        self.rules = RuleSet()
        self.tracker = UnfsyncedTracker() if track_unfsynced else None
        self.hits: dict[str, int] = {}
        self._changed = threading.Condition()
        self._closing = False
        self.crash: CrashPoint | None = None
        """A crash armed at one point of one save (``chaos.storage.crashpoints``)."""
        self._paths: dict[int, str] = {}
        """The path each open file handle was opened by (a write or flush may come without one)."""
        self._thaws = 0
        self.kcache = KernelCache()
        """The kernel's entry/attribute cache: on only while nothing is armed (``chaos.storage.kcache``)."""
        self.kcache.enable()

    # -- rules --------------------------------------------------------------------------
    def set_rules(self, rules: RuleSet) -> None:
        if rules.rules:
            self._arming()
        with self._changed:
            self.rules = rules
            self._changed.notify_all()
        self._cache_while_idle()

    def _arming(self) -> None:
        """Before a rule or a crash point acts: the kernel stops caching and forgets what it
        holds, so every lookup and stat reaches the layer again."""
        self.kcache.disable(self.fd)

    def _cache_while_idle(self) -> None:
        if not self.rules.rules and self.crash is None:
            self.kcache.enable()

    def destroy(self, path: str) -> None:
        """The mount is going away (libfuse's last call): no cache notification after this."""
        self.kcache.detach()

    def shutdown(self) -> None:
        """Release every stalled operation (the layer is going away)."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()

    def arm_crash_point(self, spec: dict[str, Any] | None, emit: Callable[..., None]) -> None:
        """Arm (or, with None, disarm) a crash at one point of one save."""
        if spec is None:
            self.crash = None
        elif self.crash is None or self.crash.spec != spec:
            self._arming()
            self.crash = CrashPoint(spec, emit)
        self._cache_while_idle()

    def _frozen_wait(self) -> None:
        """Block while the node is "off"; then fail: the caller was killed with it."""
        with self._changed:
            crash = self.crash
            if crash is not None and crash.frozen:  # else the thaw came first: still failed
                thaws = self._thaws
                self._changed.wait_for(lambda: self._closing or self._thaws != thaws)
        raise OSError(errno.EIO, "the node lost power here (crash point)")

    def _op_done(self, op: str, path: str | None, nbytes: int = 0) -> None:
        crash = self.crash
        if crash is not None:
            crash.after_op(op, _rel(path), nbytes)

    def _gate(self, op: str, path: str | None, nbytes: int = 0, crash_op: str | None = None) -> Decision:
        """The crash point's and the rules' say on one operation (``crash_op``: its name as a
        crash point counts it, where that is not the rules' name: a flush that ends a file's
        writes is a ``close``)."""
        crash = self.crash
        if crash is not None and (crash.frozen or crash.before(crash_op or op, _rel(path))):
            self._frozen_wait()
        rules = self.rules
        if not rules.rules:
            return _PASS
        decision = rules.decide(op, _rel(path), self.caller_of(), nbytes)
        for rule_id in decision.hits:
            self.hits[rule_id] = self.hits.get(rule_id, 0) + 1
        for rule in decision.stall:
            # Blocked until the rule is removed (the fault reverted), as an operation on a
            # hung NFS server or a stalled block device waits for it to come back.
            def released(r: Rule = rule) -> bool:
                return self._closing or r not in self.rules.rules

            with self._changed:
                self._changed.wait_for(released)
        if decision.sleep_s > 0:
            with self._changed:
                self._changed.wait_for(lambda: self._closing, timeout=decision.sleep_s)
        if decision.errno is not None:
            raise OSError(decision.errno, os.strerror(decision.errno))
        return decision

    # -- metadata -----------------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = self.stat(path, fh)
        return {key: getattr(st, key) for key in (
            "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_blocks",
            "st_atime_ns", "st_mtime_ns", "st_ctime_ns")} | {
            "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

    def stat(self, path: str | None, fh: int | None = None) -> os.stat_result:
        """``getattr`` as the stat result itself (the mount copies it into the kernel's
        reply without a mapping in between: a lookup is a getattr, the most frequent request)."""
        self._gate("getattr", path)
        return os.fstat(fh) if fh is not None else os.stat(_rel(path), dir_fd=self.fd, follow_symlinks=False)

    def access(self, path: str, amode: int) -> int:
        if not os.access(_rel(path), amode, dir_fd=self.fd):
            raise OSError(errno.EACCES, "access denied")
        return 0

    def readdir(self, path: str, fh: int) -> list[str]:
        self._gate("readdir", path)
        fd = os.open(_rel(path), os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.fd)
        try:
            return [".", "..", *os.listdir(fd)]
        finally:
            os.close(fd)

    def opendir(self, path: str) -> int:
        return os.open(_rel(path), os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.fd)

    def releasedir(self, path: str | None, fh: int) -> int:
        with contextlib.suppress(OSError):
            os.close(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        self._gate("fsync", path)
        os.fsync(fh)
        self._op_done("fsync", path)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._gate("mkdir", path)
        os.mkdir(_rel(path), mode, dir_fd=self.fd)
        self._op_done("mkdir", path)
        return 0

    def rmdir(self, path: str) -> int:
        self._gate("rmdir", path)
        os.rmdir(_rel(path), dir_fd=self.fd)
        self._op_done("rmdir", path)
        return 0

    def unlink(self, path: str) -> int:
        self._gate("unlink", path)
        os.unlink(_rel(path), dir_fd=self.fd)
        self._op_done("unlink", path)
        return 0

    def rename(self, old: str, new: str) -> int:
        self._gate("rename", new)
        os.rename(_rel(old), _rel(new), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        self._op_done("rename", f"{_rel(old)} -> {_rel(new)}")
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(_rel(path), mode, dir_fd=self.fd, follow_symlinks=False)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(_rel(path), uid, gid, dir_fd=self.fd, follow_symlinks=False)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        kwargs: dict[str, Any] = {"ns": times} if times else {}
        os.utime(_rel(path), dir_fd=self.fd, follow_symlinks=False, **kwargs)
        return 0

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, _rel(target), dir_fd=self.fd)
        return 0

    def readlink(self, path: str) -> str:
        return os.readlink(_rel(path), dir_fd=self.fd)

    def statfs(self, path: str) -> dict[str, int]:
        self._gate("statfs", path)
        st = os.statvfs(self.fd)
        return {key: getattr(st, key) for key in (
            "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
            "f_favail", "f_flag", "f_namemax")}

    # -- files --------------------------------------------------------------------------
    def open(self, path: str, flags: int) -> int:
        # Opening a file emptied is a create as a crash point counts it (its old bytes are gone).
        self._gate("open", path, crash_op="create" if flags & os.O_TRUNC else None)
        if self.tracker is None or not flags & os.O_TRUNC:
            fd = os.open(_rel(path), flags & ~os.O_CREAT, dir_fd=self.fd)
        else:
            # O_TRUNC drops data too: through the tracker, so a crash can bring it back.
            fd = os.open(_rel(path), flags & ~(os.O_CREAT | os.O_TRUNC), dir_fd=self.fd)
            self._truncate_fd(fd, 0)
        self._opened(fd, path, "create" if flags & os.O_TRUNC else None)
        return fd

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        self._gate("create", path)
        fd = os.open(_rel(path), flags | os.O_CREAT, mode, dir_fd=self.fd)
        self._opened(fd, path, "create")
        return fd

    def _opened(self, fd: int, path: str, op: str | None) -> None:
        self._paths[fd] = _rel(path)
        if op is not None:
            self._op_done(op, path)
            crash = self.crash
            if crash is not None:
                crash.opened(fd)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        buf = bytearray(size)
        return bytes(buf[:self.read_into(path, memoryview(buf), offset, fh)])

    def read_into(self, path: str | None, buf: memoryview, offset: int, fh: int) -> int:
        """``read`` into the caller's buffer (the kernel's request buffer: no copy of our own)."""
        decision = self._gate("read", path, len(buf))
        got = os.preadv(fh, [buf], offset)
        if decision.flip_bits and decision.rng is not None:
            buf[:got] = flip(bytes(buf[:got]), decision.flip_bits, decision.rng)
        return got

    def write(self, path: str | None, data: bytes | memoryview, offset: int, fh: int) -> int:
        decision = self._gate("write", path, len(data))
        crash = self.crash
        if crash is not None:
            cut = crash.write_cut(fh, path and _rel(path) or self._paths.get(fh, ""), offset, len(data))
            if cut is not None:
                # A torn crash: the part before the cut lands, the caller's retry waits frozen.
                if self.tracker is not None and cut:
                    self.tracker.before_write(fh, offset, cut)
                written = os.pwrite(fh, data[:cut], offset) if cut else 0
                crash.cut_written()
                return written
        if decision.allow_bytes is not None:
            if decision.allow_bytes == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data = data[:decision.allow_bytes]  # a short write: the caller's retry gets ENOSPC
        if decision.flip_bits and decision.rng is not None:
            data = flip(data, decision.flip_bits, decision.rng)
        if self.tracker is not None:
            self.tracker.before_write(fh, offset, len(data))
        written = os.pwrite(fh, data, offset)
        if crash is not None:
            crash.wrote(fh, written)
        return written

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        self._gate("truncate", path)
        if fh is not None:
            self._truncate_fd(fh, length)
        else:
            fd = os.open(_rel(path), os.O_WRONLY, dir_fd=self.fd)
            try:
                self._truncate_fd(fd, length)
            finally:
                os.close(fd)
        self._op_done("truncate", path)
        return 0

    def _truncate_fd(self, fd: int, length: int) -> None:
        if self.tracker is not None:
            self.tracker.before_write(fd, length, max(0, os.fstat(fd).st_size - length))
        os.ftruncate(fd, length)

    def flush(self, path: str | None, fh: int) -> int:
        crash = self.crash
        written = crash.closing(fh) if crash is not None else None
        relpath = path if path is not None else self._paths.get(fh)
        self._gate("flush", relpath, crash_op=None if written is None else "close")
        if written is not None:
            self._op_done("close", relpath, written)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        self._gate("fsync", path)
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)
        if self.tracker is not None:
            self.tracker.synced(fh)
        self._op_done("fsync", path)
        return 0

    def release(self, path: str | None, fh: int) -> int:
        self._paths.pop(fh, None)
        crash = self.crash
        if crash is not None:
            crash.released(fh)
        with contextlib.suppress(OSError):
            os.close(fh)
        return 0

    def drop_unfsynced(self, torn: dict[str, Any] | None = None) -> int:
        dropped = self.tracker.drop(torn) if self.tracker is not None else 0
        self.kcache.forget(self.fd)  # the files changed behind the kernel's cache
        self._crash_passed()
        return dropped

    def process_crashed(self) -> None:
        """The writer's processes died, the node did not: the page cache (every write the
        layer passed on) stays; an armed crash point keeps its image and thaws."""
        self._crash_passed()

    def _crash_passed(self) -> None:
        crash = self.crash
        if crash is not None and crash.frozen:
            # The crash of an armed crash point: keep the image the crash left, then let the
            # restarted job in (what waited through the crash fails: its caller died).
            try:
                crash.crashed(self.fd)
            finally:
                with self._changed:
                    self._thaws += 1
                    self._changed.notify_all()
