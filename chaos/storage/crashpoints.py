"""Durability boundaries and file operations of one checkpoint save, as the fault layer sees
them, and a crash at exactly one of them (``trainchaos run --crash-points``; docs/checkers.md).

Two crash models. **Power** (the default): a *boundary* is an operation after which more of
the save may be durable: every ``fsync`` (of a file or a directory) and every ``rename`` (a
checkpoint directory moved into place, a "latest" pointer replaced). **Process**: every file
operation of the save (``FILE_OPS``: mkdir, create, a truncate, the end of a file's writes
(``close``), fsync, rename, unlink, rmdir) is a point to crash before or after, and each file
written can be *torn* (the writer killed half-way through its bytes): what a checkpointer
with no fsync and no rename at all still has to get right, since a killed process (OOM, a
preemption's SIGKILL, a segfault) leaves everything it wrote in the page cache.

The save's window opens at the first operation on a path that matches ``save`` (a glob or a
list of them: the harness's ``*step-00000020*``, a plain ``torch.save`` script's
``step-20.pt``, DeepSpeed's ``global_step20/``, the HF Trainer's ``checkpoint-20/``) and closes
at the ``mkdir`` or ``create`` that starts the next save (``stop``, a path not matching
``save``: the harness's next folder, a script's next file, DeepSpeed's next tag); its points are numbered from 1. In the process model the window also looks back: the file operations since
the last one on a path of the previous save (``prev``; ``[]``: the first save, since the mount)
belong to this save too, so a "latest" pointer written *before* the data (the classic bug)
is tested; a pointer the previous save wrote last is then tested here (a crash there is a
crash between two saves all the same), and the operations after this save's last one on
its own paths (``own``) are left to the next save's look-back by the sweep: each operation
between two saves is a point once.

Armed with ``after: -1`` (and ``op: -1``) the layer only reports each boundary (a
``storage_boundary`` event) and, with ``trace_ops``, each file operation (``storage_op``):
the trace a sweep enumerates. Armed with ``after: k`` (power) it *freezes* right after boundary k completes
(``k = 0``: right before boundary 1; a save with no boundary at all, one that fsyncs and renames
nothing, as DeepSpeed's ``save_checkpoint``, freezes at the close of its window instead, before
the next save's first operation); armed with ``model: process, op: k, when: before|after``
it freezes right before or right after file operation k, and with ``when: torn`` (``path``,
``cut``) it lets the write that crosses byte ``cut`` of that file through up to the cut only,
then freezes. Frozen, every later operation blocks, so what is on disk is exactly the state
at the point, and the layer reports ``crash_point``. The crash itself is the fault triggered by
that event: a power loss (``lose_unfsynced``: the node's ranks killed, the unfsynced writes
rolled back) or a process crash (the ranks killed, the page cache kept); the layer then
copies the tree as the crash left it (the *crash image*, which a sweep audits offline, as
ALICE checks each crash state) and thaws: an operation that waited through the crash fails
with EIO (its caller is dead), later ones (the restarted job's) go through. One crash per
arming: the restarted job saving the same step again is not counted.

Pure logic and file copying; the FUSE plumbing is ``chaos.storage.faultfs``.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BOUNDARY_OPS", "FILE_OPS", "WHENS", "CrashPoint", "copy_tree_at"]

BOUNDARY_OPS: tuple[str, ...] = ("fsync", "rename")
"""Operation names (as the layer gates them; a directory fsync is ``fsync``) that are boundaries."""
NEXT_SAVE: tuple[str, ...] = ("*step-*", "*_step[0-9]*", "*checkpoint-[0-9]*", "*step=[0-9]*")
"""Where a next save begins when the spec names no ``stop``: a ``step-N`` file or folder (the
harness's, a script's), a ``<prefix>_stepN`` folder (DeepSpeed's ``global_stepN`` tag), the
HF Trainer's ``checkpoint-N/``, Lightning's default ``epoch=E-step=N.ckpt``."""

FILE_OPS: tuple[str, ...] = ("mkdir", "create", "truncate", "close", "fsync", "rename", "unlink", "rmdir")
"""What a process crash falls before or after: every operation that changes what the file
system's users see (``close``: the end of a file's writes, the first flush after them)."""

WHENS: tuple[str, ...] = ("before", "after", "torn")
"""Where a process crash falls at its operation (``torn``: half-way through the bytes of the
file that operation closes)."""

Emit = Callable[..., None]


class CrashPoint:
    """One arming of the layer: where the save's window is, and at which point to freeze."""

    def __init__(self, spec: dict[str, Any], emit: Emit) -> None:
        self.spec = dict(spec)
        save = spec["save"]
        self.save: tuple[str, ...] = (str(save),) if isinstance(save, str) else tuple(map(str, save))
        stop = spec.get("stop") or NEXT_SAVE
        self.stop: tuple[str, ...] = (str(stop),) if isinstance(stop, str) else tuple(map(str, stop))
        self.model = str(spec.get("model") or "power")
        self.after = int(spec.get("after", -1))
        self.op = int(spec.get("op", -1))
        self.when = str(spec.get("when") or "before")
        self.torn_path = str(spec.get("path") or "")
        self.torn_opened = int(spec.get("opened") or 0)
        """A torn point's file as the operation that created it (its seq): a temporary name
        drawn at random differs from run to run, the operation does not."""
        self.cut = int(spec.get("cut") or 0)
        prev = spec.get("prev")
        self.prev: tuple[str, ...] | None = None if prev is None else tuple(map(str, prev))
        self._cut_path: str | None = None
        """The torn point's file once its crossing write was let through to the cut."""
        self.trace_ops = bool(spec.get("trace_ops"))
        """The trace also reports each file operation (``storage_op``): a process sweep's."""
        self.image_dir = spec.get("image_dir")
        self.emit = emit
        self.state = "waiting"
        """waiting (for the save), open (inside its window), frozen, done."""
        self.boundaries: list[dict[str, Any]] = []
        self.ops: list[dict[str, Any]] = []
        """The file operations counted so far (the look-back's, then the window's)."""
        self._looking_back = self.prev == ()
        """Counting the look-back's operations (after the previous save's last one)."""
        self._since_op = 0
        """Bytes written in the save since its last file operation counted."""
        self._written: dict[int, int] = {}
        self._fh_seq: dict[int, int] = {}
        """The operation (seq) that created each open file handle of the save."""
        """Bytes written per open file handle since its last close."""
        self._current = threading.local()
        self._lock = threading.Lock()

    @property
    def tracing(self) -> bool:
        return self.after < 0 if self.model == "power" else self.op < 0

    # -- called by the layer, for every gated operation ----------------------------------------
    def before(self, op: str, relpath: str) -> bool:
        """Whether the layer must freeze before executing this operation."""
        with self._lock:
            self._current.seq = None
            if self.state == "waiting" and self._in_save(relpath):
                self.state = "open"
                if self.tracing and self.trace_ops:
                    for counted in self.ops:  # the look-back is this save's: say so now
                        self.emit("storage_op", **counted)
            elif self.state == "waiting" and self.prev and self._matches(relpath, self.prev):
                self._looking_back = True  # the previous save is still going: count from its last
                self.ops.clear()
                self._since_op = 0
                return False
            elif (self.state == "open" and op in ("mkdir", "create")
                  and any(fnmatch.fnmatchcase(relpath, pattern) for pattern in self.stop)
                  and not self._in_save(relpath)):
                if self.model == "power" and self.after == 0 and not self.boundaries:
                    # A save that made nothing durable: "before its first boundary" lasts
                    # until the next save begins; lose power at that last moment.
                    self._freeze(op, relpath, 0)
                    return True
                self.state = "done"  # the next save began: this one's window is closed
            if op in FILE_OPS and (self.state == "open" or (self.state == "waiting" and self._looking_back)):
                self._current.seq = len(self.ops) + 1
                opened = getattr(self._current, "opened", None) if op == "close" else None
                self.ops.append({"seq": self._current.seq, "op": op, "path": relpath, "bytes": 0,
                                 "written_before": self._since_op, "own": self._in_save(relpath),
                                 "opened": opened})
                self._since_op = 0
                if self.model == "process" and self.when == "before" and self._current.seq == self.op:
                    self._freeze(op, relpath, self.op)
                    return True
            if self.model != "power" or self.state != "open" or op not in BOUNDARY_OPS:
                return False
            if self.after == 0 and not self.boundaries:
                self._freeze(op, relpath, 0)
                return True
            return False

    def _in_save(self, relpath: str) -> bool:
        return self._matches(relpath, self.save)

    @staticmethod
    def _matches(relpath: str, patterns: tuple[str, ...]) -> bool:
        # a rename's "old -> new": either name
        return any(fnmatch.fnmatchcase(name, pattern) for name in relpath.split(" -> ") for pattern in patterns)

    def after_op(self, op: str, relpath: str, nbytes: int = 0) -> bool:
        """Record an operation that just completed; whether the layer must freeze now."""
        with self._lock:
            seq = getattr(self._current, "seq", None)
            self._current.seq = None
            self._current.done = seq
            if seq is not None and seq <= len(self.ops):
                counted = self.ops[seq - 1]
                counted.update(path=relpath, bytes=nbytes, own=counted["own"] or self._in_save(relpath))
                if self.tracing and self.trace_ops and self.state == "open":
                    self.emit("storage_op", **counted)
                if self.model == "process" and self.when == "after" and seq == self.op:
                    self._freeze(op, relpath, seq)
                    return True
            if self.state != "open" or op not in BOUNDARY_OPS:
                return False
            boundary = {"seq": len(self.boundaries) + 1, "op": op, "path": relpath}
            self.boundaries.append(boundary)
            if self.tracing:
                self.emit("storage_boundary", **boundary)
                return False
            if self.model == "power" and boundary["seq"] == self.after:
                self._freeze(op, relpath, self.after)
                return True
            return False

    # -- the writes of a file: its close, and a torn crash -----------------------------------
    def opened(self, fh: int) -> None:
        """The file handle the operation that just completed on this thread opened."""
        seq = getattr(self._current, "done", None)
        if seq is not None:
            with self._lock:
                self._fh_seq[fh] = seq

    def write_cut(self, fh: int, relpath: str, offset: int, length: int) -> int | None:
        """Of a write about to happen, how many bytes go through before a torn crash freezes
        the layer (``torn``: the first write crossing ``cut`` of the file the operation
        ``opened`` created, else of ``path``); None: all."""
        if self.model != "process" or self.when != "torn":
            return None
        if (self._fh_seq.get(fh) != self.torn_opened) if self.torn_opened else relpath != self.torn_path:
            return None
        with self._lock:
            counting = self.state == "open" or (self.state == "waiting" and self._looking_back)
            if not counting or offset + length <= self.cut or self._cut_path is not None:
                return None
            # Frozen only once the bytes before the cut are on disk (``cut_written``): a crash
            # image copied at the freeze must hold them.
            self._cut_path = relpath
            return max(0, self.cut - offset)

    def cut_written(self) -> None:
        """The torn write's bytes before the cut landed: freeze now (``crash_point``)."""
        with self._lock:
            self._freeze("write", self._cut_path or "", self.op)

    def wrote(self, fh: int, nbytes: int) -> None:
        with self._lock:
            self._written[fh] = self._written.get(fh, 0) + nbytes
            if self.state == "open" or (self.state == "waiting" and self._looking_back):
                self._since_op += nbytes

    def closing(self, fh: int) -> int | None:
        """Bytes written through ``fh`` since its last close (None: none; it is no ``close``)."""
        with self._lock:
            self._current.opened = self._fh_seq.get(fh)
            return self._written.pop(fh, None)

    def released(self, fh: int) -> None:
        """The handle is gone (its number may be used again for another file)."""
        with self._lock:
            self._fh_seq.pop(fh, None)
            self._written.pop(fh, None)

    def _freeze(self, op: str, relpath: str, at: int) -> None:
        self.state = "frozen"
        if self.model == "power":
            where = "before the first boundary" if at == 0 else f"after boundary {at}"
        else:
            where = f"{self.when} file operation {at}" if self.when != "torn" else \
                f"torn at byte {self.cut} of {relpath} (file operation {at} closes it)"
        self.emit("crash_point", after=at, op=op, path=relpath, where=where, model=self.model,
                  boundaries=[dict(b) for b in self.boundaries], ops=[dict(o) for o in self.ops])

    @property
    def frozen(self) -> bool:
        return self.state == "frozen"

    def crashed(self, backing_fd: int) -> None:
        """The crash happened (a power loss dropped the unfsynced data first, a process crash
        kept it): keep the crash image, disarm."""
        if self.image_dir:
            copy_tree_at(backing_fd, str(self.image_dir))
        with self._lock:
            self.state = "done"

    def status(self) -> dict[str, Any]:
        return {"state": self.state, "model": self.model, "after": self.after, "op": self.op,
                "boundaries": len(self.boundaries), "ops": len(self.ops)}


def copy_tree_at(dir_fd: int, dest: str) -> None:
    """Copy the tree under the directory ``dir_fd`` refers to into ``dest``, through that
    descriptor: the mount over the directory cannot shadow it, nor block on its own freeze."""
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    for root, dirs, files, root_fd in os.fwalk(".", dir_fd=dir_fd):
        target = os.path.normpath(os.path.join(dest, root))
        for name in dirs:
            os.makedirs(os.path.join(target, name), exist_ok=True)
        for name in files:
            try:
                src = os.open(name, os.O_RDONLY, dir_fd=root_fd)
            except OSError:
                continue  # not a regular file we can read (a socket, gone meanwhile)
            try:
                with open(os.path.join(target, name), "wb") as out:
                    while chunk := os.read(src, 1 << 20):
                        out.write(chunk)
            finally:
                os.close(src)
