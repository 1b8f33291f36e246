"""What a checkpoint directory looks like, and the errors about it: the file names, the
state's top-level keys, the step directories' names, and the listing of complete ones.

Layout::

    <dir>/step-00000120/state.pt        torch.save of the whole training state
    <dir>/step-00000120/MANIFEST.json   step, format version, size + sha256 of every file
    <dir>/.tmp-step-00000140-<pid>/     a write in progress (or left by a dead writer)
    <dir>/LATEST                        the newest complete checkpoint's name (for outsiders)
    <dir>/quarantine/                   checkpoints taken out of reach after silent corruption

The writer (``harness.ckpt_writer``), the reader (``harness.ckpt_reader``), retention
(``harness.ckpt_retention``) and the manager (``harness.checkpoint``) all spell it from here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

__all__ = [
    "DATA", "FORMAT_VERSION", "LR_SCHEDULER", "MANIFEST_FILE", "MODEL", "OPTIMIZER", "POINTER_FILE",
    "QUARANTINE_DIR", "RNG", "ROLLBACK_LOG", "STATE_FILE", "STEP", "TIER", "TMP_PREFIX",
    "CheckpointCorruptError", "CheckpointError", "ChecksumMismatch", "Invalid", "LoadInfo",
    "fsync_dir", "list_steps", "pid_alive", "step_dir_name",
]

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

FINAL_RE = re.compile(r"^step-(\d{8})$")
TMP_PREFIX = ".tmp-"
TMP_PID_RE = re.compile(r"-(\d+)$")

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


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def fsync_dir(path: str) -> None:
    """Make renames / new entries in ``path`` durable (a file's fsync does not cover its name)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class Invalid(Exception):
    """A checkpoint failed verification; the message is the reason reported to the user."""


class ChecksumMismatch(Invalid):
    """The bytes on disk are not the bytes written: corruption at rest or on the way."""


def list_steps(directory: str) -> list[int]:
    """Steps of the complete (renamed) checkpoint directories, oldest first."""
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return []
    steps = []
    for entry in entries:
        match = FINAL_RE.match(entry)
        if match and os.path.isdir(os.path.join(directory, entry)):
            steps.append(int(match.group(1)))
    return sorted(steps)
