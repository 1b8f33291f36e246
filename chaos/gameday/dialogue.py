"""The operator in a game day's loop: each disruptive step asked for (yes, skip, abort, or
a note), skips recorded with their reason, and what the operator reads. A mixin of
``chaos.gameday.session.GameDay`` (its fields hold the decisions, notes and skips).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from chaos.errors import EXIT_TARGET_MISSED
from chaos.gameday.view import LiveView, PlainView

__all__ = ["OperatorDialogue", "Stop"]


class Stop(Exception):  # noqa: N818 (a control-flow signal: the exercise stops here)
    def __init__(self, status: str, reason: str, exit_code: int) -> None:
        super().__init__(reason)
        self.status, self.reason, self.exit_code = status, reason, exit_code


class OperatorDialogue:
    """Asking the operator and recording the answers (``GameDay`` sets the fields)."""

    yes: bool
    view: LiveView | PlainView
    decisions: list[dict[str, Any]]
    notes: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    _event: Callable[..., None]

    def _skip(self, i: int, name: str, what: str, reason: str) -> None:
        self.skipped.append({"t": time.time(), "step": i, "name": name, "reason": reason})
        self._event("skip", what, step=i, outcome=f"skipped: {reason}")
        self._say(f"  skipped step {i} ({name}): {reason}")

    def _skipped_with(self, i: int, name: str, what: str, since: str | None) -> bool:
        """A check or wait counting from a skipped inject has nothing to count: skipped too."""
        if since is None or not any(s["name"] == since for s in self.skipped):
            return False
        self._skip(i, name, what, f"it counts from step {since}, which was skipped")
        return True

    def _confirm(self, i: int, what: str) -> bool:
        self._say(f"step {i}: {what}")
        if self.yes:
            self.decisions.append({"t": time.time(), "step": i, "decision": "yes", "by": "--yes"})
            return True
        while True:
            answer = self._prompt("  proceed? [y]es / [s]kip / [a]bort, or type a note: ").strip()
            low = answer.lower()
            if low in ("y", "yes"):
                self.decisions.append({"t": time.time(), "step": i, "decision": "yes", "by": "operator"})
                return True
            if low in ("s", "skip"):
                self.decisions.append({"t": time.time(), "step": i, "decision": "skip", "by": "operator"})
                return False
            if low in ("a", "abort"):
                self.decisions.append({"t": time.time(), "step": i, "decision": "abort", "by": "operator"})
                raise Stop("aborted", "aborted by the operator", EXIT_TARGET_MISSED)
            if answer:
                self.notes.append({"t": time.time(), "step": i, "text": answer})
                self._say("  noted.")

    def _prompt(self, text: str) -> str:
        try:
            return self.view.ask(text)
        except EOFError:
            raise Stop("aborted", "no operator answer (end of input)", EXIT_TARGET_MISSED) from None

    def _say(self, line: str) -> None:
        self.view.echo(line)
