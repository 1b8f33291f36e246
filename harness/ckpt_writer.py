"""Writing a checkpoint: what a state must be to be loadable, the host snapshot an async
save writes from, the timers a save reports (time training was blocked, a deadline), and
the files themselves (state.pt, the manifest, fsyncs, the ``LATEST`` pointer).

The manager (``harness.checkpoint``) decides when and with which policy (retries, abandon,
async); this module only writes what it is told, where it is told.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import logging
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from harness.ckpt_layout import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    POINTER_FILE,
    STATE_FILE,
    TMP_PREFIX,
    CheckpointError,
    fsync_dir,
)

__all__ = ["BlockedTime", "FaultPoint", "SaveDeadline", "check_loadable", "snapshot", "sync_dir",
           "sync_files", "write_files", "write_pointer"]

log = logging.getLogger("harness.checkpoint")

FaultPoint = Callable[..., None]


# What torch.load(weights_only=True) accepts. Checked at save time so that a state that
# could never be loaded fails the save loudly instead of making every checkpoint "corrupt".
# Exact types for scalars and containers: a subclass (numpy.float64 is a float, a namedtuple
# is a tuple) pickles as its own class, which the weights-only unpickler refuses.
_SCALARS = (str, bytes, int, float, bool, type(None), torch.dtype, torch.device, torch.Size)
_MAPPINGS = (dict, OrderedDict)


def check_loadable(obj: Any, where: str) -> None:
    kind = type(obj)
    if kind in _MAPPINGS:
        for key, value in obj.items():
            if type(key) not in (str, int):
                raise TypeError(f"checkpoint state key {where}[{key!r}] must be a str or int")
            check_loadable(value, f"{where}[{key!r}]")
    elif kind in (list, tuple):
        for i, value in enumerate(obj):
            check_loadable(value, f"{where}[{i}]")
    elif kind not in _SCALARS and not isinstance(obj, torch.Tensor):
        raise TypeError(
            f"checkpoint state {where} is a {kind.__module__}.{kind.__qualname__}; only dicts, "
            "lists, tuples, numbers, strings and tensors can be loaded with "
            "torch.load(weights_only=True) (convert e.g. numpy RNG state to a tensor or list)"
        )


def snapshot(obj: Any) -> Any:
    """A deep copy whose tensors are detached host-memory clones (for the async writer)."""
    if obj is None or isinstance(obj, int | float | str | bytes):
        return obj  # immutable: sharing is a copy (the RNG state alone holds 625 ints)
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        out = type(obj)((key, snapshot(value)) for key, value in obj.items())
        metadata = getattr(obj, "_metadata", None)  # module state_dict versions
        if metadata is not None:
            out._metadata = copy.deepcopy(metadata)  # type: ignore[attr-defined]  # an OrderedDict subclass's attribute (torch's state_dict)
        return out
    if isinstance(obj, list):
        return [snapshot(value) for value in obj]
    if isinstance(obj, tuple):
        return tuple(snapshot(value) for value in obj)
    return copy.deepcopy(obj)


class BlockedTime:
    """Time the training thread spent inside ``save``, handed to the thread that reports it.

    In async mode the writer thread can finish before ``save`` has returned (a small state),
    so the reader waits until the training thread has stopped the clock.
    """

    def __init__(self, entered: float) -> None:
        self._entered = entered
        self._value = 0.0
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._value = time.perf_counter() - self._entered
        self._stopped.set()

    def seconds(self) -> float:
        self._stopped.wait()
        return self._value


class SaveDeadline:
    """Watches the save in flight; one past its deadline is reported once, from this thread
    (the thread doing the save may be blocked in the kernel for good)."""

    def __init__(self, seconds: float, on_deadline: Callable[[int, float, str], None] | None,
                 tier: str) -> None:
        self.seconds = seconds
        self.on_deadline = on_deadline
        self.tier = tier
        self._lock = threading.Lock()
        self._inflight: tuple[int, float] | None = None
        self._thread: threading.Thread | None = None

    def begin(self, step: int) -> None:
        with self._lock:
            self._inflight = (step, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="ckpt-deadline", daemon=True)
                self._thread.start()

    def end(self) -> None:
        with self._lock:
            self._inflight = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(0.1, self.seconds / 4))
            with self._lock:
                inflight = self._inflight
            if inflight is None:
                continue
            step, began = inflight
            elapsed = time.monotonic() - began
            if elapsed < self.seconds:
                continue
            with self._lock:
                if self._inflight == inflight:
                    self._inflight = None  # reported once
            log.error("checkpoint save of step %d on the %s tier not done after %.1f s", step, self.tier, elapsed)
            if self.on_deadline is not None:
                self.on_deadline(step, elapsed, self.tier)


def write_files(tmp: str, step: int, state: dict[str, Any], *, verified: dict[str, Any] | None,
                durable: bool, fsync_enabled: bool, verify_checksum: bool,
                fault_point: FaultPoint | None) -> dict[str, Any]:
    """Write state.pt, then the manifest describing it, into ``tmp``; all fsynced (unless
    not ``durable``: the caller fsyncs them later, ``sync_files``; or the tier is not
    fsynced at all, ``fsync_enabled``). ``fault_point("ckpt_write", step=...)`` is called
    half-way through state.pt."""
    fsync = fsync_enabled and durable
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getbuffer()
    half = len(data) // 2
    with open(os.path.join(tmp, STATE_FILE), "wb") as f:
        f.write(data[:half])
        # Flushed so that a process killed at the fault point really leaves a partial
        # file behind (os._exit drops Python's buffers), as a crash mid-write would.
        f.flush()
        if fault_point is not None:
            fault_point("ckpt_write", step=step)
        f.write(data[half:])
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    manifest = {
        "format_version": FORMAT_VERSION,
        "step": step,
        "created": time.time(),
        "writer": {"host": socket.gethostname(), "pid": os.getpid()},
        "files": {STATE_FILE: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}},
    }
    if verify_checksum and not _reads_back(os.path.join(tmp, STATE_FILE), data):
        raise CheckpointError(f"checksum on save: {STATE_FILE} of step {step} reads "
                              "back different bytes than were written")
    if verified is not None:
        manifest["verified"] = verified
    del data  # release the export of the buffer
    with open(os.path.join(tmp, MANIFEST_FILE), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    if durable:
        sync_dir(tmp, fsync_enabled)
    return manifest


_READ_BACK_CHUNK = 1 << 20


def _reads_back(path: str, data: memoryview) -> bool:
    """Whether the file at ``path`` holds exactly ``data`` (the checksum on save).

    What the file system now returns (from the page cache here: this catches corruption on
    the way to the file system, not on the media) is compared with the bytes written: equal
    bytes are what an equal sha256 stands for, and a comparison costs a tenth of hashing
    them again (the load verifies the sha256). Read in chunks into one small buffer and
    compared where the written bytes lie (a bytearray with a memoryview: one memcmp; two
    memoryviews compare byte by byte): no copy of the checkpoint, and no buffer its size,
    whose fresh pages cost more than the reading (4.3 MB: 11 ms read whole, 0.4 ms so)."""
    chunk = bytearray(min(_READ_BACK_CHUNK, max(1, len(data))))
    with open(path, "rb") as f:
        offset = 0
        while offset < len(data):
            n = f.readinto(chunk)
            if not n:
                return False  # shorter than written
            if (chunk if n == len(chunk) else chunk[:n]) != data[offset:offset + n]:
                return False
            offset += n
        return not f.read(1)  # and not longer


def sync_dir(path: str, fsync_enabled: bool) -> None:
    if fsync_enabled:
        fsync_dir(path)


def sync_files(path: str, fsync_enabled: bool) -> None:
    """fsync every file of the checkpoint directory ``path``, then the directory."""
    if not fsync_enabled:
        return
    for name in sorted(os.listdir(path)):
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(path)


def write_pointer(directory: str, name: str | None, fsync_enabled: bool) -> None:
    """Point ``POINTER_FILE`` at the checkpoint ``name`` (None: remove it), atomically."""
    pointer = os.path.join(directory, POINTER_FILE)
    if name is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pointer)
    else:
        tmp = os.path.join(directory, f"{TMP_PREFIX}{POINTER_FILE}-{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(name + "\n")
            f.flush()
            if fsync_enabled:
                os.fsync(f.fileno())
        os.replace(tmp, pointer)
    sync_dir(directory, fsync_enabled)

