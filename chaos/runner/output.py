"""The controller's own output, and what its failure means.

The run directory (``--out``) and the state directory are trainchaos's, not the job's: a
full disk (ENOSPC) or a failing one (EIO) under them is a failure of trainchaos, never a
verdict on the training stack. And it must never cut a teardown short: the injector's
events (``fault_reverted``, ``job_stop``) are written from the ``finally`` that reverts the
faults and stops the job, so a write that fails there is kept for the run's record
(``ControllerEvents.failure``) instead of raised past the revert. The run loop polls it and
the fault journal's (``chaos.runfiles.journal_writer.JournalWriter.failure``) after each look,
and ends the run as a tool error naming the file and the errno.
"""

from __future__ import annotations

import errno
from typing import Any

from chaos.probe.core import Probe

__all__ = ["ControllerEvents", "describe_os_error"]


def describe_os_error(exc: OSError, path: str | None = None) -> str:
    """``/out/run/fault_journal.jsonl: No space left on device (ENOSPC)``: the file (``path``
    when the error does not carry one), what failed, and the errno's name, which is what a
    user searches for."""
    where = exc.filename if exc.filename is not None else path
    name = errno.errorcode.get(exc.errno or 0)
    what = exc.strerror or str(exc)
    text = f"{what} ({name})" if name else what
    return f"{where}: {text}" if where else text


class ControllerEvents(Probe):
    """The injector's event stream (``src`` ``injector``): a write that fails is kept in
    ``failure`` (the first one) and never raised; later events are still tried, so that a
    disk that recovers gets the rest of the run's story."""

    failure: OSError | None = None

    def emit(self, kind: str, **fields: Any) -> None:
        try:
            super().emit(kind, **fields)
        except OSError as exc:
            self._keep(exc)

    def close(self) -> None:
        try:
            super().close()
        except OSError as exc:  # the last buffered events could not be written
            self._keep(exc)

    def _keep(self, exc: OSError) -> None:
        if exc.filename is None and self._file is not None:
            exc.filename = self._file.name
        if self.failure is None:
            self.failure = exc
