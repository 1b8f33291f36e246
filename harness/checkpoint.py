"""Checkpoints that a crash can never leave half-loadable: atomic, verified, keep-last-K.

The manager is the public face and the policy; the parts are their own modules: the
directory's layout and the errors (``harness.ckpt_layout``), writing (``harness.ckpt_writer``),
reading back and verifying (``harness.ckpt_reader``), and which checkpoints stay
(``harness.ckpt_retention``).

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

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.ckpt_layout import (
    DATA,
    FORMAT_VERSION,
    LR_SCHEDULER,
    MANIFEST_FILE,
    MODEL,
    OPTIMIZER,
    POINTER_FILE,
    QUARANTINE_DIR,
    RNG,
    ROLLBACK_LOG,
    STATE_FILE,
    STEP,
    TIER,
    TMP_PREFIX,
    CheckpointCorruptError,
    CheckpointError,
    ChecksumMismatch,
    Invalid,
    LoadInfo,
    list_steps,
    step_dir_name,
)
from harness.ckpt_options import TierOptions
from harness.ckpt_reader import read_checkpoint, read_verified
from harness.ckpt_retention import prune, quarantine, remove_stale_tmp, rollback_records
from harness.ckpt_writer import (
    BlockedTime,
    FaultPoint,
    SaveDeadline,
    check_loadable,
    sync_dir,
    sync_files,
    write_files,
    write_pointer,
)
from harness.ckpt_writer import snapshot as snapshot_state

__all__ = [
    "DATA",
    "FORMAT_VERSION",
    "LR_SCHEDULER",
    "MANIFEST_FILE",
    "MODEL",
    "OPTIMIZER",
    "POINTER_FILE",
    "QUARANTINE_DIR",
    "RNG",
    "ROLLBACK_LOG",
    "STATE_FILE",
    "STEP",
    "TIER",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointManager",
    "LoadInfo",
    "TierOptions",
    "read_checkpoint",
]

log = logging.getLogger(__name__)

Emit = Callable[..., None]


class CheckpointManager:
    """Saves and loads the training state under ``directory``.

    Only the writer (rank 0: DDP state is replicated) writes; on other ranks :meth:`save` is a
    no-op, so the training loop can call it on every rank. Every rank can :meth:`load`.

    ``emit(kind, **fields)`` receives ``ckpt_save_start``, ``ckpt_save_end`` and ``ckpt_load``
    events; ``fault_point(point, step=...)`` is called half-way through writing ``state.pt``
    with point ``"ckpt_write"`` so that a chaos experiment can kill the writer there.
    """

    def __init__(self, directory: str, options: TierOptions | None = None, *, is_writer: bool,
                 emit: Emit | None = None, fault_point: FaultPoint | None = None,
                 on_deadline: Callable[[int, float, str], None] | None = None, **fields: Any) -> None:
        """``options``: how this tier saves (checked once, ``TierOptions``), or its fields
        as keywords. ``on_deadline(step, seconds, tier)``: a save past its deadline."""
        if options is None:
            options = TierOptions(**fields)
        elif fields:
            raise TypeError(f"give the tier's options or their fields, not both: {', '.join(fields)}")
        self.options = options
        self.directory = os.path.abspath(directory)
        self.is_writer = is_writer
        self._emit_fn = emit
        self._fault_point = fault_point
        o = options
        self.keep, self.mode, self.tier, self.fsync = o.keep, o.mode, o.tier, o.fsync
        self.every_steps, self.every_seconds = o.every_steps, o.every_seconds
        self.verify_checksum, self.pointer_before_fsync = o.verify_checksum, o.pointer_before_fsync
        self.retries, self.max_failed_saves, self.when_busy = o.retries, o.max_failed_saves, o.when_busy
        self._failed_in_row = 0
        self._deadline = SaveDeadline(o.save_deadline_s, on_deadline, o.tier) if o.save_deadline_s > 0 else None
        self._last_save_time = time.monotonic()
        self._thread: threading.Thread | None = None
        self._error: tuple[int, BaseException] | None = None
        self._closed = False
        if is_writer:
            os.makedirs(self.directory, exist_ok=True)
            remove_stale_tmp(self.directory)

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
        check_loadable(state, "state")

        if self.mode == "async" and self.when_busy == "skip" and self._thread is not None \
                and self._thread.is_alive():
            # The previous write is still running (slow or stalled storage): waiting for it
            # would stall training, so this save is skipped and the next one tries again.
            self._emit("ckpt_save_skipped", step=step, tier=self.tier,
                       reason="the previous write is still in flight")
            self._last_save_time = time.monotonic()
            return
        self._emit("ckpt_save_start", step=step, tier=self.tier, mode=self.mode)
        blocked = BlockedTime(entered)
        if self.mode == "sync":
            self._save(step, state, blocked, verified)
        else:
            # One write in flight at a time: waiting here is time training is blocked.
            self._join()
            self._raise_background_error()
            snapshot = snapshot_state(state)
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
        return quarantine(self.directory, from_step, record, self.fsync)

    def rollback_records(self) -> list[dict[str, Any]]:
        """The rollback log written by ``quarantine`` (oldest first; empty if none)."""
        return rollback_records(self.directory)

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints in the directory, oldest first (unverified)."""
        return self._list_steps()

    def read_step(self, step: int) -> tuple[dict[str, Any] | None, str, str | None]:
        """(state, path, None) when checkpoint ``step`` passes verification, else (None,
        path, reason); a checksum mismatch is reported as a ``detected`` corruption by the
        writer, as in :meth:`load`. For loading across tiers (harness/ckpt_tiers.py)."""
        self._join()
        path = os.path.join(self.directory, step_dir_name(step))
        try:
            return self._read_verified(path, step), path, None
        except Invalid as exc:
            log.warning("skipping checkpoint %s: %s", path, exc)
            if isinstance(exc, ChecksumMismatch) and self.is_writer:
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

    def _save_in_background(self, step: int, state: dict[str, Any], blocked: BlockedTime,
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

    def _save(self, step: int, state: dict[str, Any], blocked: BlockedTime,
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

    def _save_once(self, step: int, state: dict[str, Any], blocked: BlockedTime,
                   verified: dict[str, Any] | None = None) -> None:
        """Write ``state`` atomically as ``step``, then prune, then report the timings."""
        started = time.perf_counter()
        name = step_dir_name(step)
        final = os.path.join(self.directory, name)
        tmp = os.path.join(self.directory, f"{TMP_PREFIX}{name}-{os.getpid()}")
        if os.path.exists(tmp):  # our own earlier failed attempt at this step
            shutil.rmtree(tmp)
        os.makedirs(tmp)

        try:
            manifest = write_files(tmp, step, state, verified=verified, durable=not self.pointer_before_fsync,
                                   fsync_enabled=self.fsync, verify_checksum=self.verify_checksum,
                                   fault_point=self._fault_point)
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
            aside = os.path.join(self.directory, f"{TMP_PREFIX}replaced-{name}-{os.getpid()}")
            os.rename(final, aside)
            os.rename(tmp, final)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(tmp, final)
        sync_dir(self.directory, self.fsync)
        write_pointer(self.directory, name, self.fsync)
        if self.pointer_before_fsync:  # the bug: the files become durable only now
            sync_files(final, self.fsync)
        written = time.perf_counter() - started
        prune(self.directory, step, self.keep, self.fsync)

        if self.mode == "sync":  # training waited for all of it
            blocked.stop()
        self._emit(
            "ckpt_save_end", step=step, tier=self.tier, bytes=manifest["files"][STATE_FILE]["bytes"],
            seconds=written, blocked_seconds=blocked.seconds(), mode=self.mode, path=final,
            durable=self.fsync,  # what "the newest durable checkpoint" means (silent_rollback_steps)
        )

    # ---------------------------------------------------------------- loading

    def _list_steps(self) -> list[int]:
        return list_steps(self.directory)

    def _load(self, allow_fresh_start: bool) -> tuple[dict[str, Any], LoadInfo] | None:
        steps = self._list_steps()
        if not steps:
            return None
        skipped: list[tuple[str, str]] = []
        started = time.perf_counter()
        for step in reversed(steps):
            path = os.path.join(self.directory, step_dir_name(step))
            try:
                state = self._read_verified(path, step)
            except Invalid as exc:
                log.warning("skipping checkpoint %s: %s", path, exc)
                skipped.append((path, str(exc)))
                if isinstance(exc, ChecksumMismatch) and self.is_writer:
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
        return read_verified(path, step, self.verify_checksum)

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
