"""Durability boundaries of one checkpoint save, as the fault layer sees them, and a power
loss at exactly one of them (``trainchaos run --crash-points``; docs/checkers.md).

A *boundary* is an operation after which more of the save may be durable: every ``fsync``
(of a file or a directory) and every ``rename`` (a checkpoint directory moved into place, a
"latest" pointer replaced). The save's window opens at the first operation on a path that
matches ``save`` (a glob or a list of them: the harness's ``*step-00000020*``, a plain
``torch.save`` script's ``step-20.pt``, DeepSpeed's ``global_step20/``) and closes at the
``mkdir`` or ``create`` that starts the next save (``stop``, a path not matching ``save``: the
harness's next folder, a script's next file, DeepSpeed's next tag); its boundaries are
numbered from 1.

Armed with ``after: -1`` the layer only reports each boundary (a ``storage_boundary`` event):
the trace a sweep enumerates. Armed with ``after: k`` it *freezes* right after boundary k
completes (``k = 0``: right before boundary 1; a save with no boundary at all, one that
fsyncs and renames nothing, as DeepSpeed's ``save_checkpoint``, freezes at the close of its
window instead, before the next save's first operation): every later operation blocks, so what is on
disk is exactly the state after k boundaries, and it reports ``crash_point``. The power loss
itself is ``lose_unfsynced``, triggered by that event: the node's ranks are killed, the
unfsynced writes rolled back; the layer then copies the tree as the crash left it (the
*crash image*, which a sweep audits offline, as ALICE checks each crash state) and thaws:
an operation that waited through the crash fails with EIO (its caller is dead), later ones
(the restarted job's) go through. One crash per arming: the restarted job saving the same
step again is not counted.

Pure logic and file copying; the FUSE plumbing is ``chaos.storage.faultfs``.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BOUNDARY_OPS", "CrashPoint", "copy_tree_at"]

BOUNDARY_OPS: tuple[str, ...] = ("fsync", "rename")
"""Operation names (as the layer gates them; a directory fsync is ``fsync``) that are boundaries."""
NEXT_SAVE: tuple[str, ...] = ("*step-*", "*_step[0-9]*")
"""Where a next save begins when the spec names no ``stop``: a ``step-N`` file or folder (the
harness's, a script's), a ``<prefix>_stepN`` folder (DeepSpeed's ``global_stepN`` tag)."""

Emit = Callable[..., None]


class CrashPoint:
    """One arming of the layer: where the save's window is, and after which boundary to freeze."""

    def __init__(self, spec: dict[str, Any], emit: Emit) -> None:
        self.spec = dict(spec)
        save = spec["save"]
        self.save: tuple[str, ...] = (str(save),) if isinstance(save, str) else tuple(map(str, save))
        stop = spec.get("stop") or NEXT_SAVE
        self.stop: tuple[str, ...] = (str(stop),) if isinstance(stop, str) else tuple(map(str, stop))
        self.after = int(spec.get("after", -1))
        self.image_dir = spec.get("image_dir")
        self.emit = emit
        self.state = "waiting"
        """waiting (for the save), open (inside its window), frozen, done."""
        self.boundaries: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    # -- called by the layer, for every gated operation ----------------------------------------
    def before(self, op: str, relpath: str) -> bool:
        """Whether the layer must freeze before executing this operation."""
        with self._lock:
            if self.state == "waiting" and self._in_save(relpath):
                self.state = "open"
            elif (self.state == "open" and op in ("mkdir", "create")
                  and any(fnmatch.fnmatchcase(relpath, pattern) for pattern in self.stop)
                  and not self._in_save(relpath)):
                if self.after == 0 and not self.boundaries:
                    # A save that made nothing durable: "before its first boundary" lasts
                    # until the next save begins; lose power at that last moment.
                    self._freeze(op, relpath, 0)
                    return True
                self.state = "done"  # the next save began: this one's window is closed
            if self.state != "open" or op not in BOUNDARY_OPS:
                return False
            if self.after == 0 and not self.boundaries:
                self._freeze(op, relpath, 0)
                return True
            return False

    def _in_save(self, relpath: str) -> bool:
        return any(fnmatch.fnmatchcase(relpath, pattern) for pattern in self.save)

    def after_op(self, op: str, relpath: str) -> bool:
        """Record a boundary that just completed; whether the layer must freeze now."""
        with self._lock:
            if self.state != "open" or op not in BOUNDARY_OPS:
                return False
            boundary = {"seq": len(self.boundaries) + 1, "op": op, "path": relpath}
            self.boundaries.append(boundary)
            if self.after < 0:
                self.emit("storage_boundary", **boundary)
                return False
            if boundary["seq"] == self.after:
                self._freeze(op, relpath, self.after)
                return True
            return False

    def _freeze(self, op: str, relpath: str, after: int) -> None:
        self.state = "frozen"
        where = "before the first boundary" if after == 0 else f"after boundary {after}"
        self.emit("crash_point", after=after, op=op, path=relpath, where=where,
                  boundaries=[dict(b) for b in self.boundaries])

    @property
    def frozen(self) -> bool:
        return self.state == "frozen"

    def crashed(self, backing_fd: int) -> None:
        """The power loss happened (unfsynced data dropped): keep the crash image, disarm."""
        if self.image_dir:
            copy_tree_at(backing_fd, str(self.image_dir))
        with self._lock:
            self.state = "done"

    def status(self) -> dict[str, Any]:
        return {"state": self.state, "after": self.after, "boundaries": len(self.boundaries)}


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
