"""When a crash run of the checkpoint durability sweep has shown what the sweep judges, and
ends there (``chaos.runner.crashsweep``; docs/checkers.md).

A crash run's verdict needs the crash image (kept by the storage layer at the crash), the
events up to the crash (what was reported saved, how far training got), what the restarted
job loaded, and whether it trains on from the state the twin had: the digest of its model
state at its first step past the load, against the twin's at that step. Everything after
that first step (the rest of the training, the saves it makes again, its final weights)
repeats what the twin did from the same state, so a crash run ends there: ``CrashRunEnd``
ends it ``completed`` once the restarted writer (rank 0) has reported that step's
``state_digest``. A job that reports no digests (the twin has none) has only its final
weights to be judged by, and runs to its end.

A restart that cannot load ends the run ``failed`` at once, instead of waiting out
torchrun's restart budget: the restarted writer exits with an error (its ``rank_exit``, or
its node's agent reporting the worker failed: ``detected``), or starts a second time, before
any step past the crash.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING

from chaos.runner.handlers import RunEnd, RunHandler

if TYPE_CHECKING:
    from chaos.runfiles.events import Event

__all__ = ["CrashRunEnd", "restart_digest"]

WRITER = "rank-0"
"""The rank whose restart is judged: it writes the checkpoints, and reports the digests."""
_STOPPED_BY_AGENT = 128 + signal.SIGTERM
"""A rank's exit code when its agent stops it to restart the group with a new member (a peer
node's restart): not a failure of its own."""


def _incarnation(ev: Event) -> int:
    return int(ev.get("incarnation") or 0)


def restart_digest(events: list[Event], crash_event: str) -> tuple[int, str] | None:
    """(step, digest) of the writer's first model state past the restart after the crash
    (``state_digest`` of an incarnation >= 1, at a step past the one it resumed from); None:
    not reported (no restart, no step, or a job that reports no digests)."""
    crashed = False
    resumed = 0
    for ev in events:
        kind = ev.get("kind")
        if kind == crash_event:
            crashed = True
        if not crashed or ev.get("src") != WRITER or _incarnation(ev) < 1:
            continue
        if kind == "ckpt_load" and isinstance(ev.get("step"), int):
            resumed = int(ev["step"])
        elif kind == "state_digest" and isinstance(ev.get("step"), int) and int(ev["step"]) > resumed \
                and isinstance(ev.get("digest"), str):
            return int(ev["step"]), str(ev["digest"])
    return None


class CrashRunEnd(RunHandler):
    """Ends a crash run once its restart is judged (module docstring). ``digests``: the
    twin's state at each step (empty: the run goes on to its end)."""

    def __init__(self, crash_event: str, digests: Mapping[int, str], writer_node: int = 0) -> None:
        self.crash_event = crash_event
        self.digests = digests
        self.writer_node = f"node-{writer_node}"
        self.crashed = False
        self.resumed = 0
        self.stepped: int | None = None
        """The writer's first step past the restart."""
        self.checked: int | None = None
        """The step whose digest was reported after the restart."""
        self.failure: str | None = None

    def event(self, ev: Event) -> None:
        kind = ev.get("kind")
        if kind == self.crash_event:
            self.crashed = True
            return
        if not self.crashed or self.stepped is not None and self.checked is not None:
            return
        src, incarnation = ev.get("src"), _incarnation(ev)
        if kind == "detected" and src == self.writer_node and incarnation >= 1 and self.stepped is None:
            self.failure = f"the restarted job failed before its first step ({ev.get('reason')})"
        if src != WRITER or incarnation < 1:
            return
        if kind == "ckpt_load" and isinstance(ev.get("step"), int):
            self.resumed = int(ev["step"])
        elif kind == "step_end" and self.stepped is None and isinstance(ev.get("step"), int) \
                and int(ev["step"]) > self.resumed:
            self.stepped = int(ev["step"])
        elif kind == "state_digest" and self.checked is None and isinstance(ev.get("step"), int) \
                and int(ev["step"]) > self.resumed:
            self.checked = int(ev["step"])
        elif self.stepped is None and kind == "rank_exit" and ev.get("code") not in (0, _STOPPED_BY_AGENT):
            self.failure = f"the restarted job exited before its first step: {ev.get('reason') or ev.get('code')}"
        elif self.stepped is None and kind == "rank_start" and incarnation >= 2:
            self.failure = "the restarted job failed before its first step (it was restarted again)"

    def end(self) -> RunEnd | None:
        if self.failure is not None:
            return RunEnd("failed", self.failure)
        if not self.digests or self.stepped is None:
            return None
        if self.checked is None:
            return None
        return RunEnd("completed", f"the restart resumed from step {self.resumed} and reported its state "
                                   f"at step {self.checked}: the crash run is judged")
