"""How one tier saves its checkpoints: the options ``CheckpointManager`` takes, checked once.

``harness.ckpt_tiers`` builds one per tier from the harness's ``checkpoint`` section (the
shared tier, the node-local fast tier and its replica differ in cadence, fsync and name);
tests and benchmarks build one directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.ckpt_layout import TIER

__all__ = ["TierOptions"]


@dataclass(frozen=True)
class TierOptions:
    keep: int
    """Checkpoints kept, newest first; at least 2."""
    mode: Literal["sync", "async"]
    """sync: training waits for the write; async: only for a host snapshot."""
    every_steps: int
    """Save every N steps (0: never by steps)."""
    every_seconds: float
    """Also save when this many seconds passed since the last save (0: off)."""
    verify_checksum: bool = True
    """sha256 of state.pt read back after writing and verified on load; off: a load
    trusts the bytes it reads (what a job without checksums does)."""
    tier: str = TIER
    """The tier's name in events."""
    fsync: bool = True
    """Off: files and directories are not fsynced (a page-cache or shm tier: fast, and
    lost with the node's power)."""
    retries: int = 0
    """Retries of a failed write before the save is abandoned."""
    max_failed_saves: int = 1
    """Abandoned saves in a row that raise the last error (0: never)."""
    when_busy: Literal["wait", "skip"] = "wait"
    """A save due while the previous async write runs: wait for it, or skip this one."""
    save_deadline_s: float = 0.0
    """A save still running after this long is reported (``on_deadline``; 0: off)."""
    pointer_before_fsync: bool = False
    """A deliberate bug (checkpoint.bug_pointer_before_fsync): the pointer is replaced
    before the checkpoint's files are fsynced (KempnerForge #102)."""

    def __post_init__(self) -> None:
        # Keep at least 2: the newest complete checkpoint can still turn out unreadable (bits
        # flipped at rest, storage that acknowledged but lost unfsynced data, a torn write
        # below the filesystem), and then the previous one is the only fallback short of
        # starting over.
        if self.keep < 2:
            raise ValueError(
                f"keep is {self.keep}; keep at least 2 checkpoints: the newest may be corrupt, and "
                "the previous one is the fallback"
            )
        if self.mode not in ("sync", "async"):
            raise ValueError(f"mode {self.mode!r} is not allowed; allowed values: sync, async")
        if self.every_steps < 0 or self.every_seconds < 0:
            raise ValueError("every_steps and every_seconds must be >= 0")
        if self.retries < 0 or self.max_failed_saves < 0 or self.save_deadline_s < 0:
            raise ValueError("retries, max_failed_saves and save_deadline_s must be >= 0")
        if self.when_busy not in ("wait", "skip"):
            raise ValueError(f"when_busy {self.when_busy!r} is not allowed; allowed values: wait, skip")
