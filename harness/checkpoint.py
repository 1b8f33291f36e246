"""Checkpoints that a crash can never leave half-loadable: atomic, verified, keep-last-K.

Layout::

    <dir>/step-00000120/state.pt        torch.save of the whole training state
    <dir>/step-00000120/MANIFEST.json   step, format version, size + sha256 of every file
    <dir>/.tmp-step-00000140-<pid>/     a write in progress (or left by a dead writer)

A checkpoint is written into a ``.tmp-`` directory, every file is fsynced, the manifest is
written last, the directory is renamed to its final name and the parent directory is
fsynced. A crash at any point leaves either the complete checkpoint or a ``.tmp-`` directory
that :meth:`CheckpointManager.load` never looks at. Independently of that, ``load`` trusts
nothing it has not verified: a checkpoint whose manifest is missing, whose files differ in
size or sha256 from the manifest (a torn write, a flipped bit, storage that lost unfsynced
data) or that ``torch.load`` rejects is skipped and reported, and the next older one is used.

Why one writer and ``torch.save`` rather than ``torch.distributed.checkpoint`` (DCP): the
harness trains with DDP, whose state is fully replicated, so rank 0 holds everything and
there is nothing to shard. DCP's value is sharded state (FSDP/TP), where every rank writes its
part. Its ``async_save`` also needs a separate process group for its background collectives,
one more thing a network fault would break, and we would still have to add our own manifest
with sha256 verification, the atomic rename and keep-last-K, which DCP does not provide.

Async mode: ``save`` copies the state to host memory and returns; a background thread
writes it. Training is blocked only for the copy (and for a previous write still in flight,
unless ``when_busy="skip"``), which the ``ckpt_save_end`` event reports as
``blocked_seconds`` next to the write time.

Policy for a save that cannot persist (storage errors, a full disk): the write is retried
``retries`` times (``ckpt_save_failed`` each time, ``abandoned`` on the last), then the save
is abandoned -- its partial files removed, no ``ckpt_save_end``, so it is never reported
as saved -- and training goes on with the older checkpoints; ``max_failed_saves`` abandoned
saves in a row raise the last error (a job that cannot checkpoint at all risks
unbounded loss, and must say so). A save still running after ``save_deadline_s`` calls
``on_deadline(step, seconds, tier)``: the rank that owns the save reports it as its own
storage failure, before a peer's collective could time out and blame it as hung.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import logging
import os
import re
import shutil
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

__all__ = [
    "DATA",
    "FORMAT_VERSION",
    "LR_SCHEDULER",
    "MANIFEST_FILE",
    "MODEL",
    "OPTIMIZER",
    "POINTER_FILE",
    "RNG",
    "STATE_FILE",
    "STEP",
    "TIER",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointManager",
    "LoadInfo",
    "read_checkpoint",
]

log = logging.getLogger(__name__)

# Top-level keys of the state dict the training loop saves (shared by save and resume code).
MODEL = "model"
OPTIMIZER = "optimizer"
LR_SCHEDULER = "lr_scheduler"
RNG = "rng"
DATA = "data"
STEP = "step"

STATE_FILE = "state.pt"
MANIFEST_FILE = "MANIFEST.json"
POINTER_FILE = "LATEST"
"""Names the newest complete checkpoint (``step-NNNNNNNN``), replaced atomically after it is
durable, as Megatron's latest_checkpointed_iteration.txt and DeepSpeed's ``latest`` do: for
readers outside the job. ``load`` does not trust it; it lists and verifies."""
QUARANTINE_DIR = "quarantine"
"""Checkpoints taken out of reach of ``load`` after silent corruption was detected."""
ROLLBACK_LOG = "ROLLBACKS.jsonl"
FORMAT_VERSION = 1
TIER = "disk"
"""Storage tier named in events; the only one here (a real system adds host-memory / peer tiers)."""

_FINAL_RE = re.compile(r"^step-(\d{8})$")
_TMP_PREFIX = ".tmp-"
_TMP_PID_RE = re.compile(r"-(\d+)$")

Emit = Callable[..., None]
FaultPoint = Callable[..., None]


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (also: a failed background write, raised later)."""


class CheckpointCorruptError(CheckpointError):
    """Checkpoints exist but none passed verification; ``corrupt`` lists (path, reason)."""

    def __init__(self, corrupt: list[tuple[str, str]]) -> None:
        self.corrupt = corrupt
        lines = "".join(f"\n  {path}: {reason}" for path, reason in corrupt)
        super().__init__(
            f"all {len(corrupt)} checkpoint(s) failed verification; refusing to silently start "
            f"from scratch (pass --allow-fresh-start, or allow_fresh_start: true in a scenario, to do so):{lines}"
        )


@dataclass(frozen=True)
class LoadInfo:
    """What :meth:`CheckpointManager.load` resumed from, and what it had to skip."""

    step: int
    path: str
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def _fsync_dir(path: str) -> None:
    """Make renames / new entries in ``path`` durable (a file's fsync does not cover its name)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


# What torch.load(weights_only=True) accepts. Checked at save time so that a state that
# could never be loaded fails the save loudly instead of making every checkpoint "corrupt".
# Exact types for scalars and containers: a subclass (numpy.float64 is a float, a namedtuple
# is a tuple) pickles as its own class, which the weights-only unpickler refuses.
_SCALARS = (str, bytes, int, float, bool, type(None), torch.dtype, torch.device, torch.Size)
_MAPPINGS = (dict, OrderedDict)


def _check_loadable(obj: Any, where: str) -> None:
    kind = type(obj)
    if kind in _MAPPINGS:
        for key, value in obj.items():
            if type(key) not in (str, int):
                raise TypeError(f"checkpoint state key {where}[{key!r}] must be a str or int")
            _check_loadable(value, f"{where}[{key!r}]")
    elif kind in (list, tuple):
        for i, value in enumerate(obj):
            _check_loadable(value, f"{where}[{i}]")
    elif kind not in _SCALARS and not isinstance(obj, torch.Tensor):
        raise TypeError(
            f"checkpoint state {where} is a {kind.__module__}.{kind.__qualname__}; only dicts, "
            "lists, tuples, numbers, strings and tensors can be loaded with "
            "torch.load(weights_only=True) (convert e.g. numpy RNG state to a tensor or list)"
        )


def _snapshot(obj: Any) -> Any:
    """A deep copy whose tensors are detached host-memory clones (for the async writer)."""
    if obj is None or isinstance(obj, int | float | str | bytes):
        return obj  # immutable: sharing is a copy (the RNG state alone holds 625 ints)
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        out = type(obj)((key, _snapshot(value)) for key, value in obj.items())
        metadata = getattr(obj, "_metadata", None)  # module state_dict versions
        if metadata is not None:
            out._metadata = copy.deepcopy(metadata)  # type: ignore[attr-defined]
        return out
    if isinstance(obj, list):
        return [_snapshot(value) for value in obj]
    if isinstance(obj, tuple):
        return tuple(_snapshot(value) for value in obj)
    return copy.deepcopy(obj)


class _BlockedTime:
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


class _SaveDeadline:
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


class _Invalid(Exception):
    """A checkpoint failed verification; the message is the reason reported to the user."""


class _ChecksumMismatch(_Invalid):
    """The bytes on disk are not the bytes written: corruption at rest or on the way."""


class CheckpointManager:
    """Saves and loads the training state under ``directory``.

    Only the writer (rank 0: DDP state is replicated) writes; on other ranks :meth:`save` is a
    no-op, so the training loop can call it on every rank. Every rank can :meth:`load`.

    ``emit(kind, **fields)`` receives ``ckpt_save_start``, ``ckpt_save_end`` and ``ckpt_load``
    events; ``fault_point(point, step=...)`` is called half-way through writing ``state.pt``
    with point ``"ckpt_write"`` so that a chaos experiment can kill the writer there.
    """

    def __init__(
        self,
        directory: str,
        *,
        keep: int,
        mode: Literal["sync", "async"],
        every_steps: int,
        every_seconds: float,
        is_writer: bool,
        emit: Emit | None = None,
        fault_point: FaultPoint | None = None,
        verify_checksum: bool = True,
        tier: str = TIER,
        fsync: bool = True,
        retries: int = 0,
        max_failed_saves: int = 1,
        when_busy: Literal["wait", "skip"] = "wait",
        save_deadline_s: float = 0.0,
        on_deadline: Callable[[int, float, str], None] | None = None,
        pointer_before_fsync: bool = False,
    ) -> None:
        # Keep at least 2: the newest complete checkpoint can still turn out unreadable (bits
        # flipped at rest, storage that acknowledged but lost unfsynced data, a torn write
        # below the filesystem), and then the previous one is the only fallback short of
        # starting over.
        if keep < 2:
            raise ValueError(
                f"keep is {keep}; keep at least 2 checkpoints: the newest may be corrupt, and "
                "the previous one is the fallback"
            )
        if mode not in ("sync", "async"):
            raise ValueError(f"mode {mode!r} is not allowed; allowed values: sync, async")
        if every_steps < 0 or every_seconds < 0:
            raise ValueError("every_steps and every_seconds must be >= 0")
        if retries < 0 or max_failed_saves < 0 or save_deadline_s < 0:
            raise ValueError("retries, max_failed_saves and save_deadline_s must be >= 0")
        if when_busy not in ("wait", "skip"):
            raise ValueError(f"when_busy {when_busy!r} is not allowed; allowed values: wait, skip")
        self.directory = os.path.abspath(directory)
        self.keep = keep
        self.mode = mode
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.is_writer = is_writer
        self._emit_fn = emit
        self._fault_point = fault_point
        self.verify_checksum = verify_checksum
        """sha256 of state.pt read back after writing and verified on load; off: a load
        trusts the bytes it reads (what a job without checksums does)."""
        self.tier = tier
        self.fsync = fsync
        """Off: files and directories are not fsynced (a page-cache or shm tier: fast, and
        lost with the node's power)."""
        self.pointer_before_fsync = pointer_before_fsync
        """A deliberate bug (checkpoint.bug_pointer_before_fsync): the pointer is replaced
        before the checkpoint's files are fsynced (KempnerForge #102)."""
        self.retries = retries
        self.max_failed_saves = max_failed_saves
        self.when_busy = when_busy
        self._failed_in_row = 0
        self._deadline = _SaveDeadline(save_deadline_s, on_deadline, tier) if save_deadline_s > 0 else None
        self._last_save_time = time.monotonic()
        self._thread: threading.Thread | None = None
        self._error: tuple[int, BaseException] | None = None
        self._closed = False
        if is_writer:
            os.makedirs(self.directory, exist_ok=True)
            self._remove_stale_tmp()

    # ---------------------------------------------------------------- public API

    def should_save(self, step: int) -> bool:
        """True when ``step`` is due: a multiple of ``every_steps``, or ``every_seconds`` passed.

        Never at step 0 or below: the untrained state is reproduced exactly by a fresh start.
        """
        if step <= 0:
            return False
        if self.every_steps > 0 and step % self.every_steps == 0:
            return True
        return self.every_seconds > 0 and time.monotonic() - self._last_save_time >= self.every_seconds

    def save(self, step: int, state: dict[str, Any], verified: dict[str, Any] | None = None) -> None:
        """Checkpoint ``state`` as step ``step`` (writer only; a no-op on other ranks).

        ``verified``: how the state was verified before saving (the parameter digest the
        replicas agreed on, the last step each detector passed); kept in the manifest.
        Raises the error of a failed earlier background write first, if any.
        """
        entered = time.perf_counter()
        self._check_open()
        self._raise_background_error()
        if not self.is_writer:
            self._last_save_time = time.monotonic()
            return
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict, got {type(state).__name__}")
        if STEP in state and state[STEP] != step:
            raise ValueError(f"state[{STEP!r}] is {state[STEP]!r} but the checkpoint step is {step}")
        _check_loadable(state, "state")

        if self.mode == "async" and self.when_busy == "skip" and self._thread is not None \
                and self._thread.is_alive():
            # The previous write is still running (slow or stalled storage): waiting for it
            # would stall training, so this save is skipped and the next one tries again.
            self._emit("ckpt_save_skipped", step=step, tier=self.tier,
                       reason="the previous write is still in flight")
            self._last_save_time = time.monotonic()
            return
        self._emit("ckpt_save_start", step=step, tier=self.tier, mode=self.mode)
        blocked = _BlockedTime(entered)
        if self.mode == "sync":
            self._save(step, state, blocked, verified)
        else:
            # One write in flight at a time: waiting here is time training is blocked.
            self._join()
            self._raise_background_error()
            snapshot = _snapshot(state)
            self._thread = threading.Thread(
                target=self._save_in_background, args=(step, snapshot, blocked, verified),
                name=f"ckpt-write-{step}",
                # Daemon: a process that dies (or is told to exit) must not hang on a write
                # stuck in stalled storage; an unfinished write is only a .tmp- directory.
                daemon=True,
            )
            self._thread.start()
            blocked.stop()
        self._last_save_time = time.monotonic()

    def load(self, allow_fresh_start: bool = False) -> tuple[dict[str, Any], LoadInfo] | None:
        """The newest checkpoint that passes verification, and what was skipped on the way.

        None when there is no checkpoint at all. When checkpoints exist but none is valid,
        raises :class:`CheckpointCorruptError` naming each one and why -- or returns None if
        ``allow_fresh_start`` (the caller then trains from scratch, knowingly).
        """
        self._check_open()
        # A load must not race our own write of the same directory.
        self._join()
        return self._load(allow_fresh_start)

    def quarantine(self, from_step: int, record: dict[str, Any]) -> list[int]:
        """Move every checkpoint of ``from_step`` or later out of reach of ``load`` (into
        ``quarantine/``, kept for forensics) and append ``record`` to the rollback log;
        returns the steps moved. Writer only; waits for a write in flight first (it may be
        one of them). Used when silent corruption is detected: those checkpoints may hold
        corrupted state."""
        if not self.is_writer:
            return []
        self._join()
        qdir = os.path.join(self.directory, QUARANTINE_DIR)
        os.makedirs(qdir, exist_ok=True)
        moved = []
        for step in self._list_steps():
            if step < from_step:
                continue
            name = _step_dir_name(step)
            os.rename(os.path.join(self.directory, name),
                      os.path.join(qdir, f"{name}.{time.time_ns()}"))
            moved.append(step)
        remaining = self._list_steps()
        self._write_pointer(_step_dir_name(remaining[-1]) if remaining else None)
        _fsync_dir(self.directory)
        with open(os.path.join(qdir, ROLLBACK_LOG), "a", encoding="utf-8") as f:
            f.write(json.dumps({**record, "quarantined": moved, "from_step": from_step,
                                "t": time.time()}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(qdir)
        return moved

    def rollback_records(self) -> list[dict[str, Any]]:
        """The rollback log written by ``quarantine`` (oldest first; empty if none)."""
        path = os.path.join(self.directory, QUARANTINE_DIR, ROLLBACK_LOG)
        try:
            with open(path, encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        except (FileNotFoundError, ValueError):
            return []

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints in the directory, oldest first (unverified)."""
        return self._list_steps()

    def read_step(self, step: int) -> tuple[dict[str, Any] | None, str, str | None]:
        """(state, path, None) when checkpoint ``step`` passes verification, else (None,
        path, reason); a checksum mismatch is reported as a ``detected`` corruption by the
        writer, as in :meth:`load`. For loading across tiers (harness/ckpt_tiers.py)."""
        self._join()
        path = os.path.join(self.directory, _step_dir_name(step))
        try:
            return self._read_verified(path, step), path, None
        except _Invalid as exc:
            log.warning("skipping checkpoint %s: %s", path, exc)
            if isinstance(exc, _ChecksumMismatch) and self.is_writer:
                self._emit("detected", reason=f"checkpoint {os.path.basename(path)} ({self.tier} tier): {exc}",
                           suspect=None, failure_class="corruption", detector="ckpt_checksum",
                           checkpoint_step=step)
            return None, path, str(exc)

    def wait(self) -> None:
        """Block until the background write (if any) is done; raise its error, if it failed."""
        self._join()
        self._raise_background_error()

    def close(self) -> None:
        """Finish the write in flight and stop; raise its error, if it failed. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._join()
        self._raise_background_error()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- writing

    def _save_in_background(self, step: int, state: dict[str, Any], blocked: _BlockedTime,
                            verified: dict[str, Any] | None = None) -> None:
        # Hand the GIL straight back: Thread.start() waits for this thread to run, and a
        # writer that went on serialising would keep training blocked for a whole GIL switch
        # interval (5 ms) before save() could return.
        time.sleep(0)
        try:
            self._save(step, state, blocked, verified)
        except BaseException as exc:  # noqa: B036 - recorded and re-raised in the training thread
            log.error("background checkpoint write of step %d failed: %r", step, exc)
            self._error = (step, exc)

    def _save(self, step: int, state: dict[str, Any], blocked: _BlockedTime,
              verified: dict[str, Any] | None = None) -> None:
        """The retry / abandon policy around one save (module docstring)."""
        if self._deadline is not None:
            self._deadline.begin(step)
        try:
            for attempt in range(1, self.retries + 2):
                try:
                    self._save_once(step, state, blocked, verified)
                except Exception as exc:
                    abandoned = attempt > self.retries
                    self._emit("ckpt_save_failed", step=step, tier=self.tier, attempt=attempt,
                               abandoned=abandoned, mode=self.mode,
                               error=f"{type(exc).__name__}: {exc}"[:300])
                    if not abandoned:
                        time.sleep(min(0.1 * attempt, 1.0))  # a transient error may clear
                        continue
                    self._failed_in_row += 1
                    if self.max_failed_saves and self._failed_in_row >= self.max_failed_saves:
                        # The error itself goes up (its type tells the caller what failed).
                        exc.add_note(f"{self._failed_in_row} save(s) in a row abandoned on the "
                                     f"{self.tier} tier (max_failed_saves={self.max_failed_saves})")
                        raise
                    log.error("checkpoint save of step %d abandoned after %d attempt(s): %r",
                              step, attempt, exc)
                    return
                self._failed_in_row = 0
                return
        finally:
            if self._deadline is not None:
                self._deadline.end()

    def _save_once(self, step: int, state: dict[str, Any], blocked: _BlockedTime,
                   verified: dict[str, Any] | None = None) -> None:
        """Write ``state`` atomically as ``step``, then prune, then report the timings."""
        started = time.perf_counter()
        name = _step_dir_name(step)
        final = os.path.join(self.directory, name)
        tmp = os.path.join(self.directory, f"{_TMP_PREFIX}{name}-{os.getpid()}")
        if os.path.exists(tmp):  # our own earlier failed attempt at this step
            shutil.rmtree(tmp)
        os.makedirs(tmp)

        try:
            manifest = self._write_files(tmp, step, state, verified, durable=not self.pointer_before_fsync)
        except BaseException:
            # A write that failed (not one killed: that leaves its directory for the next
            # writer's start-up to clear) must not leave its partial files behind.
            shutil.rmtree(tmp, ignore_errors=True)
            raise

        if os.path.exists(final):
            # Only a checkpoint that failed verification can be here (a valid one would have
            # been resumed from, and this step not trained again). A directory cannot be
            # replaced atomically, so move it out of the way first; a crash in between leaves
            # no checkpoint of this step, and the older ones are untouched.
            aside = os.path.join(self.directory, f"{_TMP_PREFIX}replaced-{name}-{os.getpid()}")
            os.rename(final, aside)
            os.rename(tmp, final)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(tmp, final)
        self._sync_dir(self.directory)
        self._write_pointer(name)
        if self.pointer_before_fsync:  # the bug: the files become durable only now
            self._sync_files(final)
        written = time.perf_counter() - started
        self._prune(step)

        if self.mode == "sync":  # training waited for all of it
            blocked.stop()
        self._emit(
            "ckpt_save_end", step=step, tier=self.tier, bytes=manifest["files"][STATE_FILE]["bytes"],
            seconds=written, blocked_seconds=blocked.seconds(), mode=self.mode, path=final,
            durable=self.fsync,  # what "the newest durable checkpoint" means (silent_rollback_steps)
        )

    def _write_files(self, tmp: str, step: int, state: dict[str, Any],
                     verified: dict[str, Any] | None = None, durable: bool = True) -> dict[str, Any]:
        """Write state.pt, then the manifest describing it, into ``tmp``; all fsynced (unless
        not ``durable``: the caller fsyncs them later, ``_sync_files``)."""
        fsync = self.fsync and durable
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getbuffer()
        half = len(data) // 2
        with open(os.path.join(tmp, STATE_FILE), "wb") as f:
            f.write(data[:half])
            # Flushed so that a process killed at the fault point really leaves a partial
            # file behind (os._exit drops Python's buffers), as a crash mid-write would.
            f.flush()
            if self._fault_point is not None:
                self._fault_point("ckpt_write", step=step)
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
        if self.verify_checksum:
            # Read back what the file system now returns (from the page cache here: this
            # catches corruption on the way to the file system, not on the media).
            with open(os.path.join(tmp, STATE_FILE), "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != manifest["files"][STATE_FILE]["sha256"]:
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
            self._sync_dir(tmp)
        return manifest

    def _sync_dir(self, path: str) -> None:
        if self.fsync:
            _fsync_dir(path)

    def _sync_files(self, path: str) -> None:
        """fsync every file of the checkpoint directory ``path``, then the directory."""
        if not self.fsync:
            return
        for name in sorted(os.listdir(path)):
            fd = os.open(os.path.join(path, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(path)

    def _write_pointer(self, name: str | None) -> None:
        """Point ``POINTER_FILE`` at the checkpoint ``name`` (None: remove it), atomically."""
        pointer = os.path.join(self.directory, POINTER_FILE)
        if name is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(pointer)
        else:
            tmp = os.path.join(self.directory, f"{_TMP_PREFIX}{POINTER_FILE}-{os.getpid()}")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(name + "\n")
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, pointer)
        self._sync_dir(self.directory)

    def _prune(self, newest: int) -> None:
        """Keep the ``keep`` newest checkpoints up to ``newest``; drop the rest.

        Checkpoints *newer* than the one just written are dropped too: they belong to a
        timeline this run abandoned (they failed verification, or the run was started afresh),
        and the next restart must not resume from them.
        """
        steps = self._list_steps()
        newer = [s for s in steps if s > newest]
        kept_range = [s for s in steps if s <= newest]
        drop = newer + kept_range[:-self.keep]
        for step in drop:
            name = _step_dir_name(step)
            # Rename first, delete after: a crash mid-delete then leaves a .tmp- directory
            # (cleaned on the next start), never a half-deleted checkpoint load would report.
            aside = os.path.join(self.directory, f"{_TMP_PREFIX}prune-{name}-{os.getpid()}")
            try:
                os.rename(os.path.join(self.directory, name), aside)
            except FileNotFoundError:
                continue
            shutil.rmtree(aside, ignore_errors=True)
        if drop:
            self._sync_dir(self.directory)

    def _remove_stale_tmp(self) -> None:
        """Delete ``.tmp-`` directories of writers that are gone (their writes can never finish)."""
        for entry in os.listdir(self.directory):
            if not entry.startswith(_TMP_PREFIX):
                continue
            match = _TMP_PID_RE.search(entry)
            pid = int(match.group(1)) if match else None
            # Our own pid counts as gone: this writer has not started a write yet, so a
            # directory with our pid is from an earlier process that had the same pid
            # (common in containers, where the job is often pid 1 again after a restart).
            if pid is not None and pid != os.getpid() and _pid_alive(pid):
                continue
            log.info("removing stale partial checkpoint %s", entry)
            path = os.path.join(self.directory, entry)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:  # a pointer being replaced
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

    # ---------------------------------------------------------------- loading

    def _list_steps(self) -> list[int]:
        """Steps of the complete (renamed) checkpoint directories, oldest first."""
        try:
            entries = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        steps = []
        for entry in entries:
            match = _FINAL_RE.match(entry)
            if match and os.path.isdir(os.path.join(self.directory, entry)):
                steps.append(int(match.group(1)))
        return sorted(steps)

    def _load(self, allow_fresh_start: bool) -> tuple[dict[str, Any], LoadInfo] | None:
        steps = self._list_steps()
        if not steps:
            return None
        skipped: list[tuple[str, str]] = []
        started = time.perf_counter()
        for step in reversed(steps):
            path = os.path.join(self.directory, _step_dir_name(step))
            try:
                state = self._read_verified(path, step)
            except _Invalid as exc:
                log.warning("skipping checkpoint %s: %s", path, exc)
                skipped.append((path, str(exc)))
                if isinstance(exc, _ChecksumMismatch) and self.is_writer:
                    # Silent corruption caught: reported once (by the writer; every rank
                    # skips the same file).
                    self._emit("detected", reason=f"checkpoint {os.path.basename(path)}: {exc}",
                               suspect=None, failure_class="corruption", detector="ckpt_checksum",
                               checkpoint_step=step)
                continue
            info = LoadInfo(step=step, path=path, skipped=skipped)
            self._emit(
                "ckpt_load", step=step, tier=self.tier, verified=True, path=path,
                skipped=[list(item) for item in skipped], seconds=time.perf_counter() - started,
            )
            return state, info
        if allow_fresh_start:
            log.warning("every checkpoint failed verification; starting fresh as allowed: %s", skipped)
            return None
        raise CheckpointCorruptError(skipped)

    def _read_verified(self, path: str, step: int) -> dict[str, Any]:
        return _read_verified(path, step, self.verify_checksum)

    # ---------------------------------------------------------------- helpers

    def _join(self) -> None:
        thread = self._thread
        if thread is not None:
            thread.join()
            self._thread = None

    def _raise_background_error(self) -> None:
        if self._error is None:
            return
        step, exc = self._error
        self._error = None  # reported once
        raise CheckpointError(f"background checkpoint write of step {step} failed: {exc!r}") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError("the checkpoint manager is closed")

    def _emit(self, kind: str, **fields: Any) -> None:
        # An event sink that fails must never fail a checkpoint (chaostoolkit habit).
        if self._emit_fn is None:
            return
        try:
            self._emit_fn(kind, **fields)
        except Exception:  # noqa: BLE001
            log.exception("checkpoint event %s could not be emitted", kind)


def read_checkpoint(path: str) -> dict[str, Any]:
    """The state of the checkpoint directory ``path`` (``.../step-NNNNNNNN``), verified as
    :meth:`CheckpointManager.load` verifies it (manifest, sizes, sha256, the step); raises
    :class:`CheckpointError` saying why it is unusable. For readers outside the job:
    trainchaos's checkpoint checkers (chaos.workload.harness)."""
    match = _FINAL_RE.match(os.path.basename(os.path.normpath(path)))
    if match is None:
        raise CheckpointError(f"{path}: not a checkpoint directory (step-NNNNNNNN)")
    try:
        return _read_verified(path, int(match.group(1)), True)
    except _Invalid as exc:
        raise CheckpointError(str(exc)) from None


def _read_verified(path: str, step: int, verify_checksum: bool) -> dict[str, Any]:
    """The state of the checkpoint at ``path`` if its manifest checks out, else _Invalid."""
    manifest_path = os.path.join(path, MANIFEST_FILE)
    try:
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise _Invalid(f"no {MANIFEST_FILE} (the write never completed)") from None
    except (OSError, ValueError) as exc:
        raise _Invalid(f"unreadable {MANIFEST_FILE}: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise _Invalid(f"malformed {MANIFEST_FILE}: no 'files' mapping")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise _Invalid(
            f"format version {manifest.get('format_version')!r}, this reader knows {FORMAT_VERSION}"
        )
    if manifest.get("step") != step:
        raise _Invalid(f"manifest says step {manifest.get('step')!r}, directory says {step}")
    files = manifest["files"]
    if STATE_FILE not in files:
        raise _Invalid(f"{MANIFEST_FILE} does not list {STATE_FILE}")

    contents: dict[str, bytes] = {}
    for name, meta in files.items():
        if not isinstance(name, str) or os.path.basename(name) != name or name in (".", ".."):
            raise _Invalid(f"{MANIFEST_FILE} lists a bad file name {name!r}")
        try:
            with open(os.path.join(path, name), "rb") as f:
                data = f.read()
        except OSError as exc:
            raise _Invalid(f"{name}: cannot read: {exc.strerror or exc}") from None
        try:
            size, digest = int(meta["bytes"]), str(meta["sha256"])
        except (KeyError, TypeError, ValueError):
            raise _Invalid(f"{MANIFEST_FILE} entry of {name} lacks bytes/sha256") from None
        if len(data) != size:
            raise _Invalid(f"{name}: {len(data)} bytes, manifest says {size} (truncated or torn)")
        if verify_checksum and hashlib.sha256(data).hexdigest() != digest:
            raise _ChecksumMismatch(f"{name}: sha256 mismatch (content changed after it was written)")
        contents[name] = data

    # Load the very bytes that were verified (re-reading the file could see other bytes).
    try:
        state = torch.load(io.BytesIO(contents[STATE_FILE]), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means unusable
        raise _Invalid(f"{STATE_FILE}: torch.load failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict):
        raise _Invalid(f"{STATE_FILE} holds a {type(state).__name__}, not a state dict")
    if STEP in state and state[STEP] != step:
        raise _Invalid(f"{STATE_FILE} says step {state[STEP]!r}, manifest says {step}")
    return state
