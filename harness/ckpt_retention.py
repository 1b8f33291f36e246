"""Which checkpoints stay: keep-last-K after each save, partial writes of dead writers
cleared at start-up, and checkpoints quarantined (moved out of reach of ``load``, kept for
forensics) when silent corruption is detected.

Every removal renames first and deletes after: a crash mid-delete leaves a ``.tmp-``
directory (cleared on the next start), never a half-deleted checkpoint ``load`` would report.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from typing import Any

from harness.ckpt_layout import (
    QUARANTINE_DIR,
    ROLLBACK_LOG,
    TMP_PID_RE,
    TMP_PREFIX,
    fsync_dir,
    list_steps,
    pid_alive,
    step_dir_name,
)
from harness.ckpt_writer import sync_dir, write_pointer

__all__ = ["prune", "quarantine", "remove_stale_tmp", "rollback_records"]

log = logging.getLogger("harness.checkpoint")


def prune(directory: str, newest: int, keep: int, fsync_enabled: bool) -> None:
    """Keep the ``keep`` newest checkpoints up to ``newest``; drop the rest.

    Checkpoints *newer* than the one just written are dropped too: they belong to a
    timeline this run abandoned (they failed verification, or the run was started afresh),
    and the next restart must not resume from them.
    """
    steps = list_steps(directory)
    newer = [s for s in steps if s > newest]
    kept_range = [s for s in steps if s <= newest]
    drop = newer + kept_range[:-keep]
    for step in drop:
        name = step_dir_name(step)
        aside = os.path.join(directory, f"{TMP_PREFIX}prune-{name}-{os.getpid()}")
        try:
            os.rename(os.path.join(directory, name), aside)
        except FileNotFoundError:
            continue
        shutil.rmtree(aside, ignore_errors=True)
    if drop:
        sync_dir(directory, fsync_enabled)


def remove_stale_tmp(directory: str) -> None:
    """Delete ``.tmp-`` directories of writers that are gone (their writes can never finish)."""
    for entry in os.listdir(directory):
        if not entry.startswith(TMP_PREFIX):
            continue
        match = TMP_PID_RE.search(entry)
        pid = int(match.group(1)) if match else None
        # Our own pid counts as gone: this writer has not started a write yet, so a
        # directory with our pid is from an earlier process that had the same pid
        # (common in containers, where the job is often pid 1 again after a restart).
        if pid is not None and pid != os.getpid() and pid_alive(pid):
            continue
        log.info("removing stale partial checkpoint %s", entry)
        path = os.path.join(directory, entry)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:  # a pointer being replaced
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def quarantine(directory: str, from_step: int, record: dict[str, Any], fsync_enabled: bool) -> list[int]:
    """Move every checkpoint of ``from_step`` or later into ``quarantine/`` and append
    ``record`` to the rollback log; returns the steps moved."""
    qdir = os.path.join(directory, QUARANTINE_DIR)
    os.makedirs(qdir, exist_ok=True)
    moved = []
    for step in list_steps(directory):
        if step < from_step:
            continue
        name = step_dir_name(step)
        os.rename(os.path.join(directory, name), os.path.join(qdir, f"{name}.{time.time_ns()}"))
        moved.append(step)
    remaining = list_steps(directory)
    write_pointer(directory, step_dir_name(remaining[-1]) if remaining else None, fsync_enabled)
    fsync_dir(directory)
    with open(os.path.join(qdir, ROLLBACK_LOG), "a", encoding="utf-8") as f:
        f.write(json.dumps({**record, "quarantined": moved, "from_step": from_step,
                            "t": time.time()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(qdir)
    return moved


def rollback_records(directory: str) -> list[dict[str, Any]]:
    """The rollback log written by ``quarantine`` (oldest first; empty if none)."""
    path = os.path.join(directory, QUARANTINE_DIR, ROLLBACK_LOG)
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (FileNotFoundError, ValueError):
        return []
