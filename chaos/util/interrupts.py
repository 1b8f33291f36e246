"""SIGINT/SIGTERM handling that can never cut a revert short.

The first signal raises ``Interrupted`` in the main thread, unless teardown is under way
(``hold``): then it is only recorded, and the suite stops once the run's faults are reverted
and its journal is written (``take_pending``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypedDict

__all__ = ["Interrupted", "hold", "held", "installed", "release", "take_pending"]


class Interrupted(Exception):  # noqa: N818 (reads as a state: the run was interrupted)
    """SIGINT/SIGTERM reached the controller."""


class _State(TypedDict):
    held: int
    """Nesting depth of ``hold``: signals are recorded while it is above 0."""
    pending: str | None
    raised: bool


_state: _State = {"held": 0, "pending": None, "raised": False}
_lock = threading.Lock()


def hold() -> None:
    """From here on signals are recorded, not raised (teardown must run to its end)."""
    with _lock:
        _state["held"] += 1


def release() -> None:
    with _lock:
        _state["held"] = max(0, _state["held"] - 1)


def held() -> bool:
    """Whether signals are being recorded rather than raised now."""
    with _lock:
        return bool(_state["held"])


def take_pending() -> str | None:
    """The signal that arrived while held (once), else None."""
    with _lock:
        name, _state["pending"] = _state["pending"], None
        return name


def _handler(signum: int, _frame: object) -> None:
    name = signal.Signals(signum).name
    with _lock:
        if _state["held"] or _state["raised"]:
            # Teardown under way, or a second signal: record it; reverting goes on.
            _state["pending"] = _state["pending"] or name
            return
        _state["raised"] = True
    raise Interrupted(name)


@contextmanager
def installed() -> Iterator[None]:
    previous = {s: signal.signal(s, _handler) for s in (signal.SIGINT, signal.SIGTERM)}
    _state.update({"held": 0, "pending": None, "raised": False})
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
