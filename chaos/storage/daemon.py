"""``python -m chaos.storage.daemon MOUNTPOINT CONTROL_DIR FSNAME [--track-unfsynced]``: the
helper process that serves one fault-layer mount until it is unmounted or killed.

It opens MOUNTPOINT before mounting over it (the bytes stay in that directory), serves it
multithreaded (a stalled checkpoint write must not hold a read of the data set), polls the
control file and writes ``state.json`` once the mount is up (``ready``) and after each change.

What one request costs is most of what the layer costs (a checkpoint save is ~100 requests
with the kernel's cache on, ~200 without), so the glue to libfuse stays thin: reads and writes
go between the kernel's request buffer and the backing file without a Python copy, reads are
asked for in requests of up to 1 MiB (``READAHEAD_KB``), and the kernel caches entries and
attributes while no rule is armed (``chaos.storage.kcache``).
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

from chaos import contract
from chaos.storage.control import POLL_S, RULES_FILE, STATE_FILE, read_json, write_json_atomic
from chaos.storage.faultfs import FaultFS
from chaos.storage.rules import Caller, Rule, RuleSet

FSTYPE = "trainchaos"
"""The mount's subtype: /proc/mounts lists it as ``fuse.trainchaos``."""
READAHEAD_KB = 1024
"""The mount's read-ahead window (the kernel's default is 128 KiB): a sequential read of a
checkpoint is then one request per MiB instead of eight. A rule still sees every request."""

log = logging.getLogger(__name__)


class _Callers:
    """Caller identity from the calling thread's process environment (RANK, node), cached
    per process: the environment of a running process does not change."""

    def __init__(self) -> None:
        self._cache: dict[int, Caller] = {}

    def __call__(self) -> Caller:
        import mfusepy

        tid = mfusepy.fuse_get_context()[2]
        caller = self._cache.get(tid)
        if caller is None:
            caller = self._cache[tid] = _read_caller(tid)
        return caller


def _read_caller(tid: int) -> Caller:
    try:
        with open(f"/proc/{tid}/environ", "rb") as fh:  # a thread's environ is its process's
            env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
    except OSError:
        return Caller()

    def num(key: bytes) -> int | None:
        value = env.get(key, b"")
        return int(value) if value.isdigit() else None

    return Caller(rank=num(b"RANK"), node=num(contract.NODE_ENV.encode()))


class _Controller(threading.Thread):
    def __init__(self, fs: FaultFS, control_dir: str) -> None:
        super().__init__(name="trainchaos-storage-control", daemon=True)
        self.fs = fs
        self.dir = control_dir
        self.version = 0
        self.drops = 0
        self.dropped_files = 0
        self.releases = 0
        self.ready = False
        self._mtime: int | None = None
        self._publishing = threading.Lock()
        self._probe: Any = None

    def _events(self, events_dir: str | None) -> Any:
        """What the layer reports with (crash points): the run's event stream, as ``storage``."""
        from chaos.probe import Probe

        if events_dir and self._probe is None:
            self._probe = Probe(events_dir, "storage", 0)
        return self._probe.emit if self._probe is not None else (lambda kind, **fields: None)

    def publish(self) -> None:
        with self._publishing:  # two threads publish (this one, and the mount watcher)
            self._publish()

    def _publish(self) -> None:
        write_json_atomic(os.path.join(self.dir, STATE_FILE), {
            "version": self.version, "drop": self.drops, "dropped_files": self.dropped_files,
            "release": self.releases,
            "hits": dict(self.fs.hits), "pid": os.getpid(), "ready": self.ready, "t": time.time(),
            "unfsynced_files": self.fs.tracker.pending() if self.fs.tracker else 0,
            "crash_point": self.fs.crash.status() if self.fs.crash is not None else None,
            "kernel_cache": self.fs.kcache.on, "kernel_pages": self.fs.kcache.keep_pages,
            "cache_forgets": self.fs.kcache.forgets, "python_thread_states": _kept_states,
        })

    def run(self) -> None:
        path = os.path.join(self.dir, RULES_FILE)
        last_hits: dict[str, int] = {}
        while True:
            try:
                self.poll(path)
                if self.fs.hits != last_hits:
                    last_hits = dict(self.fs.hits)
                    self.publish()
            except Exception:  # noqa: BLE001 - logged; the next poll tries again
                traceback.print_exc()
            time.sleep(POLL_S)

    def poll(self, path: str) -> None:
        try:
            mtime = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._mtime:
            return
        doc = read_json(path)
        if doc is None:
            return
        if int(doc.get("version", 0)) > self.version:
            self.fs.set_rules(RuleSet([Rule.from_dict(r) for r in doc.get("rules", [])]))
            crash = doc.get("crash_point")
            self.fs.arm_crash_point(crash, self._events(crash.get("events_dir") if crash else None))
            wanted = int(doc.get("drop", 0))
            while self.drops < wanted:
                self.dropped_files += self.fs.drop_unfsynced(doc.get("torn"))
                self.drops += 1
            while self.releases < int(doc.get("release", 0)):
                self.fs.process_crashed()
                self.releases += 1
            self.version = int(doc["version"])
        self.publish()
        self._mtime = mtime  # only once answered: a failed publish is retried next poll


def _wait_mounted(mountpoint: str, controller: _Controller) -> None:
    """Say ``ready`` once the kernel lists the mount (FUSE() blocks the main thread)."""
    target = os.path.realpath(mountpoint)
    while True:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            if any(line.split()[4] == target and f"fuse.{FSTYPE}" in line for line in fh):
                _widen_readahead(target)
                controller.ready = True
                controller.publish()
                return
        time.sleep(0.01)


def _widen_readahead(mountpoint: str) -> None:
    """Raise the mount's read-ahead window (its own backing device info, named after the
    mount's device number) before the workload opens a file: each open file takes it then."""
    dev = os.stat(mountpoint).st_dev
    path = f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb"
    try:
        with open(path, "w", encoding="ascii") as fh:
            fh.write(str(READAHEAD_KB))
    except OSError as exc:  # not root: reads stay in 128 KiB requests, nothing else changes
        log.warning("storage layer: read-ahead stays at the kernel's default (%s: %s)", path, exc)


def _buffer(buf: Any, size: int) -> memoryview:
    """The kernel's request buffer of a read or write callback, as a writable byte view."""
    return memoryview((ctypes.c_char * size).from_address(ctypes.addressof(buf.contents))).cast("B")


_thread_state = threading.local()
_kept_states = 0
"""Thread states kept (``_keep_thread_state``): one per libfuse worker, not per request."""


def _keep_thread_state() -> None:
    """Keep this libfuse worker thread's Python thread state for the thread's life.

    A ctypes callback on a thread Python did not start runs between PyGILState_Ensure and
    PyGILState_Release, which create a thread state and destroy it again on every request:
    measured 1.5 ms of the daemon's ~10 ms of CPU a checkpoint save (75 requests). One
    Ensure more, never released, leaves the count above zero, so the state stays and later
    callbacks only take the GIL. A thread libfuse ends leaves its state behind (a few KiB):
    libfuse ends a worker only while more than its max_idle_threads (10) are idle."""
    global _kept_states
    ctypes.pythonapi.PyGILState_Ensure.restype = ctypes.c_int
    ctypes.pythonapi.PyGILState_Ensure()
    _thread_state.kept = True
    _kept_states += 1


def _fuse_class() -> type:
    import mfusepy

    class ThinFUSE(mfusepy.FUSE):
        """mfusepy, with reads and writes that make no bytes object per request (each was a
        copy of up to 1 MiB, and an allocation that mapped and faulted in fresh pages), stats
        copied straight into the kernel's reply, opens that keep the file's cached pages while
        the kernel cache allows it, and the kernel cache attached to libfuse once the mount
        is initialised."""

        def _wrapper(self, func: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(_thread_state, "kept", False):
                _keep_thread_state()
            return super()._wrapper(func, *args, **kwargs)

        def init_fuse_3(self, conn: Any, config: Any) -> None:
            super().init_fuse_3(conn, config)
            lib = mfusepy._libfuse
            self.operations.kcache.attach(lib, lib.fuse_get_context().contents.fuse, config.contents, conn.contents)

        def fgetattr(self, path: bytes | None, buf: Any, fip: Any) -> int:
            # mfusepy's goes stat -> a 13-key mapping -> a setattr per key (twice the Python).
            st = self.operations.stat(None if path is None else path.decode(self.encoding, self.errors),
                                      fip.contents.fh if fip else None)
            ctypes.memset(buf, 0, ctypes.sizeof(mfusepy.c_stat))
            out = buf.contents
            out.st_mode, out.st_nlink, out.st_uid, out.st_gid = st.st_mode, st.st_nlink, st.st_uid, st.st_gid
            out.st_size, out.st_ino, out.st_blocks = st.st_size, st.st_ino, st.st_blocks
            out.st_atimespec.tv_sec, out.st_atimespec.tv_nsec = divmod(st.st_atime_ns, 1_000_000_000)
            out.st_mtimespec.tv_sec, out.st_mtimespec.tv_nsec = divmod(st.st_mtime_ns, 1_000_000_000)
            out.st_ctimespec.tv_sec, out.st_ctimespec.tv_nsec = divmod(st.st_ctime_ns, 1_000_000_000)
            return 0

        def open(self, path: bytes, fip: Any) -> int:
            fi = fip.contents
            fi.fh = self.operations.open(path.decode(self.encoding, self.errors), fi.flags)
            fi.keep_cache = self.operations.kcache.keep_pages
            return 0

        def create(self, path: bytes, mode: int, fip: Any) -> int:
            # mfusepy's asks inspect.signature of the handler on every create (~40 us).
            fi = fip.contents
            fi.fh = self.operations.create(path.decode(self.encoding, self.errors), mode, fi.flags)
            fi.keep_cache = self.operations.kcache.keep_pages
            return 0

        def read(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
            return self.operations.read_into(None if path is None else path.decode(self.encoding, self.errors),
                                             _buffer(buf, size), offset, fip.contents.fh)

        def write(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
            return self.operations.write(None if path is None else path.decode(self.encoding, self.errors),
                                         _buffer(buf, size), offset, fip.contents.fh)

    return ThinFUSE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.storage.daemon")
    parser.add_argument("mountpoint")
    parser.add_argument("control_dir")
    parser.add_argument("fsname")
    parser.add_argument("--track-unfsynced", action="store_true")
    args = parser.parse_args(argv)
    backing = os.open(args.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
    fs = FaultFS(backing, _Callers(), track_unfsynced=args.track_unfsynced)
    controller = _Controller(fs, args.control_dir)
    controller.start()
    threading.Thread(target=_wait_mounted, args=(args.mountpoint, controller), daemon=True).start()
    # No signal handling of our own: teardown unmounts lazily and then kills this process,
    # which aborts the FUSE connection (stalled callers get ENOTCONN instead of hanging).
    # Timeouts start at 0; the kernel cache sets them once attached (rules may already be armed).
    # No default_permissions: with it, the kernel fetched the attributes of every directory
    # on a path again after each change below it, to check modes (7 of a save's 28 getattrs).
    # They decide nothing here: without allow_other only the mounting user, root, reaches
    # the mount, and root's access does not depend on mode bits (exec excepted, which the
    # kernel checks either way); access(2) is answered by the layer (FaultFS.access).
    _fuse_class()(fs, args.mountpoint, foreground=True, nothreads=False, fsname=args.fsname,
                  subtype=FSTYPE, attr_timeout=0, entry_timeout=0, negative_timeout=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
