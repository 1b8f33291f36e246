"""The hold that makes an external fault land at its step: both sides of the protocol.

A fault the controller injects from outside (a signal, a network rule, a storage rule)
takes effect when the controller gets to it, which is some milliseconds after the step it
is planned for ended, and a rank may be deep into the next step by then. So the probe of
each targeted rank holds at the end of step N, before the next collective, until the
controller says the fault is in effect; a killed rank never comes back from the hold.

- the plan (``chaos.runner.plan.probe_instructions``) gives each targeted rank a ``hold``
  instruction: the fault's id, the ranks, ``at_step`` and a ``timeout_s``. Steps with nothing
  planned hold nothing; the probe looks at nothing but its own instruction list.
- the probe (``chaos.probe``, action ``hold``) claims the hold once per rank across restarts
  (``probe_fired``), reports ``fault_hold`` (phase ``start``), leaves a request
  ``<run_dir>/holds/<fault id>@<src>`` (``chaos.contract.HOLDS_SUBDIR``; its creation wakes
  the controller at once, ``chaos.runner.wakeup``) and waits for the fault's confirmation file
  ``<run_dir>/holds/<fault id>``; then reports ``released``, or
  ``timeout`` after ``timeout_s`` (a controller that died or is stuck must never wedge the
  job: the rank goes on, and the fault, if it still comes, lands late and is measured so).
- the controller (``chaos.runner.run``) writes the confirmation once ``inject`` returned, also when
  the injection failed (nothing is coming: nobody should wait for it), and for every fault
  still unconfirmed when the run stops.

A rank restarted after the fault passes step N again without holding: the confirmation is
there already (and its claim too, if it held before). The probe polls the confirmation
file (sub-millisecond first, a few milliseconds at most): a hold lasts as long as one
injection, and an inotify watch from inside every rank would cost more than it saves.

Standard library only: the probe imports this module into every rank.
"""

from __future__ import annotations

import os
import time

__all__ = ["ACTION", "DEFAULT_TIMEOUT_S", "HoldOutcome", "confirm", "confirmation", "request", "wait"]

ACTION = "hold"
"""The probe action name of a hold instruction."""
DEFAULT_TIMEOUT_S = 5.0
"""How long a rank waits at most. Well above an injection's own time (a signal: well under
a millisecond; a network or storage rule, a container stop: tens to hundreds), well below
the harness's watchdog (10 s), past which the waiting peers would call the held rank hung."""

_FIRST_POLL_S = 0.0002
_MAX_POLL_S = 0.002

HoldOutcome = tuple[str, float]
"""(``released`` | ``timeout``, seconds waited)."""


def confirmation(directory: str, fault_id: str) -> str:
    # A fault id may carry '#' (a repeated trigger's occurrence) but never a path separator.
    return os.path.join(directory, fault_id.replace(os.sep, "_"))


def confirm(directory: str, fault_id: str, outcome: str = "in_effect") -> bool:
    """Release every rank holding for ``fault_id`` (controller side); False if it was already.

    The file appears whole (written aside, then renamed): a rank that sees it may go on."""
    path = confirmation(directory, fault_id)
    if os.path.exists(path):
        return False
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(outcome + "\n")
    os.replace(tmp, path)
    return True


def request(directory: str, fault_id: str, src: str) -> None:
    """Say that ``src`` holds for ``fault_id`` (probe side): an empty file, whose creation is
    what wakes the controller; the controller never needs to read it."""
    os.makedirs(directory, exist_ok=True)
    os.close(os.open(f"{confirmation(directory, fault_id)}@{src}", os.O_CREAT | os.O_WRONLY, 0o644))


def wait(directory: str, fault_id: str, timeout_s: float) -> HoldOutcome:
    """Wait until the controller confirmed ``fault_id`` or ``timeout_s`` passed (probe side)."""
    path = confirmation(directory, fault_id)
    started = time.monotonic()
    deadline = started + timeout_s
    pause = _FIRST_POLL_S
    while not os.path.exists(path):
        now = time.monotonic()
        if now >= deadline:
            return "timeout", now - started
        time.sleep(min(pause, deadline - now))
        pause = min(pause * 2, _MAX_POLL_S)
    return "released", time.monotonic() - started
