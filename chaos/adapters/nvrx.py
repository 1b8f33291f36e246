"""NVIDIA Resiliency Extension in-process restart adapter: each re-entry of the function
``inprocess.Wrapper`` wraps is reported as the restart it is.

    @inprocess.Wrapper(..., abort=chaos_nvrx.abort())                 # notes when it aborts
    def train(call_wrapper: inprocess.CallWrapper | None = None):
        with chaos_nvrx.iteration(call_wrapper):                       # the one line
            ...the training function, unchanged...

What it reports:

- on every re-entry after the first (``call_wrapper.iteration`` > 0) the probe starts the
  rank's next incarnation in the same process (``probe.restart_in_place``): the process
  survives an in-process restart, so without this the steps after it would look like the
  ones before, and no restart, resume or lost step could be measured;
- ``detected`` when the wrapper interrupts the function on this rank: by the rank itself
  when the function raised (the suspect is the rank; a device error is a ``device`` fault),
  else from the wrapper's ``RankShouldRestart`` (its text names the interruption and the
  ranks it blames), timed at the moment the wrapper's monitor thread began the restart
  (``abort``), which on a rank blocked in a gloo collective is long before the exception
  reaches the function (gloo cannot be aborted: pytorch/pytorch#130345).

Progress, checkpoints and the final digest are the job's other adapter's (the bundled example
checkpoints with DCP: ``chaos.adapters.dcp``). It never steers: the abort it returns is the
wrapper's default (``AbortTorchDistributed``) with a clock read before it, and every exception
goes on as it came. Imports only the probe; ``nvidia_resiliency_ext`` is imported on use.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any

from chaos import probe

__all__ = ["abort", "iteration"]

_INTERRUPTION = re.compile(r"Interruption\.(\w+) on ranks=\{([\d, ]*)\}")
_CLASS_OF = {"EXCEPTION": "unknown", "BASE_EXCEPTION": "crash", "SOFT_TIMEOUT": "hang",
             "HARD_TIMEOUT": "hang", "UNRESPONSIVE": "hang", "TERMINATED": "crash",
             "MONITOR_PROCESS_EXCEPTION": "unknown"}
"""The wrapper's interruption kinds as trainchaos's failure classes (an exception on another
rank is of a kind this rank cannot know)."""
_DEVICE_MARKERS = ("CUDA error", "illegal memory access", "Xid")
_PEER_MARKERS = ("Connection closed", "Connection reset", "Broken pipe", "Timed out", "timed out")

_aborted_at: list[float] = []
"""When the wrapper's monitor thread began aborting this rank's current iteration."""


def abort() -> Any:
    """The wrapper's ``abort``: its default (``AbortTorchDistributed``), after noting the time
    (``Compose`` runs the last one first)."""
    from nvidia_resiliency_ext import inprocess

    class _NoteAbort(inprocess.abort.Abort):
        def __call__(self, state: Any) -> Any:
            _aborted_at.append(time.time())
            return state

    return inprocess.Compose(inprocess.abort.AbortTorchDistributed(), _NoteAbort())


@contextlib.contextmanager
def iteration(call_wrapper: Any) -> Iterator[None]:
    """Around the body of the wrapped function: a re-entry starts the rank's next
    incarnation; an interruption is reported as this rank's detection, then goes on."""
    if call_wrapper is not None and call_wrapper.iteration > 0:
        probe.restart_in_place()
    _aborted_at.clear()
    try:
        yield
    except BaseException as exc:
        _report(exc)
        raise


def _report(exc: BaseException) -> None:
    src = probe.src()
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
    restart = type(exc).__name__ == "RankShouldRestart"  # the wrapper's, from its monitor thread
    if restart or _aborted_at:
        # The wrapper began the restart (on a fault elsewhere): whatever reaches the function
        # now, the exception it raises into it or a collective's error on the way, follows.
        found = _INTERRUPTION.search(str(exc)) if restart else None
        ranks = [int(r) for r in found.group(2).split(",") if r.strip()] if found else []
        fields: dict[str, Any] = {"t": _aborted_at[0]} if _aborted_at else {}
        probe.emit("detected", by=src, reason=f"inprocess.Wrapper restarts every rank ({text})",
                   suspect=f"rank-{ranks[0]}" if len(ranks) == 1 else None,
                   failure_class=_CLASS_OF.get(found.group(1), "unknown") if found else "unknown",
                   detector="nvrx_inprocess", **fields)
    elif isinstance(exc, Exception):  # the function raised here first: the wrapper restarts on it
        if any(m in text for m in _PEER_MARKERS):
            failure_class, suspect = ("hang" if "imed out" in text else "crash"), None
        elif isinstance(exc, probe.DeviceError) or any(m in text for m in _DEVICE_MARKERS):
            failure_class, suspect = "device", src
        else:
            failure_class, suspect = "unknown", src
        probe.emit("detected", by=src, reason=f"inprocess.Wrapper restarts on {text}",
                   suspect=suspect, failure_class=failure_class, detector="nvrx_inprocess")
